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
// list line, unknown config key), always with one line on stderr.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cuda/device_pipeline.h"
#include "stages/dataset.h"
#include "stages/default_dataset.h"
#include "stages/image_source.h"

using namespace conveyor;
using Clock = std::chrono::steady_clock;

namespace {

// Bad input: reported in one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v && *v) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(v, &end, 10);
      if (*end != '\0') throw UsageError(std::string("environment: ") + n + "='" + v + "' is not a non-negative integer");
      return std::size_t(x);
    }
  }
  return fallback;
}

struct Options {
  std::string list, folder;
  std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  std::size_t batch = 64;
  std::size_t host_queue = 2, device_queue = 2;
  std::size_t epochs = 1;
  std::uint64_t seed = 0;
  int crop = 0;  // 0: 64 for the embedded dataset, else 224
  std::string device = "auto";
  double link_gbps = 0;
  std::string on_error = "fail";
  std::string normalize = "off";
  std::string compute = "sleep";
  double compute_ms = 0;
  std::size_t rank = 0, world_size = 1;
  std::string json;
  std::string out;
};

void add_shared(CLI::App& app, Options& o) {
  app.add_option("--list", o.list, "dataset list file: `path label` per line")->check(CLI::ExistingFile);
  app.add_option("--folder", o.folder, "dataset folder: root/<class>/<image> (ImageFolder)")->check(CLI::ExistingDirectory);
  app.add_option("--workers", o.workers, "decode/augment worker threads")->check(CLI::Range(1, 4096));
  app.add_option("--batch", o.batch, "samples per batch")->check(CLI::Range(1, 1 << 24));
  app.add_option("--host-queue", o.host_queue, "finished batches waiting for the transfer thread")->check(CLI::Range(1, 4096));
  app.add_option("--device-queue", o.device_queue, "transferred batches waiting for the consumer")->check(CLI::Range(1, 4096));
  app.add_option("--epochs", o.epochs, "epochs to run")->check(CLI::Range(1, 1 << 30));
  app.add_option("--seed", o.seed, "seed of the order and of every augmentation");
  app.add_option("--crop", o.crop, "output size of RandomResizedCrop (default 64 on the embedded dataset, else 224)")
      ->check(CLI::Range(1, 16384));
  app.add_option("--device", o.device, "auto | cuda | host")->check(CLI::IsMember({"auto", "cuda", "host"}));
  app.add_option("--link-gbps", o.link_gbps, "host backend: simulated host-to-device link, GB/s")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--on-error", o.on_error, "a bad image: fail (stop) or skip (count and list it)")
      ->check(CLI::IsMember({"fail", "skip"}));
  app.add_option("--normalize", o.normalize, "normalize on the device: off | float32 | float16 | bfloat16")
      ->check(CLI::IsMember({"off", "float32", "float16", "bfloat16"}));
  app.add_option("--compute", o.compute, "the consumer's synthetic step: sleep (frees the CPU, like a GPU) or spin")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--compute-ms", o.compute_ms, "milliseconds of synthetic step per batch; 0: no step")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--rank", o.rank, "this process's shard (default: $RANK or $OMPI_COMM_WORLD_RANK, else 0)");
  app.add_option("--world-size", o.world_size, "number of shards (default: $WORLD_SIZE or $OMPI_COMM_WORLD_SIZE, else 1)")
      ->check(CLI::Range(1, 1 << 20));
}

Dataset open_dataset(const Options& o, bool& embedded) {
  if (!o.list.empty() && !o.folder.empty()) throw UsageError("--list and --folder: give one dataset, not both");
  embedded = o.list.empty() && o.folder.empty();
  try {
    if (!o.list.empty()) return Dataset::from_list(o.list);
    if (!o.folder.empty()) return Dataset::from_folder(o.folder);
  } catch (const DatasetError& e) {
    throw UsageError(e.what());
  }
  bool made = false;
  const auto dir = ensure_default_dataset({}, &made);
  std::fprintf(stderr, "%s the embedded default dataset: %s\n", made ? "made" : "using", dir.c_str());
  return Dataset::from_folder(dir);
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

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

struct EpochFigures {
  std::uint64_t epoch = 0, batches = 0, images = 0, skipped = 0;
  double seconds = 0;
  double images_per_s() const { return seconds > 0 ? double(images) / seconds : 0; }
};

struct RunResult {
  std::vector<EpochFigures> epochs;
  PipelineStats stats;
  std::string device;
  std::vector<SkippedSample> skipped;
};

RunResult run_pipeline(const Options& o, bool print_epochs) {
  bool embedded = false;
  Dataset dataset = open_dataset(o, embedded);
  ImageConfig ic;
  const int crop = o.crop ? o.crop : (embedded ? 64 : 224);
  ic.transforms = {RandomResizedCrop{{crop, crop}}, RandomHorizontalFlip{}};
  ic.on_error = o.on_error == "skip" ? ErrorPolicy::skip : ErrorPolicy::fail;
  ImageSource images(dataset, ic, o.workers);

  Config cfg;
  cfg.batch_size = o.batch;
  cfg.sample_bytes = images.sample_bytes();
  cfg.workers = o.workers;
  cfg.host_queue_depth = o.host_queue;
  cfg.device_queue_depth = o.device_queue;
  cfg.seed = o.seed;
  cfg.epochs = o.epochs;
  cfg.rank = o.rank;
  cfg.world_size = o.world_size;
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }

  DeviceConfig dc;
  dc.backend = *parse_backend(o.device);
  dc.link_gbps = o.link_gbps;
  auto device = open_device(dc);
  TransferConfig tc;
  if (o.normalize != "off") {
    tc.normalize = TransferConfig::Normalization{std::size_t(crop), std::size_t(crop), 3, Normalize{}, *parse_dtype(o.normalize)};
  }
  RunResult result;
  result.device = device->describe();
  if (print_epochs) {
    std::printf("dataset: %zu images, %zu classes; rank %zu of %zu\n%s\n", dataset.size(), dataset.classes().size(),
                o.rank, o.world_size, result.device.c_str());
  }
  DevicePipeline pipeline(cfg, dataset.size(), images.filler(), tc, device);
  const bool tty = ::isatty(STDERR_FILENO);
  for (std::uint64_t e = 0; e < o.epochs; ++e) {
    EpochFigures f;
    f.epoch = e;
    const auto t0 = Clock::now();
    const std::size_t total = pipeline.batches_per_epoch();
    for (auto& batch : pipeline.epoch(e)) {
      f.images += batch.size();
      f.skipped += batch.host().skipped.size();
      ++f.batches;
      step(o);
      if (tty && print_epochs && (f.batches % 4 == 0 || f.batches == total)) {
        const int width = 30, done = int(double(f.batches) / double(total) * width);
        std::fprintf(stderr, "\r  epoch %llu [%s%s] %llu/%zu batches", (unsigned long long)e, std::string(done, '#').c_str(),
                     std::string(width - done, '.').c_str(), (unsigned long long)f.batches, total);
      }
    }
    f.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (tty && print_epochs) std::fprintf(stderr, "\r%*s\r", 70, "");
    result.epochs.push_back(f);
    if (print_epochs) {
      const PipelineStats s = pipeline.stats();
      std::printf("epoch %llu: %llu images in %llu batches, %.1f s, %.0f images/s%s\n", (unsigned long long)e,
                  (unsigned long long)f.images, (unsigned long long)f.batches, f.seconds, f.images_per_s(),
                  f.skipped ? (", " + std::to_string(f.skipped) + " skipped").c_str() : "");
      std::printf("%s", s.table().c_str());
      std::fflush(stdout);
    }
  }
  result.stats = pipeline.stats();
  result.skipped = pipeline.skipped();
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
  std::uint64_t images = 0, batches = 0;
  double seconds = 0;
  for (auto& e : r.epochs) {
    images += e.images;
    batches += e.batches;
    seconds += e.seconds;
  }
  std::ofstream out(file);
  if (!out) throw UsageError("--json: cannot write " + file);
  out << "{\n  \"device\": \"" << json_escape(r.device) << "\",\n";
  out << "  \"workers\": " << o.workers << ", \"batch\": " << o.batch << ", \"host_queue\": " << o.host_queue
      << ", \"device_queue\": " << o.device_queue << ", \"epochs\": " << o.epochs << ",\n";
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
  double idle = 0;
  for (const auto& s : r.stats.stages) {
    if (s.name == "consumer") idle = s.starved_fraction();
  }
  out << "  \"consumer_idle\": " << idle << ",\n  \"peak_rss_mib\": " << double(peak_rss_kib()) / 1024.0 << "\n}\n";
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
  Stages stages;
  stages.fill = [&](Sample& s) {
    Counts& c = per_worker[s.worker];
    const std::string path = dataset.path(s.index).string();
    try {
      read_file(dataset.path(s.index), DecodeLimits{}.max_file_bytes, files[s.worker]);
      ImageDecoder& d = *decoders[s.worker];
      const ImageInfo info = d.open(files[s.worker]);
      (void)d.decode(Rect{0, 0, info.width, info.height}, 1.0);
      static const char* fmt[] = {"unknown", "jpeg", "png", "bmp", "pnm", "tga", "gif"};
      ++c.formats[fmt[std::min<int>(int(info.format), 6)]];
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conveyor: an input pipeline for C++ training code (decode workers -> transfer thread -> your step)"};
  app.require_subcommand(1);
  app.set_config("--config", "", "TOML file of flags (`workers = 8`); flags on the command line override it");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.footer(
      "Examples:\n"
      "  conveyor run                                      embedded default dataset\n"
      "  conveyor run --folder train/ --workers 8 --batch 256 --compute-ms 40\n"
      "  conveyor bench --config configs/imagenet.toml --json bench.json\n"
      "  conveyor inspect --list train.txt\n"
      "  conveyor make-dataset --out /tmp/shapes");
  Options o;
  o.rank = 0;
  o.world_size = 1;
  add_shared(app, o);
  app.fallthrough();

  auto* run = app.add_subcommand("run", "run the pipeline with a consumer for --epochs; per-epoch stats");
  auto* bench = app.add_subcommand("bench", "throughput only: a table, and --json FILE with the figures");
  bench->add_option("--json", o.json, "write the figures as JSON");
  auto* insp = app.add_subcommand("inspect", "decode every sample once; counts by format, size, colour; unreadable files");
  auto* make = app.add_subcommand("make-dataset", "write the embedded default dataset to --out DIR");
  make->add_option("--out", o.out, "folder to write (must not exist)")->required();
  for (auto* s : {run, bench, insp, make}) s->fallthrough();

  try {
    o.rank = env_size({"RANK", "OMPI_COMM_WORLD_RANK"}, 0);
    o.world_size = env_size({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}, 1);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
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
      write_default_dataset(o.out);
      std::printf("wrote the default dataset (%zu classes) to %s\n", default_dataset_classes().size(), o.out.c_str());
      return 0;
    }
    if (*insp) return inspect(o);
    const RunResult r = run_pipeline(o, true);
    if (*bench) {
      std::uint64_t images = 0;
      double seconds = 0;
      for (auto& e : r.epochs) {
        images += e.images;
        seconds += e.seconds;
      }
      std::printf("bench: %.0f images/s over %zu epoch(s), peak RSS %.0f MiB\n", seconds > 0 ? double(images) / seconds : 0,
                  r.epochs.size(), double(peak_rss_kib()) / 1024.0);
      if (!o.json.empty()) write_json(o.json, o, r);
    }
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor: %s\n", e.what());
    return 1;
  }
}
