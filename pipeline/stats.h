// Stats: what each stage of a pipeline did with its time, and which stage limits
// throughput.
//
// Every stage thread's time falls into three parts: busy (its own work: filling
// samples, delivering and transferring, or the consumer's step between next()
// calls), blocked (waiting for room downstream or a free buffer) and starved
// (waiting for input). Fractions are of the stage's wall time times its thread
// count: the workers' and the delivery thread's since the pipeline started, the
// consumer's since it first asked for a batch (the caller's setup before that is
// none of its three). StageCounters' methods are the one place that moves time
// into these figures.
//
// Thread safety: StageCounters is written by its one owning thread and may be read
// from any thread at any time (read()). The report structs are plain values.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/autotune.h"
#include "pipeline/bounded_queue.h"

namespace conveyor {

using Clock = std::chrono::steady_clock;

inline std::uint64_t elapsed_ns(Clock::time_point t0, Clock::time_point t1) {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

// One thread's counters, on its own cache line so threads never share one.
struct alignas(64) StageCounters {
  std::atomic<std::uint64_t> items{0};
  std::atomic<std::uint64_t> busy_ns{0};
  std::atomic<std::uint64_t> blocked_ns{0};
  std::atomic<std::uint64_t> starved_ns{0};
  // Part of blocked_ns: the delivery thread's waits inside the transfer phases
  // for memory the consumer still uses (Batch::transfer_blocked_ns), as opposed to waits for
  // room in the device queue.
  std::atomic<std::uint64_t> consumer_wait_ns{0};
  // A worker parked by the tuner (Config::tune_workers): time out of the
  // stage's count, neither busy, blocked nor starved.
  std::atomic<std::uint64_t> parked_ns{0};

  // The start of the wait (or, for busy_since, the work) under way, in Clock
  // ticks, 0 when none: a snapshot adds the interval so far, so a long one
  // (workers blocked while the consumer evaluates, a worker stuck in a stalled
  // read) shows in the intervals it spans rather than all at once when it ends.
  std::atomic<std::int64_t> busy_since{0};
  std::atomic<std::int64_t> blocked_since{0};
  std::atomic<std::int64_t> starved_since{0};
  std::atomic<std::int64_t> parked_since{0};
  // Odd while end_wait() moves an interval from under way into its total (or
  // as_one() changes several figures). Without it a reader that saw `since`
  // cleared but not yet the total would miss the interval, and one that saw
  // the total added but `since` still set would count it twice. A one-writer
  // sequence lock (the writer never waits; a reader retries) makes each read()
  // a single moment.
  std::atomic<std::uint64_t> seq{0};

  // Every figure at one moment of the owning thread. Each interval it counts
  // (closed, or under way from its `since`) began before read() returned, so a
  // clock read after read() bounds them all: a snapshot never shows more time
  // than passed.
  struct Reading {
    std::uint64_t items = 0, busy_ns = 0, blocked_ns = 0, starved_ns = 0, consumer_wait_ns = 0, parked_ns = 0;
    std::int64_t busy_since = 0, blocked_since = 0, starved_since = 0, parked_since = 0;
  };
  Reading read() const {
    for (;;) {
      // Boehm's seqlock reader, with acquire loads instead of fences (which
      // ThreadSanitizer does not model): the second seq load cannot move
      // above the data loads.
      const std::uint64_t s0 = seq.load(std::memory_order_acquire);
      Reading r;
      r.items = items.load(std::memory_order_acquire);
      r.busy_ns = busy_ns.load(std::memory_order_acquire);
      r.blocked_ns = blocked_ns.load(std::memory_order_acquire);
      r.starved_ns = starved_ns.load(std::memory_order_acquire);
      r.consumer_wait_ns = consumer_wait_ns.load(std::memory_order_acquire);
      r.parked_ns = parked_ns.load(std::memory_order_acquire);
      r.busy_since = busy_since.load(std::memory_order_acquire);
      r.blocked_since = blocked_since.load(std::memory_order_acquire);
      r.starved_since = starved_since.load(std::memory_order_acquire);
      r.parked_since = parked_since.load(std::memory_order_acquire);
      if (!(s0 & 1) && seq.load(std::memory_order_relaxed) == s0) return r;
      std::this_thread::yield();  // the writer may be preempted mid-update
    }
  }

  // Single writer: the owning thread. Release stores, so that a reader's
  // acquire load of a figure also sees the seq change before it.
  static void add(std::atomic<std::uint64_t>& c, std::uint64_t v) {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_release);
  }
  static void begin_wait(std::atomic<std::int64_t>& since, Clock::time_point t0) {
    since.store(t0.time_since_epoch().count(), std::memory_order_release);
  }
  // Ends the wait that began at t0: clears `since` and counts t0..t1 in `total`,
  // as one step for read().
  void end_wait(std::atomic<std::int64_t>& since, std::atomic<std::uint64_t>& total, Clock::time_point t0,
                Clock::time_point t1) {
    as_one([&] {
      since.store(0, std::memory_order_release);
      add(total, elapsed_ns(t0, t1));
    });
  }
  // Runs update() (stores through add and begin_wait) as one step for read(),
  // e.g. a phase's time split between busy and blocked.
  template <class Update>
  void as_one(Update&& update) {
    const std::uint64_t s0 = seq.load(std::memory_order_relaxed);
    seq.store(s0 + 1, std::memory_order_relaxed);
    update();
    seq.store(s0 + 2, std::memory_order_release);
  }
  // Runs wait() as one wait that began at t0 (begin_wait, then end_wait when it
  // returns); returns what wait() returned. A wait() that throws leaves `since`
  // set: the thread's catch clears it.
  template <class Wait>
  auto timed_wait(std::atomic<std::int64_t>& since, std::atomic<std::uint64_t>& total, Clock::time_point t0,
                  Wait&& wait) {
    Clock::time_point end;
    return timed_wait(since, total, t0, std::forward<Wait>(wait), end);
  }
  // As timed_wait, and sets `end` to when the wait ended (the clock read that
  // closed it).
  template <class Wait>
  auto timed_wait(std::atomic<std::int64_t>& since, std::atomic<std::uint64_t>& total, Clock::time_point t0,
                  Wait&& wait, Clock::time_point& end) {
    begin_wait(since, t0);
    auto got = wait();
    end = Clock::now();
    end_wait(since, total, t0, end);
    return got;
  }
  // A worker's step between waits: runs work() as busy time from `mark` (shown
  // while under way) and moves `mark` to its end. A work() that throws counts
  // nothing and clears busy_since before the exception leaves.
  template <class Work>
  void busy_span(Clock::time_point& mark, Work&& work) {
    begin_wait(busy_since, mark);
    try {
      work();
    } catch (...) {
      busy_since.store(0, std::memory_order_relaxed);
      throw;
    }
    const auto now = Clock::now();
    end_wait(busy_since, busy_ns, mark, now);
    mark = now;
  }
  // A worker stops to wait: its busy time since `mark` ends now, wait() runs as
  // blocked time, and `mark` moves to the wait's end, where the next busy time
  // begins. Returns what wait() returned.
  template <class Wait>
  auto blocked_after_busy(Clock::time_point& mark, Wait&& wait) {
    const auto t0 = Clock::now();
    add(busy_ns, elapsed_ns(mark, t0));
    return timed_wait(blocked_since, blocked_ns, t0, std::forward<Wait>(wait), mark);
  }
  // A transfer phase that took `took_ns`, of which `consumer_wait_ns` (capped
  // at took_ns) waited for memory the consumer still held and `input_wait`
  // (capped at the rest) for the batch's input from a helper stage: the first
  // part is blocked (and consumer_wait), the second starved, the rest busy,
  // counted as one step.
  void count_phase(std::uint64_t took_ns, std::uint64_t consumer_wait, std::uint64_t input_wait = 0) {
    const std::uint64_t blocked = std::min(consumer_wait, took_ns);
    const std::uint64_t starved = std::min(input_wait, took_ns - blocked);
    as_one([&] {
      add(busy_ns, took_ns - blocked - starved);
      add(blocked_ns, blocked);
      add(consumer_wait_ns, blocked);
      add(starved_ns, starved);
    });
  }
};

// The delivery thread's stage name in stats() (so in the stats table, `--json`
// and the trace) and in PipelineError::stage(): "transfer", named for the copy
// it runs on a device (StageFunctions::transfer). Users' scripts read it, so it
// stays "transfer" though the thread is the delivery thread.
inline constexpr std::string_view kDeliveryStage = "transfer";

// A part of a helper stage's busy time, where the stage breaks it down (the
// GPU decode feed: its decoder's calls, gpu_decode/jpeg_batch_decoder.h).
struct StagePart {
  std::string name;
  double seconds = 0;       // summed over the stage's threads
  std::uint64_t calls = 0;  // how often it ran
};

struct StageStats {
  std::string name;       // "workers", kDeliveryStage ("transfer"), "consumer", or a helper stage's
  std::size_t threads = 1;
  std::uint64_t items = 0;  // samples for workers, batches otherwise
  double busy_s = 0, blocked_s = 0, starved_s = 0;
  double consumer_wait_s = 0;  // part of blocked_s: waits for memory the consumer holds (delivery only)
  double wall_s = 0;  // the consumer's since its first next(), the others' since the start
  std::string hint;   // a helper stage's advice for the bottleneck line when it is the limit
  std::vector<StagePart> parts;  // a helper stage's breakdown of busy_s (the table's "parts" line); mostly empty
  double parked_s = 0;  // thread time parked by the tuner (workers under Config::tune_workers), outside the fractions

  double busy_fraction() const { return fraction(busy_s); }
  double consumer_wait_fraction() const { return fraction(consumer_wait_s); }
  double blocked_fraction() const { return fraction(blocked_s); }
  double starved_fraction() const { return fraction(starved_s); }
  // The threads that worked, on average over wall_s: `threads` less the parked time.
  double working_threads() const { return wall_s > 0 ? std::max(0.0, double(threads) - parked_s / wall_s) : 0.0; }

 private:
  // Of the time the stage's threads worked (parked time left out).
  double fraction(double s) const {
    const double t = wall_s * double(threads) - parked_s;
    return t > 0 ? s / t : 0.0;
  }
};

struct NamedQueueStats {
  std::string name;  // "host queue", "device queue", "buffer pool"
  QueueStats stats;
};

struct PipelineStats {
  double wall_s = 0;  // since the pipeline started
  std::uint64_t batches = 0, samples = 0;  // delivered to the consumer
  std::uint64_t samples_skipped = 0;       // left out by the filler (Sample::skip) in those batches
  // The whole process's CPU time over the same interval (every thread, the
  // caller's too) and the cores it may run on: busy workers on a CPU the
  // process already fills are not helped by more workers.
  double cpu_s = 0;
  std::size_t cores = 0;
  // Seconds from the start to when the consumer got its latest batch (0: none
  // yet): with `samples`, a rate between deliveries (the worker tuner's).
  double last_delivery_s = 0;
  std::vector<StageStats> stages;
  std::vector<NamedQueueStats> queues;
  // Config::tune_workers: the workers working now, and the tuner's changes
  // (the latest kMaxTuneDecisions of them; tune_changes counts all). Empty
  // and 0 otherwise.
  static constexpr std::size_t kMaxTuneDecisions = 32;
  std::size_t workers_active = 0;
  std::uint64_t tune_changes = 0;
  std::vector<TuneDecision> tuning;
  // A tuned queue (Config::tune_host_queue, tune_device_queue): its depth
  // now, its ceiling, and its tuner's changes (from/to are depths; the latest
  // kMaxTuneDecisions of them; `changes` counts all). 0 and empty otherwise.
  struct QueueTuning {
    std::size_t depth = 0, ceiling = 0;
    std::uint64_t changes = 0;
    std::vector<TuneDecision> decisions;
  };
  QueueTuning host_queue_tuning, device_queue_tuning;

  // The stage that sets the pace: the one with the highest busy fraction, or the
  // consumer when the delivery stage waited for memory the consumer still held
  // (consumer_wait_fraction) longer than any stage was busy. That is a consumer
  // whose work runs on a device after its thread has returned (a GPU training
  // step): its thread looks idle while the buffers it released are in use.
  const StageStats* bottleneck() const;
  // One line naming the bottleneck with the evidence and a hint, e.g.
  // "bottleneck: workers (busy 98%); consumer waited 61% of the time - add workers or make samples cheaper".
  // Busy workers, at least as many as the cores, while the process uses 75% or
  // more of them get "the CPU is the limit" instead: a worker's busy time counts
  // while it waits for a core, and workers that wait on reads (busy, yet idle)
  // are helped by more.
  std::string bottleneck_summary() const;
  // The stage named `name` ("consumer", kDeliveryStage, ...), or nullptr.
  const StageStats* stage(std::string_view name) const;
  // The busy seconds of the stage named `name` (0 when there is none), e.g.
  // the workers' beside their wait on the network (network_bottleneck).
  double busy_s(std::string_view name) const;
  // A small table of stages and queues plus the bottleneck line.
  std::string table() const;
  // The stages' items and times over the interval since `earlier` (a snapshot of
  // the same pipeline), e.g. one epoch; queue figures stay since the start.
  PipelineStats since(const PipelineStats& earlier) const;
};

// Adds r's figures to `into`, with the intervals under way counted up to `now`
// (a clock read after r was read).
void accumulate(StageStats& into, const StageCounters::Reading& r, Clock::time_point now);

}  // namespace conveyor
