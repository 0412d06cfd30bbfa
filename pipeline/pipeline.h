// Pipeline: worker threads fill pooled batch buffers sample by sample, one
// delivery thread puts finished batches in order and hands them on, and the
// consumer takes them with next() or `for (auto& batch : pipeline.epoch(e))`,
// all three at the same time.
//
//   workers (N) --host queue--> delivery (1) --device queue--> consumer (caller)
//        ^                                                         |
//        +------------------- batch pool (free buffers) <----------+
//
// Workers cooperate on the oldest unfinished batches: each claims the next run
// of samples of the stream, so a batch's samples are filled in parallel and its
// latency falls as workers are added. Runs are guided: a claim takes a
// 1 / (2 x workers) share of what is left of the batch, at least one sample, so
// the shared counters are touched a few times per batch rather than per
// sample, and a batch ends in single samples that keep the workers finishing
// it together. The delivery thread restores sampler order (or, with
// ordered = false, passes batches on as they complete within an epoch) and
// runs the stage's transfer function on each batch (DevicePipeline's copy to
// the device). Its stage is named "transfer" in stats() and in PipelineError
// (kDeliveryStage). Workers persist across epochs and prefetch into the next
// one.
//
// With Config::tune_workers a tuning thread chooses how many of the workers
// work, window by window (pipeline/autotune.h); the others wait, parked. With
// Config::tune_host_queue and tune_device_queue the same thread deepens those
// queues, adding the buffers (and device slots) each step needs.
//
// Output depends on (seed, epoch, index) alone: the same bytes whatever the
// worker count or the scheduling.
//
// Errors: the first exception in any stage stops the pipeline; the consumer's
// next call throws PipelineError naming the stage, epoch, sample and the
// original message, with the original exception inside (cause()), and every
// later call throws it again.
//
// Thread safety: next(), wait_ready(), epoch(), state() and stop() belong to the
// consumer: call them from one thread at a time. stats() may be called from any thread. The
// destructor stops and joins every thread it started.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "pipeline/batch.h"
#include "pipeline/observer.h"
#include "pipeline/skip_log.h"
#include "pipeline/bounded_queue.h"
#include "pipeline/config.h"
#include "pipeline/epoch_range.h"
#include "pipeline/plan.h"
#include "pipeline/rng.h"
#include "pipeline/sampler.h"
#include "pipeline/state.h"
#include "pipeline/stats.h"

namespace conveyor {

// What the filler gets for one sample. It writes every byte of `data` (exactly
// sample_bytes; the buffer still holds an older batch's bytes) and may set `label`.
// Or it calls skip(reason): the sample is left out of its batch, which is then
// delivered short (the samples after it move down; a batch whose every sample
// was skipped is delivered empty), and the skip is listed in Batch::skipped.
struct Sample {
  std::uint64_t index = 0;  // dataset index
  std::uint64_t epoch = 0;
  std::size_t slot = 0;     // position within the batch
  std::span<std::byte> data;
  std::int64_t label = 0;
  Rng rng;                  // this sample's stream: Rng(seed, epoch, index)
  std::size_t worker = 0;   // 0 .. workers-1: the calling thread, for per-thread scratch
  std::optional<std::string> skipped;  // set by skip()
  // The pipeline's stop flag (null outside a pipeline). A filler that can wait
  // long (a stalled read) polls stop_requested() and returns early; a sample
  // filled while stopping is discarded, so what it holds does not matter.
  const std::atomic<bool>* stopping = nullptr;

  void skip(std::string reason) { skipped = std::move(reason); }
  bool stop_requested() const { return stopping && stopping->load(std::memory_order_relaxed); }
};

// Fills one sample. Called concurrently from every worker thread; must be
// thread-safe. Throwing stops the pipeline (see PipelineError). It must not call
// the pipeline's next() (the batch it waits for is the one being filled: a
// deadlock) or stop() (the run then ends as if complete).
//
// Optionally it also takes read-ahead advice: when a worker opens batch g, the
// pipeline passes the dataset indices of batch g + 1 (and of g itself when g is
// an epoch's or the run's first batch) to `prefetch`, so a source can start the
// reads (posix_fadvise WILLNEED on a shard) that the workers will do next. It
// is advice only: it runs on the opening worker, and what it throws is ignored
// (the sample's own read reports any real error). Any callable taking a
// Sample& converts to a Filler without advice.
class Filler {
 public:
  using Prefetch = std::function<void(std::span<const std::uint64_t> indices)>;

  Filler() = default;
  template <class F>
    requires(!std::same_as<std::decay_t<F>, Filler> && std::is_invocable_v<F&, Sample&>)
  Filler(F fill, Prefetch prefetch = {})  // NOLINT(google-explicit-constructor): a callable is a Filler
      : fill_(std::move(fill)), prefetch_(std::move(prefetch)) {}

  void operator()(Sample& s) const { fill_(s); }
  explicit operator bool() const { return static_cast<bool>(fill_); }
  bool takes_advice() const { return static_cast<bool>(prefetch_); }
  void prefetch(std::span<const std::uint64_t> indices) const noexcept {
    if (!prefetch_) return;
    try {
      prefetch_(indices);
    } catch (...) {  // advice: the read itself reports what went wrong
    }
  }

 private:
  std::function<void(Sample&)> fill_;
  Prefetch prefetch_;
};
// Runs on the delivery thread for each finished batch, in delivery order. It
// may change the bytes, never the batch's samples (indices, labels, skipped).
using TransferFn = std::function<void(Batch&)>;

struct StageFunctions {
  Filler fill;               // required
  TransferFn transfer;       // optional: identity when empty
  Allocator allocator = Allocator::host();
  // Optional: called when the pipeline starts stopping (stop(), a stage's error,
  // destruction), possibly more than once and from any thread; it must wake any
  // blocking wait inside `transfer` so the delivery thread can be joined.
  std::function<void()> on_stop;
  // Optional, with `transfer`: a transfer that ends asynchronously (a DMA).
  // transfer(b) then only starts it and finish(b) waits for it to end; the
  // batch is published when finish returns. The delivery thread keeps one batch
  // in flight: it starts batch N before it finishes batch N-1, so the device
  // has the next copy queued behind the current one whenever the workers are
  // ahead. It finishes the batch in flight before it waits on anything the
  // batch could be holding up: when the host queue has no batch ready, and
  // when transfer_would_wait() says the next start would block. (Publishing
  // N-1 may wait for room in the device queue while N is in flight; the
  // consumer drains that queue without N.) Every started batch is finished
  // exactly once, in order, even when the pipeline stops or fails (errors from
  // that last call are ignored), so a buffer never returns to the pool while
  // its transfer still reads it. A transfer() that throws is never finished and
  // its buffer is recycled at once: it must wait for its own asynchronous work
  // before it throws.
  TransferFn finish;
  // Optional, with `finish`: true when transfer() would block now (it waits for
  // something the batch in flight may be holding, such as a device slot).
  std::function<bool()> transfer_would_wait;
  // Optional: called once for every batch of the run, on the worker thread
  // that completed it (its samples filled or skipped, the batch compacted),
  // before it is queued for the delivery thread: a helper stage can start on
  // it ahead of transfer() (the GPU decode feed). The batch is read-only there
  // and alive until it is finished. Must not block or throw.
  std::function<void(const Batch&)> filled;
  // Optional: told of each sample's fill, on its worker (pipeline/observer.h).
  std::shared_ptr<Observer> observer;
  // Optional, for Config::tune_device_queue: called on the tuning thread
  // before the device queue deepens to `depth`, to set up what that depth
  // needs beyond the host buffers (a DevicePipeline's device slots). Throws
  // PoolAllocationError when it cannot: the depth then stays where it was.
  std::function<void(std::size_t depth)> deepen_device_queue;
};

// Thrown by the consumer's calls after any stage failed. It names where the
// failure happened (stage, epoch, sample) and keeps what the stage threw, with
// its type: rethrow_cause() throws that exception again, so a caller can catch
// a DeviceError (or its own type) thrown in a filler as itself.
class PipelineError : public std::runtime_error {
 public:
  static constexpr std::uint64_t kNoSample = ~std::uint64_t{0};
  // what(): "<stage> stage failed[ at epoch E][, sample S]: <message>"; the
  // epoch is left out (epoch() is kNoSample) for a failure of no one epoch,
  // such as a device pipeline's release.
  PipelineError(std::string stage, std::uint64_t epoch, std::uint64_t sample, std::string message,
                std::exception_ptr cause = nullptr);
  const std::string& stage() const { return stage_; }
  std::uint64_t epoch() const { return epoch_; }
  std::uint64_t sample() const { return sample_; }  // dataset index, or kNoSample
  const std::string& message() const { return message_; }
  // The exception the stage threw; null for an error the pipeline made itself.
  const std::exception_ptr& cause() const { return cause_; }
  // Throws cause(), or this error where there is none.
  [[noreturn]] void rethrow_cause() const;

 private:
  std::string stage_;
  std::uint64_t epoch_, sample_;
  std::string message_;
  std::exception_ptr cause_;
};

// The state of a consumer that has taken nothing yet: epoch 0 with the
// config's order settings. A resume state for epoch e is this with epoch = e,
// e <= kMaxEpoch (2^62: epochs count up from there without overflow).
inline constexpr std::uint64_t kMaxEpoch = std::uint64_t{1} << 62;
PipelineState initial_state(const Config& config, std::size_t dataset_size);

class Pipeline {
 public:
  // Starts the threads. The epoch's order and plan take 8 bytes a sample and
  // a few a batch (dataset_size is bounded by memory, not checked against it:
  // a run over too many samples fails with std::bad_alloc, at construction or
  // as the workers' PipelineError). Throws ConfigError for an invalid config,
  // std::invalid_argument for a missing filler or a resume state that does not
  // match the config (or whose epoch is past kMaxEpoch), and whatever the
  // allocator throws.
  Pipeline(const Config& config, std::size_t dataset_size, StageFunctions stages,
           std::optional<PipelineState> resume = std::nullopt);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Blocks until the next batch is ready. Returns an empty optional when the
  // configured epochs are done or the pipeline was stopped. Throws PipelineError
  // once any stage failed. Release (destroy or reset) the handle to recycle the buffer.
  std::optional<BatchHandle> next();

  // Blocks up to `timeout` until next() would return without waiting for the
  // workers: a batch is ready, the run is over, stopped or failed. True then,
  // false on timeout. For a consumer that must stay interruptible (the Python
  // module waits in slices and checks for Ctrl-C between them).
  bool wait_ready(std::chrono::microseconds timeout);

  // The consumer turns to other work (evaluation, a checkpoint) until its next
  // call: that time counts as neither busy nor starved in the consumer's stats,
  // so a per-epoch figure taken around the training loop stays the loop's own.
  void consumer_away();

  using EpochRange = EpochRangeOf<Pipeline, BatchHandle>;
  // The remaining batches of epoch e, which must be the consumer's current epoch
  // (the first not yet fully consumed); std::logic_error otherwise.
  EpochRange epoch(std::uint64_t e);

  // Position after the last batch next() returned.
  PipelineState state() const;

  // Stops every thread and joins it; returns promptly from any state. Idempotent.
  void stop();

  // Each stage's figures and fractions: workers and delivery ("transfer") from
  // the pipeline's start, the consumer from its first next() (or wait_ready()):
  // time before that is the caller's setup, not the consumer's.
  PipelineStats stats() const;
  // When the pipeline started its threads: the start of its first epoch.
  Clock::time_point started_at() const { return start_; }

  // The samples skipped in the batches next() has returned so far: each
  // distinct (sample, reason) once, with how many times and in which epochs
  // (pipeline/skip_log.h), in the order first skipped; stats().samples_skipped
  // counts every skip. Bounded by the dataset, however many epochs run.
  // Thread-safe.
  std::vector<SkippedSample> skipped() const;

  const Config& config() const { return config_; }
  const Sampler& sampler() const { return sampler_; }
  std::size_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }

 private:
  struct OpenBatch;
  void worker_main(std::size_t w);  // worker_loop, its errors turned into fail()
  void worker_loop(std::size_t w, std::uint64_t& g);  // g: the batch position under way
  class Delivery;                   // the delivery thread's loop state and steps
  void delivery_main();             // delivery_loop, its errors turned into fail()
  // Config::tune_workers: worker w waits here while w >= active_workers_;
  // false when stopping. The wait is parked time in its counters.
  bool park(std::size_t w, StageCounters& counters, Clock::time_point& mark);
  void tuner_main();                // Config::tune_*: windows, WorkerTuner, QueueTuner
  // Config::tune_workers' first count: one a core this process may use (as
  // tf.data's AUTOTUNE starts a map's parallelism), at most Config::workers.
  std::size_t tuned_workers_start() const { return std::min(config_.workers, std::max<std::size_t>(1, cores_)); }
  // Config::tune_host_queue or tune_device_queue: that queue's depth goes
  // to `depth`, the pool growing by the buffers it adds (and, for the device
  // queue, stages_.deepen_device_queue setting up the rest); logs `d`. False
  // when that could not be had (out of memory: the depth stays, noted in the
  // log).
  bool deepen(TunedQueue queue, std::size_t depth, TuneDecision d);
  void delivery_loop(std::uint64_t& delivered);  // delivered: batches of the plan handed on so far
  bool claim(std::uint64_t& g, std::size_t& slot, std::size_t& count);
  // `mark` is the worker's busy-time origin; each advances it past its waits.
  // `ahead`: the calling worker's own list for the read-ahead advice, reused
  // from batch to batch so opening a batch allocates nothing once it has grown.
  bool open_batch(std::uint64_t g, StageCounters& counters, Clock::time_point& mark, std::vector<std::uint64_t>& ahead);
  bool wait_open(std::uint64_t g, StageCounters& counters, Clock::time_point& mark);
  void complete(OpenBatch& ob, StageCounters& counters, Clock::time_point& mark);
  // Keeps the first error (`cause`, what() prefixed by `context`) and stops.
  void fail(const std::string& stage, std::uint64_t epoch, std::uint64_t sample, std::exception_ptr cause,
            const std::string& context = "");
  void request_stop();
  void throw_if_failed() const;
  std::optional<BatchHandle> end_of_stream() const;
  // The consumer arrives for a batch: its busy time since the last one ends. Returns now.
  Clock::time_point consumer_arrives();
  // The consumer's step since next() last returned, if one is under way, ends
  // at `now`: its busy time. Caller holds state_mu_.
  void end_consumer_step(Clock::time_point now);
  void note_delivered(const Batch& b);
  bool stopping_flag() const { return stop_requested_.load(std::memory_order_acquire); }

  Config config_;
  Sampler sampler_;
  StageFunctions stages_;
  // The consumer's position (guarded by state_mu_); its start also fixes the plan.
  PipelineState position_;
  Plan plan_;
  Clock::time_point start_;  // set as the threads start (after the pool's allocation)
  double start_cpu_s_ = 0;   // the process's CPU time at start_
  std::size_t cores_;        // the cores this process may run on (its affinity mask)

  // Buffers and queues. Declared before the threads: destroyed after them.
  BatchPool pool_;
  BoundedQueue<BatchHandle> host_queue_;
  BoundedQueue<BatchHandle> device_queue_;

  // Work distribution: `cursor_` packs (batch position g, next slot); openers take
  // buffers in g order; ring_[g % R] holds batch g while workers fill it. The
  // cursor has a cache line of its own: every claim by every worker writes it.
  alignas(64) std::atomic<std::uint64_t> cursor_{0};
  std::unique_ptr<OpenBatch[]> ring_;
  std::size_t ring_size_;
  std::mutex mu_;               // guards next_open_, ring tags' transitions, stopping_, changes to active_workers_
  std::condition_variable cv_;
  // Parked workers and the tuning thread wait here (with mu_), apart from
  // cv_, which every batch opened or completed wakes.
  std::condition_variable idle_cv_;
  std::uint64_t next_open_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stop_requested_{false};  // stopping_ for lock-free checks
  // The order cache, touched only by the current opener (openers run one at a time).
  std::uint64_t order_epoch_ = ~std::uint64_t{0};  // none yet: no epoch reaches ~0 (see kMaxEpoch)
  std::vector<std::uint64_t> order_;

  // The first error, kept and rethrown to the consumer.
  mutable std::mutex error_mu_;
  std::shared_ptr<const PipelineError> error_;

  // Consumer-side position and timing.
  mutable std::mutex state_mu_;
  std::uint64_t delivered_batches_ = 0, delivered_samples_ = 0;
  SkipLog skipped_;
  std::optional<Clock::time_point> last_return_;
  std::optional<Clock::time_point> consumer_first_;  // its first arrival; guarded by state_mu_
  std::optional<Clock::time_point> last_delivery_;   // when next() last returned a batch; guarded by state_mu_

  // Workers allowed to work: workers 0 .. active_workers_ - 1 (all but under
  // Config::tune_workers). Written by the tuning thread under mu_, read lock-free.
  std::atomic<std::size_t> active_workers_{1};
  bool tuning_over_ = false;  // the plan is all claimed: parked workers return (guarded by mu_)
  // The tuner's changes, for stats(): guarded by tune_mu_.
  mutable std::mutex tune_mu_;
  std::vector<TuneDecision> tuning_;
  std::uint64_t tune_changes_ = 0;
  // Config::tune_host_queue and tune_device_queue: each queue's depth now
  // and its tuner's changes (guarded by tune_mu_; depth 0 when not tuned).
  PipelineStats::QueueTuning host_tuned_, device_tuned_;

  std::unique_ptr<StageCounters[]> worker_counters_;
  StageCounters delivery_counters_;
  StageCounters consumer_counters_;

  std::mutex join_mu_;
  std::vector<std::thread> workers_;
  std::thread delivery_;
  std::thread tuner_;
};

}  // namespace conveyor
