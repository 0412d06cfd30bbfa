// `conveyor run` and `conveyor bench`: a dataset, the image filler and a
// consumer with a synthetic step, for --epochs, in one of three modes:
//
//   streaming   the pipeline: workers -> delivery thread -> this thread (run.cpp)
//   --resident  decode once, upload, gather each batch on the device (run_resident.cpp)
//   --serial    fill, copy and step one after another on one thread (run_serial.cpp)
//
// Each goes through the one epoch loop (apps/epochs.h) and returns a RunResult
// (apps/report.h). Thread safety: the caller's thread; a mode joins every
// thread it starts before it returns.
#pragma once

#include "apps/options.h"
#include "apps/report.h"
#include "pipeline/pipeline.h"

namespace conveyor::apps {

// Whether a run prints its header and per-epoch lines (run, bench) or nothing
// (a sweep's points, which print a row each).
enum class Output { print, quiet };
// Which subcommand asked: bench adds its summary line.
enum class RunKind { run, bench };

// A run: the flags' mode, its figures reported; exits 0, or 128 + the signal
// that ended it early. Throws UsageError for bad input.
int run_command(const Options& o, RunKind kind);
// The run alone, as run_command and sweep's points call it.
RunResult run_once(const Options& o, Output output);

// The modes, for run_once.
RunResult run_resident(const Options& o, Dataset dataset, Output output);
RunResult run_serial(const Options& o, const Config& cfg, std::size_t dataset_size, const Filler& fill,
                     const std::shared_ptr<Device>& device, Output output);

// --compute-ms of --compute: the consumer's synthetic training step, `step`
// counting the run's steps from 0 (--compute-stall-ms makes some long).
void synthetic_step(const Options& o, std::uint64_t step);
// --synthetic-ms: a filler of known cost (the sample's identity in its first
// bytes, then a sleep); with --synthetic-stall-ms, every --synthetic-stall-every'th
// sample of the dataset (by index) sleeps that much longer: a stalled read.
Filler synthetic_filler(const Options& o);

}  // namespace conveyor::apps
