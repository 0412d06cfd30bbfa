// What the command-line programs share besides their options (apps/options.h):
// the one-line usage error (exit status 2) every program reports bad input
// with, and the one ladder from an exception to an exit status; signals; the
// dataset the flags name; output files checked before a run and written with
// every write checked; memory figures; gnuplot.
// Used by `conveyor` (apps/conveyor.cpp and its parts) and `conveyor-train`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/options.h"
#include "data/dataset.h"
#include "device/device_pipeline.h"
#include "device/memory_budget.h"

namespace conveyor::apps {

// Bad input: reported in one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The first of `names` set in the environment, as a decimal integer in
// [0, max]; fallback when none is set. Throws UsageError naming the variable
// when its value is not one (a sign, a space, a suffix, out of range).
std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback, std::size_t max);

// A quarter of physical memory, MiB: what the batch pools may take unless --max-memory-mb says otherwise.
double default_max_memory_mb();
// --max-memory-mb, or its default where it is 0.
double memory_limit_mb(const Options& o);


// SIGINT, SIGTERM and SIGPIPE set a flag instead of ending the program, so the
// caller can finish its step, report and save (the trace and --json files),
// then exit 128 + the signal. SIGPIPE: the reader of a pipe on standard output
// left (`conveyor run | head`). The SIGINT and SIGTERM handlers reset
// themselves: a second Ctrl-C ends the program at once. A signal inherited as
// ignored (a background job) stays ignored.
void catch_interrupts();
// The signal caught since catch_interrupts(), or 0.
int interrupt_signal();
// "SIGINT", "SIGTERM", or what SIGPIPE means, for "interrupted by ..." lines.
const char* signal_word(int sig);
// Waits until source.next() (a Pipeline or DevicePipeline) would not block, in
// 100 ms slices, asking stop() between them; false when stop() said so first.
// For a consumer that must see a signal while the workers are slow.
template <typename Source, typename Stop>
bool wait_for_batch(Source& source, Stop&& stop) {
  while (!source.wait_ready(std::chrono::milliseconds(100))) {
    if (stop()) return false;
  }
  return true;
}

// s in ASCII lower case (file extensions, flag words).
std::string lower_case(std::string s);

// Whether open_dataset says on stderr which embedded dataset it uses.
enum class Announce { always, when_made };
// --list, --folder, --shards, or the embedded default dataset (made on first use; says
// which on stderr per `announce`, and always when it was just made). Throws
// UsageError, also for a dataset with no samples (an empty list).
// Remote shards are read while they download (RemoteOptions::stream), or,
// with Remote::download_first (inspect and pack, which check a dataset),
// downloaded and checked whole first.
enum class Remote { stream, download_first };
Dataset open_dataset(const Options& o, Announce announce, Remote remote = Remote::stream);
// --rank-by-shard: rank o.rank's shards of d, of o.world_size ranks
// (Dataset::rank_subset, the pipeline's shard policy). open_dataset applies
// it; train applies it to its training split instead. Throws UsageError.
Dataset shards_of_rank(const Dataset& d, const Options& o);
// The classes a dataset holds: its class folders, or for a list the distinct labels.
std::size_t class_count(const Dataset& d);

// The pipeline's memory (device/memory_budget.h's estimate over dataset_size
// samples) against --max-memory-mb, before anything is allocated. Throws
// UsageError naming the flags and the figures when it exceeds it.
void check_memory(const Options& o, const Config& cfg, std::size_t dataset_size, const TransferConfig& tc,
                  const Device& device);

// An output file the run will write (`flag` names it): fails now, with
// UsageError naming flag, file and reason, when it cannot be created or
// written (a directory, a missing folder, no permission), not after the run.
// Leaves no file behind where none was.
void check_writable(const std::string& flag, const std::string& file);
// Writes text to file whole or not at all (data/atomic_file.h: a temporary
// renamed over it), checking every write and the close: throws
// std::runtime_error "FLAG: cannot write FILE: reason" (a full disk,
// /dev/full), and the file is then as it was.
void write_file(const std::string& flag, const std::string& file, const std::string& text);
// Every integer flag of app and its subcommands (CLI11 type INT or UINT) takes
// decimal digits only, and a value that fits 64 bits. CLI11 2.1 reads them with
// strtoull(..., 0): "--batch 010" was 8, "0x10" 16, and "-1" or a value past
// 2^64 became 2^64-1 for an unsigned flag. Every FLOAT flag takes a finite
// number: a range check passes NaN. Every BOOLEAN flag value, and the value
// a flag (--resident) gets from a --config file or as --resident=V, is on/off,
// true/false, yes/no or 1/0 (CLI11 took -1 as false, 2 as true). Call after
// the flags are added.
void strict_values(CLI::App& app);
// Refuses an empty element in a comma-list flag of `sub` (sweep's axes) as
// written in argv: "--workers 1,,2", "--batch 8," or "=,4". CLI11 splits the
// value and drops the empty pieces before any check sees them, so a typo
// quietly ran fewer points. Throws UsageError naming the flag and its value.
void refuse_empty_list_elements(const CLI::App& sub, int argc, const char* const* argv);
// The exit status for the exception being handled (call it in a catch block),
// the same ladder for every program: --help is CLI11's (0); a bad flag, a bad
// --config file (named with `section`'s reading of it) or a UsageError is one
// line on stderr and 2; any other std::exception one line and 1. Standard
// output is flushed and a progress line wiped first, so the line stands alone.
// Anything else is rethrown. Its line goes through printable() (data/quote_bytes.h).
int exit_status(const char* program, const CLI::App& app, const std::string& section);
// Wipes a progress line from a terminal's stderr (nothing when it is not one).
void wipe_progress_line(std::size_t width = 80);

// Opens /dev/null on each of standard input, output and error that is closed
// (`conveyor run >&-`), first thing in main: otherwise the first file the run
// opens (the --trace file) becomes descriptor 1 and takes the printed lines.
void hold_standard_fds();

// Flushes standard output; on failure (a full disk, /dev/full, a standard
// output that was closed) prints one line on stderr and returns 1, else
// returns status.
int finish_stdout(const char* program, int status);

// Peak resident set size of this process, KiB.
long peak_rss_kib();
// Resident set size now (/proc/self/statm), KiB; 0 where it cannot be read.
long current_rss_kib();

// The consumer's starved fraction: the share of the time the training step waited for data.
double consumer_idle(const PipelineStats& s);

// Renders a gnuplot script to `output` (PNG or SVG by its extension): writes
// output + ".gp" and runs gnuplot. Prints a one-line note and returns false
// when gnuplot is not installed; `data` names the file with the figures.
// Throws std::runtime_error when the script cannot be written or gnuplot
// fails (it could not write `output`, say).
bool gnuplot(const std::string& output, const std::string& script_body, const std::string& data);
// s as a gnuplot single-quoted string ('it''s'), for file names in scripts.
std::string gnuplot_quote(const std::string& s);

}  // namespace conveyor::apps
