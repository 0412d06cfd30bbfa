// The pipeline's delivery thread (pipeline.h draws it): it takes
// the batches the workers complete, in any order, puts them in turn (in plan
// order, or any order within an epoch), runs the transfer stage on each (one
// phase, or two overlapped ones) and hands them to the consumer through the
// device queue. Its state lives in Pipeline::Delivery, owned by the thread's
// stack for the length of delivery_loop().
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "pipeline/pipeline.h"

namespace conveyor {

void Pipeline::delivery_main() {
  std::uint64_t delivered = 0;
  try {
    delivery_loop(delivered);
  } catch (...) {  // see worker_main
    delivery_counters_.blocked_since.store(0, std::memory_order_relaxed);
    delivery_counters_.starved_since.store(0, std::memory_order_relaxed);
    // Only the loop body throws, while batch `delivered` of the plan is awaited
    // (or, past the last one, while the last is published).
    const std::uint64_t at = delivered < plan_.total() ? delivered : delivered - 1;
    fail(std::string(kDeliveryStage), plan_.at(at).epoch, PipelineError::kNoSample, std::current_exception());
  }
}

// How long the delivery thread, with a two-phase transfer's batch in flight,
// waits for the next batch before it finishes the one in flight instead: a few
// thread wake-ups (5-50 us each on a VM). It never slows a run down: the wait
// ends when a batch arrives, and when none does, the consumer gets the batch in
// flight this much later at most.
constexpr std::chrono::microseconds kNextBatchGrace{200};

// The delivery thread's state and its steps: the batches that completed ahead
// of their turn, and the batch whose two-phase transfer was started and not yet
// finished. Every step that can wait returns false once the pipeline stops (or
// a transfer phase failed, which stops it).
class Pipeline::Delivery {
 public:
  Delivery(Pipeline& p, std::uint64_t& delivered)
      : p_(p),
        counters_(p.delivery_counters_),
        delivered_(delivered),
        total_(p.plan_.total()),
        epoch_end_(total_ ? p.plan_.epoch_end(0) : 0) {}
  // However the loop ends, a started batch is finished before its buffer can
  // be recycled (StageFunctions::finish); errors then are not this batch's news.
  ~Delivery() {
    if (!in_flight_) return;
    try {
      p_.stages_.finish(**in_flight_);
    } catch (...) {
    }
  }
  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  // Delivers every batch of the plan, then closes the device queue (the end of
  // the run flows downstream); returns early, the queue left open, once stopped.
  void run();

 private:
  std::optional<BatchHandle> next_arrival();
  bool deliver_in_turn();
  bool deliver(BatchHandle batch);
  bool run_phase(const TransferFn& phase, Batch& batch);
  bool publish(BatchHandle& batch);
  bool finish_and_publish(BatchHandle& batch) { return run_phase(p_.stages_.finish, *batch) && publish(batch); }
  // Finishes and publishes the batch in flight, which must be there.
  bool finish_in_flight() {
    BatchHandle batch = std::move(*in_flight_);
    in_flight_.reset();
    return finish_and_publish(batch);
  }
  // Runs wait() as time the stage is starved (nothing to deliver); returns what it got.
  template <class Wait>
  auto starved(Wait&& wait) {
    return counters_.timed_wait(counters_.starved_since, counters_.starved_ns, Clock::now(), std::forward<Wait>(wait));
  }

  Pipeline& p_;
  StageCounters& counters_;
  std::uint64_t& delivered_;  // batches of the plan handed on (started, with a two-phase transfer)
  const std::uint64_t total_;
  std::uint64_t epoch_end_;  // the plan position where the current epoch ends
  std::map<std::uint64_t, BatchHandle> early_;  // batches that completed ahead of their turn, by position
  std::optional<BatchHandle> in_flight_;
};

void Pipeline::delivery_loop(std::uint64_t& delivered) {
  Delivery delivery(*this, delivered);
  delivery.run();
}

void Pipeline::Delivery::run() {
  while (delivered_ < total_) {
    std::optional<BatchHandle> in = next_arrival();
    if (!in) return;  // stopped
    early_.emplace((*in)->sequence, std::move(*in));
    if (!deliver_in_turn()) return;
  }
  if (in_flight_ && !finish_in_flight()) return;
  p_.device_queue_.close();
}

// The next batch the workers completed, in any order; empty once stopped. With
// a batch in flight and none ready, the batch in flight is finished and
// published before the wait goes on.
std::optional<BatchHandle> Pipeline::Delivery::next_arrival() {
  BoundedQueue<BatchHandle>& host_queue = p_.host_queue_;
  if (in_flight_) {
    // The next batch is often a wake-up away: with a shallow host queue, the
    // worker that finished it was blocked on the full queue until this thread
    // popped the last one. Give it that long; otherwise, with nothing to
    // overlap, publish the batch in flight rather than hold it while waiting.
    std::optional<BatchHandle> in = host_queue.try_pop();
    if (!in) {
      in = starved([&] { return host_queue.wait_ready_for(kNextBatchGrace) ? host_queue.try_pop() : std::nullopt; });
    }
    if (in) return in;
    if (!finish_in_flight()) return std::nullopt;
  }
  return starved([&] { return host_queue.pop(); });
}

// Delivers the batches that arrived early whose turn has come: the next
// position (ordered) or any of the current epoch (ordered = false). False once
// stopped.
bool Pipeline::Delivery::deliver_in_turn() {
  while (!early_.empty()) {
    auto it = early_.begin();
    const bool its_turn = p_.config_.ordered ? it->first == delivered_ : it->first < epoch_end_;
    if (!its_turn) break;
    BatchHandle batch = std::move(it->second);
    early_.erase(it);
    if (!deliver(std::move(batch))) return false;
  }
  return true;
}

// Runs the transfer on the batch whose turn it is and hands it on: at once, or,
// with a two-phase transfer, it becomes the batch in flight and the one before
// it is finished and published. False once stopped.
bool Pipeline::Delivery::deliver(BatchHandle batch) {
  const StageFunctions& stages = p_.stages_;
  if (in_flight_ && stages.transfer_would_wait && stages.transfer_would_wait() && !finish_in_flight()) return false;
  if (stages.transfer && !run_phase(stages.transfer, *batch)) return false;
  if (++delivered_ == epoch_end_ && delivered_ < total_) epoch_end_ = p_.plan_.epoch_end(delivered_);
  if (!stages.transfer || !stages.finish) return publish(batch);
  // N is started and in flight now; N-1 finishes while N's transfer is queued behind it.
  std::optional<BatchHandle> previous = std::exchange(in_flight_, std::move(batch));
  return !previous || finish_and_publish(*previous);
}

// Runs one phase of the transfer; its time is the stage's busy time, less what
// the phase says it waited for the consumer (Batch::transfer_blocked_ns), which
// is blocked time. False when it threw: a phase woken by on_stop throws to get
// out, which is not an error.
bool Pipeline::Delivery::run_phase(const TransferFn& phase, Batch& batch) {
  const auto t0 = Clock::now();
  batch.transfer_blocked_ns = 0;
  batch.transfer_starved_ns = 0;
  try {
    phase(batch);
  } catch (...) {
    if (!p_.stopping_flag()) {
      p_.fail(std::string(kDeliveryStage), batch.epoch, PipelineError::kNoSample, std::current_exception(),
              "batch " + std::to_string(batch.index) + ": ");
    }
    return false;
  }
  counters_.count_phase(elapsed_ns(t0, Clock::now()), batch.transfer_blocked_ns, batch.transfer_starved_ns);
  return true;
}

// Hands a transferred batch to the consumer; false once stopped.
bool Pipeline::Delivery::publish(BatchHandle& batch) {
  StageCounters::add(counters_.items, 1);
  return counters_.timed_wait(counters_.blocked_since, counters_.blocked_ns, Clock::now(),
                              [&] { return p_.device_queue_.push(batch); });
}

}  // namespace conveyor
