// conveyor-bench-device: the transfer stage's benchmarks (docs/benchmarks.md, docs/cuda.md).
//
//   h2d       GPU only: host-to-device GB/s from pinned and from pageable memory,
//             1 to 64 MB, timed with CUDA events.
//   pipeline  batches/s with the consumer running a fixed-length kernel on its
//             own stream, and the consumer's idle fraction measured with timing
//             events around each kernel: 1 - (sum of kernel times) / (first start
//             to last end). Any backend.
//   overlap   host backend with a simulated link (--link-gbps, several allowed):
//             the same sleep-costed fill, link and step run three ways side by
//             side: serial (one thread), copy in the consumer (workers overlap,
//             but the copy and the step take turns), and the DevicePipeline
//             (fill, copy and step all at once).
//
// Every mode repeats --runs times and prints each run and the median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/median.h"
#include "apps/synthetic.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/kernels/busy.h"

using namespace conveyor;

namespace {

using apps::median;

// Writes the sample's identity into its first bytes and sleeps sample_us: a
// decode of known cost that leaves the cores free (2-core machines).
Filler light_filler(double sample_us) {
  return [sample_us](Sample& s) {
    const std::uint64_t id[2] = {s.epoch, s.index};
    std::memcpy(s.data.data(), id, std::min(s.data.size(), sizeof id));
    s.label = std::int64_t(s.index % 1000);
    if (sample_us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(sample_us));
  };
}

// Median GB/s over `runs` bursts of back-to-back copies of `bytes` from src to a device buffer,
// timed by events on one stream. A burst (about 200 MB, at least 2 copies) is the copy engine's
// steady state, which a pipeline's stream of copies reaches; one copy alone, timed by itself,
// varies by a factor of two on an H100 at 38 MB (22.6 against 51.5 GB/s in one H100 run).
double copy_gbps(Device& device, const void* src, std::size_t bytes, int runs) {
  const int burst = int(std::clamp<std::size_t>(200'000'000 / std::max<std::size_t>(bytes, 1), 2, 64));
  auto stream = device.create_stream();
  auto t0 = device.create_event(EventKind::timing), t1 = device.create_event(EventKind::timing);
  auto dst = device.allocate(bytes);
  device.copy_to_device(dst->data(), src, bytes, *stream);  // warm-up
  device.synchronize(*stream);
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    device.record(*t0, *stream);
    for (int k = 0; k < burst; ++k) device.copy_to_device(dst->data(), src, bytes, *stream);
    device.record(*t1, *stream);
    device.synchronize(*t1);
    gbps.push_back(double(bytes) * burst / (device.elapsed_ms(*t0, *t1) * 1e6));
  }
  return median(gbps);
}

// The same from pinned memory (the device's host allocation): what a batch's copy can reach.
double pinned_gbps(Device& device, std::size_t bytes, int runs) {
  void* pinned = device.allocate_host(bytes);
  std::memset(pinned, 1, bytes);
  const double g = copy_gbps(device, pinned, bytes, runs);
  device.free_host(pinned);
  return g;
}

int h2d(Device& device, const std::vector<double>& sizes_mb, int runs) {
  if (device.backend() != Backend::cuda) {
    std::fprintf(stderr, "h2d measures a GPU's copy engine; this run has the %s\n", device.describe().c_str());
    return 2;
  }
  std::printf("%s\n%-8s %12s %12s %8s\n", device.describe().c_str(), "MB", "pinned GB/s", "pageable GB/s", "ratio");
  for (double mb : sizes_mb) {
    const auto bytes = static_cast<std::size_t>(mb * 1e6);
    const std::vector<std::byte> pageable(bytes, std::byte{1});
    const double p = pinned_gbps(device, bytes, runs), q = copy_gbps(device, pageable.data(), bytes, runs);
    std::printf("%-8.0f %12.2f %12.2f %8.2f\n", mb, p, q, p / q);
  }
  return 0;
}

int pipeline(std::shared_ptr<Device> device, Config cfg, std::size_t batches, double sample_us, double step_us,
             std::optional<TransferConfig::Normalization> normalize, int runs) {
  std::printf("%s\n", device->describe().c_str());
  std::printf("pipeline: %zu batches of %zu x %zu B (%.1f MB), %zu workers, fill %.0f us/sample, step kernel %.0f us, "
              "normalize %s\n",
              batches, cfg.batch_size, cfg.sample_bytes, double(cfg.batch_size * cfg.sample_bytes) / 1e6, cfg.workers,
              sample_us, step_us, normalize ? dtype_name(normalize->out_type) : "off");
  // The link's reach at this copy's size (the pixels and the labels: one copy a
  // batch), measured here, so the runs can say how much of it they use.
  const std::size_t copy_bytes = cfg.batch_size * (cfg.sample_bytes + sizeof(std::int64_t));
  const double link = pinned_gbps(*device, copy_bytes, std::max(runs, 5));
  std::printf("pinned copy of %.1f MB: %.2f GB/s\n", double(copy_bytes) / 1e6, link);
  auto stream = device->create_stream();
  // Timing events for every batch, created before the run (none in the steady state).
  std::vector<std::unique_ptr<Event>> start(batches), end(batches);
  for (std::size_t i = 0; i < batches; ++i) {
    start[i] = device->create_event(EventKind::timing);
    end[i] = device->create_event(EventKind::timing);
  }
  std::vector<double> rates, idles;
  for (int r = 0; r < runs; ++r) {
    TransferConfig tc;
    tc.consumer_stream = stream->native();
    tc.normalize = normalize;
    Config c = cfg;
    c.epochs = 0;
    DevicePipeline dp(c, batches * c.batch_size * 2, light_filler(sample_us), tc, device);
    // Warm-up: the first batches fill the queues; measure from the next one.
    for (std::size_t w = 0; w < c.device_queue_depth + 1; ++w) (void)dp.next();
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < batches; ++i) {
      auto b = dp.next();
      if (!b) {
        std::fprintf(stderr, "pipeline: ended after %zu batches\n", i);
        return 1;
      }
      device->record(*start[i], *stream);
      kernels::busy(*device, step_us, *stream);  // the training step, reading b's memory
      device->record(*end[i], *stream);
    }  // b released at each iteration's end: consumed recorded after the step
    device->synchronize(*stream);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    double busy_ms = 0;
    for (std::size_t i = 0; i < batches; ++i) busy_ms += device->elapsed_ms(*start[i], *end[i]);
    const double span_ms = device->elapsed_ms(*start[0], *end[batches - 1]);
    const double idle = 1.0 - busy_ms / span_ms;
    rates.push_back(double(batches) / wall);
    idles.push_back(idle);
    const double gbps = double(batches) * double(copy_bytes) / wall / 1e9;
    std::printf("run %d: %.1f batches/s = %.2f GB/s, link utilisation %.0f%% (bound by the step: %.1f), consumer idle "
                "%.1f%%; %s\n",
                r + 1, double(batches) / wall, gbps, 100 * gbps / link, 1e6 / step_us, 100 * idle,
                dp.stats().bottleneck_summary().c_str());
  }
  const double rate = median(rates), gbps = rate * double(copy_bytes) / 1e9;
  std::printf("median of %d: %.1f batches/s = %.2f GB/s, link utilisation %.0f%% of the pinned %.2f GB/s, consumer "
              "idle %.1f%%\n",
              runs, rate, gbps, 100 * gbps / link, link, 100 * median(idles));
  return 0;
}

struct OverlapCosts {
  double sample_us, step_us;
};

// Each mode times `batches` batches in the steady state: after `warmup`
// batches, so buffer allocation and first-touch page faults are left out.
constexpr std::size_t kWarmup = 12;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One thread: fill every sample, copy the batch over the link, run the step.
double run_serial(Device& device, const Config& cfg, std::size_t batches, OverlapCosts k) {
  std::vector<std::byte> host(cfg.batch_size * cfg.sample_bytes, std::byte{1});
  auto dev = device.allocate(host.size());
  auto inline_stream = device.wrap_stream(nullptr);
  Filler fill = light_filler(k.sample_us);
  Clock::time_point t0;
  for (std::size_t b = 0; b < batches + kWarmup; ++b) {
    if (b == kWarmup) t0 = Clock::now();
    for (std::size_t j = 0; j < cfg.batch_size; ++j) {
      const std::uint64_t index = b * cfg.batch_size + j;
      Sample s{index, 0, j, std::span<std::byte>(host.data() + j * cfg.sample_bytes, cfg.sample_bytes), 0,
               Rng(cfg.seed, 0, index)};
      fill(s);
    }
    device.copy_to_device(dev->data(), host.data(), host.size(), *inline_stream);
    kernels::busy(device, k.step_us, *inline_stream);
  }
  return seconds(t0);
}

// Workers fill ahead, but the consumer copies each batch itself and then steps:
// a blocking .to(device) in the training loop.
double run_copy_in_consumer(Device& device, const Config& cfg, std::size_t batches, OverlapCosts k) {
  auto dev = device.allocate(cfg.batch_size * cfg.sample_bytes);
  auto inline_stream = device.wrap_stream(nullptr);
  Config c = cfg;
  c.epochs = 0;
  StageFunctions stages;
  stages.fill = light_filler(k.sample_us);
  Pipeline p(c, (batches + kWarmup) * c.batch_size, std::move(stages));
  Clock::time_point t0;
  for (std::size_t b = 0; b < batches + kWarmup; ++b) {
    if (b == kWarmup) t0 = Clock::now();
    auto h = p.next();
    device.copy_to_device(dev->data(), (*h)->data, (*h)->bytes().size(), *inline_stream);
    kernels::busy(device, k.step_us, *inline_stream);
  }
  return seconds(t0);
}

// Fill, copy (on the delivery thread) and step all at once.
double run_device_pipeline(std::shared_ptr<Device> device, const Config& cfg, std::size_t batches, OverlapCosts k) {
  Config c = cfg;
  c.epochs = 0;
  DevicePipeline dp(c, (batches + kWarmup) * c.batch_size, light_filler(k.sample_us), TransferConfig{}, device);
  auto inline_stream = device->wrap_stream(nullptr);
  Clock::time_point t0;
  for (std::size_t b = 0; b < batches + kWarmup; ++b) {
    if (b == kWarmup) t0 = Clock::now();
    auto batch = dp.next();
    kernels::busy(*device, k.step_us, *inline_stream);
  }
  return seconds(t0);
}

// What each stage really costs here (sleeps overshoot), median of 5, in ms.
struct Measured {
  double fill_one_thread, copy, step;
};
Measured calibrate(Device& device, const Config& cfg, OverlapCosts k) {
  std::vector<std::byte> host(cfg.batch_size * cfg.sample_bytes, std::byte{1});
  auto dev = device.allocate(host.size());
  auto s = device.wrap_stream(nullptr);
  Filler fill = light_filler(k.sample_us);
  std::vector<double> f, c, t;
  for (int r = 0; r < 6; ++r) {
    auto t0 = Clock::now();
    for (std::size_t j = 0; j < cfg.batch_size; ++j) {
      Sample smp{j, 0, j, std::span<std::byte>(host.data() + j * cfg.sample_bytes, cfg.sample_bytes), 0, Rng(0, 0, j)};
      fill(smp);
    }
    f.push_back(1000 * seconds(t0));
    t0 = Clock::now();
    device.copy_to_device(dev->data(), host.data(), host.size(), *s);
    c.push_back(1000 * seconds(t0));
    t0 = Clock::now();
    kernels::busy(device, k.step_us, *s);
    t.push_back(1000 * seconds(t0));
  }
  f.erase(f.begin());  // the first round touches fresh pages
  c.erase(c.begin());
  t.erase(t.begin());
  return {median(f), median(c), median(t)};
}

int overlap(const std::vector<double>& links, const Config& cfg, std::size_t batches, OverlapCosts k, int runs) {
  const double batch_mb = double(cfg.batch_size * cfg.sample_bytes) / 1e6;
  std::printf("overlap: %zu batches (after %zu warm-up) of %zu x %zu B (%.1f MB), %zu workers, "
              "fill %.0f us/sample (sleep), step %.0f us (sleep)\n",
              batches, kWarmup, cfg.batch_size, cfg.sample_bytes, batch_mb, cfg.workers, k.sample_us, k.step_us);
  for (double gbps : links) {
    DeviceConfig dc;
    dc.backend = BackendChoice::host;
    dc.link_gbps = gbps;
    auto device = open_device(dc);
    const Measured m = calibrate(*device, cfg, k);
    const double fill = m.fill_one_thread / double(cfg.workers);  // workers sleep side by side
    const double n = double(batches);
    const double serial_bound = n * (m.fill_one_thread + m.copy + m.step);
    const double consumer_bound = n * std::max(fill, m.copy + m.step);
    const double pipeline_bound = n * std::max({fill, m.copy, m.step});
    std::printf("\nlink %.0f GB/s (%s)\n", gbps, device->describe().c_str());
    std::printf("measured per batch: fill %.2f ms on one thread (%.2f ms with %zu workers), copy %.2f ms "
                "(link alone: %.2f), step %.2f ms\n",
                m.fill_one_thread, fill, cfg.workers, m.copy, batch_mb / gbps, m.step);
    std::printf("bounds (ms for %zu batches): serial %.1f, copy in consumer %.1f, pipeline %.1f\n", batches,
                serial_bound, consumer_bound, pipeline_bound);
    std::vector<double> s, c, p, cp, sp;
    for (int r = 0; r < runs; ++r) {
      s.push_back(1000 * run_serial(*device, cfg, batches, k));
      c.push_back(1000 * run_copy_in_consumer(*device, cfg, batches, k));
      p.push_back(1000 * run_device_pipeline(device, cfg, batches, k));
      sp.push_back(s.back() / p.back());
      cp.push_back(c.back() / p.back());
      std::printf("run %d: serial %.1f ms, copy in consumer %.1f ms, device pipeline %.1f ms (%.2f x bound); "
                  "pipeline speed-up %.2fx vs serial, %.2fx vs copy in consumer\n",
                  r + 1, s.back(), c.back(), p.back(), p.back() / pipeline_bound, sp.back(), cp.back());
    }
    std::printf("median of %d: serial %.1f ms, copy in consumer %.1f ms, device pipeline %.1f ms (%.2f x bound); "
                "speed-up %.2fx vs serial, %.2fx vs copy in consumer\n",
                runs, median(s), median(c), median(p), median(p) / pipeline_bound, median(sp), median(cp));
  }
  return 0;
}

std::optional<DType> normalize_type(const std::string& s) {
  if (s == "off") return std::nullopt;
  return parse_dtype(s);
}

// --normalize: off, or the float type of 224x224x3 samples normalized on the
// device. False, with a line on stderr, for anything else.
bool normalize_flag(const std::string& norm, std::size_t sample_bytes, std::optional<TransferConfig::Normalization>& out) {
  if (norm == "off") return true;
  const auto t = normalize_type(norm);
  if (!t || *t == DType::uint8) {
    std::fprintf(stderr, "--normalize: '%s' is not off, float32, float16 or bfloat16\n", norm.c_str());
    return false;
  }
  if (sample_bytes != 224 * 224 * 3) {
    std::fprintf(stderr, "--normalize: needs 224x224x3 samples (--sample-bytes 150528)\n");
    return false;
  }
  out = TransferConfig::Normalization{224, 224, 3, Normalize{}, *t};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conveyor-bench-device: transfer-stage benchmarks"};
  app.require_subcommand(1);
  std::string backend = "auto";
  int runs = 5;
  int gpu = 0;
  app.add_option("--device", backend, "auto | cuda | host")->check(CLI::IsMember({"auto", "cuda", "host"}));
  app.add_option("--gpu", gpu, "the CUDA device to use, numbered as CUDA_VISIBLE_DEVICES shows them")
      ->check(CLI::Range(0, 1023));
  app.add_option("--runs", runs, "repeats; the median is reported")->check(CLI::PositiveNumber);

  auto* h2d_cmd = app.add_subcommand("h2d", "GPU: H2D GB/s, pinned vs pageable");
  std::vector<double> sizes{1, 2, 4, 8, 16, 32, 64};
  h2d_cmd->add_option("--sizes-mb", sizes, "copy sizes in MB (1e6 bytes)")->delimiter(',');

  Config cfg;
  cfg.batch_size = 128;
  cfg.sample_bytes = 224 * 224 * 3;
  cfg.workers = 4;
  std::size_t batches = 100;
  double sample_us = 20, step_us = 5000, link = 0;
  std::string norm = "off";
  auto* pipe_cmd = app.add_subcommand("pipeline", "batches/s with a fixed consumer kernel, consumer idle fraction");
  auto* over_cmd = app.add_subcommand("overlap", "host backend, simulated link: serial vs copy in consumer vs pipeline");
  std::vector<double> links{12, 25};
  for (auto* cmd : {pipe_cmd, over_cmd}) {
    cmd->add_option("--batch", cfg.batch_size, "samples per batch");
    cmd->add_option("--sample-bytes", cfg.sample_bytes, "bytes per sample (default 224x224x3)");
    cmd->add_option("--workers", cfg.workers, "worker threads");
    cmd->add_option("--batches", batches, "batches measured");
    cmd->add_option("--sample-us", sample_us, "fill cost per sample (sleep)");
  }
  pipe_cmd->add_option("--step-us", step_us, "the consumer's kernel, per batch");
  pipe_cmd->add_option("--normalize", norm, "off | float32 | float16 | bfloat16 (224x224x3 samples)");
  pipe_cmd->add_option("--link-gbps", link, "host backend: simulated link");
  over_cmd->add_option("--links", links, "simulated link speeds, GB/s")->delimiter(',');
  over_cmd->add_option("--step-us", step_us, "the training step, per batch");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*over_cmd) {
      if (gpu != 0) {
        std::fprintf(stderr, "conveyor-bench-device: --gpu %d: not with overlap (it simulates links on the host backend)\n", gpu);
        return 2;
      }
      // Defaults that make the link matter: a step about as long as a 12 GB/s copy.
      if (!over_cmd->count("--step-us")) step_us = 1500;
      if (!over_cmd->count("--batches")) batches = 60;
      if (!over_cmd->count("--sample-us")) sample_us = 0;
      return overlap(links, cfg, batches, OverlapCosts{sample_us, step_us}, runs);
    }
    DeviceConfig dc;
    dc.backend = *parse_backend(backend);
    if (gpu != 0 && dc.backend == BackendChoice::host) {
      std::fprintf(stderr, "conveyor-bench-device: --gpu %d: not with --device host (it picks a CUDA device)\n", gpu);
      return 2;
    }
    dc.cuda_device = gpu;
    dc.link_gbps = link;
    auto device = open_device(dc);
    if (*h2d_cmd) return h2d(*device, sizes, runs);
    std::optional<TransferConfig::Normalization> normalize;
    if (!normalize_flag(norm, cfg.sample_bytes, normalize)) return 2;
    return pipeline(device, cfg, batches, sample_us, step_us, normalize, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor-bench-device: %s\n", e.what());
    return 1;
  }
}
