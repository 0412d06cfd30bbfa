#include "apps/run.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "apps/cli.h"
#include "apps/trace.h"
#include "gpu_decode/share.h"
#include "gpu_decode/step.h"
#include "source/source.h"
#include "image/image_source.h"

namespace conveyor::apps {

namespace {

// The streaming run's lines: a progress bar, and per epoch its figures with the
// stage table of that epoch alone.
class StreamingReporter final : public EpochReporter {
 public:
  StreamingReporter(Output output, const DevicePipeline& pipeline, const Dataset& dataset)
      : output_(output), pipeline_(pipeline), dataset_(dataset), remote_before_(remote_counters(dataset)) {}

  std::string progress(const EpochFigures& f, std::size_t done, std::size_t total) const override {
    if (output_ == Output::quiet) return {};
    const int width = 30, filled = int(double(done) / double(total) * width);
    char line[160];
    std::snprintf(line, sizeof line, "  epoch %llu [%s%s] %zu/%zu batches", (unsigned long long)f.epoch,
                  std::string(std::size_t(filled), '#').c_str(), std::string(std::size_t(width - filled), '.').c_str(),
                  done, total);
    return line;
  }

  bool epoch_done(EpochFigures& f, int interrupted) override {
    f.rss_mib = double(current_rss_kib()) / 1024.0;
    const PipelineStats now = pipeline_.stats();
    const PipelineStats epoch_stats = now.since(before_);  // this epoch's fractions, not the run's
    before_ = now;
    f.note_decoding(epoch_stats);
    if (output_ == Output::quiet) return true;
    std::printf("epoch %llu%s: %llu images in %llu batches, %.2f s, %.0f images/s, consumer idle %.0f%%, RSS %.1f MiB%s%s\n",
                (unsigned long long)f.epoch, interrupted ? " (interrupted)" : "", (unsigned long long)f.images,
                (unsigned long long)f.batches, f.seconds, f.images_per_s(), 100 * consumer_idle(epoch_stats), f.rss_mib,
                f.skipped ? (", " + std::to_string(f.skipped) + " skipped").c_str() : "", f.prefetch_note().c_str());
    std::printf("%s", epoch_stats.table().c_str());
    if (const std::optional<StreamingCounters> now_remote = remote_counters(dataset_)) {
      StreamingCounters epoch = *now_remote;  // this epoch's reads; the shards' states as they are
      epoch.range_reads -= remote_before_->range_reads;
      epoch.read_ahead -= remote_before_->read_ahead;
      epoch.range_bytes -= remote_before_->range_bytes;
      epoch.range_seconds -= remote_before_->range_seconds;
      epoch.retries -= remote_before_->retries;
      remote_before_ = now_remote;
      std::printf("%s", remote_line(epoch, epoch_stats.busy_s("workers")).c_str());
    }
    std::fflush(stdout);
    return true;
  }

 private:
  Output output_;
  const DevicePipeline& pipeline_;
  const Dataset& dataset_;
  PipelineStats before_;
  std::optional<StreamingCounters> remote_before_;
};

void print_header(const Options& o, const Dataset& dataset, const std::string& device) {
  const std::size_t classes = class_count(dataset);
  std::printf("dataset: %zu images, %zu class%s; rank %zu of %zu\n%s\n", dataset.size(), classes, classes == 1 ? "" : "es", o.rank,
              o.world_size, device.c_str());
  // The list as read (from --transforms, `transforms = "..."` or [[transforms]] tables).
  if (!o.transforms.empty()) std::printf("transforms: %s\n", Augment(transforms_of(o)).describe().c_str());
  for (const ViewSpec& v : views_of(o)) {
    std::printf("views: %zu x %s\n", v.count, Augment(v.transforms).describe().c_str());
  }
  if (o.normalize) {
    std::printf("normalize: %s %s\n", std::string(name_of(kNormalizes, o.normalize)).c_str(),
                o.normalize_in == NormalizeIn::workers ? "in the workers" : "after the transfer");
  }
}

// The streaming mode: the pipeline's batches, the step on this thread.
RunResult run_streaming(const Options& o, const Config& cfg, const Dataset& dataset, Filler fill, TransferConfig tc,
                        const std::shared_ptr<Device>& device, Output output) {
  RunResult result;
  result.device = device->describe();
  std::shared_ptr<PipelineTrace> trace;
  if (!o.trace.empty()) {
    trace = std::make_shared<PipelineTrace>(o.trace, o.workers);
    tc.observer = trace;
  }
  // Ctrl-C while the pools are allocated and first touched (seconds for
  // large ones) ends the run there, as at any step.
  tc.interrupted = [] { return interrupt_signal() != 0; };
  std::optional<DevicePipeline> built;
  try {
    built.emplace(cfg, dataset.size(), std::move(fill), tc, device);
  } catch (const Interrupted&) {
    result.interrupted = interrupt_signal();
    return result;
  }
  DevicePipeline& pipeline = *built;
  const PipelineTrace::Sampling sampling(trace.get(), pipeline);  // joined before the pipeline goes
  StreamingReporter reporter(output, pipeline, dataset);
  std::uint64_t steps = 0;  // the consumer's, over the run
  result.interrupted = for_each_epoch(
      0, o.epochs, reporter, result.epochs, pipeline.started_at(), [&](std::uint64_t) { return pipeline.batches_per_epoch(); },
      [](std::uint64_t) { return std::size_t{0}; },
      [&](EpochTally& tally) {
        // Waits for the next batch here, not in next(), so that a signal is
        // seen while the workers are slow (a stalled read, --synthetic-ms).
        const auto batch_ready = [&] { return wait_for_batch(pipeline, [&] { return !tally.go_on(); }); };
        if (!batch_ready()) return;
        for (auto& batch : pipeline.epoch(tally.epoch())) {
          const auto a = Clock::now();
          synthetic_step(o, steps++);
          if (trace) trace->step(batch.host().index, a, Clock::now());
          tally.add(batch.host());
          if (!tally.go_on()) break;  // after this step: report what ran
          const bool last = batch.host().last_in_epoch;
          batch.reset();  // back to the pipeline before the wait, as the range would
          if (!last && !batch_ready()) break;
        }
      });
  result.stats = pipeline.stats();
  result.skipped = pipeline.skipped();
  result.remote = remote_counters(dataset);
  const auto gpu = gpu_decode_counts(pipeline);
  result.gpu_decoded = gpu.decoded;
  result.gpu_cpu_fallbacks = gpu.cpu_fallbacks;
  if (trace) {
    trace->finish();
    if (output == Output::print) report_trace(o.trace);
  }
  return result;
}

// Sleeps `ms`, in slices of at most 50 ms, and returns early once `stop()`:
// a long synthetic cost must not hold off Ctrl-C or a pipeline's stop.
template <typename Stop>
void sleep_unless(double ms, Stop&& stop) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  for (auto now = Clock::now(); now < until && !stop(); now = Clock::now()) {
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}
}  // namespace

void synthetic_step(const Options& o, std::uint64_t step) {
  const bool long_step = o.compute_stall_every && (step + 1) % o.compute_stall_every == 0;
  const double ms = o.compute_ms + (long_step ? o.compute_stall_ms : 0.0);
  if (ms <= 0) return;
  const auto d = std::chrono::duration<double, std::milli>(ms);
  if (o.compute == Compute::sleep) {
    sleep_unless(ms, [] { return interrupt_signal() != 0; });
  } else {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(d);
    while (Clock::now() < until && interrupt_signal() == 0) {
    }
  }
}

Filler synthetic_filler(const Options& o) {
  const std::uint64_t every = o.synthetic_stall_every;
  const double stall_ms = o.synthetic_stall_ms;
  return [ms = o.synthetic_ms, every, stall_ms](Sample& s) {
    const std::uint64_t id[2] = {s.epoch, s.index};
    std::memcpy(s.data.data(), id, std::min(s.data.size(), sizeof id));
    s.label = 0;
    // A pipeline's worker stops on the pipeline's flag; --serial's loop on the signal.
    const double stall = every && s.index % every == 0 ? stall_ms : 0.0;
    sleep_unless(ms + stall, [&s] { return s.stop_requested() || interrupt_signal() != 0; });
  };
}

RunResult run_once(const Options& o, Output output) {
  Dataset dataset = open_dataset(o, output == Output::print ? Announce::always : Announce::when_made);
  if (o.resident) return run_resident(o, std::move(dataset), output);
  const int crop = crop_size(o);
  auto device = open_device(device_config(o));
  TransferConfig tc;
  const ImageSourceParts parts =
      build_image_source(dataset, image_config(o, o.augment, crop), o.workers, gpu_decode_share(o), *device, tc,
                         o.gpu_decode_threads);
  if (o.normalize && o.normalize_in != NormalizeIn::workers) tc.normalize = device_normalization(*parts.images, *o.normalize);
  Config cfg = pipeline_config(o);
  cfg.sample_bytes = parts.images->sample_bytes();
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
  check_memory(o, cfg, dataset.size(), tc, *device);  // before the pools are allocated
  if (output == Output::print) print_header(o, dataset, device->describe());
  const GpuDecodeChoice& gpu = parts.gpu;
  if (!gpu.line.empty() && output == Output::print) std::printf("%s\n", gpu.line.c_str());
  const Filler fill = o.synthetic_ms > 0 ? synthetic_filler(o) : parts.images->filler();
  if (o.serial) {
    RunResult r = run_serial(o, cfg, dataset.size(), fill, device, output);
    r.remote = remote_counters(dataset);
    return r;
  }
  RunResult r = run_streaming(o, cfg, dataset, fill, std::move(tc), device, output);
  r.gpu_share = gpu.share;
  return r;
}

int run_command(const Options& o, RunKind kind) {
  // Ctrl-C or SIGTERM: the step in progress finishes, the pipeline stops,
  // the figures so far are printed and the trace written; exit 128 + signal.
  catch_interrupts();
  const RunResult r = run_once(o, Output::print);
  report_skipped(r);
  if (kind == RunKind::bench) report_bench(r);
  if (!o.json.empty()) write_json(o.json, o, r);
  if (r.interrupted) {
    std::printf("interrupted by %s\n", signal_word(r.interrupted));
    return 128 + r.interrupted;
  }
  return 0;
}

}  // namespace conveyor::apps
