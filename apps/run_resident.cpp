// `conveyor run --resident`: decode every image once (deterministic Resize +
// CenterCrop) with the workers, upload the set, then make each batch on the
// device by gather.
#include <cstdio>
#include <cstring>

#include "apps/cli.h"
#include "apps/run.h"
#include "device/resident.h"
#include "image/image_source.h"

namespace conveyor::apps {

namespace {

void print_epoch(const EpochFigures& f, int interrupted) {
  std::printf("epoch %llu%s: %llu images in %llu batches, %.3f s, %.0f images/s (resident: one gather per batch)\n",
              (unsigned long long)f.epoch, interrupted ? " (interrupted)" : "", (unsigned long long)f.images,
              (unsigned long long)f.batches, f.seconds, f.images_per_s());
}

// The decoded set must fit --budget-mb on the device and --max-memory-mb on the
// host, where it is held while it uploads. Throws UsageError.
void check_budget(const Options& o, double need_mb) {
  if (need_mb > o.budget_mb) {
    throw UsageError("--resident: the decoded set needs " + std::to_string(std::size_t(need_mb + 1)) +
                     " MiB, over --budget-mb " + std::to_string(std::size_t(o.budget_mb)) +
                     "; raise it, use a smaller --crop, or drop --resident to stream");
  }
  const double limit_mb = memory_limit_mb(o);
  if (need_mb > limit_mb) {
    throw UsageError("--resident: the decoded set needs " + std::to_string(std::size_t(need_mb + 1)) +
                     " MiB of host memory, over --max-memory-mb " + std::to_string(std::size_t(limit_mb)));
  }
}

struct DecodedSet {
  std::vector<std::byte> pixels;
  std::vector<std::int64_t> labels;
  std::vector<std::uint64_t> index;  // each row's dataset index (rows skip the samples skipped)
  std::vector<SkippedSample> skipped;  // --on-error skip: left out of the set, with their reasons
  double seconds = 0;
};

// Every image decoded once by a pipeline of the workers, in dataset order;
// stops early (with what it has) on SIGINT or SIGTERM.
DecodedSet decode_all(const Options& o, const Dataset& dataset, ImageSource& images) {
  const std::size_t row = images.sample_bytes();
  Config load;
  load.batch_size = 16;  // small: an interrupt waits for the batch being decoded
  load.sample_bytes = row;
  load.workers = o.workers;
  load.shuffle = false;
  load.epochs = 1;
  DecodedSet set;
  set.pixels.resize(dataset.size() * row);
  set.labels.reserve(dataset.size());
  const auto t0 = Clock::now();
  {
    Pipeline loader(load, dataset.size(), {images.filler()});
    std::size_t at = 0;
    while (auto b = loader.next()) {
      std::memcpy(set.pixels.data() + at * row, (*b)->data, (*b)->bytes().size());
      set.labels.insert(set.labels.end(), (*b)->labels.begin(), (*b)->labels.end());
      set.index.insert(set.index.end(), (*b)->indices.begin(), (*b)->indices.end());
      at += (*b)->size();
      if (interrupt_signal() != 0) break;  // the loader stops its workers as it goes out of scope
    }
    set.pixels.resize(at * row);
    set.skipped = loader.skipped();
  }
  set.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return set;
}

}  // namespace

RunResult run_resident(const Options& o, Dataset dataset, Output output) {
  const int crop = crop_size(o);
  ImageSource images(dataset, image_config(o, Augmentation::center, crop), o.workers);
  check_budget(o, double(dataset.size()) * double(images.sample_bytes() + 8) / double(1 << 20));
  DecodedSet set = decode_all(o, dataset, images);
  if (const int sig = interrupt_signal(); sig != 0) {
    if (output == Output::print) {
      std::printf("interrupted while decoding the set once: %zu of %zu images decoded\n", set.labels.size(), dataset.size());
    }
    RunResult stopped;
    stopped.interrupted = sig;
    return stopped;
  }
  auto device = open_device(device_config(o));
  HostSamples samples{set.pixels.data(), DType::uint8, set.labels.size(), {std::size_t(crop), std::size_t(crop), 3}};
  ResidentDataset resident(device, samples, set.labels, pipeline_config(o), resident_config(o, crop));
  RunResult result;
  result.device = device->describe();
  result.skipped = std::move(set.skipped);  // listed after the run, as a streaming run lists its own
  if (output == Output::print) {
    const std::string left_out =
        result.skipped.empty() ? "" : " (" + std::to_string(result.skipped.size()) + " skipped, listed at the end)";
    std::printf("dataset: %zu images decoded once at %dx%d in %.1f s%s (%.0f MiB on the device); rank %zu of %zu\n%s\n",
                set.labels.size(), crop, crop, set.seconds, left_out.c_str(),
                double(resident.device_bytes()) / double(1 << 20), o.rank, o.world_size, result.device.c_str());
  }
  // Each epoch's figures as a streaming run's: its samples' digests by
  // dataset index (--json's epoch_digest), and the samples skipped while
  // decoding counted in every epoch, as streaming skips them in each. Every
  // rank decodes the whole set, so rank 0 alone counts those.
  std::uint64_t skipped_digest = 0;
  for (const SkippedSample& k : result.skipped) skipped_digest += sample_digest(k.index);
  const bool counts_skips = o.rank == 0;
  EpochLinePrinter reporter(output == Output::print ? print_epoch : EpochLinePrinter::Print());
  std::uint64_t steps = 0;  // the consumer's, over the run
  result.interrupted = for_each_epoch(
      0, o.epochs, reporter, result.epochs, Clock::now(), [&](std::uint64_t) { return resident.batches_per_epoch(); },
      [](std::uint64_t) { return std::size_t{0}; },
      [&](EpochTally& tally) {
        if (counts_skips) {
          tally.figures().skipped += result.skipped.size();
          tally.figures().digest += skipped_digest;
        }
        for (std::size_t i = 0; i < resident.batches_per_epoch(); ++i) {
          auto b = resident.next();
          if (!b) break;
          synthetic_step(o, steps++);
          std::uint64_t digest = 0;
          for (const std::uint64_t row : b->indices()) digest += sample_digest(set.index[row]);
          tally.add(b->size(), 0, digest);
          if (!tally.go_on()) break;  // after this step, as streaming does
        }
      });
  return result;
}

}  // namespace conveyor::apps
