#include <algorithm>
#include <atomic>
#include <barrier>
#include <latch>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "catch_compat.h"

#include "pipeline/bounded_queue.h"

using conveyor::BoundedQueue;

TEST_CASE("queue: capacity 0 is rejected", "[queue]") {
  REQUIRE_THROWS_AS(BoundedQueue<int>(0), std::invalid_argument);
}

TEST_CASE("queue: capacity 1 holds one item and keeps FIFO order", "[queue]") {
  BoundedQueue<int> q(1);
  REQUIRE(q.capacity() == 1);
  REQUIRE_FALSE(q.try_pop().has_value());
  REQUIRE(q.try_push(1));
  REQUIRE_FALSE(q.try_push(2));  // full
  REQUIRE(q.pop() == 1);
  REQUIRE(q.try_push(2));
  REQUIRE(q.try_pop() == 2);
  REQUIRE_FALSE(q.try_pop().has_value());

  // A producer and a consumer through one slot: order is kept.
  constexpr int kItems = 20000;
  std::atomic<int> refused{0};  // Catch2 assertions are not thread-safe: count, then check
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) refused += !q.push(i);
    q.close();
  });
  int expect = 0, out_of_order = 0;
  while (auto v = q.pop()) out_of_order += *v != expect++;
  producer.join();
  REQUIRE(refused == 0);
  REQUIRE(out_of_order == 0);
  REQUIRE(expect == kItems);
  REQUIRE(q.stats().high_water == 1);
}

TEST_CASE("queue: many producers and consumers deliver every item exactly once", "[queue]") {
  auto [capacity, producers, consumers] = GENERATE(table<std::size_t, int, int>({
      {1, 4, 4}, {2, 1, 3}, {3, 4, 1}, {8, 3, 3}, {64, 8, 2}}));
  const std::size_t yields = GENERATE(std::size_t{0}, conveyor::kDefaultWaitYields);  // sleep at once, or yield first
  CAPTURE(capacity, producers, consumers, yields);
  constexpr int kPerProducer = 5000;
  BoundedQueue<int> q(capacity, yields);
  std::vector<std::atomic<int>> seen(std::size_t(producers) * kPerProducer);
  std::atomic<int> producers_left{producers};
  std::atomic<int> refused{0}, out_of_order{0};  // Catch2 assertions are not thread-safe
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) refused += !q.push(p * kPerProducer + i);
      if (--producers_left == 0) q.close();  // the source ends the stream
    });
  }
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&] {
      int last_of[64];
      std::fill(std::begin(last_of), std::end(last_of), -1);
      while (auto v = q.pop()) {
        seen[std::size_t(*v)]++;
        // Per producer, one consumer sees items in the order they were pushed.
        const int p = *v / kPerProducer;
        out_of_order += *v <= last_of[p];
        last_of[p] = *v;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(refused == 0);
  REQUIRE(out_of_order == 0);
  for (auto& s : seen) REQUIRE(s.load() == 1);
  const auto st = q.stats();
  REQUIRE(st.pushes == seen.size());
  REQUIRE(st.pops == seen.size());
  REQUIRE(st.high_water <= capacity);
  REQUIRE(q.size() == 0);
}

TEST_CASE("queue: close ends the stream after the queued items", "[queue]") {
  BoundedQueue<int> q(4);
  REQUIRE(q.push(1));
  REQUIRE(q.push(2));
  q.close();
  q.close();  // idempotent
  REQUIRE(q.closed());
  REQUIRE_FALSE(q.push(3));
  REQUIRE_FALSE(q.try_push(3));
  REQUIRE(q.pop() == 1);
  REQUIRE(q.try_pop() == 2);
  REQUIRE_FALSE(q.pop().has_value());
  REQUIRE_FALSE(q.pop().has_value());  // stays ended
}

TEST_CASE("queue: close wakes every blocked consumer and producer", "[queue]") {
  constexpr int kWaiters = 6;
  const std::size_t yields = GENERATE(std::size_t{0}, conveyor::kDefaultWaitYields);
  BoundedQueue<int> empty(2, yields);
  BoundedQueue<int> full(1, yields);
  REQUIRE(full.push(0));
  std::latch started(2 * kWaiters);
  std::atomic<int> pops_ended{0}, pushes_refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      started.count_down();
      if (!empty.pop()) pops_ended++;
    });
    threads.emplace_back([&] {
      started.count_down();
      if (!full.push(1)) pushes_refused++;
    });
  }
  started.wait();  // whether each thread is already blocked or not, close() must release it
  empty.close();
  full.close();
  for (auto& t : threads) t.join();
  REQUIRE(pops_ended == kWaiters);
  REQUIRE(pushes_refused == kWaiters);
}

TEST_CASE("queue: slots left closed at first open with widen(), waking a blocked producer", "[queue]") {
  CHECK_THROWS_AS(BoundedQueue<int>(2, conveyor::kDefaultWaitYields, 3), std::invalid_argument);
  const std::size_t yields = GENERATE(std::size_t{0}, conveyor::kDefaultWaitYields);
  BoundedQueue<int> q(4, yields, 1);
  CHECK(q.capacity() == 4);
  CHECK(q.open() == 1);
  CHECK(q.stats().capacity == 1);
  REQUIRE(q.try_push(1));
  CHECK_FALSE(q.try_push(2));  // one slot open, and taken
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    if (q.push(2)) pushed = true;
  });
  CHECK(q.widen(2) == 3);  // the blocked push goes on, and one more fits
  producer.join();
  CHECK(pushed);
  REQUIRE(q.try_push(3));
  CHECK_FALSE(q.try_push(4));
  CHECK(q.widen(10) == 4);  // never past the capacity
  REQUIRE(q.try_push(4));
  CHECK_FALSE(q.try_push(5));
  CHECK(q.stats().capacity == 4);
  std::vector<int> got;  // in any order: the producer thread's item has a sub-queue of its own
  for (int i = 0; i < 4; ++i) got.push_back(q.pop().value_or(0));
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<int>{1, 2, 3, 4});
}

namespace {
// Counts live objects, to prove the queue neither leaks nor double-destroys.
struct Counted {
  static inline std::atomic<int> live{0};
  std::unique_ptr<int> v;
  Counted() : v(std::make_unique<int>(0)) { ++live; }
  explicit Counted(int x) : v(std::make_unique<int>(x)) { ++live; }
  Counted(Counted&& o) noexcept : v(std::move(o.v)) { ++live; }
  Counted& operator=(Counted&& o) noexcept { v = std::move(o.v); return *this; }
  ~Counted() { --live; }
};
}  // namespace

TEST_CASE("queue: items left in a destroyed queue are destroyed once", "[queue]") {
  {
    BoundedQueue<Counted> q(8);
    for (int i = 0; i < 5; ++i) REQUIRE(q.push(Counted(i)));
    auto one = q.pop();
    REQUIRE(*one->v == 0);
    q.close();
  }
  REQUIRE(Counted::live == 0);
}

TEST_CASE("queue: a failed push leaves the item with the caller", "[queue]") {
  BoundedQueue<std::unique_ptr<int>> q(1);
  REQUIRE(q.push(std::make_unique<int>(1)));
  auto item = std::make_unique<int>(2);
  REQUIRE_FALSE(q.try_push(item));
  REQUIRE(item);  // not moved from
  q.close();
  REQUIRE_FALSE(q.push(item));
  REQUIRE(item);
}

TEST_CASE("queue: stats record blocking and starvation", "[queue]") {
  BoundedQueue<int> q(1);
  std::barrier sync(2);
  std::thread consumer([&] {
    sync.arrive_and_wait();
    while (q.pop()) {
    }
  });
  REQUIRE(q.push(1));
  sync.arrive_and_wait();
  for (int i = 0; i < 1000; ++i) REQUIRE(q.push(i));
  q.close();
  consumer.join();
  const auto st = q.stats();
  REQUIRE(st.pushes == 1001);
  REQUIRE(st.pops == 1001);
  REQUIRE(st.mean_occupancy > 0.0);
  REQUIRE(st.mean_occupancy <= 1.0);
  REQUIRE(st.producer_blocked_s + st.consumer_starved_s > 0.0);
}
