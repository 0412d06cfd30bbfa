// What the command-line programs share: the flags that describe a dataset and a
// pipeline, how they become a Dataset, a Config and a Device, and the one-line
// usage error (exit status 2) every program reports bad input with.
// Used by `conveyor` (apps/conveyor.cpp) and `conveyor-train` (apps/train.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cuda/device_pipeline.h"
#include "stages/dataset.h"
#include "stages/augment.h"
#include "stages/image_source.h"

namespace conveyor::apps {

// Bad input: reported in one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The first of `names` set in the environment, as a non-negative integer;
// fallback when none is set. Throws UsageError naming a variable that is not one.
std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback);

struct Options {
  std::string list, folder;
  std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  std::size_t batch = 64;
  std::size_t host_queue = 2, device_queue = 2;
  std::size_t wait_yields = Config{}.wait_yields;
  std::size_t epochs = 1;
  std::uint64_t seed = 0;
  int crop = 0;  // 0: 64 for the embedded dataset, else 224
  std::string device = "auto";
  double link_gbps = 0;
  std::string host_transfer = "copy";
  std::string on_error = "fail";
  std::string normalize = "off";
  std::string normalize_in = "device";
  std::string compute = "sleep";
  double compute_ms = 0;
  std::size_t rank = 0, world_size = 1;
  std::string json;
  std::string out;
  // sweep axes
  std::vector<std::size_t> sw_workers, sw_host_queue, sw_device_queue, sw_batch;
  std::vector<double> sw_link, sw_compute;
  std::string csv, plot;
  std::string augment = "rrc";
  std::string trace;
  double synthetic_ms = 0;
  bool serial = false;
  bool resident = false;
  double budget_mb = 1024;
  std::size_t images_per_class = 300;
};

// The dataset, pipeline and device flags (--list, --folder, --workers, --batch,
// queues, --epochs, --seed, --crop, --augment, --device, --link-gbps,
// --host-transfer, --on-error, --rank, --world-size).
void add_pipeline_flags(CLI::App& app, Options& o);
// What `conveyor run` adds: the synthetic consumer, teaching modes, resident
// mode, normalize (--normalize, --normalize-in) and tracing.
void add_run_flags(CLI::App& app, Options& o);
// SIGINT and SIGTERM set a flag instead of ending the program, so the caller
// can finish its step, report and save, then exit 128 + the signal. The
// handler resets itself: a second Ctrl-C ends the program at once. A signal
// inherited as ignored (a background job) stays ignored.
void catch_interrupts();
// The signal caught since catch_interrupts(), or 0.
int interrupt_signal();

// Reads RANK/WORLD_SIZE (torchrun) or OMPI_COMM_WORLD_RANK/SIZE (Open MPI)
// into o as the defaults the flags override. Throws UsageError.
void shard_from_environment(Options& o);

// --list, --folder, or the embedded default dataset (made on first use; says
// which on stderr when announce or when it was just made). Throws UsageError.
Dataset open_dataset(const Options& o, bool& embedded, bool announce = true);

// Peak resident set size of this process, KiB.
long peak_rss_kib();
// Resident set size now (/proc/self/statm), KiB; 0 where it cannot be read.
long current_rss_kib();

// The consumer's starved fraction: the share of the time the training step waited for data.
double consumer_idle(const PipelineStats& s);

// The pipeline settings the flags give; callers add sample_bytes.
Config pipeline_config(const Options& o);
std::shared_ptr<Device> open_device_for(const Options& o);
std::optional<TransferConfig::Normalization> normalization_for(const Options& o, int crop);
// --augment's transforms at output size crop x crop.
std::vector<Transform> transforms(const std::string& augment, int crop);
// The image stage's settings: `augment`'s transforms (an --augment value) at
// crop x crop, --on-error's policy, and with --normalize-in workers the
// workers' normalize. Throws UsageError (check_normalize_flags).
ImageConfig image_config(const Options& o, const std::string& augment, int crop);
// --normalize-in workers needs --normalize float32 and no --resident: throws
// UsageError otherwise. Cheap, so callers run it before opening the dataset.
void check_normalize_flags(const Options& o);

// Renders a gnuplot script to `output` (PNG or SVG by its extension): writes
// output + ".gp" and runs gnuplot. Prints a one-line note and returns false
// when gnuplot is not installed or fails; `data` names the file with the figures.
bool gnuplot(const std::string& output, const std::string& script_body, const std::string& data);
// s as a gnuplot single-quoted string ('it''s'), for file names in scripts.
std::string gnuplot_quote(const std::string& s);

}  // namespace conveyor::apps
