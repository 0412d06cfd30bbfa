#include "pipeline/pipeline.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include <time.h>

namespace conveyor {

// ---------------------------------------------------------------- PipelineError

namespace {
std::string describe(const std::string& stage, std::uint64_t epoch, std::uint64_t sample, const std::string& message) {
  std::string s = stage + " stage failed";
  if (epoch != PipelineError::kNoSample) s += " at epoch " + std::to_string(epoch);
  if (sample != PipelineError::kNoSample) s += ", sample " + std::to_string(sample);
  return s + ": " + message;
}
}  // namespace

PipelineError::PipelineError(std::string stage, std::uint64_t epoch, std::uint64_t sample, std::string message,
                             std::exception_ptr cause)
    : std::runtime_error(describe(stage, epoch, sample, message)),
      stage_(std::move(stage)),
      epoch_(epoch),
      sample_(sample),
      message_(std::move(message)),
      cause_(std::move(cause)) {}

void PipelineError::rethrow_cause() const {
  if (cause_) std::rethrow_exception(cause_);
  throw *this;
}

// ---------------------------------------------------------------- Pipeline

namespace {
constexpr unsigned kSlotBits = 24;  // Config::validate caps batch_size at 2^24
constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << kSlotBits) - 1;
constexpr std::uint64_t kFree = 0;  // ring tag of an entry holding no batch
static_assert(Config{}.wait_yields == kDefaultWaitYields, "one default for Config and a queue built alone");

const Config& validated(const Config& c) {
  c.validate();
  return c;
}


// Checks a resume state against the config; returns it, or the fresh start.
PipelineState checked_start(const Config& c, const Sampler& sampler, std::size_t n,
                            const std::optional<PipelineState>& resume) {
  PipelineState fresh = initial_state(c, n);
  if (!resume) return fresh;
  // Epochs are counted up from here without bound; this cap keeps that count
  // (and order_epoch_'s "none yet" marker, ~0) out of reach of overflow.
  const auto out_of_range = [](std::uint64_t epoch) {
    return std::invalid_argument("resume: epoch " + std::to_string(epoch) + " is out of range (at most " +
                                 std::to_string(kMaxEpoch) + ")");
  };
  if (resume->epoch > kMaxEpoch) throw out_of_range(resume->epoch);
  // Only the fields that differ: the two whole lines hid them among ten others.
  if (const std::string differ = resume->setting_differences(fresh); !differ.empty()) {
    throw std::invalid_argument("resume: state was taken with other settings: " + differ);
  }
  for (std::size_t i = 0; i < resume->delivered.size(); ++i) {
    if (resume->delivered[i] >= sampler.batches_per_epoch() || (i && resume->delivered[i] <= resume->delivered[i - 1])) {
      throw std::invalid_argument("resume: state's delivered batches are not sorted indices below " +
                                  std::to_string(sampler.batches_per_epoch()));
    }
  }
  // Every batch of its epoch delivered: the next epoch, with none, as
  // note_delivered() keeps it (state() never shows this; a hand-made or
  // foreign state may). Left as it is, the first epoch() range would hold the
  // next epoch's first batch alone, splitting that epoch over two loops.
  if (resume->delivered.size() == sampler.batches_per_epoch() && !resume->delivered.empty()) {
    if (resume->epoch == kMaxEpoch) throw out_of_range(kMaxEpoch + 1);  // the cap is on the epoch it starts at
    PipelineState next = *resume;
    ++next.epoch;
    next.delivered.clear();
    return next;
  }
  return *resume;
}

Plan make_plan(const Config& c, const Sampler& sampler, const PipelineState& start) {
  std::vector<std::uint64_t> first;
  const std::uint64_t per_epoch = sampler.batches_per_epoch();
  for (std::uint64_t b = 0, k = 0; b < per_epoch; ++b) {
    if (k < start.delivered.size() && start.delivered[k] == b) {
      ++k;
    } else {
      first.push_back(b);
    }
  }
  return Plan(per_epoch, start.epoch, std::move(first), c.epochs ? c.epochs : Plan::kUnbounded);
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}
}  // namespace

namespace {
// Every thread's CPU time so far, in seconds (0 where the clock is missing).
double process_cpu_s() {
  timespec t{};
  return ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0 ? double(t.tv_sec) + double(t.tv_nsec) * 1e-9 : 0.0;
}
}  // namespace

// Batch g while workers fill it. `tag` is g + 1 once the batch is ready to fill,
// kFree when the entry holds nothing. Written under mu_, read lock-free.
struct Pipeline::OpenBatch {
  std::atomic<std::uint64_t> tag{kFree};
  std::atomic<std::size_t> done{0};
  std::size_t length = 0;
  Batch* batch = nullptr;
  BatchHandle handle;
  // Per-slot skip reasons, each written by the worker that filled the slot and
  // read by the completer (ordered by `done`). A pointer a slot: 8 bytes where
  // an optional string took 40, for every slot of every buffer.
  std::vector<std::unique_ptr<std::string>> skips;
};

Pipeline::Pipeline(const Config& config, std::size_t dataset_size, StageFunctions stages, std::optional<PipelineState> resume)
    : config_(validated(config)),
      sampler_(config_.sampler_options(dataset_size)),
      stages_(std::move(stages)),
      position_(checked_start(config_, sampler_, dataset_size, resume)),
      plan_(make_plan(config_, sampler_, position_)),
      cores_(usable_cores()),
      pool_(config_.host_buffer_start(), config_.batch_size, config_.sample_bytes, stages_.allocator,
            config_.wait_yields, config_.host_buffer_count()),
      host_queue_(config_.host_queue_depth, config_.wait_yields),
      device_queue_(config_.device_queue_depth, config_.wait_yields, config_.device_queue_start()),
      ring_(std::make_unique<OpenBatch[]>(config_.host_buffer_count())),
      ring_size_(config_.host_buffer_count()),
      worker_counters_(std::make_unique<StageCounters[]>(config_.workers)) {
  active_workers_.store(config_.tune_workers ? tuned_workers_start() : config_.workers, std::memory_order_relaxed);
  if (config_.tune_host_queue) host_tuned_ = {config_.host_queue_start(), config_.host_queue_depth, 0, {}};
  if (config_.tune_device_queue) device_tuned_ = {config_.device_queue_start(), config_.device_queue_depth, 0, {}};
  if (!stages_.fill) throw std::invalid_argument("pipeline: stages.fill is required");
  for (std::size_t r = 0; r < ring_size_; ++r) grow_touched(ring_[r].skips, config_.batch_size, stages_.allocator.interrupted);
  // The clocks start with the threads, not before the pool's allocation
  // (pinned memory, hundreds of MB, would count as every worker's busy time).
  start_ = Clock::now();
  start_cpu_s_ = process_cpu_s();
  try {
    workers_.reserve(config_.workers);
    for (std::size_t w = 0; w < config_.workers; ++w) workers_.emplace_back(&Pipeline::worker_main, this, w);
    delivery_ = std::thread(&Pipeline::delivery_main, this);
    if (config_.tune_workers || config_.tune_host_queue || config_.tune_device_queue) {
      tuner_ = std::thread(&Pipeline::tuner_main, this);
    }
  } catch (...) {
    stop();  // a failed spawn: shut down the threads that did start
    throw;
  }
}

Pipeline::~Pipeline() { stop(); }

void Pipeline::request_stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    stop_requested_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  pool_.close();
  host_queue_.close();
  device_queue_.close();
  if (stages_.on_stop) stages_.on_stop();
}

void Pipeline::stop() {
  request_stop();
  std::lock_guard lk(join_mu_);
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  if (delivery_.joinable()) delivery_.join();
  if (tuner_.joinable()) tuner_.join();
}

void Pipeline::fail(const std::string& stage, std::uint64_t epoch, std::uint64_t sample, std::exception_ptr cause,
                    const std::string& context) {
  {
    std::lock_guard lk(error_mu_);
    if (!error_) error_ = std::make_shared<const PipelineError>(stage, epoch, sample, context + what_of(cause), cause);
  }
  request_stop();
}

void Pipeline::throw_if_failed() const {
  std::shared_ptr<const PipelineError> e;
  {
    std::lock_guard lk(error_mu_);
    e = error_;
  }
  if (e) throw PipelineError(*e);
}

// ---- workers

// Claims slots [slot, slot + count) of batch g: a guided share of what is left
// (OpenMP's schedule(guided)). Per-sample claims cost two contended atomics per
// sample, which with a cheap filler took over half of the worker loop's own
// time (perf annotate); runs cut that to about 15 per batch of 64.
bool Pipeline::claim(std::uint64_t& g, std::size_t& slot, std::size_t& count) {
  std::uint64_t cur = cursor_.load(std::memory_order_relaxed);
  for (;;) {
    g = cur >> kSlotBits;
    slot = std::size_t(cur & kSlotMask);
    if (g >= plan_.total()) return false;
    const std::size_t left = sampler_.batch_length(plan_.at(g).batch) - slot;
    count = std::max<std::size_t>(1, left / (2 * active_workers_.load(std::memory_order_relaxed)));
    const std::uint64_t next = count < left ? cur + count : (g + 1) << kSlotBits;
    if (cursor_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return true;
  }
}

bool Pipeline::open_batch(std::uint64_t g, StageCounters& counters, Clock::time_point& mark,
                          std::vector<std::uint64_t>& ahead) {
  OpenBatch& ob = ring_[g % ring_size_];
  auto handle = counters.blocked_after_busy(mark, [&]() -> std::optional<BatchHandle> {
    {
      // Buffers are taken in g order, so an older batch never waits for a buffer
      // held by a younger one (which, delivered in order, would wait for it).
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || (next_open_ == g && ob.tag.load(std::memory_order_relaxed) == kFree); });
      if (stopping_) return std::nullopt;
    }
    return pool_.acquire();
  });
  if (!handle) return false;  // stopping

  const Plan::Pos pos = plan_.at(g);
  if (order_epoch_ != pos.epoch) {  // first batch of a new epoch: compute its order once
    sampler_.epoch_order(pos.epoch, order_);  // in place: one order's memory, never two
    order_epoch_ = pos.epoch;
  }
  Batch& b = **handle;
  const std::size_t length = sampler_.batch_length(pos.batch);
  const auto first = order_.begin() + std::ptrdiff_t(pos.batch * config_.batch_size);
  b.epoch = pos.epoch;
  b.index = pos.batch;
  b.sequence = g;
  b.last_in_epoch = pos.batch + 1 == sampler_.batches_per_epoch();
  b.indices.assign(first, first + std::ptrdiff_t(length));
  b.labels.assign(length, 0);
  b.skipped.clear();
  ob.length = length;
  ob.done.store(0, std::memory_order_relaxed);
  ob.batch = &b;
  ob.handle = std::move(*handle);
  // Read-ahead advice (see Filler): batch g + 1's samples, gathered while this
  // worker still owns the epoch's order, passed on once the batch is open.
  ahead.clear();
  if (stages_.fill.takes_advice()) {
    if (g == 0 || pos.batch == 0) ahead.assign(b.indices.begin(), b.indices.end());  // nothing announced it
    if (g + 1 < plan_.total()) {
      const Plan::Pos next = plan_.at(g + 1);
      if (next.epoch == pos.epoch) {
        const auto from = order_.begin() + std::ptrdiff_t(next.batch * config_.batch_size);
        ahead.insert(ahead.end(), from, from + std::ptrdiff_t(sampler_.batch_length(next.batch)));
      }
    }
  }
  {
    std::lock_guard lk(mu_);
    ob.tag.store(g + 1, std::memory_order_release);
    next_open_ = g + 1;
  }
  cv_.notify_all();
  if (!ahead.empty()) stages_.fill.prefetch(ahead);
  return true;
}

bool Pipeline::wait_open(std::uint64_t g, StageCounters& counters, Clock::time_point& mark) {
  OpenBatch& ob = ring_[g % ring_size_];
  auto is_open = [&] { return ob.tag.load(std::memory_order_acquire) == g + 1; };
  if (is_open()) return true;
  return counters.blocked_after_busy(mark, [&] {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return stopping_ || is_open(); });
    return !stopping_;
  });
}

// Removes the skipped slots: later samples move down so the batch stays dense.
static void compact_skipped(Batch& b, std::vector<std::unique_ptr<std::string>>& skips) {
  std::size_t out = 0;
  for (std::size_t j = 0; j < b.indices.size(); ++j) {
    if (skips[j]) {
      b.skipped.push_back({b.epoch, b.indices[j], std::move(*skips[j])});
      skips[j].reset();
      continue;
    }
    if (out != j) {
      b.indices[out] = b.indices[j];
      b.labels[out] = b.labels[j];
      std::memmove(b.data + out * b.sample_bytes, b.data + j * b.sample_bytes, b.sample_bytes);
    }
    ++out;
  }
  b.indices.resize(out);
  b.labels.resize(out);
}

void Pipeline::complete(OpenBatch& ob, StageCounters& counters, Clock::time_point& mark) {
  if (std::any_of(ob.skips.begin(), ob.skips.begin() + std::ptrdiff_t(ob.length), [](auto& r) { return r != nullptr; })) {
    compact_skipped(*ob.batch, ob.skips);
  }
  ob.batch->filled_at = Clock::now();
  if (stages_.filled) stages_.filled(*ob.batch);
  BatchHandle handle = std::move(ob.handle);
  ob.batch = nullptr;
  {
    std::lock_guard lk(mu_);
    ob.tag.store(kFree, std::memory_order_relaxed);
  }
  cv_.notify_all();
  if (!host_queue_.try_push(handle)) {
    // Fails only when stopping: the handle then recycles itself.
    (void)counters.blocked_after_busy(mark, [&] { return host_queue_.push(handle); });
  }
}

// The filler's exceptions are caught per sample, where they name the sample.
// The thread functions catch the rest (memory for an epoch's order, a batch's
// indices, a skip reason, the reorder map), so that the pipeline stops with the
// error at the consumer instead of the process ending in std::terminate.
void Pipeline::worker_main(std::size_t w) {
  std::uint64_t g = 0;
  try {
    worker_loop(w, g);
  } catch (...) {
    worker_counters_[w].busy_since.store(0, std::memory_order_relaxed);
    worker_counters_[w].blocked_since.store(0, std::memory_order_relaxed);
    worker_counters_[w].parked_since.store(0, std::memory_order_relaxed);
    // g is the batch of the last claim (0 before the first: park() may throw
    // first, in theory, as any wait may).
    const Plan::Pos pos = plan_.at(g);
    fail("worker", pos.epoch, PipelineError::kNoSample, std::current_exception(),
         "batch " + std::to_string(pos.batch) + ": ");
  }
}

void Pipeline::worker_loop(std::size_t w, std::uint64_t& g) {
  StageCounters& counters = worker_counters_[w];
  std::size_t first = 0, count = 0;
  std::vector<std::uint64_t> ahead;  // open_batch's read-ahead list, reused
  // One clock read per sample: busy time runs from `mark` (the end of the last
  // sample or wait) to the end of this sample, so claiming counts as work. The
  // first runs from the pipeline's start: a thread's start-up (long with many
  // workers on few cores) is its time too, so the fractions add up.
  auto mark = start_;
  for (;;) {
    if (w >= active_workers_.load(std::memory_order_acquire) && !park(w, counters, mark)) return;
    if (!claim(g, first, count)) return;
    OpenBatch& ob = ring_[g % ring_size_];
    if (!(first == 0 ? open_batch(g, counters, mark, ahead) : wait_open(g, counters, mark))) return;
    Batch& b = *ob.batch;
    for (std::size_t slot = first; slot < first + count; ++slot) {
      Sample s{b.indices[slot], b.epoch, slot, b.sample(slot), 0, Rng(config_.seed, b.epoch, b.indices[slot]), w, {},
               &stop_requested_};
      try {
        counters.busy_span(mark, [&] {  // a long fill shows in snapshots while under way
          const Observed observed(stages_.observer.get(), {Work::fill, w, s.epoch, s.index});
          stages_.fill(s);
        });
      } catch (...) {
        fail("worker", s.epoch, s.index, std::current_exception());
        return;
      }
      StageCounters::add(counters.items, 1);
      if (s.skipped) {
        ob.skips[slot] = std::make_unique<std::string>(std::move(*s.skipped));
      } else {
        b.labels[slot] = s.label;
      }
      if (stopping_flag()) return;
    }
    // Read the length before counting this run done: once the last sample is
    // counted, the entry may be completed and reopened for batch g + R at once.
    const std::size_t length = ob.length;
    if (ob.done.fetch_add(count, std::memory_order_acq_rel) + count == length) complete(ob, counters, mark);
    if (stopping_flag()) return;
  }
}

bool Pipeline::park(std::size_t w, StageCounters& counters, Clock::time_point& mark) {
  const auto t0 = Clock::now();
  StageCounters::add(counters.busy_ns, elapsed_ns(mark, t0));
  return counters.timed_wait(counters.parked_since, counters.parked_ns, t0, [&] {
    std::unique_lock lk(mu_);
    idle_cv_.wait(lk, [&] { return stopping_ || tuning_over_ || w < active_workers_.load(std::memory_order_relaxed); });
    return !stopping_;
  }, mark);
}

// ---- the tuner

namespace {
// The buffer pool's name in stats()' queues, which the tuner reads back.
constexpr std::string_view kPoolQueue = "buffer pool";

// Seconds workers waited for a free buffer since the start.
double pool_waits(const PipelineStats& s) {
  for (const NamedQueueStats& q : s.queues) {
    if (q.name == kPoolQueue) return q.stats.consumer_starved_s;
  }
  return 0.0;
}

// A tuner's change into its log (the caller holds tune_mu_): the latest
// kMaxTuneDecisions kept, every one counted.
void log_change(std::vector<TuneDecision>& log, std::uint64_t& changes, TuneDecision d) {
  if (log.size() == PipelineStats::kMaxTuneDecisions) log.erase(log.begin());
  log.push_back(std::move(d));
  ++changes;
}
}  // namespace

void Pipeline::tuner_main() {
  try {
    std::optional<WorkerTuner> tuner;
    if (config_.tune_workers) tuner.emplace(config_.workers, tuned_workers_start());
    // One tuner a tuned queue, the host queue's first.
    std::vector<QueueTuner> queues;
    if (config_.tune_host_queue) queues.emplace_back(TunedQueue::host, config_.host_queue_start(), config_.host_queue_depth);
    if (config_.tune_device_queue) {
      queues.emplace_back(TunedQueue::device, config_.device_queue_start(), config_.device_queue_depth);
    }
    const auto window = std::chrono::milliseconds(config_.tune_window_ms);
    const double window_s = std::chrono::duration<double>(window).count();
    // The thread looks every QueueTuner::kWindowShare of a window. The queue
    // tuners decide on each look: a wait a deeper queue would have absorbed
    // shows at once. The worker tuner compares rates, which need the whole
    // window, but may jump at the first look (WorkerTuner::early).
    const auto look = std::max(std::chrono::milliseconds(5), window / QueueTuner::kWindowShare);
    // Each window is measured from a quarter window after the change before
    // it (or the start): the queues refill, woken workers start their decoders.
    const auto settle = window / 4;
    const auto wait = [&](std::chrono::milliseconds t) {
      std::unique_lock lk(mu_);
      return !idle_cv_.wait_for(lk, t, [&] { return stopping_; });
    };
    if (!wait(settle)) return;
    PipelineStats before = stats();          // the queue tuners' window began here
    PipelineStats workers_before = before;   // the worker tuner's
    // After a change both windows start again, a quarter window on.
    const auto restart = [&] {
      if (!wait(settle)) return false;
      before = workers_before = stats();
      return true;
    };
    // The consumer's pace from `from` to `to`: from batch to batch, not over
    // the window (whole batches in a fixed window would be off by up to one
    // batch in a dozen). A span much longer than the window held a pause (the
    // consumer away): its mean is no pace.
    const auto consumer_rate = [](const PipelineStats& from, const PipelineStats& to) {
      const double between = to.last_delivery_s - from.last_delivery_s;
      const double wall = to.wall_s - from.wall_s;
      if (from.last_delivery_s <= 0 || between <= 0 || between > 2 * wall) return 0.0;
      return double(to.samples - from.samples) / between;
    };
    for (;;) {
      if (!wait(look)) return;
      if ((cursor_.load(std::memory_order_relaxed) >> kSlotBits) >= plan_.total()) {
        // Every sample of the plan is claimed: nothing left to tune. Parked
        // workers are released to find the plan's end and return.
        {
          std::lock_guard lk(mu_);
          tuning_over_ = true;
        }
        idle_cv_.notify_all();
        return;
      }
      const PipelineStats now = stats();
      if (!queues.empty()) {
        // One change a window: a deeper queue is tried before the worker
        // count moves, since a consumer held up by a slow batch would make
        // the worker tuner's rates noise.
        const PipelineStats d = now.since(before);
        QueueWindow q;
        q.consumer_seen = d.batches > 0;
        if (const StageStats* consumer = d.stage("consumer")) {
          q.consumer_starved = consumer->starved_fraction();
          q.consumer_step_s = consumer->items > 0 ? consumer->busy_s / double(consumer->items) : 0.0;
        }
        if (const StageStats* delivery = d.stage(kDeliveryStage)) {
          q.delivery_busy = delivery->busy_fraction();
          q.delivery_starved = delivery->starved_fraction();
          q.delivery_blocked = delivery->blocked_fraction();
        }
        // The pool's waits (queue figures count from the start: the window's
        // is the difference), summed over the workers that waited: the share
        // of the window the pool stood empty, near enough, up to 1.
        q.buffer_wait = d.wall_s > 0 ? std::min(1.0, (pool_waits(now) - pool_waits(before)) / d.wall_s) : 0.0;
        q.window_s = d.wall_s;
        bool changed = false;
        for (auto it = queues.begin(); it != queues.end(); ++it) {
          TuneDecision decision;
          const std::size_t had = it->depth();
          const std::size_t depth = it->next(q, &decision);
          if (depth == had) continue;
          changed = true;
          decision.at_s = now.wall_s;
          decision.images_per_s = consumer_rate(before, now);
          if (!deepen(it->queue(), depth, std::move(decision))) queues.erase(it);  // no memory for more: done
          break;
        }
        if (changed) {
          if (!restart()) return;
          continue;
        }
        before = now;
      }
      // The worker tuner's window: whole looks, at least `window` long; the
      // first look at the first window may only jump.
      if (!tuner) continue;
      const double elapsed = now.wall_s - workers_before.wall_s;
      const bool whole = elapsed >= 0.9 * window_s;
      if (!whole && (!tuner->early_pending() || elapsed < 0.45 * window_s)) continue;
      const PipelineStats d = now.since(workers_before);
      const StageStats& workers = d.stages.front();  // stats() lists the workers first
      TuneWindow w;
      w.active = tuner->active();
      w.images_per_s = d.wall_s > 0 ? double(workers.items) / d.wall_s : 0.0;
      w.consumer_images_per_s = consumer_rate(workers_before, now);
      w.busy = workers.busy_fraction();
      w.blocked = workers.blocked_fraction();
      w.cores_used = d.wall_s > 0 ? d.cpu_s / d.wall_s : 0.0;
      w.cores = cores_;
      if (const StageStats* consumer = d.stage("consumer"); consumer && consumer->busy_s > 0) {
        w.consumer_capacity = double(d.samples) / consumer->busy_s;
      }
      TuneDecision decision;
      std::size_t n;
      if (whole) {
        workers_before = now;
        n = tuner->next(w, &decision);
      } else {
        n = tuner->early(w, &decision);  // the window goes on when it does not jump
      }
      if (n == w.active) continue;
      decision.at_s = now.wall_s;
      {
        std::lock_guard lk(tune_mu_);
        log_change(tuning_, tune_changes_, std::move(decision));
      }
      {
        std::lock_guard lk(mu_);
        active_workers_.store(n, std::memory_order_release);
      }
      idle_cv_.notify_all();
      if (!restart()) return;
    }
  } catch (...) {
    fail("tuner", PipelineError::kNoSample, PipelineError::kNoSample, std::current_exception());
  }
}

bool Pipeline::deepen(TunedQueue queue, std::size_t depth, TuneDecision d) {
  const bool host = queue == TunedQueue::host;
  PipelineStats::QueueTuning& tuned = host ? host_tuned_ : device_tuned_;
  const std::size_t more = depth - d.from;  // d.from: the depth now (only this thread changes it)
  bool grown = true;
  try {
    // Every batch a queue holds holds a host buffer; a fixed pool
    // (host_buffers, not with a tuned host queue) stays as it is.
    if (host || config_.host_buffers == 0) pool_.grow(more);
    if (!host && stages_.deepen_device_queue) stages_.deepen_device_queue(depth);
  } catch (const PoolAllocationError& e) {
    // A deeper queue is an optimization: the run goes on at the depth it has.
    grown = false;
    d.to = d.from;
    d.reason = std::string("stays: ") + e.what();
  }
  if (grown && !host) device_queue_.widen(more);
  std::lock_guard lk(tune_mu_);
  if (grown) tuned.depth = depth;
  log_change(tuned.decisions, tuned.changes, std::move(d));
  return grown;
}

// ---- consumer

// The stream ends here, or the pipeline's error is thrown. fail() records the
// error before it requests the stop, so a stop seen means its error is seen.
// The error is read after the stop, never before: a failure that came between
// the two reads would end the stream as if it were complete.
std::optional<BatchHandle> Pipeline::end_of_stream() const {
  throw_if_failed();
  return std::nullopt;
}

std::optional<BatchHandle> Pipeline::next() {
  if (stopping_flag()) return end_of_stream();
  auto batch = consumer_counters_.timed_wait(consumer_counters_.starved_since, consumer_counters_.starved_ns,
                                        consumer_arrives(), [&] { return device_queue_.pop(); });
  if (!batch || stopping_flag()) return end_of_stream();
  note_delivered(**batch);
  StageCounters::add(consumer_counters_.items, 1);
  return batch;
}

Clock::time_point Pipeline::consumer_arrives() {
  const auto now = Clock::now();
  std::lock_guard lk(state_mu_);
  end_consumer_step(now);
  if (!consumer_first_) consumer_first_ = now;
  return now;
}

void Pipeline::end_consumer_step(Clock::time_point now) {
  if (last_return_) StageCounters::add(consumer_counters_.busy_ns, elapsed_ns(*last_return_, now));
  last_return_.reset();
}

bool Pipeline::wait_ready(std::chrono::microseconds timeout) {
  if (stopping_flag()) return true;
  // Waiting here is the consumer starving, as in next(): the stats must not
  // count a consumer that waits in slices (Python) as busy.
  return consumer_counters_.timed_wait(consumer_counters_.starved_since, consumer_counters_.starved_ns, consumer_arrives(),
                                   [&] { return device_queue_.wait_ready_for(timeout) || stopping_flag(); });
}

void Pipeline::consumer_away() {
  const auto now = Clock::now();
  std::lock_guard lk(state_mu_);
  end_consumer_step(now);
}

void Pipeline::note_delivered(const Batch& b) {
  std::lock_guard lk(state_mu_);
  if (b.epoch != position_.epoch) {
    position_.epoch = b.epoch;
    position_.delivered.clear();
  }
  auto& d = position_.delivered;
  d.insert(std::upper_bound(d.begin(), d.end(), b.index), b.index);
  if (d.size() == sampler_.batches_per_epoch()) {
    ++position_.epoch;
    d.clear();
  }
  ++delivered_batches_;
  delivered_samples_ += b.size();
  for (const SkippedSample& k : b.skipped) skipped_.add(k);
  last_return_ = Clock::now();
  last_delivery_ = last_return_;
}

PipelineState Pipeline::state() const {
  std::lock_guard lk(state_mu_);
  return position_;
}

Pipeline::EpochRange Pipeline::epoch(std::uint64_t e) {
  const std::uint64_t per_epoch = sampler_.batches_per_epoch();
  if (per_epoch == 0) return EpochRange(this, 0);
  const PipelineState pos = state();
  if (e != pos.epoch) {
    throw std::logic_error("pipeline: epoch(" + std::to_string(e) + ") asked, but the consumer is at epoch " +
                           std::to_string(pos.epoch));
  }
  const bool past_end = config_.epochs != 0 && e >= config_.epochs;
  return EpochRange(this, past_end ? 0 : per_epoch - pos.delivered.size());
}

std::vector<SkippedSample> Pipeline::skipped() const {
  std::lock_guard lk(state_mu_);
  return skipped_.entries();
}

PipelineStats Pipeline::stats() const {
  PipelineStats s;
  // Read every counter first and the clock last: each interval the readings
  // hold began before `now`, so no stage shows more time than has passed.
  std::vector<StageCounters::Reading> worker_readings;
  worker_readings.reserve(config_.workers);
  for (std::size_t w = 0; w < config_.workers; ++w) worker_readings.push_back(worker_counters_[w].read());
  const StageCounters::Reading delivery_reading = delivery_counters_.read();
  StageCounters::Reading consumer_reading;
  std::optional<Clock::time_point> step_since;  // the consumer's step under way
  std::optional<Clock::time_point> consumer_from;
  {
    // Under the lock with last_return_, which consumer_arrives() moves into
    // busy_ns under it.
    std::lock_guard lk(state_mu_);
    consumer_reading = consumer_counters_.read();
    step_since = last_return_;
    consumer_from = consumer_first_;
    s.batches = delivered_batches_;
    s.samples = delivered_samples_;
    s.samples_skipped = skipped_.total();
    if (last_delivery_) s.last_delivery_s = double(elapsed_ns(start_, *last_delivery_)) * 1e-9;
  }
  const auto now = Clock::now();
  s.wall_s = double(elapsed_ns(start_, now)) * 1e-9;
  s.cpu_s = process_cpu_s() - start_cpu_s_;
  s.cores = cores_;
  StageStats workers{"workers", config_.workers};
  for (const auto& r : worker_readings) accumulate(workers, r, now);
  StageStats delivery{std::string(kDeliveryStage), 1};
  accumulate(delivery, delivery_reading, now);
  StageStats consumer{"consumer", 1};
  accumulate(consumer, consumer_reading, now);
  if (step_since) consumer.busy_s += double(elapsed_ns(*step_since, now)) * 1e-9;
  workers.wall_s = delivery.wall_s = s.wall_s;
  consumer.wall_s = consumer_from ? double(elapsed_ns(*consumer_from, now)) * 1e-9 : 0.0;
  for (StageStats* st : {&workers, &delivery, &consumer}) s.stages.push_back(*st);
  if (config_.tune_workers) {
    s.workers_active = active_workers_.load(std::memory_order_relaxed);
    std::lock_guard lk(tune_mu_);
    s.tuning = tuning_;
    s.tune_changes = tune_changes_;
  }
  if (config_.tune_host_queue || config_.tune_device_queue) {
    std::lock_guard lk(tune_mu_);
    s.host_queue_tuning = host_tuned_;
    s.device_queue_tuning = device_tuned_;
  }
  s.queues.push_back({"host queue", host_queue_.stats()});
  s.queues.push_back({"device queue", device_queue_.stats()});
  s.queues.push_back({std::string(kPoolQueue), pool_.stats()});
  return s;
}

// ---------------------------------------------------------------- state

PipelineState initial_state(const Config& c, std::size_t dataset_size) {
  PipelineState s;
  static_cast<SampleOrder&>(s) = c;
  s.dataset_size = dataset_size;
  return s;
}

}  // namespace conveyor
