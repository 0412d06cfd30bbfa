// Options: the settings of `conveyor` and `conveyor-train`, typed. Each flag is
// parsed once (by CLI11, from the command line or a --config file) into its
// field here; a choice becomes an enum, never a string compared again later.
// Every default is written here, once, and `--help` shows it.
//
// From Options the library's configs are built, one function each:
// pipeline_config (Config), device_config (DeviceConfig), image_config
// (ImageConfig), normalization (TransferConfig's normalize), resident_config.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "device/device_pipeline.h"
#include "device/resident.h"
#include "image/augment.h"
#include "data/dataset.h"
#include "data/shards/shard_index.h"
#include "image/image_source.h"

namespace conveyor::apps {

// --augment: the training transforms at the output size (image/augment.h).
using Augmentation = AugmentPreset;
// --compute: what the synthetic training step does for --compute-ms.
enum class Compute {
  sleep,  // frees the CPU, as a step on a GPU does
  spin,   // holds a core
};
// --normalize-in: where --normalize happens.
enum class NormalizeIn {
  device,   // after the transfer (the GPU's kernel; on the host backend, the normalize stream's own thread)
  workers,  // each worker writes float32 (a consumer on the CPU)
};

struct Options {
  // ---- dataset (none of --list, --folder, --shards: the embedded default dataset)
  std::string list;    // --list FILE: `path label` per line. Default: none.
  std::string folder;  // --folder DIR: root/<class>/<image>. Default: none.
  std::string shards;  // --shards DIR|URL: WebDataset tar shards (KEY.jpg + KEY.cls), local, http(s):// or s3://. Default: none.
  // --cache-dir DIR: where http(s):// and s3:// shards are downloaded to. Default: the user's cache folder's remote/.
  std::string cache_dir;
  // --cache-gb GB: the most the cache folder may hold (1 GB = 10^9 bytes);
  // the least recently used shards of jobs not running go first, and shards
  // that still do not fit are read by range. Default: none (no limit).
  std::optional<double> cache_gb;
  // --download-first: every shard of a URL downloaded and checked against the
  // manifest before the first batch, instead of read while it downloads.
  // Default: off.
  bool download_first = false;
  // --extra-shards: also read .tar files DIR's manifest does not list. Default: refused by name.
  UnlistedShards unlisted_shards = UnlistedShards::refuse;
  std::size_t shard_mb = 256;  // pack --shard-mb: a shard's size limit in MiB. Default: 256.
  // pack --max-side N --quality Q: images larger than N pixels on their longest
  // side re-encoded smaller as JPEG at quality Q (image/reencode.h). Lossy and
  // opt-in. Defaults: 0 (off), and quality 0 for "not given" (then 90).
  int max_side = 0;
  int quality = 0;
  // pack --raw N: every image stored as decoded RGB8 pixels (a binary PPM),
  // resized when larger than N on its longest side (image/reencode.h).
  // Default: 0 (off).
  int raw = 0;
  // pack --original-bytes: each JPEG stored as its file's bytes. By default pack
  // re-encodes sequential JPEGs losslessly with restart markers
  // (image/jpeg_restart.h), so that decoding a crop skips what it does not cover.
  bool original_bytes = false;

  // ---- pipeline
  std::size_t workers = std::max(1u, std::thread::hardware_concurrency());  // Default: the core count.
  // --workers auto: the pipeline tunes how many of `workers` threads work
  // (Config::tune_workers); `workers` is then --max-workers, by default
  // Config's default_worker_ceiling(). Default: off.
  bool workers_auto = false;
  std::size_t max_workers = 0;  // --max-workers; 0: not given
  std::size_t batch = 64;                            // Default: 64.
  std::size_t host_queue = 2, device_queue = 2;      // Default: 2 and 2 (under auto, each is the ceiling).
  // --host-queue auto: the pipeline deepens the host queue from what it
  // measures (Config::tune_host_queue), up to --max-host-queue, by default
  // kDefaultHostQueueCeiling. Default: off.
  bool host_queue_auto = false;
  std::size_t max_host_queue = 0;  // --max-host-queue; 0: not given
  // --device-queue auto: the same for the device queue (Config::tune_device_queue),
  // up to --max-device-queue, by default kDefaultDeviceQueueCeiling. Default: off.
  bool device_queue_auto = false;
  std::size_t max_device_queue = 0;  // --max-device-queue; 0: not given
  std::size_t wait_yields = Config{}.wait_yields;    // Default: the library's (16).
  std::size_t epochs = 1;                            // Default: 1 (train: 5).
  std::uint64_t seed = 0;                            // Default: 0.
  int crop = 0;                  // Default: 0, meaning 64 on the embedded dataset, else 224 (train: by model).
  Augmentation augment = Augmentation::rrc;                    // Default: rrc (train: crop).
  // --transforms: the transform list as text (image/transform_spec.h), in
  // place of --augment and --crop. Default: "" (the --augment preset).
  std::string transforms;
  // --views: several views of each sample (image/transform_spec.h,
  // parse_views), in place of --transforms. Default: "" (one view).
  std::string views;
  ErrorPolicy on_error = ErrorPolicy::fail;          // Default: fail.
  std::size_t rank = 0, world_size = 1;              // Default: $RANK/$WORLD_SIZE, else 0 of 1.
  bool rank_by_shard = false;  // --rank-by-shard: whole shards per rank. Default: off (sample by sample).
  bool read_ahead = ImageConfig{}.read_ahead;  // --read-ahead: shards' read-ahead advice. Default: the library's (on).
  double max_memory_mb = 0;  // the most the batch pools may take. Default: 0, a quarter of physical memory.

  // ---- device
  BackendChoice device = BackendChoice::automatic;   // Default: auto.
  int gpu = 0;  // --gpu N: the CUDA device, numbered as CUDA_VISIBLE_DEVICES shows them. Default: 0.
  double link_gbps = 0;                              // host backend's simulated link. Default: 0, none.
  HostTransfer host_transfer = HostTransfer::copy;   // Default: copy.

  // ---- run, bench, sweep: the consumer and the teaching modes
  std::optional<DType> normalize;                    // Default: off (uint8 HWC).
  NormalizeIn normalize_in = NormalizeIn::device;    // Default: device.
  Compute compute = Compute::sleep;                  // Default: sleep.
  double compute_ms = 0;                             // Default: 0, no step.
  // Every compute_stall_every'th step (counted from the run's first) takes
  // compute_stall_ms more: a consumer whose steps come in bursts (an
  // evaluation or a checkpoint every so many). Default: 0 and 0, none.
  double compute_stall_ms = 0;
  std::size_t compute_stall_every = 0;
  double synthetic_ms = 0;                           // Default: 0, decode for real.
  // With --synthetic-ms: every synthetic_stall_every'th sample (by dataset
  // index) sleeps synthetic_stall_ms more. Default: 0 and 0, no stall.
  double synthetic_stall_ms = 0;
  std::size_t synthetic_stall_every = 0;
  bool serial = false;                               // Default: off.
  bool resident = false;                             // Default: off.
  std::string gpu_decode = "off";  // --gpu-decode off | auto | SHARE in [0, 1]. Default: off.
  // --gpu-decode-threads: the GPU decode feed's threads, two decoders each. Default: 0, kDefaultGpuDecodeThreads.
  std::size_t gpu_decode_threads = 0;
  double budget_mb = 1024;                           // --resident's device memory. Default: 1024.
  std::string trace;                                 // Default: none.
  std::string json;                                  // run, bench. Default: none.

  // ---- sweep: each axis a list; empty means the single-value flag's default
  std::vector<std::size_t> sw_workers, sw_host_queue, sw_device_queue, sw_batch;
  std::vector<double> sw_link, sw_compute;
  std::string csv, plot;                             // Default: none.

  // ---- make-dataset
  std::string out;                                   // required
  std::string config;  // the --config file, once parsed (for check_outputs). Default: none.
  std::size_t images_per_class = 300;                // Default: 300.
};

// The names a choice has on the command line, in --help's order.
template <typename E>
struct Choice {
  std::string_view name;
  E value;
};
inline constexpr std::array<Choice<Augmentation>, 3> kAugments{{{kAugmentPresets[0].name, kAugmentPresets[0].preset},
                                                                  {kAugmentPresets[1].name, kAugmentPresets[1].preset},
                                                                  {kAugmentPresets[2].name, kAugmentPresets[2].preset}}};
inline constexpr std::array<Choice<Compute>, 2> kComputes{{{"sleep", Compute::sleep}, {"spin", Compute::spin}}};
inline constexpr std::array<Choice<NormalizeIn>, 2> kNormalizeIns{{{"device", NormalizeIn::device}, {"workers", NormalizeIn::workers}}};
inline constexpr std::array<Choice<BackendChoice>, 3> kDevices{
    {{"auto", BackendChoice::automatic}, {"cuda", BackendChoice::cuda}, {"host", BackendChoice::host}}};
inline constexpr std::array<Choice<HostTransfer>, 2> kHostTransfers{{{"copy", HostTransfer::copy}, {"handover", HostTransfer::handover}}};
inline constexpr std::array<Choice<ErrorPolicy>, 2> kErrorPolicies{{{"fail", ErrorPolicy::fail}, {"skip", ErrorPolicy::skip}}};
inline constexpr std::array<Choice<std::optional<DType>>, 4> kNormalizes{{{"off", std::nullopt},
                                                                          {"float32", DType::float32},
                                                                          {"float16", DType::float16},
                                                                          {"bfloat16", DType::bfloat16}}};

template <typename E, std::size_t N>
constexpr std::string_view name_of(const std::array<Choice<E>, N>& choices, const E& value) {
  for (const auto& c : choices) {
    if (c.value == value) return c.name;
  }
  return "?";
}

// Adds a choice flag to app (unless it has one of that name): its names are
// checked and listed in --help as words, its default shown as value's name,
// and the word given parsed into value once, here.
template <typename E, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& name, E& value, const std::array<Choice<E>, N>& choices,
                        const std::string& help) {
  if (CLI::Option* existing = app.get_option_no_throw(name)) return existing;
  std::vector<std::string> names;
  for (const auto& c : choices) names.emplace_back(c.name);
  const auto parse = [&value, &choices](const std::string& word) {
    for (const auto& c : choices) {
      if (c.name == word) value = c.value;
    }
  };
  return app.add_option_function<std::string>(name, parse, help)
      ->check(CLI::IsMember(names))
      ->default_str(std::string(name_of(choices, value)));
}

// The dataset, pipeline and device flags (--list, --folder, --shards,
// --workers, --batch, queues, --wait-yields, --epochs, --seed, --crop,
// --augment, --device, --gpu, --link-gbps, --host-transfer, --on-error, --rank,
// --world-size, --rank-by-shard, --read-ahead, --max-memory-mb), their
// defaults taken from o. A flag app already has (a sweep axis of the same
// name) is left as it is. Ranges are checked at parse time, with the library's
// own limits (Config::kMaxWorkers).
void add_pipeline_flags(CLI::App& app, Options& o);
// The dataset alone: --list, --folder, --shards (add_pipeline_flags includes them).
void add_dataset_flags(CLI::App& app, Options& o);
// What `conveyor run` adds: the synthetic consumer, teaching modes, resident
// mode, normalize (--normalize, --normalize-in) and tracing.
void add_run_flags(CLI::App& app, Options& o);
// Sweep's axes (comma lists), --csv and --plot. Before add_pipeline_flags, whose
// single-value flags of the same names they take the place of.
void add_sweep_flags(CLI::App& app, Options& o);

// Reads RANK/WORLD_SIZE (torchrun) or OMPI_COMM_WORLD_RANK/SIZE (Open MPI)
// into o as the defaults the flags override. Throws UsageError.
void shard_from_environment(Options& o);
// What no single flag can check, each checked once after parsing. Throw UsageError.
// --rank below --world-size.
void check_shard(const Options& o);
// --normalize-in workers: with --normalize float32, and not with --resident.
void check_normalize(const Options& o);
// --transforms ending with RandomErasing, MixUp or CutMix: needs --normalize
// on the device, and not --serial (they run in the device stage).
void check_device_transforms(const Options& o);
// A file or folder a subcommand writes, for check_outputs.
struct OutputFile {
  const char* flag;  // "--trace"
  std::string path;  // empty: not asked for
  bool folder = false;  // pack's --out: shards are written inside it
  bool image = false;   // --plot: itself an image, so an image there may be an earlier plot
};
// None of the outputs may destroy an input or another output (a run would
// truncate it at start-up): none the same as another, the --list or --config
// file, inside the --folder or --shards dataset, or an existing image file (a
// file of a --list dataset, found by its magic bytes: the list may name
// millions; not for an output that is an image itself). Devices (/dev/null)
// are exempt. Throws UsageError naming the flag.
void check_outputs(const Options& o, const std::vector<OutputFile>& outputs);
// run, bench, sweep: --trace, --json, --csv and --plot as above; --plot a .png
// or .svg, and with --csv.
void check_outputs(const Options& o);
// --plot FILE (any subcommand's): a .png or .svg, the format gnuplot writes
// follows it. Nothing for an empty name. Throws UsageError.
void check_plot_name(const std::string& plot);
// --gpu-decode as a share: 0 for off, the number for SHARE, nullopt for auto.
// Throws UsageError for anything else, or for a mode it cannot combine with.
std::optional<double> gpu_decode_share(const Options& o);

// True when none of --list, --folder, --shards names a dataset.
bool embedded_dataset(const Options& o);
// --crop, or its default: 64 on the embedded dataset, else 224; with
// --transforms, the side of the list's (square) output. Throws UsageError.
int crop_size(const Options& o);
// --transforms read and checked (torchvision's names, an output side; not with
// --crop or --resident). Empty without --transforms. Throws UsageError naming
// the transform and parameter.
std::vector<Transform> transforms_of(const Options& o);
// --views read and checked (not with --transforms, --crop, --resident, the
// GPU decoder, or a transform that runs on whole batches). Empty without --views. Throws
// UsageError naming the entry and what is wrong.
std::vector<ViewSpec> views_of(const Options& o);

// The pipeline settings the flags give; callers add sample_bytes.
Config pipeline_config(const Options& o);
// --device, --link-gbps, --host-transfer.
DeviceConfig device_config(const Options& o);
// The image stage's settings: --transforms, else `augment`'s transforms at crop x crop,
// --on-error's policy, and with --normalize-in workers the workers' normalize.
ImageConfig image_config(const Options& o, Augmentation augment, int crop);
// --resident's --normalize after the transfer (none when off, or done in the
// workers). A pipeline's is source/source.h's device_normalization, which
// knows the views.
std::optional<TransferConfig::Normalization> normalization(const Options& o, int crop);
// --resident: --budget-mb and --normalize.
ResidentConfig resident_config(const Options& o, int crop);

}  // namespace conveyor::apps
