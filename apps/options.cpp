#include "apps/options.h"

#include "apps/cli.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <optional>

#include "data/dataset.h"
#include "data/remote/remote_shards.h"
#include "data/remote/url.h"
#include "data/files/list_file.h"
#include "gpu_decode/share.h"
#include "image/decode.h"
#include "image/transform_spec.h"

namespace conveyor::apps {

namespace {

// --link-gbps: 0 (off), or DeviceConfig's range, 0.01 to 1e6 GB/s.
CLI::Validator link_range() {
  return CLI::Validator(
      [](const std::string& value) -> std::string {
        const double x = std::strtod(value.c_str(), nullptr);
        if (x == 0 || (x >= DeviceConfig::kMinLinkGbps && x <= DeviceConfig::kMaxLinkGbps)) return {};
        return "Value " + value + " is neither 0 nor in 0.01 to 1e6 (GB/s)";
      },
      "0 or 0.01-1e6");
}
// A whole number of at most `max` written in decimal digits alone (no sign,
// no space), as the counts that also take "auto" must be; nullopt otherwise.
std::optional<std::size_t> parse_count(const std::string& v, std::size_t max) {
  std::size_t n = 0;
  const char* end = v.data() + v.size();
  const auto [at, ec] = std::from_chars(v.data(), end, n);
  if (v.empty() || v[0] == '+' || ec != std::errc() || at != end || n > max) return std::nullopt;
  return n;
}

// Adds `name`, which takes a whole number in 1 .. max (into `count`) or
// "auto" (sets `is_auto`); `noun` names the number in the error ("count").
void add_count_or_auto(CLI::App& app, const std::string& name, std::size_t& count, bool& is_auto, std::size_t max,
                       const std::string& noun, const std::string& help) {
  app.add_option_function<std::string>(
         name,
         [&count, &is_auto](const std::string& v) {
           is_auto = v == "auto";
           if (!is_auto) count = std::stoul(v);  // the check took only 1 .. max
         },
         help)
      ->type_name("UINT|auto")
      ->check(CLI::Validator(
          [max, noun](std::string& v) -> std::string {
            if (v == "auto") return {};
            const auto n = parse_count(v, max);
            if (n && *n >= 1) return {};
            return v + ": expected a " + noun + " in 1 - " + std::to_string(max) + " or auto";
          },
          "INT in [1 - " + std::to_string(max) + "] or auto"));
}

// Adds a flag unless the subcommand already has one of that name (sweep's
// axes), which then keeps its own meaning; returns whichever it has.
template <typename T>
CLI::Option* add_or_keep(CLI::App& app, const std::string& name, T& value, const std::string& help) {
  if (CLI::Option* existing = app.get_option_no_throw(name)) return existing;
  return app.add_option(name, value, help);
}

}  // namespace

void add_dataset_flags(CLI::App& app, Options& o) {
  add_or_keep(app, "--list", o.list, "dataset list file: `path label` per line")->check(CLI::ExistingFile);
  add_or_keep(app, "--folder", o.folder, "dataset folder: root/<class>/<image> (ImageFolder)")->check(CLI::ExistingDirectory);
  add_or_keep(app, "--shards", o.shards,
              "dataset of WebDataset tar shards: DIR/*.tar holding KEY.jpg + KEY.cls, or an http(s):// or s3:// URL of a "
              "folder `conveyor pack` wrote (downloaded once into --cache-dir; s3:// takes AWS_* variables)")
      ->check(CLI::Validator([](std::string& s) { return is_remote_location(s) ? std::string() : CLI::ExistingDirectory(s); },
                             "DIR|URL"));
  add_or_keep(app, "--cache-dir", o.cache_dir,
              "with an http(s):// or s3:// --shards URL: the folder its shards are downloaded to (default: the user's cache "
              "folder, ~/.cache/conveyor/remote)");
  if (!app.get_option_no_throw("--cache-gb")) {
    app.add_option("--cache-gb", o.cache_gb,
                   "with an http(s):// or s3:// --shards URL: the most the cache folder may hold, in GB (10^9 bytes); the "
                   "least recently used shards of jobs not running are removed to make room, and shards that still do "
                   "not fit are read by range (default: no limit)")
        ->check(CLI::Validator(
            [](std::string& s) {
              try {
                (void)cache_gb_bytes(std::stod(s));
                return std::string();
              } catch (const std::invalid_argument& e) {
                return std::string(e.what());
              } catch (const std::out_of_range&) {
                return std::string("a cache limit in GB must be a number above 0");
              }
            },
            "GB"));
  }
  if (!app.get_option_no_throw("--download-first")) {
    app.add_flag("--download-first", o.download_first,
                 "with an http(s):// or s3:// --shards URL: download every shard and check it against the manifest "
                 "before the first batch (default: read samples by range while the shards download)");
  }
  if (!app.get_option_no_throw("--extra-shards")) {
    app.add_flag_callback("--extra-shards", [&o] { o.unlisted_shards = UnlistedShards::read; },
                          "with --shards: also read .tar files that the folder's manifest (conveyor pack's) does not "
                          "list (default: refused by name)");
  }
}

void add_pipeline_flags(CLI::App& app, Options& o) {
  const auto option = [&](const std::string& name, auto& value, const std::string& help) {
    return add_or_keep(app, name, value, help);
  };
  const auto range = [](std::size_t lo, std::size_t hi) { return CLI::Range(lo, hi); };
  add_dataset_flags(app, o);
  // A count that also takes "auto", and the --max-NAME ceiling auto goes up
  // to; sweep's own lists of counts keep their meaning.
  const auto tuned_count = [&](const std::string& name, std::size_t& count, bool& is_auto, std::size_t& ceiling,
                               std::size_t max, const std::string& noun, const std::string& help,
                               const std::string& ceiling_help) {
    if (app.get_option_no_throw(name)) return;
    add_count_or_auto(app, name, count, is_auto, max, noun, help);
    option("--max-" + name.substr(2), ceiling, ceiling_help)->check(range(1, max));
  };
  tuned_count("--workers", o.workers, o.workers_auto, o.max_workers, Config::kMaxWorkers, "count",
              "decode/augment worker threads, or auto: the pipeline runs as many of --max-workers as raise images/s "
              "while half a core is free, fewer when the consumer is the limit (default: the core count)",
              "with --workers auto: the most worker threads it may run (default: twice the cores, " +
                  std::to_string(default_worker_ceiling()) + " here)");
  tuned_count("--host-queue", o.host_queue, o.host_queue_auto, o.max_host_queue, 4096, "depth",
              "finished batches waiting for the delivery thread (which copies them to the device), or auto: deeper, "
              "up to --max-host-queue, while the consumer waits on batches held up behind a slow one (default: 2)",
              "with --host-queue auto: the deepest it may go; the memory check counts its buffers, allocated as the "
              "depth grows (default: " + std::to_string(kDefaultHostQueueCeiling) + ")");
  tuned_count("--device-queue", o.device_queue, o.device_queue_auto, o.max_device_queue, 4096, "depth",
              "transferred batches waiting for the consumer, or auto: deeper, up to --max-device-queue, while the "
              "consumer waits on batches the transfer could have moved earlier had the queue had room (a consumer "
              "whose steps come in bursts) (default: 2)",
              "with --device-queue auto: the deepest it may go; the memory check counts its buffers and device "
              "slots, allocated as the depth grows (default: " + std::to_string(kDefaultDeviceQueueCeiling) + ")");
  if (app.get_option_no_throw("--max-workers") || app.get_option_no_throw("--max-host-queue") ||
      app.get_option_no_throw("--max-device-queue")) {
    app.final_callback([&o] {
      // Under auto the count is the ceiling: --max-NAME's, or the default one.
      const auto settle = [](const char* name, bool is_auto, std::size_t ceiling, std::size_t& count,
                             std::size_t fallback) {
        if (ceiling && !is_auto) throw UsageError(std::string("--max-") + name + ": only with --" + name + " auto");
        if (is_auto) count = ceiling ? ceiling : fallback;
      };
      settle("workers", o.workers_auto, o.max_workers, o.workers, default_worker_ceiling());
      settle("host-queue", o.host_queue_auto, o.max_host_queue, o.host_queue, kDefaultHostQueueCeiling);
      settle("device-queue", o.device_queue_auto, o.max_device_queue, o.device_queue, kDefaultDeviceQueueCeiling);
    });
  }
  option("--batch", o.batch, "samples per batch")->check(range(1, Config::kMaxBatchSize));
  option("--wait-yields", o.wait_yields, "times a waiting thread yields its core before it sleeps (0: sleep at once)")
      ->check(range(0, Config::kMaxWaitYields));
  option("--epochs", o.epochs, "epochs to run")->check(range(1, std::size_t(1) << 30));
  option("--seed", o.seed, "seed of the order and of every augmentation");
  option("--crop", o.crop, "output size of RandomResizedCrop (default 0: 64 on the embedded dataset, else 224)")
      ->check(CLI::Range(1, kMaxCrop));
  add_choice(app, "--augment", o.augment, kAugments,
             "rrc: RandomResizedCrop + flip | crop: Resize + RandomCrop (padding 4) + flip | center: Resize + CenterCrop");
  option("--transforms", o.transforms,
         "the transform list as torchvision's Compose is written, e.g. \"RandomResizedCrop(224), RandomHorizontalFlip(), "
         "ColorJitter(0.4, 0.4, 0.4)\" (names, parameters and defaults: image/transform_spec.h); in place of --augment "
         "and --crop");
  option("--views", o.views,
         "several views of each sample (SimCLR, DINO): transform lists separated by ';', each with its count and a "
         "':' in front, e.g. \"2: RandomResizedCrop(224, scale=(0.4, 1)), RandomHorizontalFlip(); 6: "
         "RandomResizedCrop(96, scale=(0.05, 0.4))\"; one read and decode per sample; in place of --transforms");
  add_choice(app, "--device", o.device, kDevices, "auto | cuda | host");
  option("--gpu", o.gpu, "the CUDA device to use, numbered as CUDA_VISIBLE_DEVICES shows them (default 0; --gpu 0 is "
                         "the default, so --device auto still falls back to the host without a GPU; any other N does not)")
      ->check(range(0, 1023));
  option("--link-gbps", o.link_gbps, "host backend: simulated host-to-device link, GB/s (0: as fast as memcpy)")
      ->check(link_range());
  add_choice(app, "--host-transfer", o.host_transfer, kHostTransfers,
             "host backend: copy (each batch into a separate buffer, as a GPU copy would) or handover "
             "(the consumer gets the worker's buffer: CPU training)");
  add_choice(app, "--on-error", o.on_error, kErrorPolicies, "a bad image: fail (stop) or skip (count and list it)");
  option("--rank", o.rank, "this process's shard (default: $RANK or $OMPI_COMM_WORLD_RANK, else 0)")
      ->check(range(0, Config::kMaxWorldSize - 1));
  option("--world-size", o.world_size, "number of shards (default: $WORLD_SIZE or $OMPI_COMM_WORLD_SIZE, else 1)")
      ->check(range(1, Config::kMaxWorldSize));
  app.add_flag("--rank-by-shard", o.rank_by_shard,
         "with --shards: whole shards per rank (shard s to rank s % world size), for locality; counts evened by padding");
  option("--read-ahead", o.read_ahead,
         "with --shards: advise the kernel of the next batch's byte ranges so their reads start early (default on)");
  option("--max-memory-mb", o.max_memory_mb,
         "the most the batch pools (host and device) may take, MiB (0: a quarter of physical memory, " +
             std::to_string(std::size_t(default_max_memory_mb())) + " here)")
      ->check(CLI::Range(0.0, 1e12));
}

void add_run_flags(CLI::App& app, Options& o) {
  app.add_flag("--resident", o.resident,
               "decode every image once (Resize + CenterCrop), upload, and batch on the device by gather");
  add_or_keep(app, "--budget-mb", o.budget_mb, "--resident: device memory the decoded set may take, MiB")
      ->check(CLI::Range(1.0, 1e9));
  add_choice(app, "--normalize", o.normalize, kNormalizes,
             "normalized output (CHW), where --normalize-in says: off (uint8 HWC) | float32 | float16 | bfloat16");
  add_choice(app, "--normalize-in", o.normalize_in, kNormalizeIns,
             "device: after the transfer (the GPU's kernel; on the host backend, the normalize stream's own thread) | "
             "workers: each worker writes float32 (a consumer on the CPU)");
  add_choice(app, "--compute", o.compute, kComputes,
             "the consumer's synthetic step: sleep (frees the CPU, like a GPU) or spin");
  add_or_keep(app, "--compute-ms", o.compute_ms, "milliseconds of synthetic step per batch; 0: no step")
      ->check(CLI::Range(0.0, 1e6));
  add_or_keep(app, "--compute-stall-ms", o.compute_stall_ms,
              "a long step, this many milliseconds more for every --compute-stall-every'th batch (a consumer whose "
              "steps come in bursts)")
      ->check(CLI::Range(0.0, 1e6));
  add_or_keep(app, "--compute-stall-every", o.compute_stall_every,
              "with --compute-stall-ms: one step in this many is long (default 0: none)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 30));
  add_or_keep(app, "--synthetic-ms", o.synthetic_ms,
              "teaching: workers sleep this long per sample instead of decoding (known stage costs)")
      ->check(CLI::Range(0.0, 1e6));
  add_or_keep(app, "--synthetic-stall-ms", o.synthetic_stall_ms,
              "with --synthetic-ms: a stalled read, this many milliseconds more for every --synthetic-stall-every'th "
              "sample (by index)")
      ->check(CLI::Range(0.0, 1e6));
  add_or_keep(app, "--synthetic-stall-every", o.synthetic_stall_every,
              "with --synthetic-stall-ms: one sample in this many stalls (default 0: none)")
      ->check(CLI::Range(std::size_t(0), std::size_t(1) << 40));
  add_or_keep(app, "--gpu-decode", o.gpu_decode,
              "decode a share of the JPEGs on the GPU beside the CPU workers: off | auto (a share from the measured "
              "rates; off without a GPU decoder) | SHARE in [0, 1] (on the host backend: its CPU twin, a test path)");
  add_or_keep(app, "--gpu-decode-threads", o.gpu_decode_threads,
              "with --gpu-decode: threads that feed the GPU decoder, each with two decoders (default 0: " +
                  std::to_string(kDefaultGpuDecodeThreads) + ")")
      ->check(CLI::Range(std::size_t(0), kMaxGpuDecodeThreads));
  app.add_flag("--serial", o.serial, "teaching: fill, copy and step one after another on one thread (no overlap)");
  add_or_keep(app, "--trace", o.trace, "write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE");
}

void add_sweep_flags(CLI::App& app, Options& o) {
  const auto list = [&](const std::string& name, auto& values, const std::string& help) {
    return app.add_option(name, values, help)->delimiter(',');
  };
  list("--workers", o.sw_workers, "comma list, e.g. 1,2,4")->check(CLI::Range(std::size_t(1), Config::kMaxWorkers));
  list("--host-queue", o.sw_host_queue, "comma list")->check(CLI::Range(1, 4096));
  list("--device-queue", o.sw_device_queue, "comma list")->check(CLI::Range(1, 4096));
  list("--batch", o.sw_batch, "comma list")->check(CLI::Range(std::size_t(1), Config::kMaxBatchSize));
  list("--link-gbps", o.sw_link, "comma list (host backend)")->check(link_range());
  list("--compute-ms", o.sw_compute, "comma list")->check(CLI::Range(0.0, 1e6));
  app.add_option("--csv", o.csv, "write the rows as CSV");
  app.add_option("--plot", o.plot, "draw images/s by workers to FILE.png or FILE.svg with gnuplot (needs --csv)");
}

void shard_from_environment(Options& o) {
  constexpr std::size_t kMaxRanks = Config::kMaxWorldSize;  // as --world-size
  o.rank = env_size({"RANK", "OMPI_COMM_WORLD_RANK"}, 0, kMaxRanks - 1);
  o.world_size = env_size({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}, 1, kMaxRanks);
  if (o.world_size == 0) throw UsageError("environment: WORLD_SIZE (or OMPI_COMM_WORLD_SIZE) must be at least 1");
}

void check_shard(const Options& o) {
  if (o.rank >= o.world_size) {
    // Either may have come from the environment (RANK alone, under a launcher): both sources named.
    throw UsageError("rank " + std::to_string(o.rank) + " (--rank, or RANK / OMPI_COMM_WORLD_RANK) must be below world size " +
                     std::to_string(o.world_size) + " (--world-size, or WORLD_SIZE / OMPI_COMM_WORLD_SIZE)");
  }
  if (o.rank_by_shard && o.shards.empty()) throw UsageError("--rank-by-shard: needs a --shards dataset");
  if (o.unlisted_shards == UnlistedShards::read && o.shards.empty()) throw UsageError("--extra-shards: needs a --shards dataset");
  if (!o.cache_dir.empty() && !is_remote_location(o.shards)) throw UsageError("--cache-dir: needs an http(s):// or s3:// --shards URL");
  if (o.download_first && !is_remote_location(o.shards)) throw UsageError("--download-first: needs an http(s):// or s3:// --shards URL");
  if (o.cache_gb && !is_remote_location(o.shards)) throw UsageError("--cache-gb: needs an http(s):// or s3:// --shards URL");
}

void check_normalize(const Options& o) {
  if (o.normalize_in != NormalizeIn::workers) return;
  if (o.normalize != DType::float32) throw UsageError("--normalize-in workers: needs --normalize float32 (what the workers write)");
  if (o.resident) throw UsageError("--normalize-in workers: not with --resident, which normalizes in its gather on the device");
}

void check_device_transforms(const Options& o) {
  if (o.transforms.empty()) return;
  const char* device_op = Augment(transforms_of(o)).device_transform();
  if (!device_op) return;
  const std::string op = device_op;
  if (!o.normalize || o.normalize_in == NormalizeIn::workers) {
    throw UsageError("--transforms: " + op + " follows Normalize, on the device: give --normalize float32, float16 " +
                     "or bfloat16 (not --normalize-in workers)");
  }
  if (o.serial) throw UsageError("--transforms: " + op + " runs in the device stage, which --serial does not have");
}

void check_outputs(const Options& o, const std::vector<OutputFile>& outputs) {
  namespace fs = std::filesystem;
  // Links resolved where the path exists, and ".." after them (so lk/.. is
  // the link target's parent, as the kernel sees it).
  const auto canonical = [](const std::string& p) {
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
    return ec ? fs::absolute(p).lexically_normal() : c;
  };
  // /dev/null or /dev/stdout may take several outputs: only files can clash.
  const auto device = [](const std::string& p) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    return !ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st);
  };
  const auto inside_or_at = [](const fs::path& file, const fs::path& dir) {
    const fs::path rel = file.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
  };
  // An image by its magic bytes (TGA has none, and a CSV or JSON file could
  // pass stb's loose TGA probe: not counted).
  const auto image_format = [](const std::string& p) -> std::string {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) return {};
    unsigned char head[32];
    const std::size_t n = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
    const ImageFormat format = sniff_format({head, n});
    return format == ImageFormat::unknown || format == ImageFormat::tga ? "" : format_name(format);
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const OutputFile& output = outputs[i];
    if (output.path.empty() || device(output.path)) continue;
    const fs::path out = canonical(output.path);
    const std::string named = std::string(output.flag) + " " + output.path;
    for (std::size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() && canonical(outputs[j].path) == out) {
        throw UsageError(named + ": the same file as " + outputs[j].flag + "; each output needs its own");
      }
    }
    if (!o.list.empty() && canonical(o.list) == out) throw UsageError(named + ": that is the --list file, which it would overwrite");
    if (!o.config.empty() && canonical(o.config) == out) {
      throw UsageError(named + ": that is the --config file, which it would overwrite");
    }
    if (!o.folder.empty() && inside_or_at(out, canonical(o.folder))) {
      throw UsageError(named + ": inside the --folder dataset " + o.folder + "; write outputs elsewhere");
    }
    if (!o.shards.empty() && !is_remote_location(o.shards) && inside_or_at(out, canonical(o.shards))) {
      throw UsageError(named + ": inside the --shards folder " + o.shards + "; write outputs elsewhere");
    }
    if (std::error_code ec; !output.folder && !output.image && fs::is_regular_file(out, ec)) {
      if (const std::string format = image_format(out.string()); !format.empty()) {
        throw UsageError(named + ": an existing " + format + " image, maybe a file of the dataset; name another file");
      }
    }
    // An image output (--plot) may overwrite an earlier plot, but not an image
    // the --list names. Read only when such a file exists; a list that does
    // not parse is left for the dataset's own error.
    if (std::error_code ec; output.image && !o.list.empty() && fs::is_regular_file(out, ec)) {
      try {
        const Dataset listed = dataset_from_list(o.list);
        for (std::size_t k = 0; k < listed.size(); ++k) {
          if (canonical(listed.path(k)) == out) {  // resolved: a listed link to the plot counts too
            throw UsageError(named + ": an image the --list names; name another file");
          }
        }
      } catch (const DatasetError&) {
      }
    }
  }
}

void check_outputs(const Options& o) {
  check_outputs(o, {{"--trace", o.trace}, {"--json", o.json}, {"--csv", o.csv}, {"--plot", o.plot, false, true}});
  check_plot_name(o.plot);
  if (!o.plot.empty() && o.csv.empty()) throw UsageError("--plot needs --csv FILE (the plot is drawn from it)");
}

void check_plot_name(const std::string& plot) {
  if (plot.empty()) return;
  const std::string ext = lower_case(std::filesystem::path(plot).extension().string());
  if (ext != ".png" && ext != ".svg") throw UsageError("--plot " + plot + ": name a .png or .svg file (the format follows it)");
}

std::optional<double> gpu_decode_share(const Options& o) {
  std::optional<double> share;
  if (o.gpu_decode == "off") {
    share = 0.0;
  } else if (o.gpu_decode != "auto") {
    char* end = nullptr;
    const double v = std::strtod(o.gpu_decode.c_str(), &end);
    if (o.gpu_decode.empty() || *end != '\0' || !(v >= 0 && v <= 1)) {
      throw UsageError("--gpu-decode: '" + o.gpu_decode + "' is not off, auto or a share in [0, 1]");
    }
    share = v;
  }
  if (share == 0.0) return share;
  if (!o.views.empty()) throw UsageError("--gpu-decode: not with --views (each view is a crop of one CPU decode)");
  if (o.normalize_in == NormalizeIn::workers) throw UsageError("--gpu-decode: not with --normalize-in workers (the device normalizes)");
  if (o.resident) throw UsageError("--gpu-decode: not with --resident, which decodes once on the CPU");
  if (o.serial) throw UsageError("--gpu-decode: not with --serial");
  if (o.synthetic_ms > 0) throw UsageError("--gpu-decode: not with --synthetic-ms, which decodes nothing");
  if (!share && o.workers_auto) {
    throw UsageError("--gpu-decode auto: not with --workers auto (the share balances a fixed worker count; give one, "
                     "or a fixed share)");
  }
  return share;
}

bool embedded_dataset(const Options& o) { return o.list.empty() && o.folder.empty() && o.shards.empty(); }

std::vector<Transform> transforms_of(const Options& o) {
  if (o.transforms.empty()) return {};
  if (o.crop) throw UsageError("--crop: not with --transforms, whose list sets the output size");
  if (o.resident) throw UsageError("--transforms: not with --resident, which decodes each image once (center crop)");
  try {
    std::vector<Transform> chain = parse_transforms(o.transforms);
    const Size out = Augment(chain).output();
    if (out.height != out.width) {
      throw UsageError("--transforms: the output must be square for now; the list ends at " + std::to_string(out.height) +
                       " x " + std::to_string(out.width));
    }
    return chain;
  } catch (const AugmentError& e) {
    throw UsageError(std::string("--transforms: ").append(e.what()));
  }
}

std::vector<ViewSpec> views_of(const Options& o) {
  if (o.views.empty()) return {};
  if (!o.transforms.empty()) throw UsageError("--views: not with --transforms (each view has its own list)");
  if (o.crop) throw UsageError("--crop: not with --views, whose lists set the output sizes");
  if (o.resident) throw UsageError("--views: not with --resident, which decodes each image once (center crop)");
  try {
    std::vector<ViewSpec> views = parse_views(o.views);
    for (const ViewSpec& v : views) {
      if (const char* op = Augment(v.transforms).device_transform()) {
        throw UsageError(std::string("--views: ") + op + " is not supported with views (it runs on whole batches)");
      }
    }
    return views;
  } catch (const AugmentError& e) {
    throw UsageError(std::string("--").append(e.what()));  // "views: entry N: ..."
  }
}

int crop_size(const Options& o) {
  if (!o.views.empty()) return Augment(views_of(o).front().transforms).output().width;
  if (!o.transforms.empty()) return Augment(transforms_of(o)).output().width;
  return o.crop ? o.crop : (embedded_dataset(o) ? 64 : 224);
}

Config pipeline_config(const Options& o) {
  Config cfg;
  cfg.batch_size = o.batch;
  cfg.workers = o.workers;
  cfg.tune_workers = o.workers_auto;
  cfg.host_queue_depth = o.host_queue;
  cfg.tune_host_queue = o.host_queue_auto;
  cfg.tune_device_queue = o.device_queue_auto;
  cfg.device_queue_depth = o.device_queue;
  cfg.wait_yields = o.wait_yields;
  cfg.seed = o.seed;
  cfg.epochs = o.epochs;
  cfg.rank = o.rank_by_shard ? 0 : o.rank;  // by shard: open_dataset already took this rank's shards
  cfg.world_size = o.rank_by_shard ? 1 : o.world_size;
  return cfg;
}

DeviceConfig device_config(const Options& o) {
  if (o.gpu != 0 && o.device == BackendChoice::host) {
    throw UsageError("--gpu " + std::to_string(o.gpu) + ": not with --device host (it picks a CUDA device)");
  }
  if (o.gpu != 0 && (o.link_gbps > 0 || o.host_transfer == HostTransfer::handover)) {
    throw UsageError("--gpu " + std::to_string(o.gpu) + ": not with " +
                     (o.link_gbps > 0 ? "--link-gbps" : "--host-transfer handover") + " (host-backend options)");
  }
  DeviceConfig dc;
  dc.backend = o.device;
  dc.cuda_device = o.gpu;
  dc.link_gbps = o.link_gbps;
  dc.host_transfer = o.host_transfer;
  return dc;
}

ImageConfig image_config(const Options& o, Augmentation augment, int crop) {
  ImageConfig ic;
  ic.transforms = o.transforms.empty() ? preset_transforms(augment, crop) : transforms_of(o);
  ic.views = views_of(o);
  ic.on_error = o.on_error;
  ic.read_ahead = o.read_ahead;
  if (o.normalize_in == NormalizeIn::workers) ic.normalize = Normalize{};
  return ic;
}

std::optional<TransferConfig::Normalization> normalization(const Options& o, int crop) {
  if (!o.normalize || o.normalize_in == NormalizeIn::workers) return std::nullopt;
  return TransferConfig::Normalization{std::size_t(crop), std::size_t(crop), 3, Normalize{}, *o.normalize};
}

ResidentConfig resident_config(const Options& o, int crop) {
  ResidentConfig rc;
  rc.budget_bytes = std::size_t(o.budget_mb * double(1 << 20));
  rc.normalize = normalization(o, crop);
  return rc;
}

}  // namespace conveyor::apps
