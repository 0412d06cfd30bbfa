#include "apps/epochs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "apps/cli.h"
#include "pipeline/rng.h"

namespace conveyor::apps {

std::uint64_t sample_digest(std::uint64_t index) { return splitmix64(index); }

std::string EpochReporter::progress(const EpochFigures&, std::size_t, std::size_t) const { return {}; }

bool EpochReporter::epoch_done(EpochFigures&, int) { return true; }

void EpochFigures::note_decoding(const PipelineStats& during) {
  const std::uint64_t samples = images + skipped;
  for (const StageStats& s : during.stages) {
    if (s.name == "workers" && s.items < samples) prefetched = std::max(prefetched, samples - s.items);
  }
}

std::string EpochFigures::prefetch_note() const {
  const std::uint64_t samples = images + skipped;
  if (samples == 0 || 4 * prefetched < samples) return {};
  return "; at least " + std::to_string(prefetched) + " of its " + std::to_string(samples) +
         " samples were decoded before it began (prefetch), so its rate does not measure decoding";
}

EpochTally::EpochTally(std::uint64_t epoch, std::size_t total, std::size_t done_before, const EpochReporter& reporter,
                       Clock::time_point began)
    : reporter_(reporter), began_(began), total_(total), done_(done_before), tty_(::isatty(STDERR_FILENO)) {
  figures_.epoch = epoch;
}

void EpochTally::add(std::uint64_t images, std::uint64_t skipped, std::uint64_t digest) {
  figures_.images += images;
  figures_.skipped += skipped;
  figures_.digest += digest;
  ++figures_.batches;
  ++done_;
  if (!tty_ || (done_ % 4 != 0 && done_ != total_)) return;
  const std::string line = reporter_.progress(figures_, done_, total_);
  if (line.empty()) return;
  std::fprintf(stderr, "\r%s", line.c_str());
  shown_ = std::max(shown_, line.size());
}

void EpochTally::add(const Batch& b) {
  std::uint64_t digest = 0;
  for (const std::uint64_t i : b.indices) digest += sample_digest(i);
  for (const SkippedSample& s : b.skipped) digest += sample_digest(s.index);
  filled(b.filled_at, b.size() + b.skipped.size());
  add(b.size(), b.skipped.size(), digest);
}

bool EpochTally::go_on() {
  interrupted_ = interrupt_signal();
  return interrupted_ == 0;
}

void EpochTally::wipe() const {
  if (shown_ > 0) std::fprintf(stderr, "\r%*s\r", int(shown_), "");
}

}  // namespace conveyor::apps
