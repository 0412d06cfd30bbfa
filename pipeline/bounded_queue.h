// BoundedQueue<T>: a multi-producer, multi-consumer FIFO of fixed capacity with
// blocking and non-blocking push/pop and a close() that ends the stream.
//
// Thread safety: every method is safe to call from any number of threads at once.
// T must be default-constructible and movable.
// Ownership: the queue owns the items it holds; destroying it destroys them. Close
// the queue and join every thread that may wait in it before destroying it.
//
// Built on moodycamel::ConcurrentQueue (the storage) and two
// moodycamel::LightweightSemaphore (free slots and ready items), which bound the
// queue and let threads block without spinning a core. The queue records how full
// it is and how long producers were blocked and consumers starved (QueueStats).
//
// Waiting: a thread that finds the queue full (push) or empty (pop) first
// yields its core up to `wait_yields` times, looking again after each, and only
// then sleeps in the semaphore. Waking a sleeping thread costs a system call on
// the waker's side and a context switch on the sleeper's, 5-10 us on a VM; when
// a pipeline runs more threads than there are cores, the yield hands the core
// to the thread being waited for instead, and the hand-off costs neither (see
// docs/benchmarks.md, the pipeline's own overhead). A pure spin would hold the core that thread
// needs, so the semaphore's own spin comes after the yields, not instead.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include <concurrentqueue/concurrentqueue.h>  // first: lightweightsemaphore.h relies on its macros
#include <concurrentqueue/lightweightsemaphore.h>

// ThreadSanitizer does not model the atomic_thread_fence calls with which
// moodycamel orders an item's enqueue before its dequeue, so it would miss that
// edge and report races on whatever the item points to. Under TSan the queue
// states the edge itself: release before enqueue, acquire after dequeue.
// (moodycamel's own slot accesses are listed in tests/tsan.supp.)
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CONVEYOR_TSAN_RELEASE(addr) __tsan_release(addr)
#define CONVEYOR_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#else
#define CONVEYOR_TSAN_RELEASE(addr) ((void)0)
#define CONVEYOR_TSAN_ACQUIRE(addr) ((void)0)
#endif

namespace conveyor {

// Config::wait_yields's default, here so that a queue built alone waits alike.
inline constexpr std::size_t kDefaultWaitYields = 16;

// A snapshot of a queue's counters. Times are totals over all threads.
struct QueueStats {
  std::size_t capacity = 0;        // the slots open (BoundedQueue::open())
  std::uint64_t pushes = 0;
  std::uint64_t pops = 0;
  double mean_occupancy = 0;       // items present, averaged over time since construction
  std::size_t high_water = 0;      // most items ever present at once
  double producer_blocked_s = 0;   // time push() waited for a free slot
  double consumer_starved_s = 0;   // time pop() waited for an item
};

template <typename T>
class BoundedQueue {
 public:
  // Throws std::invalid_argument if capacity is 0, or if open is more than
  // capacity. wait_yields: as Config::wait_yields (0: sleep at once). open:
  // the slots usable at first (0: all of them); widen() opens the others.
  explicit BoundedQueue(std::size_t capacity, std::size_t wait_yields = kDefaultWaitYields, std::size_t open = 0)
      : capacity_(capacity == 0 ? throw std::invalid_argument("BoundedQueue: capacity must be >= 1")
                                : capacity),
        wait_yields_(wait_yields),
        open_(open == 0 ? capacity
                        : open <= capacity ? open
                                           : throw std::invalid_argument("BoundedQueue: open must be <= capacity")),
        queue_(capacity),
        free_slots_(static_cast<moodycamel::LightweightSemaphore::ssize_t>(open_.load())) {}

  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // Blocks while the queue is full. Returns false, and leaves `item` untouched,
  // if the queue is closed (before or while waiting). Thread-safe.
  [[nodiscard]] bool push(T& item) { return push_impl(item, /*block=*/true); }
  [[nodiscard]] bool push(T&& item) { return push_impl(item, /*block=*/true); }

  // Never blocks. Returns false if the queue is full or closed. Thread-safe.
  [[nodiscard]] bool try_push(T& item) { return push_impl(item, /*block=*/false); }
  [[nodiscard]] bool try_push(T&& item) { return push_impl(item, /*block=*/false); }

  // Blocks while the queue is empty and open. Returns the oldest item, or an
  // empty optional once the queue is closed and drained. Thread-safe.
  std::optional<T> pop() { return pop_impl(/*block=*/true); }

  // Never blocks. Returns an empty optional if no item is ready right now
  // (check closed() to tell "empty" from "ended"). Thread-safe.
  std::optional<T> try_pop() { return pop_impl(/*block=*/false); }

  // Blocks up to `timeout` until pop() would return at once: an item is
  // queued or the queue is closed. Returns true then, false on timeout. Takes
  // nothing, so it suits a single consumer that must stay interruptible (a
  // Python caller checks for Ctrl-C between waits); with several consumers
  // another may take the item first. Thread-safe.
  bool wait_ready_for(std::chrono::microseconds timeout) {
    if (closed()) return true;
    // Borrow a token and give it back: the count stays that of the items.
    if (!ready_items_.tryWait()) {
      const auto t0 = Clock::now();
      const bool got = wait_for(ready_items_, timeout);  // yields first, as pop() does
      starved_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
      if (!got) return closed();
    }
    ready_items_.signal();
    return true;
  }

  // Ends the stream: later pushes fail, items already queued can still be
  // popped, and every thread blocked in push() or pop() wakes. Idempotent.
  void close() {
    if (closed_.exchange(true, std::memory_order_seq_cst)) return;
    // Enough tokens to release every waiter now and every later call.
    free_slots_.signal(kWakeAll);
    ready_items_.signal(kWakeAll);
  }

  // Opens `more` of the slots the constructor left closed (fewer where fewer
  // are left); a push waiting for room may go on at once. Returns the slots
  // open now. Safe from any thread; the open slots never close again.
  std::size_t widen(std::size_t more) {
    std::size_t now = open_.load(std::memory_order_relaxed), to = 0;
    do {
      to = std::min(capacity_, now + more);
    } while (!open_.compare_exchange_weak(now, to, std::memory_order_relaxed));
    if (to > now) free_slots_.signal(static_cast<Sema::ssize_t>(to - now));
    return to;
  }

  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // The most slots it may ever open; open(): those usable now.
  std::size_t capacity() const { return capacity_; }
  std::size_t open() const { return open_.load(std::memory_order_relaxed); }
  // Approximate: exact only when no other thread is pushing or popping.
  std::size_t size() const {
    std::lock_guard lk(occupancy_mu_);
    return occupancy_;
  }

  QueueStats stats() const {
    QueueStats s;
    s.capacity = open();
    s.pushes = pushes_.load(std::memory_order_relaxed);
    s.pops = pops_.load(std::memory_order_relaxed);
    {
      std::lock_guard lk(occupancy_mu_);
      const auto now = Clock::now();
      const double area = area_ns_ + double(occupancy_) * double(ns_between(changed_, now));
      const auto span = ns_between(created_, now);
      s.mean_occupancy = span ? area / double(span) : 0.0;
      s.high_water = high_water_;
    }
    s.producer_blocked_s = double(blocked_ns_.load(std::memory_order_relaxed)) * 1e-9;
    s.consumer_starved_s = double(starved_ns_.load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }

 private:
  using Sema = moodycamel::LightweightSemaphore;
  static constexpr Sema::ssize_t kWakeAll = Sema::ssize_t(1) << 40;
  using Clock = std::chrono::steady_clock;

  static std::uint64_t ns_between(Clock::time_point t0, Clock::time_point t1) {
    return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  static std::uint64_t ns_since(Clock::time_point t0) { return ns_between(t0, Clock::now()); }

  // Time-weighted occupancy. A mutex, not atomics, because the area needs the
  // count and the time of its last change together; it is held for a few
  // nanoseconds per push or pop, and our queues carry batches, not samples.
  void count_change(int delta) {
    std::lock_guard lk(occupancy_mu_);
    const auto now = Clock::now();
    area_ns_ += double(occupancy_) * double(ns_between(changed_, now));
    changed_ = now;
    occupancy_ = std::size_t(std::ptrdiff_t(occupancy_) + delta);
    high_water_ = std::max(high_water_, occupancy_);
  }

  bool push_impl(T& item, bool block) {
    // `pushing_` lets a consumer that finds the queue closed and empty tell
    // "drained" from "a push that passed the closed check is still enqueuing".
    pushing_.fetch_add(1, std::memory_order_seq_cst);
    bool ok = false;
    if (!closed_.load(std::memory_order_seq_cst)) {
      bool have_slot = free_slots_.tryWait();
      if (!have_slot && block) {
        const auto t0 = Clock::now();
        have_slot = wait_for(free_slots_);
        blocked_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
      }
      // A slot token handed out by close() is no slot: refuse the item.
      if (have_slot && !closed_.load(std::memory_order_seq_cst)) {
        // The semaphore bounds the count; enqueue may allocate a block the first
        // time a new producer thread pushes, never in the steady state.
        CONVEYOR_TSAN_RELEASE(this);
        queue_.enqueue(std::move(item));
        count_change(+1);
        pushes_.fetch_add(1, std::memory_order_relaxed);
        ready_items_.signal();
        ok = true;
      }
    }
    pushing_.fetch_sub(1, std::memory_order_seq_cst);
    return ok;
  }

  std::optional<T> pop_impl(bool block) {
    bool have_item = ready_items_.tryWait();
    if (!have_item) {
      if (!block) return std::nullopt;  // taking an item without its token would desync the count
      const auto t0 = Clock::now();
      have_item = wait_for(ready_items_);
      starved_ns_.fetch_add(ns_since(t0), std::memory_order_relaxed);
    }
    for (;;) {
      if (auto item = take_if_any()) return item;
      // Only a closed queue hands out tokens without items. Drained means no
      // item left and no push still in flight.
      if (closed_.load(std::memory_order_seq_cst) && pushing_.load(std::memory_order_seq_cst) == 0) {
        return take_if_any();
      }
      std::this_thread::yield();  // a push is between its check and enqueue: microseconds
    }
  }

  // A token from `s`: yield-and-look wait_yields_ times, then sleep (see the top),
  // for `timeout` at most when one is given.
  bool wait_for(Sema& s, std::optional<std::chrono::microseconds> timeout = std::nullopt) {
    for (std::size_t i = 0; i < wait_yields_; ++i) {
      std::this_thread::yield();
      if (s.tryWait()) return true;
    }
    return timeout ? s.wait(std::int64_t(timeout->count())) : s.wait();
  }

  std::optional<T> take_if_any() {
    std::optional<T> out;
    T value;
    if (queue_.try_dequeue(value)) {
      CONVEYOR_TSAN_ACQUIRE(this);
      count_change(-1);
      pops_.fetch_add(1, std::memory_order_relaxed);
      out.emplace(std::move(value));
      free_slots_.signal();
    }
    return out;
  }

  const std::size_t capacity_;
  const std::size_t wait_yields_;
  std::atomic<std::size_t> open_;
  moodycamel::ConcurrentQueue<T> queue_;
  Sema free_slots_;
  Sema ready_items_{0};
  std::atomic<bool> closed_{false};
  std::atomic<int> pushing_{0};

  mutable std::mutex occupancy_mu_;
  const Clock::time_point created_ = Clock::now();
  Clock::time_point changed_ = created_;
  std::size_t occupancy_ = 0;
  std::size_t high_water_ = 0;
  double area_ns_ = 0;
  std::atomic<std::uint64_t> pushes_{0};
  std::atomic<std::uint64_t> pops_{0};
  std::atomic<std::uint64_t> blocked_ns_{0};
  std::atomic<std::uint64_t> starved_ns_{0};
};

}  // namespace conveyor
