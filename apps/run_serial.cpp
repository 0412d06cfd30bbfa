// `conveyor run --serial`: what a loop without a pipeline does. One thread
// fills every sample of a batch, copies it, runs the step, and only then
// starts the next batch.
#include <cstdio>

#include "apps/run.h"
#include "apps/trace.h"
#include "pipeline/skip_log.h"

namespace conveyor::apps {

namespace {

void print_epoch(const EpochFigures& f, int interrupted) {
  std::printf("epoch %llu (serial%s): %llu images in %llu batches, %.2f s, %.0f images/s\n", (unsigned long long)f.epoch,
              interrupted ? ", interrupted" : "", (unsigned long long)f.images, (unsigned long long)f.batches, f.seconds,
              f.images_per_s());
}

}  // namespace

RunResult run_serial(const Options& o, const Config& cfg, std::size_t dataset_size, const Filler& fill,
                     const std::shared_ptr<Device>& device, Output output) {
  RunResult result;
  result.device = device->describe();
  SkipLog skips;  // each distinct (sample, reason) once, however many epochs run
  std::unique_ptr<Tracer> tracer;
  if (!o.trace.empty()) {
    tracer = std::make_unique<Tracer>(o.trace);
    tracer->thread(1, "consumer (serial: fill, copy, step)");
  }
  const Sampler sampler(cfg.sampler_options(dataset_size));
  std::vector<std::byte> host(cfg.batch_size * cfg.sample_bytes);
  auto dev = device->allocate(host.size());
  auto stream = device->wrap_stream(nullptr);
  std::uint64_t steps = 0;  // the consumer's, over the run
  // One batch: its samples filled, copied, stepped. As the pipeline does, a
  // sample the filler skips (--on-error skip) is left out and listed, and the
  // next one takes its place. Counts the batch in `tally`.
  const auto one_batch = [&](EpochTally& tally, const std::uint64_t* indices, std::size_t n) {
    const std::uint64_t e = tally.epoch();
    std::uint64_t digest = 0;
    std::size_t kept = 0;
    const auto a = Clock::now();
    for (std::size_t j = 0; j < n; ++j) {
      digest += sample_digest(indices[j]);
      Sample s{indices[j], e, kept, std::span<std::byte>(host.data() + kept * cfg.sample_bytes, cfg.sample_bytes), 0,
               Rng(cfg.seed, e, indices[j])};
      fill(s);
      if (s.skipped) {
        skips.add({e, indices[j], std::move(*s.skipped)});
      } else {
        ++kept;
      }
    }
    const auto filled = Clock::now();
    device->copy_to_device(dev->data(), host.data(), kept * cfg.sample_bytes, *stream);
    const auto copied = Clock::now();
    synthetic_step(o, steps++);
    if (tracer) {
      tracer->span("fill", 1, a, filled);
      tracer->span("transfer", 1, filled, copied);
      tracer->span("step", 1, copied, Clock::now());
    }
    tally.add(kept, n - kept, digest);
  };
  EpochLinePrinter reporter(output == Output::print ? print_epoch : EpochLinePrinter::Print());
  result.interrupted = for_each_epoch(
      0, o.epochs, reporter, result.epochs, Clock::now(), [&](std::uint64_t) { return sampler.batches_per_epoch(); },
      [](std::uint64_t) { return std::size_t{0}; },
      [&](EpochTally& tally) {
        const auto order = sampler.epoch_order(tally.epoch());
        for (std::size_t b = 0; b < sampler.batches_per_epoch(); ++b) {
          const std::size_t n = sampler.batch_length(b);
          one_batch(tally, order.data() + b * cfg.batch_size, n);
          if (!tally.go_on()) break;
        }
      });
  if (tracer) {
    tracer->finish();
    if (output == Output::print) report_trace(o.trace);
  }
  result.skipped = skips.entries();
  return result;
}

}  // namespace conveyor::apps
