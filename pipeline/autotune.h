// WorkerTuner: how many of a pipeline's worker threads should work, chosen from
// what the pipeline measures, as tf.data's AUTOTUNE chooses a map's parallelism.
//
// The pipeline (Config::tune_workers) starts Config::workers threads, lets the
// first `active` of them work and parks the rest; every window its tuning
// thread hands the tuner what the window measured and applies the count it
// returns. Which thread fills a sample never changes the sample's bytes, so
// output stays the same whatever the tuner chooses.
//
// Images/s is the lower of the workers' rate and the consumer's: while the
// buffers fill the workers outrun a slower consumer for a while, and while
// they drain the consumer outruns the workers; neither lasts. A window in
// which the consumer took nothing while the workers waited on it (it is away:
// setup, evaluation) decides nothing.
//
// The rules, in order:
// - Grow while it pays: from the start count (one worker a core, as tf.data's
//   AUTOTUNE starts a map's parallelism), try more (steps of the start count,
//   then twice that, ...: 2, 4, 8 from 2) while
//   the workers are not held up downstream (blocked under kBlockedGrow) and
//   the process leaves half a core free. A step is kept when images/s rose by
//   a quarter of the step's share (1 -> 2 workers: +25%; 8 -> 9: +3.1%), and
//   by 2% at least; otherwise the count goes back and the step halves, down
//   to one worker. In the first climb a step may be larger: as many workers
//   as the consumer's capacity asks for at the workers' rate each (with
//   kJumpMargin to spare), as far as the free cores carry them at the CPU
//   each worker used. Workers that wait on reads (a remote store) use little
//   CPU and get there in one step; CPU-bound ones stop at the cores.
// - Give cores back: when the workers wait on the stages after them (the
//   consumer, the transfer) a quarter of their time or more, try the count
//   their working share says would do, plus one (n x (1 - blocked), rounded
//   up, + 1), and at least one fewer. It is kept while the workers still wait
//   on the stages after them, or make within 3% of the consumer's pace before
//   the first of a run of shrinks; otherwise the count goes back and the next
//   shrink tries one more. After a shrink, grows go one at a time.
// - Then hold, and look again: a grow refused at count n is retried only
//   after kRetryWindows windows, so a training step that speeds up later still
//   gets its workers.
// The caller measures each window after a change from a quarter window past
// it (Pipeline::tuner_main), which lets the queues refill and the woken
// threads start their decoders. It may look at the first window half-way
// (early()): workers waiting on reads then jump 0.15 s into the run with the
// default window, which matters on short runs.
//
// Thread safety: none; the pipeline's tuning thread owns it. Pure logic: no
// clock, no threads, so the tests drive it with known stage costs.
#pragma once

#include <cstddef>
#include <string>

namespace conveyor {

// One window of a running pipeline, as the tuner reads it.
struct TuneWindow {
  std::size_t active = 1;    // workers that worked during the window
  double images_per_s = 0;   // samples the workers filled per second
  // Samples the consumer took per second, between the batches it took
  // (0: fewer than two batches, or none since the window before).
  double consumer_images_per_s = 0;
  double busy = 0;           // the working workers' busy share of their time, 0..1
  double blocked = 0;        // their share blocked on the stages after them, 0..1
  double cores_used = 0;     // the whole process's CPU time over the window's wall time
  std::size_t cores = 1;     // the cores the process may run on
  // Samples the consumer could take per second: those it took over its busy
  // time, its waits left out (0: unknown).
  double consumer_capacity = 0;
};

// A change the tuner made, for stats() and --json.
struct TuneDecision {
  double at_s = 0;           // seconds since the pipeline started (the pipeline fills this in)
  std::size_t from = 0, to = 0;
  double images_per_s = 0;   // the window's rate that led to it
  std::string reason;        // e.g. "grow: workers busy 100%, 1.0 of 2 cores free"
};

class WorkerTuner {
 public:
  static constexpr std::size_t kRetryWindows = 20;
  static constexpr double kMinGain = 0.02;      // a grow step's least gain
  static constexpr double kShareOfStep = 0.25;  // ... or this share of the step's proportional gain
  static constexpr double kShrinkLoss = 0.03;   // a shrink's most loss
  static constexpr double kBlockedShrink = 0.25;  // workers blocked this share of their time: try fewer
  static constexpr double kBlockedGrow = 0.10;    // ... and under this share only, try more
  static constexpr double kFreeCore = 0.5;        // the cores a grow needs left free
  static constexpr double kJumpMargin = 1.25;     // a first-climb jump asks this much over the consumer's capacity

  // ceiling: the threads the pipeline started (Config::workers), >= 1.
  // start: the first count, clamped to 1 .. ceiling; the first grow doubles it.
  explicit WorkerTuner(std::size_t ceiling, std::size_t start = 1);

  std::size_t active() const { return active_; }

  // Takes a window measured at active() workers; returns the count for the
  // next window, and sets `decision` (its from/to/reason) when that differs
  // from active() or a trial was undone. Never returns 0 or more than the
  // ceiling. Allocates only for the reason's text.
  std::size_t next(const TuneWindow& w, TuneDecision* decision);

  // A look at the first window half-way through it, before any next(): the
  // first climb's jump alone, taken when the consumer's capacity asks for
  // more workers than the plain step and the free cores carry them (workers
  // waiting on reads). Otherwise it returns active() and changes nothing, and
  // next() decides on the whole window as it would have. A jump is a trial,
  // judged by the next whole window as any grow is. One look only: later
  // calls return active().
  std::size_t early(const TuneWindow& w, TuneDecision* decision);
  // Whether early() would still look: neither it nor next() has run.
  bool early_pending() const { return !looked_; }

 private:
  // A count being tried against the one before it.
  struct Trial {
    bool on = false;
    std::size_t base = 0;     // the count before the trial
    double base_rate = 0;     // its rate
    bool grow = true;
    bool consumer_seen = false;  // the base rate had the consumer's: the trial waits for it too
  };
  std::size_t change_to(std::size_t n, double rate, const std::string& why, TuneDecision* d);
  // A window's images/s: the lower of the workers' rate and the consumer's
  // pace (the workers' alone while the consumer's is unknown).
  static double rate_of(const TuneWindow& w);
  // The first climb's jump from `stepped` (the plain step's count): as many
  // as the consumer's capacity asks for at `rate`, as far as the free cores
  // carry them; `stepped` when it asks no more or is unknown.
  std::size_t jump(const TuneWindow& w, double rate, double free_cores, std::size_t stepped) const;
  // A grow to `to` from a window that had `rate`: the trial and its reason.
  std::size_t grow(const TuneWindow& w, double rate, double free_cores, std::size_t to, std::size_t stepped,
                   bool consumer_seen, TuneDecision* d);

  std::size_t ceiling_;
  std::size_t active_ = 1;
  std::size_t step_ = 1;
  bool growing_ = true;        // still in the first climb
  bool looked_ = false;        // next() or early() has run
  Trial trial_;
  std::size_t refused_at_ = 0;      // a grow from this count was refused ...
  std::size_t refused_windows_ = 0;  // ... this many windows ago
  std::size_t floor_ = 1;            // a shrink below this was refused ...
  std::size_t floor_windows_ = 0;    // ... this many windows ago
  bool shrinking_ = false;           // in a run of kept shrinks
  double reference_rate_ = 0;        // the consumer's pace a shrink must keep (within kShrinkLoss)
};

// QueueTuner: how deep a queue should be, from the jitter the pipeline
// measures, as tf.data's AUTOTUNE sizes a prefetch buffer. One tuner a queue:
// the host queue (batches the workers finished ahead of the delivery thread)
// or the device queue (batches delivered, and on a device transferred, ahead
// of the consumer).
//
// With Config::tune_host_queue or tune_device_queue the pipeline starts the
// queue shallow and allocates only the buffers (and device slots) that depth
// needs; each step up allocates the ones it adds, up to the ceiling the
// memory budget was checked against. Depth never goes down: the buffers are
// allocated, and a stall the queue absorbed once comes again.
//
// The rule: in one window, the consumer waited for batches (kStarved of the
// window or more) while the stage before the queue had run ahead of it and
// had to wait for room (kSlack or more), and the delivery thread had time to
// spare (busy under kDeliveryBusy: a transfer too slow overall is helped by
// no queue). Which queue the wait is put down to:
// - the host queue's, when the delivery thread waited for the workers for
//   at least kBehindWorkers of the consumer's wait (the consumer waited on a
//   batch held up behind a slow one: a stalled read, a large image) and the
//   workers had waited for a free buffer (they were ahead before it);
// - the device queue's, when it waited less than that (the batches were
//   there, the transfer was not done: the consumer's steps came faster than
//   the transfer for a while, as after a long step) and the delivery thread
//   had waited for room in the device queue or a free device slot.
// A deeper queue lets the stage before it finish more batches ahead of the
// consumer, which then carry it through the next such spell. Workers too
// slow overall never run out of buffers, a transfer too slow overall never
// waits for room, and a consumer that keeps up never waits: none of them
// deepens a queue. A step adds the batches the consumer could have taken
// while it waited (its wait over its own time per batch), at least 1, and at
// least double the step before while windows in a row call for more; a
// window that does not starts the doubling again.
//
// Thread safety: none; the pipeline's tuning thread owns it. Pure logic.
struct QueueWindow {
  bool consumer_seen = false;    // the consumer took batches in the window
  double consumer_starved = 0;   // its share of the window spent waiting for a batch, 0..1
  double buffer_wait = 0;        // the share of the window a worker waited for a free buffer, 0..1
  double delivery_busy = 0;      // the delivery thread's busy share (the transfer), 0..1
  double delivery_starved = 0;   // its share waiting for the workers' batches, 0..1
  double delivery_blocked = 0;   // its share waiting for room downstream (the device queue, a device slot), 0..1
  double window_s = 0;           // the window's length
  double consumer_step_s = 0;    // the consumer's busy time per batch it took (0: unknown)
};

enum class TunedQueue { host, device };

class QueueTuner {
 public:
  static constexpr double kStarved = 0.05;
  static constexpr double kSlack = 0.05;
  static constexpr double kDeliveryBusy = 0.75;
  static constexpr double kBehindWorkers = 0.5;
  // The queue tuners' window is Config::tune_window_ms over this: half the
  // worker tuner's, since a wait shows at once where a rate needs time to
  // settle, so the first step comes early in a run (0.15 s in by default). A
  // shorter one often holds a single burst, too little to size the step by.
  static constexpr int kWindowShare = 2;

  // start: the first depth; ceiling: the most, >= start >= 1.
  QueueTuner(TunedQueue queue, std::size_t start, std::size_t ceiling);

  std::size_t depth() const { return depth_; }
  TunedQueue queue() const { return queue_; }

  // Takes a window measured at depth(); returns the depth for the next window
  // (never less than depth(), never more than the ceiling), and sets
  // `decision` when it differs.
  std::size_t next(const QueueWindow& w, TuneDecision* decision);

 private:
  TunedQueue queue_;
  std::size_t depth_, ceiling_;
  std::size_t step_ = 1;
};

}  // namespace conveyor
