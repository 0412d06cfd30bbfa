// What a run of `conveyor run` or `bench` reports once it is over: its result
// (the epochs' figures, the pipeline's stats, the samples skipped), the skipped
// samples' summary, bench's line, and the --json file. The per-epoch lines and
// the progress line are the epoch loop's (apps/epochs.h).
//
// Thread safety: the caller's thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/epochs.h"
#include "apps/options.h"
#include "data/dataset.h"
#include "data/remote/streaming_shards.h"
#include "pipeline/stats.h"

namespace conveyor::apps {

struct RunResult {
  std::vector<EpochFigures> epochs;
  PipelineStats stats;
  std::string device;  // Device::describe()
  std::vector<SkippedSample> skipped;  // each distinct (sample, reason) once (pipeline/skip_log.h)
  int interrupted = 0;  // SIGINT or SIGTERM ended the run early (the last epoch is partial)
  double gpu_share = 0;                 // --gpu-decode: the share used (0: CPU workers alone)
  std::uint64_t gpu_decoded = 0, gpu_cpu_fallbacks = 0;  // gpu_decode_counts(pipeline) (gpu_decode/step.h)
  // Shards read while they download (data/remote/streaming_shards.h): what
  // the reads and downloads did by the run's end; none for other datasets.
  std::optional<StreamingCounters> remote;

  // Images, batches, skipped samples and seconds over every epoch.
  EpochFigures total() const;
};

// The counters of a dataset whose shards stream in (open_remote_shards);
// none for any other. Throws nothing.
std::optional<StreamingCounters> remote_counters(const Dataset& dataset);
// One line on the shards streaming in: how many are in the cache, the
// samples read by range and the time the workers waited on the network
// against their busy time `workers_busy_s`; when that wait is most of it, a
// second line says the network is the limit (network_bottleneck). Throws
// nothing but bad_alloc.
std::string remote_line(const StreamingCounters& c, double workers_busy_s);

// --on-error skip: the samples left out; in the terminal the first few and the count.
void report_skipped(const RunResult& r);
// bench's summary line: images/s over the run and the peak resident set.
void report_bench(const RunResult& r);
// The line that says where a run's --trace went (streaming and --serial alike).
void report_trace(const std::string& file);
// --json FILE: the settings, the figures, per-epoch counts and digests (for
// checking shards across ranks) and every skipped sample. Throws
// std::runtime_error when the file cannot be written.
void write_json(const std::string& file, const Options& o, const RunResult& r);

}  // namespace conveyor::apps
