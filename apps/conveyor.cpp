// conveyor: run, measure and check an image input pipeline from the command line.
//
//   conveyor run                      the embedded default dataset, default settings
//   conveyor run --folder train/ --workers 8 --batch 256 --epochs 2 --compute-ms 40
//   conveyor bench --json out.json    throughput only, as figures
//   conveyor inspect --folder train/  decode every sample once; list what fails
//   conveyor make-dataset --out DIR   write the embedded default dataset
//   conveyor run --config configs/imagenet.toml --workers 16   (flags override the file)
//
// Exit status: 0 on success; 1 when a run fails or inspect finds unreadable
// files; 2 for bad input (unknown flag, bad value, missing file, malformed
// list line, unknown config key), always with one line on stderr; 130 or 143
// when SIGINT or SIGTERM ended `run` or `bench` early (after the step in
// progress, with the figures so far printed and the trace written).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/cli.h"
#include "apps/toml_config.h"
#include "apps/trace.h"
#include "cuda/device_pipeline.h"
#include "cuda/resident.h"
#include "stages/dataset.h"
#include "stages/default_dataset.h"
#include "stages/image_source.h"

using namespace conveyor;
using namespace conveyor::apps;

namespace {

void step(const Options& o) {
  if (o.compute_ms <= 0) return;
  const auto d = std::chrono::duration<double, std::milli>(o.compute_ms);
  if (o.compute == "sleep") {
    std::this_thread::sleep_for(d);
  } else {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(d);
    while (Clock::now() < until) {
    }
  }
}

// A sample's contribution to an epoch's digest: SplitMix64 of its dataset index.
// The digest is the sum over the samples a rank delivered or skipped, so the
// ranks' digests of one epoch add up to the whole dataset's exactly when their
// shards are disjoint and cover it (with counts adding up to the size).
std::uint64_t index_hash(std::uint64_t index) { return splitmix64(index); }

struct EpochFigures {
  std::uint64_t epoch = 0, batches = 0, images = 0, skipped = 0;
  std::uint64_t digest = 0;  // sum of index_hash() over delivered and skipped samples, mod 2^64
  double seconds = 0;
  double rss_mib = 0;  // resident set at the epoch's end
  double images_per_s() const { return seconds > 0 ? double(images) / seconds : 0; }
};

struct RunResult {
  std::vector<EpochFigures> epochs;
  PipelineStats stats;
  std::string device;
  std::vector<SkippedSample> skipped;
  int interrupted = 0;  // SIGINT or SIGTERM ended the run early (the last epoch is partial)

  // Images, batches and seconds over every epoch.
  EpochFigures total() const {
    EpochFigures t;
    for (const auto& e : epochs) {
      t.images += e.images;
      t.batches += e.batches;
      t.skipped += e.skipped;
      t.seconds += e.seconds;
    }
    return t;
  }
};

RunResult run_resident(const Options& o, Dataset dataset, int crop, bool print_epochs);

// --serial: what a loop without a pipeline does. One thread fills every sample
// of a batch, copies it, runs the step, and only then starts the next batch.
RunResult run_serial(const Options& o, const Config& cfg, std::size_t dataset_size, const Filler& fill,
                     const std::shared_ptr<Device>& device, bool print_epochs, RunResult& result) {
  std::unique_ptr<Tracer> tracer;
  if (!o.trace.empty()) {
    tracer = std::make_unique<Tracer>(o.trace);
    tracer->thread(1, "consumer (serial: fill, copy, step)");
  }
  Sampler sampler({dataset_size, cfg.batch_size, cfg.seed, cfg.shuffle, cfg.drop_last, cfg.rank, cfg.world_size,
                   cfg.shard_policy});
  std::vector<std::byte> host(cfg.batch_size * cfg.sample_bytes);
  auto dev = device->allocate(host.size());
  auto stream = device->wrap_stream(nullptr);
  for (std::uint64_t e = 0; e < o.epochs; ++e) {
    EpochFigures f;
    f.epoch = e;
    const auto t0 = Clock::now();
    const auto order = sampler.epoch_order(e);
    for (std::size_t b = 0; b < sampler.batches_per_epoch(); ++b) {
      const std::size_t n = sampler.batch_length(b);
      const auto a = Clock::now();
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint64_t index = order[b * cfg.batch_size + j];
        f.digest += index_hash(index);
        Sample s{index, e, j, std::span<std::byte>(host.data() + j * cfg.sample_bytes, cfg.sample_bytes), 0,
                 Rng(cfg.seed, e, index)};
        fill(s);
      }
      const auto filled = Clock::now();
      device->copy_to_device(dev->data(), host.data(), n * cfg.sample_bytes, *stream);
      const auto copied = Clock::now();
      step(o);
      if (tracer) {
        tracer->span("fill", 1, a, filled);
        tracer->span("transfer", 1, filled, copied);
        tracer->span("step", 1, copied, Clock::now());
      }
      f.images += n;
      ++f.batches;
      if ((result.interrupted = interrupt_signal()) != 0) break;
    }
    f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    result.epochs.push_back(f);
    if (print_epochs) {
      std::printf("epoch %llu (serial%s): %llu images in %llu batches, %.2f s, %.0f images/s\n", (unsigned long long)e,
                  result.interrupted ? ", interrupted" : "", (unsigned long long)f.images, (unsigned long long)f.batches,
                  f.seconds, f.images_per_s());
    }
    if (result.interrupted) break;
  }
  if (tracer) tracer->finish();
  return result;
}

RunResult run_pipeline(const Options& o, bool print_epochs) {
  check_normalize_flags(o);
  bool embedded = false;
  Dataset dataset = open_dataset(o, embedded, print_epochs);
  const int crop = o.crop ? o.crop : (embedded ? 64 : 224);
  if (o.resident) return run_resident(o, std::move(dataset), crop, print_epochs);
  ImageSource images(dataset, image_config(o, o.augment, crop), o.workers);

  Config cfg = pipeline_config(o);
  cfg.sample_bytes = images.sample_bytes();
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }

  auto device = open_device_for(o);
  TransferConfig tc;
  tc.normalize = normalization_for(o, crop);
  check_memory(o, cfg, tc, *device);  // before the pools are allocated
  RunResult result;
  result.device = device->describe();
  if (print_epochs) {
    std::printf("dataset: %zu images, %zu classes; rank %zu of %zu\n%s\n", dataset.size(), class_count(dataset),
                o.rank, o.world_size, result.device.c_str());
    if (o.normalize != "off") {
      std::printf("normalize: %s %s\n", o.normalize.c_str(),
                  o.normalize_in == "workers" ? "in the workers" : "after the transfer");
    }
  }
  std::unique_ptr<Tracer> tracer;
  Filler fill = images.filler();
  if (o.synthetic_ms > 0) {
    // A stage of known cost: the sample's identity in its first bytes, then a sleep.
    fill = [ms = o.synthetic_ms](Sample& s) {
      const std::uint64_t id[2] = {s.epoch, s.index};
      std::memcpy(s.data.data(), id, std::min(s.data.size(), sizeof id));
      s.label = 0;
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    };
  }
  if (o.serial) return run_serial(o, cfg, dataset.size(), fill, device, print_epochs, result);
  if (!o.trace.empty()) {
    tracer = std::make_unique<Tracer>(o.trace);
    tracer->thread(1, "consumer");
    tracer->thread(2, "transfer");
    for (std::size_t w = 0; w < o.workers; ++w) tracer->thread(int(10 + w), "worker " + std::to_string(w));
    fill = [inner = fill, t = tracer.get()](Sample& s) {
      const auto a = Clock::now();
      inner(s);
      t->span("decode", int(10 + s.worker), a, Clock::now(),
              "\"sample\":" + std::to_string(s.index) + ",\"epoch\":" + std::to_string(s.epoch));
    };
    tc.on_transfer = [t = tracer.get()](const Batch& b, Clock::time_point a, Clock::time_point z) {
      t->span("transfer", 2, a, z, "\"batch\":" + std::to_string(b.index) + ",\"epoch\":" + std::to_string(b.epoch));
    };
  }
  DevicePipeline pipeline(cfg, dataset.size(), fill, tc, device);
  // Queue depths for the trace: pushes - pops of each queue, every 2 ms, from a sampler thread.
  std::atomic<bool> sampling{tracer != nullptr};
  std::thread sampler;
  if (tracer) {
    sampler = std::thread([&] {
      while (sampling.load()) {
        const auto now = Clock::now();
        for (const auto& q : pipeline.stats().queues) {
          tracer->counter(q.name.c_str(), now, double(q.stats.pushes) - double(q.stats.pops));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  struct JoinSampler {
    std::atomic<bool>& flag;
    std::thread& t;
    ~JoinSampler() {
      flag = false;
      if (t.joinable()) t.join();
    }
  } join_sampler{sampling, sampler};
  const bool tty = ::isatty(STDERR_FILENO);
  PipelineStats before = pipeline.stats();
  for (std::uint64_t e = 0; e < o.epochs; ++e) {
    EpochFigures f;
    f.epoch = e;
    const auto t0 = Clock::now();
    const std::size_t total = pipeline.batches_per_epoch();
    for (auto& batch : pipeline.epoch(e)) {
      f.images += batch.size();
      f.skipped += batch.host().skipped.size();
      for (const std::uint64_t i : batch.host().indices) f.digest += index_hash(i);
      for (const SkippedSample& s : batch.host().skipped) f.digest += index_hash(s.index);
      ++f.batches;
      const auto a = Clock::now();
      step(o);
      if (tracer) tracer->span("step", 1, a, Clock::now(), "\"batch\":" + std::to_string(batch.host().index));
      if ((result.interrupted = interrupt_signal()) != 0) break;  // after this step: report what ran
      if (tty && print_epochs && (f.batches % 4 == 0 || f.batches == total)) {
        const int width = 30, done = int(double(f.batches) / double(total) * width);
        std::fprintf(stderr, "\r  epoch %llu [%s%s] %llu/%zu batches", (unsigned long long)e, std::string(done, '#').c_str(),
                     std::string(width - done, '.').c_str(), (unsigned long long)f.batches, total);
      }
    }
    f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (tty && print_epochs) std::fprintf(stderr, "\r%*s\r", 70, "");
    f.rss_mib = double(current_rss_kib()) / 1024.0;
    result.epochs.push_back(f);
    const PipelineStats now = pipeline.stats();
    const PipelineStats epoch_stats = now.since(before);  // this epoch's fractions, not the run's
    before = now;
    if (print_epochs) {
      const double idle = consumer_idle(epoch_stats);
      std::printf("epoch %llu%s: %llu images in %llu batches, %.2f s, %.0f images/s, consumer idle %.0f%%, RSS %.1f MiB%s\n",
                  (unsigned long long)e, result.interrupted ? " (interrupted)" : "", (unsigned long long)f.images,
                  (unsigned long long)f.batches, f.seconds, f.images_per_s(), 100 * idle, f.rss_mib,
                  f.skipped ? (", " + std::to_string(f.skipped) + " skipped").c_str() : "");
      std::printf("%s", epoch_stats.table().c_str());
      std::fflush(stdout);
    }
    if (result.interrupted) break;
  }
  result.stats = pipeline.stats();
  result.skipped = pipeline.skipped();
  if (tracer) {
    sampling = false;
    sampler.join();
    tracer->finish();
    if (print_epochs) std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", o.trace.c_str());
  }
  return result;
}

// --resident: decode every image once (deterministic Resize + CenterCrop) with
// the workers, upload the set, then make each batch on the device by gather.
RunResult run_resident(const Options& o, Dataset dataset, int crop, bool print_epochs) {
  ImageSource images(dataset, image_config(o, "center", crop), o.workers);
  const std::size_t row = images.sample_bytes();
  const double need_mb = double(dataset.size()) * double(row + 8) / double(1 << 20);
  if (need_mb > o.budget_mb) {
    throw UsageError("--resident: the decoded set needs " + std::to_string(std::size_t(need_mb + 1)) +
                     " MiB, over --budget-mb " + std::to_string(std::size_t(o.budget_mb)) +
                     "; raise it, use a smaller --crop, or drop --resident to stream");
  }
  const double limit_mb = o.max_memory_mb > 0 ? o.max_memory_mb : default_max_memory_mb();
  if (need_mb > limit_mb) {  // the decoded set is held in host memory too, while it uploads
    throw UsageError("--resident: the decoded set needs " + std::to_string(std::size_t(need_mb + 1)) +
                     " MiB of host memory, over --max-memory-mb " + std::to_string(std::size_t(limit_mb)));
  }
  Config load;
  load.batch_size = 64;
  load.sample_bytes = row;
  load.workers = o.workers;
  load.shuffle = false;
  load.epochs = 1;
  std::vector<std::byte> pixels(dataset.size() * row);
  std::vector<std::int64_t> labels;
  labels.reserve(dataset.size());
  const auto t0 = Clock::now();
  {
    Pipeline loader(load, dataset.size(), {images.filler()});
    std::size_t at = 0;
    while (auto b = loader.next()) {
      std::memcpy(pixels.data() + at * row, (*b)->data, (*b)->bytes().size());
      labels.insert(labels.end(), (*b)->labels.begin(), (*b)->labels.end());
      at += (*b)->size();
      if (interrupt_signal() != 0) break;  // the loader stops its workers as it goes out of scope
    }
    pixels.resize(at * row);
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (const int sig = interrupt_signal(); sig != 0) {
    if (print_epochs) std::printf("interrupted while decoding the set once: %zu of %zu images decoded\n", labels.size(), dataset.size());
    RunResult stopped;
    stopped.interrupted = sig;
    return stopped;
  }

  auto device = open_device_for(o);
  HostSamples samples{pixels.data(), DType::uint8, labels.size(), {std::size_t(crop), std::size_t(crop), 3}};
  ResidentConfig rc;
  rc.budget_bytes = std::size_t(o.budget_mb * double(1 << 20));
  rc.normalize = normalization_for(o, crop);
  ResidentDataset resident(device, samples, labels, pipeline_config(o), rc);
  RunResult result;
  result.device = device->describe();
  if (print_epochs) {
    std::printf("dataset: %zu images decoded once at %dx%d in %.1f s (%.0f MiB on the device); rank %zu of %zu\n%s\n",
                labels.size(), crop, crop, load_s, double(resident.device_bytes()) / double(1 << 20), o.rank,
                o.world_size, result.device.c_str());
  }
  for (std::uint64_t e = 0; e < o.epochs; ++e) {
    EpochFigures f;
    f.epoch = e;
    const auto e0 = Clock::now();
    for (std::size_t i = 0; i < resident.batches_per_epoch(); ++i) {
      auto b = resident.next();
      if (!b) break;
      f.images += b->size();
      ++f.batches;
      step(o);
      if ((result.interrupted = interrupt_signal()) != 0) break;  // after this step, as run does
    }
    f.seconds = std::chrono::duration<double>(Clock::now() - e0).count();
    result.epochs.push_back(f);
    if (print_epochs) {
      std::printf("epoch %llu%s: %llu images in %llu batches, %.3f s, %.0f images/s (resident: one gather per batch)\n",
                  (unsigned long long)e, result.interrupted ? " (interrupted)" : "", (unsigned long long)f.images,
                  (unsigned long long)f.batches, f.seconds, f.images_per_s());
    }
    if (result.interrupted) break;
  }
  return result;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out;
}

void write_json(const std::string& file, const Options& o, const RunResult& r) {
  const EpochFigures t = r.total();
  const std::uint64_t images = t.images, batches = t.batches;
  const double seconds = t.seconds;
  std::ostringstream out;
  out << "{\n  \"device\": \"" << json_escape(r.device) << "\",\n";
  out << "  \"workers\": " << o.workers << ", \"batch\": " << o.batch << ", \"host_queue\": " << o.host_queue
      << ", \"device_queue\": " << o.device_queue << ", \"wait_yields\": " << o.wait_yields
      << ", \"epochs\": " << o.epochs << ",\n";
  out << "  \"images\": " << images << ", \"batches\": " << batches << ", \"seconds\": " << seconds << ",\n";
  out << "  \"images_per_s\": " << (seconds > 0 ? double(images) / seconds : 0)
      << ", \"batches_per_s\": " << (seconds > 0 ? double(batches) / seconds : 0) << ",\n";
  out << "  \"stages\": {";
  for (std::size_t i = 0; i < r.stats.stages.size(); ++i) {
    const auto& s = r.stats.stages[i];
    out << (i ? ", " : "") << "\"" << s.name << "\": {\"busy\": " << s.busy_fraction() << ", \"blocked\": "
        << s.blocked_fraction() << ", \"starved\": " << s.starved_fraction() << "}";
  }
  out << "},\n";
  // Per epoch, for checking shards across ranks (tests/cli_test.sh): counts and digests.
  out << "  \"rank\": " << o.rank << ", \"world_size\": " << o.world_size << ",\n";
  const auto list = [&](const char* name, auto field) {
    out << "  \"" << name << "\": [";
    for (std::size_t i = 0; i < r.epochs.size(); ++i) out << (i ? ", " : "") << field(r.epochs[i]);
    out << "],\n";
  };
  list("epoch_images", [](const EpochFigures& f) { return f.images; });
  list("epoch_skipped", [](const EpochFigures& f) { return f.skipped; });
  list("epoch_batches", [](const EpochFigures& f) { return f.batches; });
  list("epoch_digest", [](const EpochFigures& f) { return f.digest; });
  out << "  \"consumer_idle\": " << consumer_idle(r.stats) << ",\n  \"peak_rss_mib\": " << double(peak_rss_kib()) / 1024.0
      << ",\n  \"epoch_rss_mib\": [";
  for (std::size_t i = 0; i < r.epochs.size(); ++i) out << (i ? ", " : "") << r.epochs[i].rss_mib;
  out << "],\n  \"skipped\": [";  // every sample --on-error skip left out, with its reason (which names the file)
  for (std::size_t i = 0; i < r.skipped.size(); ++i) {
    const SkippedSample& k = r.skipped[i];
    out << (i ? ",\n    " : "\n    ") << "{\"epoch\": " << k.epoch << ", \"index\": " << k.index << ", \"reason\": \""
        << json_escape(k.reason) << "\"}";
  }
  out << (r.skipped.empty() ? "]\n}\n" : "\n  ]\n}\n");
  write_text_file("--json", file, out.str());
}

// --on-error skip: the samples left out, in the terminal the first few and the count.
void report_skipped(const RunResult& r) {
  if (r.skipped.empty()) return;
  constexpr std::size_t kShown = 5;
  std::printf("skipped %zu sample(s) (--on-error skip):\n", r.skipped.size());
  for (std::size_t i = 0; i < std::min(kShown, r.skipped.size()); ++i) {
    std::printf("  epoch %llu: %s\n", (unsigned long long)r.skipped[i].epoch, r.skipped[i].reason.c_str());
  }
  if (r.skipped.size() > kShown) {
    std::printf("  ... and %zu more (bench --json FILE lists every one)\n", r.skipped.size() - kShown);
  }
}

struct SweepPoint {
  std::size_t workers, host_queue, device_queue, batch;
  double link_gbps, compute_ms;
  double images_per_s = 0, consumer_idle = 0, peak_rss_mib = 0;
  bool ok = false;
};

// Runs one point in a child process, so its peak RSS is its own (wait4's rusage)
// and a failing point cannot take the sweep down. The parent has no other
// threads at the fork: each point's pipeline is gone before the next starts.
SweepPoint run_point(Options o, SweepPoint p) {
  o.workers = p.workers;
  o.host_queue = p.host_queue;
  o.device_queue = p.device_queue;
  o.batch = p.batch;
  o.link_gbps = p.link_gbps;
  o.compute_ms = p.compute_ms;
  int fd[2];
  if (::pipe(fd) != 0) throw std::runtime_error("sweep: pipe failed");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("sweep: fork failed");
  if (pid == 0) {
    ::close(fd[0]);
    double figures[2] = {0, 0};
    try {
      const RunResult r = run_pipeline(o, false);
      figures[0] = r.total().images_per_s();
      figures[1] = consumer_idle(r.stats);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "conveyor sweep: point failed: %s\n", e.what());
      ::_exit(1);
    }
    const bool wrote = ::write(fd[1], figures, sizeof figures) == ssize_t(sizeof figures);
    ::_exit(wrote ? 0 : 1);
  }
  ::close(fd[1]);
  double figures[2] = {0, 0};
  const bool got = ::read(fd[0], figures, sizeof figures) == ssize_t(sizeof figures);
  ::close(fd[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  p.ok = got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  p.images_per_s = figures[0];
  p.consumer_idle = figures[1];
  p.peak_rss_mib = double(usage.ru_maxrss) / 1024.0;
  return p;
}

int sweep(Options o) {
  check_normalize_flags(o);  // one usage error, not a failed row per point
  auto axis = [](std::vector<std::size_t> v, std::size_t d) { return v.empty() ? std::vector<std::size_t>{d} : v; };
  auto axisd = [](std::vector<double> v, double d) { return v.empty() ? std::vector<double>{d} : v; };
  const auto W = axis(o.sw_workers, o.workers), H = axis(o.sw_host_queue, o.host_queue),
             D = axis(o.sw_device_queue, o.device_queue), B = axis(o.sw_batch, o.batch);
  const auto L = axisd(o.sw_link, o.link_gbps), C = axisd(o.sw_compute, o.compute_ms);
  bool embedded = false;
  (void)open_dataset(o, embedded);  // make (or check) the dataset once, before the children
  std::printf("%8s %10s %12s %6s %9s %10s %12s %10s %9s\n", "workers", "host_queue", "device_queue", "batch",
              "link_gbps", "compute_ms", "images_per_s", "idle_pct", "rss_mib");
  std::vector<SweepPoint> points;
  for (auto w : W)
    for (auto h : H)
      for (auto d : D)
        for (auto b : B)
          for (auto l : L)
            for (auto c : C) {
              const SweepPoint p = run_point(o, SweepPoint{w, h, d, b, l, c});
              points.push_back(p);
              if (p.ok) {
                std::printf("%8zu %10zu %12zu %6zu %9.1f %10.1f %12.0f %10.1f %9.0f\n", w, h, d, b, l, c, p.images_per_s,
                            100 * p.consumer_idle, p.peak_rss_mib);
              } else {
                std::printf("%8zu %10zu %12zu %6zu %9.1f %10.1f %12s\n", w, h, d, b, l, c, "failed");
              }
              std::fflush(stdout);
            }
  if (!o.csv.empty()) {
    std::ostringstream out;
    out << "workers,host_queue,device_queue,batch,link_gbps,compute_ms,images_per_s,consumer_idle_pct,peak_rss_mib,ok\n";
    for (auto& p : points) {
      out << p.workers << ',' << p.host_queue << ',' << p.device_queue << ',' << p.batch << ',' << p.link_gbps << ','
          << p.compute_ms << ',' << p.images_per_s << ',' << 100 * p.consumer_idle << ',' << p.peak_rss_mib << ','
          << (p.ok ? 1 : 0) << '\n';
    }
    write_text_file("--csv", o.csv, out.str());  // whole before gnuplot reads it
    std::printf("wrote %s\n", o.csv.c_str());
    if (!o.plot.empty()) {
      // images/s against workers, one line per host queue depth (other axes at their first value).
      std::string body =
          "set key outside\nset xlabel 'workers'\nset ylabel 'images/s'\nset xtics 1\nset yrange [0:*]\n"
          "set title 'conveyor sweep: images/s by workers and host queue depth'\nplot ";
      for (std::size_t i = 0; i < H.size(); ++i) {
        body += (i ? ", " : "") + gnuplot_quote(o.csv) + " using ($2==" + std::to_string(H[i]) + " && $3==" + std::to_string(D[0]) +
                " && $4==" + std::to_string(B[0]) + " ? $1 : 1/0):7 with points pointsize 1.5 title 'host queue " +
                std::to_string(H[i]) + "'";
      }
      (void)gnuplot(o.plot, body + "\n", o.csv);
    }
  } else if (!o.plot.empty()) {
    throw UsageError("--plot needs --csv FILE (the plot is drawn from it)");
  }
  for (auto& p : points) {
    if (!p.ok) return 1;
  }
  return 0;
}

int inspect(const Options& o) {
  bool embedded = false;
  Dataset dataset = open_dataset(o, embedded);
  struct Counts {
    std::map<std::string, std::size_t> formats, modes, sizes;
    std::vector<std::pair<std::string, std::string>> failed;
  };
  std::vector<Counts> per_worker(o.workers);
  std::vector<std::unique_ptr<ImageDecoder>> decoders;
  for (std::size_t w = 0; w < o.workers; ++w) decoders.push_back(std::make_unique<ImageDecoder>());
  std::vector<std::vector<unsigned char>> files(o.workers);
  Config cfg;
  cfg.batch_size = o.batch;
  cfg.workers = o.workers;
  cfg.shuffle = false;
  cfg.epochs = 1;
  StageFunctions stages;
  stages.fill = [&](Sample& s) {
    Counts& c = per_worker[s.worker];
    const std::string path = dataset.path(s.index).string();
    try {
      read_file(dataset.path(s.index), DecodeLimits{}.max_file_bytes, files[s.worker]);
      ImageDecoder& d = *decoders[s.worker];
      const ImageInfo info = d.open(files[s.worker]);
      (void)d.decode(Rect{0, 0, info.width, info.height}, 1.0);
      ++c.formats[format_name(info.format)];
      static const char* mode[] = {"?", "gray", "gray+alpha", "rgb", "rgba/cmyk"};
      ++c.modes[mode[std::clamp(info.components, 0, 4)]];
      const int side = std::max(info.width, info.height);
      ++c.sizes[side <= 128 ? "<=128 px" : side <= 512 ? "129-512 px" : side <= 2048 ? "513-2048 px" : ">2048 px"];
    } catch (const std::exception& e) {
      c.failed.emplace_back(path, e.what());
    }
  };
  Pipeline p(cfg, dataset.size(), std::move(stages));
  std::size_t seen = 0;
  while (auto b = p.next()) seen += (*b)->size();
  Counts all;
  for (auto& c : per_worker) {
    for (auto& [k, v] : c.formats) all.formats[k] += v;
    for (auto& [k, v] : c.modes) all.modes[k] += v;
    for (auto& [k, v] : c.sizes) all.sizes[k] += v;
    all.failed.insert(all.failed.end(), c.failed.begin(), c.failed.end());
  }
  std::printf("%zu samples decoded, %zu unreadable\n", seen - all.failed.size(), all.failed.size());
  auto show = [](const char* title, const std::map<std::string, std::size_t>& m) {
    std::printf("%s:", title);
    for (auto& [k, v] : m) std::printf(" %s %zu;", k.c_str(), v);
    std::printf("\n");
  };
  show("formats", all.formats);
  show("colour", all.modes);
  show("largest side", all.sizes);
  std::sort(all.failed.begin(), all.failed.end());
  for (auto& [path, why] : all.failed) std::printf("unreadable: %s: %s\n", path.c_str(), why.c_str());
  return all.failed.empty() ? 0 : 1;
}

// `conveyor train` is the conveyor-train program, built next to this one when
// LibTorch is found: a program of its own so that the other subcommands start
// without loading LibTorch (about 0.5 s).
int exec_train(int argc, char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto train = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "conveyor-train";
  if (!std::filesystem::exists(train)) {
    std::fprintf(stderr,
                 "conveyor: train: this build has no LibTorch (%s not built); install libtorch-dev and configure "
                 "with -DCONVEYOR_TORCH=ON (./go test does both)\n",
                 train.c_str());
    return 2;
  }
  std::vector<char*> args{const_cast<char*>(train.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(train.c_str(), args.data());
  std::fprintf(stderr, "conveyor: train: cannot run %s: %s\n", train.c_str(), std::strerror(errno));
  return 1;
}


constexpr const char* kSubcommands = "run, bench, sweep, inspect, make-dataset, train";

// argv[1] when it is neither a flag nor a subcommand: named, with the valid ones.
void check_subcommand(int argc, char** argv, const CLI::App& app) {
  if (argc < 2) throw UsageError(std::string("no subcommand: give one of ") + kSubcommands + " (conveyor --help)");
  const std::string first = argv[1];
  if (first.starts_with("-")) return;  // --help, --version: CLI11's
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == first) return;
  }
  throw UsageError("unknown subcommand '" + first + "': give one of " + kSubcommands + " (conveyor --help)");
}

// A run: flags and outputs checked, the pipeline run, its figures reported.
int run_command(const Options& o, bool bench) {
  // Ctrl-C or SIGTERM: the step in progress finishes, the pipeline stops,
  // the figures so far are printed and the trace written; exit 128 + signal.
  catch_interrupts();
  const RunResult r = run_pipeline(o, true);
  report_skipped(r);
  if (bench) {
    std::printf("bench: %.0f images/s over %zu epoch(s)%s, peak RSS %.0f MiB\n", r.total().images_per_s(),
                r.epochs.size(), r.interrupted ? " (interrupted)" : "", double(peak_rss_kib()) / 1024.0);
  }
  if (!o.json.empty()) write_json(o.json, o, r);
  if (r.interrupted) {
    std::printf("interrupted by %s\n", r.interrupted == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + r.interrupted;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "train") return exec_train(argc, argv);
  CLI::App app{"conveyor: an input pipeline for C++ training code (decode workers -> transfer thread -> your step)"};
  app.option_defaults()->always_capture_default();  // every subcommand's --help shows each flag's default
  app.require_subcommand(1);
  app.footer(
      "Each subcommand lists its own flags: conveyor run --help\n"
      "Examples:\n"
      "  conveyor run                                      embedded default dataset\n"
      "  conveyor run --folder train/ --workers 8 --batch 256 --compute-ms 40\n"
      "  conveyor bench --config configs/imagenet.toml --json bench.json\n"
      "  conveyor sweep --workers 1,2,4 --host-queue 1,2,8 --csv sweep.csv --plot sweep.png\n"
      "  conveyor inspect --list train.txt\n"
      "  conveyor train --model lenet --epochs 5 --checkpoint lenet.pt\n"
      "  conveyor make-dataset --out /tmp/shapes");
  Options o;
  auto* run = app.add_subcommand("run", "run the pipeline with a consumer for --epochs; per-epoch stats");
  auto* bench = app.add_subcommand("bench", "throughput only: a table, and --json FILE with the figures");
  auto* sw = app.add_subcommand("sweep", "a grid of runs: one row per point (images/s, consumer idle %, peak RSS)");
  auto* insp = app.add_subcommand("inspect", "decode every sample once; counts by format, size, colour; unreadable files");
  auto* make = app.add_subcommand("make-dataset", "write the embedded default dataset to --out DIR");
  app.add_subcommand("train", "train LeNet-5 or a small ResNet on the batches with LibTorch (conveyor train --help)");
  // Sweep's axes first: add_pipeline_flags leaves a flag sweep already has alone.
  sw->add_option("--workers", o.sw_workers, "comma list, e.g. 1,2,4")->delimiter(',')->check(CLI::Range(std::size_t(1), Config::kMaxWorkers));
  sw->add_option("--host-queue", o.sw_host_queue, "comma list")->delimiter(',')->check(CLI::Range(1, 4096));
  sw->add_option("--device-queue", o.sw_device_queue, "comma list")->delimiter(',')->check(CLI::Range(1, 4096));
  sw->add_option("--batch", o.sw_batch, "comma list")->delimiter(',')->check(CLI::Range(std::size_t(1), Config::kMaxBatchSize));
  sw->add_option("--link-gbps", o.sw_link, "comma list (host backend)")->delimiter(',')->check(CLI::Range(0.0, 1e6));
  sw->add_option("--compute-ms", o.sw_compute, "comma list")->delimiter(',')->check(CLI::Range(0.0, 1e6));
  sw->add_option("--csv", o.csv, "write the rows as CSV");
  sw->add_option("--plot", o.plot, "draw images/s by workers to FILE.png or FILE.svg with gnuplot (needs --csv)");
  for (auto* sub : {run, bench, sw}) {
    add_pipeline_flags(*sub, o);
    add_run_flags(*sub, o);
  }
  for (auto* sub : {run, bench}) sub->add_option("--json", o.json, "write the figures (and every skipped sample) as JSON");
  add_pipeline_flags(*insp, o);
  // --config is the program's (CLI11 reads config files for the top-level app
  // only); its keys set the flags of the subcommand named first.
  const std::string section = argc > 1 ? argv[1] : "";
  add_config_option(app, section, section);
  for (auto* sub : {run, bench, sw, insp, make}) sub->fallthrough();  // `conveyor run --config F`
  make->add_option("--out", o.out, "folder to write (must not exist)")->required();
  make->add_option("--images-per-class", o.images_per_class, "images in each of the 10 classes")->check(CLI::Range(1, 1000000));

  try {
    check_subcommand(argc, argv, app);
    shard_from_environment(o);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConfigError& e) {
    std::fprintf(stderr, "conveyor: %s\n", config_error_line(app, section, e).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 2;
  }

  try {
    if (o.rank >= o.world_size) throw UsageError("--rank " + std::to_string(o.rank) + " must be below --world-size " + std::to_string(o.world_size));
    if (*make) {
      if (std::filesystem::exists(o.out)) throw UsageError("--out " + o.out + ": already exists");
      DefaultDatasetOptions d;
      d.images_per_class = o.images_per_class;
      write_default_dataset(o.out, d);
      std::printf("wrote the default dataset (%zu classes) to %s\n", default_dataset_classes().size(), o.out.c_str());
      return finish_stdout("conveyor", 0);
    }
    // Every output is checked before the run, not found unwritable after it.
    check_writable("--trace", o.trace);
    check_writable("--json", o.json);
    check_writable("--csv", o.csv);
    check_writable("--plot", o.plot);
    check_normalize_flags(o);
    if (*insp) return finish_stdout("conveyor", inspect(o));
    if (*sw) return finish_stdout("conveyor", sweep(o));
    return finish_stdout("conveyor", run_command(o, bench->parsed()));
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 1;
  }
}
