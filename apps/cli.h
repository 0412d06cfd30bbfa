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

// The first of `names` set in the environment, as a decimal integer in
// [0, max]; fallback when none is set. Throws UsageError naming the variable
// when its value is not one (a sign, a space, a suffix, out of range).
std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback, std::size_t max);

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
  // --max-memory-mb: the most the batch pools (host and device) may take.
  // 0: default_max_memory_mb(), a quarter of physical memory.
  double max_memory_mb = 0;
};

// A quarter of physical memory, MiB: what the batch pools may take unless --max-memory-mb says otherwise.
double default_max_memory_mb();


// The dataset, pipeline and device flags (--list, --folder, --workers, --batch,
// queues, --epochs, --seed, --crop, --augment, --device, --link-gbps,
// --host-transfer, --on-error, --rank, --world-size, --max-memory-mb). A flag
// app already has (a sweep axis of the same name) is left as it is. Ranges are
// checked at parse time, with the library's own limits (Config::kMaxWorkers).
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
// which on stderr when announce or when it was just made). Throws UsageError,
// also for a dataset with no samples (an empty list).
Dataset open_dataset(const Options& o, bool& embedded, bool announce = true);
// The classes a dataset holds: its class folders, or for a list the distinct labels.
std::size_t class_count(const Dataset& d);

// The batch pools' bytes (host: cfg.host_pool_bytes(); device:
// device_pool_bytes()) against --max-memory-mb, before anything is allocated.
// Throws UsageError naming the flags and the figures when they exceed it.
void check_memory(const Options& o, const Config& cfg, const TransferConfig& tc, const Device& device);

// An output file the run will write (`flag` names it): fails now, with
// UsageError naming flag, file and reason, when it cannot be created or
// written (a directory, a missing folder, no permission), not after the run.
// Leaves no file behind where none was.
void check_writable(const std::string& flag, const std::string& file);
// Writes text to file, checking every write and the close: throws
// std::runtime_error "FLAG: cannot write FILE: reason" (a full disk, /dev/full).
void write_text_file(const std::string& flag, const std::string& file, const std::string& text);
// Flushes standard output; on failure (a full disk, /dev/full) prints one line
// on stderr and returns 1, else returns status.
int finish_stdout(const char* program, int status);

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
// when gnuplot is not installed; `data` names the file with the figures.
// Throws std::runtime_error when the script cannot be written or gnuplot
// fails (it could not write `output`, say).
bool gnuplot(const std::string& output, const std::string& script_body, const std::string& data);
// s as a gnuplot single-quoted string ('it''s'), for file names in scripts.
std::string gnuplot_quote(const std::string& s);

}  // namespace conveyor::apps
