// The epoch loop: one for every consumer of the command (`run` streaming,
// `run --resident`, `run --serial`, `train`). It times each epoch, counts what
// the consumer took (EpochFigures), keeps the progress line on a terminal's
// stderr, lets SIGINT/SIGTERM end the run after the step in progress, and hands
// each finished epoch to the mode's EpochReporter, which prints its line.
//
//   EpochTally      one epoch as it is consumed: add() after each batch's step,
//                   go_on() to notice a signal
//   EpochReporter   what a mode prints: the progress line's text and the
//                   epoch's line; the quiet one (a sweep's points) prints nothing
//   for_each_epoch  the loop
//
// Thread safety: the consumer's thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/batch.h"
#include "pipeline/stats.h"

namespace conveyor::apps {

// One epoch as the consumer saw it.
struct EpochFigures {
  std::uint64_t epoch = 0, batches = 0, images = 0, skipped = 0;
  // The sum of sample_digest() over the samples delivered and skipped, mod 2^64.
  std::uint64_t digest = 0;
  double seconds = 0;
  double rss_mib = 0;  // resident set at the epoch's end (streaming runs)
  // Samples of the epoch the workers had decoded before it began, at least:
  // the pool's prefetch, decoded while the epoch before ran (streaming runs).
  // Counted whole batches at a time by EpochTally, then raised by
  // note_decoding() with what the workers did during the epoch.
  std::uint64_t prefetched = 0;
  double images_per_s() const { return seconds > 0 ? double(images) / seconds : 0; }
  // The workers decoded `worker_items` samples while the epoch ran (the next
  // epoch's among them): the rest of its own were decoded before it began.
  // Exact for the last epoch, which has no next one to decode ahead for.
  void note_decoding(const PipelineStats& during);
  // For the epoch's line, when a quarter or more of its samples were
  // prefetched (a dataset not much larger than the pool, or the last epoch of
  // a small one): "; at least 78 of its 200 samples were decoded before it
  // began (prefetch), so its rate does not measure decoding". Else "".
  std::string prefetch_note() const;
};

// A sample's contribution to an epoch's digest: SplitMix64 of its dataset index.
// The digest is the sum over the samples a rank delivered or skipped, so the
// ranks' digests of one epoch add up to the whole dataset's exactly when their
// shards are disjoint and cover it (with counts adding up to the size).
std::uint64_t sample_digest(std::uint64_t index);

// What a consumer mode prints as its epochs go. The default prints nothing
// (a sweep's points): a mode overrides what it shows.
class EpochReporter {
 public:
  virtual ~EpochReporter() = default;
  // The progress line after `done` of `total` batches; empty for none.
  virtual std::string progress(const EpochFigures& f, std::size_t done, std::size_t total) const;
  // The epoch is over (`interrupted`: the signal that cut it short, or 0); a
  // mode may add to its figures (the resident set) before they are kept.
  // Returns false to end the run after it.
  virtual bool epoch_done(EpochFigures& f, int interrupted);
};

// A reporter that prints each epoch's line with `print`, or nothing when it is
// empty (a quiet run).
class EpochLinePrinter final : public EpochReporter {
 public:
  using Print = std::function<void(const EpochFigures& f, int interrupted)>;
  explicit EpochLinePrinter(Print print) : print_(std::move(print)) {}
  bool epoch_done(EpochFigures& f, int interrupted) override {
    if (print_) print_(f, interrupted);
    return true;
  }

 private:
  Print print_;
};

// One epoch as the consumer takes it.
class EpochTally {
 public:
  // total: the epoch's batches; done_before: those a resumed run had consumed
  // already; began: when the epoch's clock started (for prefetched()).
  EpochTally(std::uint64_t epoch, std::size_t total, std::size_t done_before, const EpochReporter& reporter,
             Clock::time_point began = {});
  std::uint64_t epoch() const { return figures_.epoch; }
  std::size_t done() const { return done_; }  // batches of the epoch consumed, resumed ones included
  std::size_t total() const { return total_; }
  const EpochFigures& figures() const { return figures_; }
  EpochFigures& figures() { return figures_; }

  // Counts a batch whose step ran, and shows the progress line every 4 batches
  // and at the last.
  void add(std::uint64_t images, std::uint64_t skipped = 0, std::uint64_t digest = 0);
  // A pipeline's batch: its images, skipped samples and their digests, and
  // whether it was prefetched (filled before the epoch began).
  void add(const Batch& b);
  // Counts a batch of `samples` (delivered and skipped) filled at
  // `filled_at` as prefetched when that was before the epoch began (for a
  // caller that counts with add(images, ...)).
  void filled(Clock::time_point filled_at, std::uint64_t samples) {
    if (filled_at != Clock::time_point{} && filled_at < began_) figures_.prefetched += samples;
  }
  // After a step: false, once SIGINT or SIGTERM came, so the epoch (and the
  // run after its report) ends.
  bool go_on();
  int interrupted() const { return interrupted_; }
  // Ends the run here, without the epoch's report (train stopping mid-epoch).
  void end_run() { ended_ = true; }
  bool run_ended() const { return ended_; }
  // Wipes the progress line from the terminal.
  void wipe() const;

 private:
  const EpochReporter& reporter_;
  Clock::time_point began_;
  EpochFigures figures_;
  std::size_t total_, done_;
  int interrupted_ = 0;
  bool ended_ = false;
  bool tty_;
  std::size_t shown_ = 0;  // the longest progress line shown, for the wipe
};

// Runs epochs [first, end): `take(tally)` consumes epoch tally.epoch()'s
// batches (`total_of(e)` of them, `done_of(e)` already consumed), calling
// tally.add() after each step and stopping when tally.go_on() is false. Each
// finished epoch goes to reporter.epoch_done() and into `figures`. The first
// epoch's time runs from `first_from` (a streaming pipeline's start: its
// workers began before the loop), each later one's from its loop. Returns the
// signal that ended the run early, or 0.
template <typename Take, typename Total, typename Done>
int for_each_epoch(std::uint64_t first, std::uint64_t end, EpochReporter& reporter, std::vector<EpochFigures>& figures,
                   Clock::time_point first_from, Total&& total_of, Done&& done_of, Take&& take) {
  for (std::uint64_t e = first; e < end; ++e) {
    const auto t0 = e == first ? first_from : Clock::now();
    EpochTally tally(e, total_of(e), done_of(e), reporter, t0);
    take(tally);
    tally.figures().seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    tally.wipe();
    if (tally.run_ended()) return 0;
    const bool go_on = reporter.epoch_done(tally.figures(), tally.interrupted());
    figures.push_back(tally.figures());
    if (!go_on || tally.interrupted()) return tally.interrupted();
  }
  return 0;
}

}  // namespace conveyor::apps
