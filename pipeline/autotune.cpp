#include "pipeline/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace conveyor {

WorkerTuner::WorkerTuner(std::size_t ceiling, std::size_t start) : ceiling_(ceiling) {
  if (ceiling == 0) throw std::invalid_argument("WorkerTuner: ceiling must be >= 1");
  active_ = step_ = std::clamp<std::size_t>(start, 1, ceiling);
}

std::size_t WorkerTuner::change_to(std::size_t n, double rate, const std::string& why, TuneDecision* d) {
  if (d) *d = TuneDecision{0, active_, n, rate, why};
  active_ = n;
  return n;
}

namespace {
int pct(double f) { return int(f * 100.0 + (f < 0 ? -0.5 : 0.5)); }
}  // namespace

std::size_t WorkerTuner::jump(const TuneWindow& w, double rate, double free_cores, std::size_t stepped) const {
  if (w.consumer_capacity <= 0 || rate <= 0) return stepped;
  // The process's CPU per worker: the other threads' too, so an upper bound.
  const double cpu_each = std::max(w.cores_used / double(active_), 0.01);
  const double wanted = std::ceil(double(active_) * kJumpMargin * w.consumer_capacity / rate);
  const double room = double(active_) + std::floor(free_cores / cpu_each);
  return std::max(stepped, std::size_t(std::min({wanted, room, double(ceiling_)})));
}

std::size_t WorkerTuner::grow(const TuneWindow& w, double rate, double free_cores, std::size_t to, std::size_t stepped,
                              bool consumer_seen, TuneDecision* d) {
  trial_ = {true, active_, rate, true, consumer_seen};
  char why[200];
  const int n = std::snprintf(why, sizeof why, "grow: workers busy %d%%, %.1f of %zu cores free", pct(w.busy), free_cores,
                              w.cores);
  if (to > stepped && n > 0 && std::size_t(n) < sizeof why) {
    std::snprintf(why + n, sizeof why - std::size_t(n), ", the consumer could take %.0f images/s", w.consumer_capacity);
  }
  return change_to(to, rate, why, d);
}

double WorkerTuner::rate_of(const TuneWindow& w) {
  return w.consumer_images_per_s > 0 ? std::min(w.images_per_s, w.consumer_images_per_s) : w.images_per_s;
}

std::size_t WorkerTuner::early(const TuneWindow& w, TuneDecision* d) {
  if (!early_pending()) return active_;
  looked_ = true;
  if (!growing_ || active_ >= ceiling_) return active_;
  // The consumer's pace may not be known yet (two batches taken since the window began).
  const bool consumer_seen = w.consumer_images_per_s > 0;
  const double rate = rate_of(w);
  const double free_cores = double(w.cores) - w.cores_used;
  if (w.blocked >= kBlockedGrow || free_cores < kFreeCore) return active_;
  const std::size_t stepped = std::min(ceiling_, active_ + step_);
  const std::size_t to = jump(w, rate, free_cores, stepped);
  if (to <= stepped) return active_;
  return grow(w, rate, free_cores, to, stepped, consumer_seen, d);
}

std::size_t WorkerTuner::next(const TuneWindow& w, TuneDecision* d) {
  looked_ = true;
  if (w.consumer_images_per_s <= 0 && w.blocked >= kBlockedShrink) return active_;  // the consumer is away
  const bool consumer_seen = w.consumer_images_per_s > 0;
  const double rate = rate_of(w);
  // What a shrink must keep: the consumer's pace (the workers' own rate is
  // low while they wait on it, high while they refill buffers).
  const double pace = consumer_seen ? w.consumer_images_per_s : w.images_per_s;
  char why[200];
  if (trial_.on && trial_.consumer_seen && !consumer_seen) return active_;  // no like-for-like rate yet: wait
  if (trial_.on) {
    trial_.on = false;
    const double change = trial_.base_rate > 0 ? rate / trial_.base_rate - 1.0 : 0.0;
    if (trial_.grow) {
      const double share = double(active_ - trial_.base) / double(trial_.base);
      const double need = std::max(kMinGain, kShareOfStep * share);
      if (change < need) {
        std::snprintf(why, sizeof why, "back: %zu workers gave %+d%% images/s over %zu (needed %+d%%)", active_,
                      pct(change), trial_.base, pct(need));
        if (step_ > 1) {
          step_ /= 2;  // overshot: a smaller step next
        } else {
          growing_ = false;
          refused_at_ = trial_.base;
          refused_windows_ = 0;
        }
        return change_to(trial_.base, rate, why, d);
      }
      if (growing_) step_ = std::min(step_ * 2, ceiling_);
    } else {
      // Workers still waiting on the consumer keep up. Otherwise their rate
      // is their capacity: against the pace before the first shrink of a run
      // of them, so that losses each under the limit do not add up.
      if (w.blocked < kBlockedGrow && w.images_per_s < reference_rate_ * (1.0 - kShrinkLoss)) {
        std::snprintf(why, sizeof why, "back: %zu workers made %+d%% images/s against the pace at %zu", active_,
                      pct(w.images_per_s / reference_rate_ - 1.0), trial_.base);
        floor_ = active_ + 1;  // the next shrink tries one more than this
        floor_windows_ = 0;
        return change_to(trial_.base, rate, why, d);
      }
    }
  }
  ++refused_windows_;
  ++floor_windows_;
  if (floor_windows_ >= kRetryWindows) floor_ = 1;

  if (w.blocked >= kBlockedShrink && active_ > std::max<std::size_t>(floor_, 1)) {
    if (!shrinking_) reference_rate_ = pace;
    shrinking_ = true;
    growing_ = false;  // from here on, grow one at a time
    step_ = 1;
    trial_ = {true, active_, pace, false, consumer_seen};
    // The workers' share of their time not spent waiting says how many would keep up.
    const auto enough = std::size_t(std::ceil(double(active_) * (1.0 - w.blocked))) + 1;
    const std::size_t to = std::max(std::max<std::size_t>(floor_, 1), std::min(active_ - 1, enough));
    std::snprintf(why, sizeof why, "shrink: workers blocked %d%% of their time on the stages after them", pct(w.blocked));
    return change_to(to, rate, why, d);
  }
  shrinking_ = false;
  const double free_cores = double(w.cores) - w.cores_used;
  const bool refused_here = refused_at_ == active_ && refused_windows_ < kRetryWindows;
  if (active_ < ceiling_ && w.blocked < kBlockedGrow && free_cores >= kFreeCore && !refused_here) {
    const std::size_t stepped = std::min(ceiling_, active_ + (growing_ ? step_ : 1));
    const std::size_t to = growing_ ? jump(w, rate, free_cores, stepped) : stepped;
    return grow(w, rate, free_cores, to, stepped, consumer_seen, d);
  }
  return active_;
}

QueueTuner::QueueTuner(TunedQueue queue, std::size_t start, std::size_t ceiling)
    : queue_(queue), depth_(start), ceiling_(ceiling) {
  if (start == 0 || ceiling < start) throw std::invalid_argument("QueueTuner: needs 1 <= start <= ceiling");
}

std::size_t QueueTuner::next(const QueueWindow& w, TuneDecision* d) {
  const bool behind_workers = w.delivery_starved >= kBehindWorkers * w.consumer_starved;
  const bool host = queue_ == TunedQueue::host;
  // The stage before the queue ran ahead and waited for room in it.
  const double ahead = host ? w.buffer_wait : w.delivery_blocked;
  if (!w.consumer_seen || w.consumer_starved < kStarved || ahead < kSlack || w.delivery_busy >= kDeliveryBusy ||
      behind_workers != host || depth_ == ceiling_) {
    step_ = 1;
    return depth_;
  }
  // The steps the consumer missed while it waited: that many more batches
  // ready ahead of it would have carried it through.
  const double missed = w.consumer_step_s > 0 ? w.consumer_starved * w.window_s / w.consumer_step_s : 0.0;
  const std::size_t need = std::size_t(std::min(std::ceil(missed), double(ceiling_)));
  const std::size_t add = std::max(step_, need);
  const std::size_t to = std::min(ceiling_, depth_ + add);
  char why[200];
  std::snprintf(why, sizeof why, "grow: the consumer waited %d%% of the window (%.1f of its steps), %s %d%% for %s",
                pct(w.consumer_starved), missed, host ? "the workers" : "the transfer", pct(ahead),
                host ? "a free buffer" : "room");
  if (d) *d = TuneDecision{0, depth_, to, 0, why};
  step_ = 2 * add;
  depth_ = to;
  return depth_;
}

}  // namespace conveyor
