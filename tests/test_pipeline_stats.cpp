// The core pipeline's stats and bottleneck sentence, its batch pool and its
// config's memory arithmetic. Part of test_pipeline.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "catch_compat.h"
#include "pipeline/pipeline.h"
#include "support.h"
#include "pipeline_support.h"

using namespace conveyor;
using conveyor::test::eventually;
using conveyor::test::expected_bytes;
using conveyor::test::fill_pattern;
using namespace conveyor::test;

TEST_CASE("pipeline: stats name the bottleneck", "[pipeline][stats]") {
  Config c = small_config();
  c.workers = 2;
  c.epochs = 1;
  SECTION("slow workers") {
    Pipeline p(c, 140, {[](Sample& s) {
                 fill_pattern(s);
                 std::this_thread::sleep_for(std::chrono::microseconds(500));  // a sample's cost
               }});
    while (p.next()) {
    }
    const auto st = p.stats();
    REQUIRE(st.bottleneck()->name == "workers");
    REQUIRE_THAT(st.bottleneck_summary(), Catch::Contains("workers") && Catch::Contains("add workers"));
    REQUIRE(st.stages[0].items == 140);
  }
  SECTION("workers busy while the process fills its cores: the CPU is the limit, not the worker count") {
    // A snapshot as 4 workers on 2 cores give: busy, and the process at 1.9
    // of its 2 cores. The hint must not say "add workers"; with cores to
    // spare (the sleeping workers above) it still does.
    PipelineStats st;
    st.wall_s = 1.0;
    st.cores = 2;
    st.cpu_s = 1.9;
    st.stages = {{"workers", 4, 100, 3.8, 0.1, 0.1, 0, 1.0}, {"transfer", 1, 10, 0.1, 0, 0.9, 0, 1.0},
                 {"consumer", 1, 10, 0.05, 0, 0.95, 0, 1.0}};
    REQUIRE_THAT(st.bottleneck_summary(),
                 Catch::Contains("bottleneck: workers (busy 95%)") &&
                     Catch::Contains("the CPU is the limit (the process used 1.9 of 2 cores)") &&
                     !Catch::Contains("add workers"));
    st.cores = 16;  // fewer workers than cores: more of them would help
    REQUIRE_THAT(st.bottleneck_summary(), Catch::Contains("add workers"));
    st.cores = 2;
    st.cpu_s = 0.4;  // busy, yet the cores idle: workers waiting on reads
    REQUIRE_THAT(st.bottleneck_summary(), Catch::Contains("add workers"));
    st.cpu_s = 1.9;
    // Over an epoch (since()), the CPU time is the interval's too.
    PipelineStats later = st;
    later.wall_s = 2.0;
    later.cpu_s = 2.0;
    REQUIRE(later.since(st).cpu_s == Approx(0.1));
  }
  SECTION("slow consumer") {
    Pipeline p(c, 140, {fill_pattern});
    while (p.next()) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // a training step's cost
    const auto st = p.stats();
    REQUIRE(st.bottleneck()->name == "consumer");
    REQUIRE(st.queues[1].stats.high_water >= 1);
    REQUIRE_THAT(st.table(), Catch::Contains("device queue"));
  }
  SECTION("a transfer that waits for the consumer's memory is blocked, not busy") {
    // As a device transfer waiting for a slot the GPU's step still uses: the
    // consumer's thread is quick, the time shows up in the transfer phase.
    // 1 ms of its own work, then 3 ms of waiting: the core zeroes the report
    // before each phase (the buffers are pooled), so only the 3 ms are blocked.
    TransferFn waiting = [](Batch& b) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      b.transfer_blocked_ns += elapsed_ns(t0, Clock::now());
    };
    Pipeline p(c, 140, {fill_pattern, waiting});
    while (p.next()) {
    }
    const auto st = p.stats();
    const StageStats& transfer = st.stages[1];
    REQUIRE(transfer.name == "transfer");
    REQUIRE(transfer.consumer_wait_fraction() > 0.5);
    REQUIRE(transfer.blocked_fraction() >= transfer.consumer_wait_fraction());
    REQUIRE(transfer.busy_fraction() > 0.1);  // the 1 ms: not swallowed by a report left over from an earlier phase
    REQUIRE(transfer.busy_fraction() < 0.45);
    REQUIRE(st.bottleneck()->name == "consumer");
    REQUIRE_THAT(st.bottleneck_summary(), Catch::Contains("the transfer waited") && Catch::Contains("training step"));
  }
  SECTION("a consumer that starts late does not make a slow transfer look like a slow consumer") {
    // The transfer is the limit (3 ms a batch of its own work, 60 ms in all);
    // the consumer arrives 200 ms late, so the transfer first waits on a full
    // device queue for longer than it works. That wait is blocked time, but not
    // a wait for the consumer's memory.
    TransferFn slow = [](Batch&) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
    Pipeline p(c, 140, {fill_pattern, slow});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    while (p.next()) {
    }
    const auto st = p.stats();
    REQUIRE(st.stages[1].consumer_wait_fraction() == 0);
    REQUIRE(st.bottleneck()->name == "transfer");
  }
}

TEST_CASE("pipeline: a wait under way counts in the snapshot taken during it", "[pipeline][stats]") {
  // The consumer takes one batch and then stays away: the workers fill every
  // buffer and block, the delivery thread blocks on the full device queue.
  // Snapshots taken during those waits must show them (not only once they end),
  // so an interval between two snapshots holds the waits it spans. Were a wait
  // counted only when it ends, the blocked times below would stay flat and the
  // checks would give up after eventually()'s limit.
  Config c = small_config();
  c.workers = 2;
  c.epochs = 1;
  Pipeline p(c, 200, {fill_pattern});
  auto first = p.next();
  REQUIRE(first);
  REQUIRE(eventually([&] { return consumer_away_filled_everything(p.stats()); }));
  const auto a = p.stats();
  PipelineStats d;
  REQUIRE(eventually([&] {
    d = p.stats().since(a);
    return d.stages[0].blocked_s > 2 * 0.15 && d.stages[1].blocked_s > 0.15;  // both workers, and the transfer
  }));
  REQUIRE(d.stages[0].name == "workers");
  REQUIRE(d.stages[1].name == "transfer");
  // At most the whole interval, up to the window between a wait's reading of
  // the clock and its publication (begin_wait): a wait that began just before
  // snapshot `a` but was published after a's reading counts in the later
  // snapshot from its start, a few microseconds before the interval (3e-6 of
  // it once under TSan, on a 2-core machine running CI). 1e-4 is about 30
  // microseconds here, far below a wait counted twice or a missed end.
  REQUIRE(d.stages[0].blocked_fraction() <= 1.0 + 1e-4);
  REQUIRE(d.stages[1].blocked_fraction() <= 1.0 + 1e-4);
  first.reset();
  while (p.next()) {
  }
  const auto end = p.stats();
  for (const auto& s : end.stages) REQUIRE(s.busy_s + s.blocked_s + s.starved_s <= s.wall_s * double(s.threads) * (1 + 1e-9));
}

TEST_CASE("pipeline: no snapshot shows a stage busier than the time that passed", "[pipeline][stats]") {
  // Many short waits and fills end while another thread takes snapshots as
  // fast as it can. A snapshot that reads its clock before the counters counts
  // a wait ending in between up to its end, past that clock; one that sees an
  // interval's total added while its start is not yet cleared counts it twice.
  // Either shows a stage with more time than the run has had. (The times may
  // still step back by a few ns between snapshots: one counts an interval under
  // way up to its own clock, and the thread then ends it at the clock it read
  // a moment before. Items never step back.)
  Config c = small_config();
  c.workers = 2;
  c.epochs = 40;
  Pipeline p(c, 100, {fill_pattern});
  std::atomic<bool> done{false};
  std::atomic<std::size_t> snapshots{0};
  std::size_t items_back = 0, over_time = 0;
  std::string first_fault;
  std::thread watcher([&] {
    PipelineStats last = p.stats();
    while (!done.load()) {
      const PipelineStats now = p.stats();
      ++snapshots;
      for (std::size_t i = 0; i < now.stages.size(); ++i) {
        const StageStats& b = now.stages[i];
        const bool back = b.items < last.stages[i].items;
        // 1e-9: the rounding of the sums.
        const bool over = b.busy_s + b.blocked_s + b.starved_s > b.wall_s * double(b.threads) * (1 + 1e-9);
        if ((back || over) && first_fault.empty()) {
          char line[200];
          std::snprintf(line, sizeof line, "%s: items %llu -> %llu, busy %.9f + blocked %.9f + starved %.9f, wall %.9f",
                        b.name.c_str(), (unsigned long long)last.stages[i].items, (unsigned long long)b.items, b.busy_s,
                        b.blocked_s, b.starved_s, b.wall_s);
          first_fault = line;
        }
        items_back += back;
        over_time += over;
      }
      last = now;
    }
  });
  const std::size_t run_batches = 40 * ((100 + 6) / 7);  // 40 epochs of 15 batches
  std::size_t batches = 0;
  while (auto b = p.next()) {
    if (++batches % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // the consumer's step
    // The run lasts tens of milliseconds: a watcher the scheduler starts late
    // still takes its snapshots while the pipeline runs.
    if (batches == run_batches - 1) {
      while (snapshots.load() <= 100) std::this_thread::yield();
    }
  }
  done = true;
  watcher.join();
  INFO(first_fault);
  INFO(snapshots.load() << " snapshots");
  REQUIRE(batches == run_batches);
  REQUIRE(snapshots > 100);
  REQUIRE(items_back == 0);
  REQUIRE(over_time == 0);
}

TEST_CASE("pipeline: the consumer's fractions count from its first next(), and add up", "[pipeline][stats]") {
  // The caller builds the pipeline, then sets up for a while (a model, a log)
  // before asking for a batch. That time is neither the consumer's work nor
  // its wait: counted in its wall time, its busy + starved fell short of 100%,
  // and the run's "consumer idle" disagreed with the epochs' lines.
  Config c = small_config();
  c.epochs = 1;
  Pipeline p(c, 100, {fill_pattern});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::size_t batches = 0;
  // A 5 ms step per batch: with every batch made during the sleep, a consumer
  // that only counted would live a few microseconds, in which the bookkeeping
  // between its steps is no small share (under TSan, 11% of it once, and 13%
  // of 2 ms steps in CI with the suite running beside it).
  while (auto b = p.next()) {
    ++batches;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const PipelineStats s = p.stats();
  const StageStats& consumer = s.stages[2];
  REQUIRE(consumer.name == "consumer");
  REQUIRE(batches == (100 + 6) / 7);
  REQUIRE(consumer.wall_s < s.wall_s - 0.15);
  REQUIRE(consumer.busy_fraction() + consumer.starved_fraction() > 0.9);
  REQUIRE(consumer.busy_fraction() + consumer.starved_fraction() <= 1 + 1e-9);
  // The workers count from the start: what they did before the consumer came is theirs.
  const StageStats& workers = s.stages[0];
  REQUIRE(workers.wall_s == s.wall_s);
  REQUIRE(workers.items == 100);
}

TEST_CASE("batch pool: running out of memory names the buffer, its size and the allocator, and frees the rest",
          "[pipeline][error]") {
  std::size_t live = 0, calls = 0;
  Allocator a;
  a.name = "test";
  a.allocate = [&](std::size_t bytes) -> void* {
    if (++calls == 3) throw std::bad_alloc();
    ++live;
    return ::operator new(bytes);
  };
  a.deallocate = [&](void* p, std::size_t) {
    --live;
    ::operator delete(p);
  };
  try {
    BatchPool pool(5, 4, 100, a);
    FAIL("no error");
  } catch (const PoolAllocationError& e) {
    CHECK(std::string(e.what()) == "batch pool: out of memory allocating buffer 3 of 5 (400 bytes each, test memory)");
  }
  CHECK(live == 0);
}

namespace {
// The host allocator, counting the buffers it holds in `live`.
Allocator counting_host(std::atomic<std::size_t>& live) {
  Allocator a = Allocator::host();
  a.allocate = [&live, plain = a.allocate](std::size_t bytes) {
    ++live;
    return plain(bytes);
  };
  a.deallocate = [&live, plain = a.deallocate](void* p, std::size_t bytes) {
    --live;
    plain(p, bytes);
  };
  return a;
}
}  // namespace

TEST_CASE("batch pool: grow adds usable buffers up to max_count, while others acquire and release", "[pipeline]") {
  std::atomic<std::size_t> live{0};
  const Allocator a = counting_host(live);
  {
    BatchPool pool(2, 4, 100, a, kDefaultWaitYields, 6);
    CHECK(pool.count() == 2);
    CHECK(live == 2);
    // Two threads take and give back buffers while the pool grows.
    std::atomic<bool> done{false};
    std::vector<std::thread> users;
    for (int t = 0; t < 2; ++t) {
      users.emplace_back([&] {
        while (!done) {
          auto h = pool.acquire();
          if (!h) return;
          std::memset((*h)->data, 7, 400);
        }
      });
    }
    CHECK(pool.grow(3) == 5);
    CHECK(pool.grow(10) == 6);  // stops at max_count
    CHECK(pool.grow(1) == 6);
    done = true;
    for (auto& u : users) u.join();
    CHECK(pool.count() == 6);
    CHECK(live == 6);
    // All six can be held at once.
    std::vector<BatchHandle> held;
    for (int i = 0; i < 6; ++i) held.push_back(std::move(*pool.acquire()));
    std::set<Batch*> distinct;
    for (auto& h : held) distinct.insert(h.get());
    CHECK(distinct.size() == 6);
  }
  CHECK(live == 0);
  CHECK_THROWS_AS(BatchPool(3, 4, 100, a, kDefaultWaitYields, 2), std::invalid_argument);
}

TEST_CASE("config: the host pool's bytes, saturating instead of overflowing", "[pipeline][config]") {
  Config c;
  c.batch_size = 64;
  c.sample_bytes = 150528;
  c.workers = 4;
  CHECK(c.host_buffer_count() == 10);
  CHECK(c.host_pool_bytes() == 10 * 64 * (150528 + 24));
  c.sample_bytes = SIZE_MAX / 2;
  CHECK(c.host_pool_bytes() == SIZE_MAX);
  // The buffer counts saturate too (a queue depth of SIZE_MAX - 5 gave 0 buffers, 0 bytes).
  c.sample_bytes = 1;
  c.host_queue_depth = SIZE_MAX - 5;
  CHECK(c.host_buffer_count() == SIZE_MAX);
  CHECK(c.host_pool_bytes() == SIZE_MAX);
  c.device_queue_depth = SIZE_MAX - 1;
  CHECK(c.device_buffer_count() == SIZE_MAX);
}

TEST_CASE("batch pool: labels-only buffers are allocated, and a null from the allocator is refused",
          "[pipeline][config]") {
  std::vector<std::size_t> asked;
  Allocator a;
  a.name = "test";
  a.allocate = [&](std::size_t bytes) -> void* {
    asked.push_back(bytes);
    return ::operator new(bytes + 8);  // room of its own past the pixels, as the device pipeline's label tail
  };
  a.deallocate = [](void* p, std::size_t) { ::operator delete(p); };
  {
    BatchPool pool(2, 4, 0, a);  // sample_bytes 0: labels only
    CHECK(asked == std::vector<std::size_t>{0, 0});
    std::optional<BatchHandle> h = pool.acquire();
    REQUIRE(h);
    CHECK((*h)->data != nullptr);
  }
  a.allocate = [](std::size_t) -> void* { return nullptr; };
  REQUIRE_THROWS_AS(BatchPool(2, 4, 16, a), PoolAllocationError);
}

TEST_CASE("batch pool: an interrupt between buffers abandons the build and frees what it took", "[pipeline][error]") {
  std::atomic<std::size_t> live{0};
  std::size_t polls = 0;
  Allocator a = counting_host(live);
  a.interrupted = [&] { return ++polls > 6; };  // a few buffers in
  CHECK_THROWS_AS(BatchPool(8, 4, 100, a), Interrupted);
  CHECK(live == 0);
  a.interrupted = [] { return false; };
  BatchPool pool(8, 4, 100, a);  // polled and never stopped: built as ever
  CHECK(pool.count() == 8);
}

TEST_CASE("first_touch: writes every byte, and stops between chunks when interrupted", "[pipeline]") {
  std::vector<std::byte> v(kTouchChunk * 2 + 5, std::byte{7});
  first_touch(v.data(), v.size(), {});
  CHECK(std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; }));
  std::fill(v.begin(), v.end(), std::byte{7});
  int polls = 0;
  CHECK_THROWS_AS(first_touch(v.data(), v.size(), [&] { return ++polls == 2; }), Interrupted);
  CHECK(v[0] == std::byte{0});
  CHECK(v[kTouchChunk] == std::byte{7});  // the second chunk was never written
}

TEST_CASE("config: the bookkeeping's bytes count the order, the plan and the read-ahead lists", "[pipeline][config]") {
  Config c;
  c.batch_size = 10;
  c.workers = 3;
  CHECK(c.bookkeeping_bytes(95) == 95 * 8 + 10 * 16 + 3 * 10 * 16);
  CHECK(c.bookkeeping_bytes(SIZE_MAX) == SIZE_MAX);
}
