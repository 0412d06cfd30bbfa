// The core pipeline: the order grid, prefetch and read-ahead, cooperating
// workers, errors and skips, and the two-phase transfer. The tests of resume
// and stop, and of stats and the pools, are test_pipeline_resume.cpp and
// test_pipeline_stats.cpp (one executable).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
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

TEST_CASE("pipeline grid: every index once per epoch, in order, right bytes", "[pipeline][grid]") {
  const auto workers = GENERATE(1, 2, 3, 8);
  const auto host_q = GENERATE(1, 2, 8);
  const auto device_q = GENERATE(1, 2);
  const auto batch = GENERATE(1, 7, 64);
  const auto n = GENERATE(0, 1, 100, 128);
  Config c = small_config();
  c.workers = std::size_t(workers);
  c.host_queue_depth = std::size_t(host_q);
  c.device_queue_depth = std::size_t(device_q);
  c.batch_size = std::size_t(batch);
  c.wait_yields = device_q == 1 ? 0 : kDefaultWaitYields;  // both ways of waiting, half the grid each
  CAPTURE(workers, host_q, device_q, batch, n, c.wait_yields);
  Pipeline p(c, std::size_t(n), {fill_pattern});
  const std::size_t per_epoch = (std::size_t(n) + c.batch_size - 1) / c.batch_size;
  REQUIRE(p.batches_per_epoch() == per_epoch);
  for (std::uint64_t e = 0; e < c.epochs; ++e) {
    const auto order = p.sampler().epoch_order(e);
    std::uint64_t next_index = 0;
    std::set<std::uint64_t> seen;
    for (auto& b : p.epoch(e)) {
      REQUIRE(b->epoch == e);
      REQUIRE(b->index == next_index++);
      REQUIRE(b->last_in_epoch == (b->index + 1 == per_epoch));
      REQUIRE(bad_samples(c, *b, order) == 0);
      seen.insert(b->indices.begin(), b->indices.end());
    }
    REQUIRE(next_index == per_epoch);
    REQUIRE(seen.size() == std::size_t(n));  // every index exactly once (sizes add up, all distinct)
  }
  REQUIRE_FALSE(p.next().has_value());  // the configured epochs are over
  const auto st = p.stats();
  REQUIRE(st.batches == 2 * per_epoch);
  REQUIRE(st.samples == 2 * std::size_t(n));
}

TEST_CASE("pipeline: drop_last and shards through the pipeline", "[pipeline]") {
  const auto workers = GENERATE(1, 3);
  const auto n = GENERATE(0, 1, 100);
  const auto policy = GENERATE(ShardPolicy::pad, ShardPolicy::drop);
  Config c = small_config();
  c.workers = std::size_t(workers);
  c.drop_last = true;
  c.world_size = 3;
  c.shard_policy = policy;
  std::multiset<std::uint64_t> all;
  std::set<std::size_t> batch_counts;
  for (std::size_t r = 0; r < 3; ++r) {
    c.rank = r;
    Pipeline p(c, std::size_t(n), {fill_pattern});
    std::size_t batches = 0;
    for (auto& b : p.epoch(0)) {
      REQUIRE(b->size() == c.batch_size);  // drop_last: never short
      all.insert(b->indices.begin(), b->indices.end());
      ++batches;
    }
    batch_counts.insert(batches);
  }
  REQUIRE(batch_counts.size() == 1);  // every rank the same number of batches
  const std::size_t shard = policy == ShardPolicy::pad ? (std::size_t(n) + 2) / 3 : std::size_t(n) / 3;
  REQUIRE(*batch_counts.begin() == shard / c.batch_size);
  REQUIRE(all.size() == 3 * (shard / c.batch_size) * c.batch_size);
  if (policy == ShardPolicy::drop) {
    REQUIRE(std::set<std::uint64_t>(all.begin(), all.end()).size() == all.size());  // pairwise disjoint
  }
}

TEST_CASE("pipeline: bytes are identical with 1 and 8 workers, ordered or not", "[pipeline]") {
  Config c = small_config();
  c.sample_bytes = 100;
  c.workers = 1;
  const auto one = run_digests(c, 300);
  c.workers = 8;
  REQUIRE(run_digests(c, 300) == one);
  c.ordered = false;
  REQUIRE(run_digests(c, 300) == one);
  REQUIRE(one.size() == 2 * 43);
}

TEST_CASE("pipeline: unordered delivery covers each epoch once, epochs in turn", "[pipeline]") {
  Config c = small_config();
  c.ordered = false;
  c.workers = 4;
  c.epochs = 3;
  // Uneven sample costs so batches finish out of order.
  Pipeline p(c, 200, {[](Sample& s) {
               fill_pattern(s);
               if (s.rng.below(4) == 0) std::this_thread::yield();
             }});
  for (std::uint64_t e = 0; e < 3; ++e) {
    std::set<std::uint64_t> batches, samples;
    for (auto& b : p.epoch(e)) {
      REQUIRE(b->epoch == e);
      REQUIRE(batches.insert(b->index).second);
      samples.insert(b->indices.begin(), b->indices.end());
    }
    REQUIRE(batches.size() == p.batches_per_epoch());
    REQUIRE(samples.size() == 200);
  }
  REQUIRE_FALSE(p.next());
}

TEST_CASE("pipeline: workers prefetch into the next epoch before the consumer asks for it", "[pipeline]") {
  // The consumer takes every batch of epoch 0 and asks for nothing more. The
  // workers, which persist across epochs, go on filling epoch 1: samples
  // filled beyond epoch 0's count can only be epoch 1's.
  Config c = small_config();
  c.epochs = 2;
  const std::size_t n = 100;
  Pipeline p(c, n, {fill_pattern});
  std::size_t samples = 0;
  for (auto& b : p.epoch(0)) samples += b->size();
  REQUIRE(samples == n);
  REQUIRE(eventually([&] { return p.stats().stages[0].items >= n + c.batch_size; }));  // a whole batch of epoch 1
  REQUIRE(p.stats().batches == p.batches_per_epoch());  // and the consumer has not taken it
  const std::vector<std::uint64_t> order = p.sampler().epoch_order(1);
  auto first = p.next();
  REQUIRE(first);
  REQUIRE((*first)->epoch == 1);
  REQUIRE(bad_samples(c, **first, order) == 0);
}

TEST_CASE("pipeline: read-ahead advice names every delivered sample once, and cannot break the run", "[pipeline][advice]") {
  const auto workers = GENERATE(1, 3);
  const auto resume_at = GENERATE(0, 7);  // batches already taken: a resumed run starts mid-epoch
  CAPTURE(workers, resume_at);
  Config c = small_config();
  c.workers = std::size_t(workers);
  c.epochs = 3;
  const std::size_t n = 100;  // 15 batches an epoch, the last one short
  std::mutex mu;
  std::map<std::uint64_t, int> advised;  // index -> times advised
  std::atomic<int> calls{0};
  const Filler advising(fill_pattern, [&](std::span<const std::uint64_t> indices) {
    ++calls;
    std::lock_guard lk(mu);
    for (const auto i : indices) ++advised[i];
  });
  PipelineState start = initial_state(c, n);
  {
    Pipeline p(c, n, {fill_pattern});
    for (int i = 0; i < resume_at; ++i) REQUIRE(p.next());
    start = p.state();
  }
  std::map<std::uint64_t, int> delivered;
  {
    Pipeline p(c, n, {advising}, start);
    while (auto b = p.next()) {
      REQUIRE(bad_samples(c, **b, p.sampler().epoch_order((*b)->epoch)) == 0);
      for (const auto i : (*b)->indices) ++delivered[i];
    }
  }
  REQUIRE(advised == delivered);  // each batch announced once: by the batch before it, or by itself at a start
  REQUIRE(calls == 3 * 15 - resume_at - 3);  // one per opened batch, except the last of each epoch

  // Advice that throws is ignored: the bytes are the same and nothing stops.
  const Filler throwing(fill_pattern, [](std::span<const std::uint64_t>) { throw std::runtime_error("advice failed"); });
  Pipeline p(c, n, {throwing});
  std::size_t batches = 0;
  while (auto b = p.next()) {
    REQUIRE(bad_samples(c, **b, p.sampler().epoch_order((*b)->epoch)) == 0);
    ++batches;
  }
  REQUIRE(batches == 45);
}

TEST_CASE("pipeline: workers cooperate on one batch's samples", "[pipeline]") {
  // Each worker's first sample of batch 0 waits until all four workers have
  // one: that completes only if four workers fill samples of the same batch at
  // once. With batch 64 a claim takes a run of samples; no worker may take the
  // whole batch.
  const auto batch = GENERATE(8, 64);
  Config c = small_config();
  c.workers = 4;
  c.batch_size = std::size_t(batch);
  c.shuffle = false;
  c.epochs = 1;
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::size_t> arrived;
  std::atomic<bool> timed_out{false};
  Pipeline p(c, 8 * c.batch_size, {[&](Sample& s) {
               fill_pattern(s);
               if (s.index >= c.batch_size) return;
               std::unique_lock lk(mu);
               if (!arrived.insert(s.worker).second) return;
               cv.notify_all();
               if (!cv.wait_for(lk, std::chrono::seconds(20), [&] { return arrived.size() == 4; })) timed_out = true;
             }});
  std::size_t batches = 0;
  while (p.next()) ++batches;
  REQUIRE_FALSE(timed_out);
  REQUIRE(batches == 8);
}

TEST_CASE("pipeline: invalid config names the field", "[pipeline][config]") {
  auto rejects = [](auto mutate, const char* field) {
    Config c = small_config();
    mutate(c);
    try {
      Pipeline p(c, 10, {fill_pattern});
      FAIL("accepted an invalid " << field);
    } catch (const ConfigError& e) {
      REQUIRE(e.field() == field);
      REQUIRE_THAT(e.what(), Catch::Contains(field));
    }
  };
  rejects([](Config& c) { c.batch_size = 0; }, "batch_size");
  rejects([](Config& c) { c.batch_size = std::size_t{1} << 25; }, "batch_size");
  rejects([](Config& c) { c.workers = 0; }, "workers");
  rejects([](Config& c) { c.host_queue_depth = 0; }, "host_queue_depth");
  rejects([](Config& c) { c.device_queue_depth = 0; }, "device_queue_depth");
  rejects([](Config& c) { c.world_size = 0; }, "world_size");
  rejects([](Config& c) { c.rank = 4, c.world_size = 4; }, "rank");
  rejects([](Config& c) { c.wait_yields = 1000001; }, "wait_yields");
  // An unsigned -1 passed validate() and hung next(): the queue's semaphore took it as a negative count.
  rejects([](Config& c) { c.host_queue_depth = SIZE_MAX; }, "host_queue_depth");
  rejects([](Config& c) { c.device_queue_depth = std::size_t{1} << 63; }, "device_queue_depth");
  rejects([](Config& c) { c.host_buffers = SIZE_MAX; }, "host_buffers");
  rejects([](Config& c) { c.device_buffers = std::size_t{1} << 40; }, "device_buffers");
  rejects([](Config& c) { c.world_size = SIZE_MAX; }, "world_size");
  rejects([](Config& c) { c.shard_policy = ShardPolicy(7); }, "shard_policy");
  REQUIRE_THROWS_WITH(Pipeline(small_config(), 10, StageFunctions{}), Catch::Contains("fill"));
}

TEST_CASE("pipeline: a filler exception reaches the consumer with its sample", "[pipeline][error]") {
  const auto workers = GENERATE(1, 4);
  const auto bad = GENERATE(0u, 37u, 99u);
  Config c = small_config();
  c.workers = std::size_t(workers);
  Pipeline p(c, 100, {[bad](Sample& s) {
               fill_pattern(s);
               if (s.index == bad && s.epoch == 1) throw std::runtime_error("cannot read image " + std::to_string(bad));
             }});
  std::size_t batches = 0;
  try {
    while (p.next()) ++batches;
    FAIL("no error surfaced");
  } catch (const PipelineError& e) {
    REQUIRE(e.stage() == "worker");
    REQUIRE(e.epoch() == 1);
    REQUIRE(e.sample() == bad);
    REQUIRE_THAT(e.what(), Catch::Contains("cannot read image " + std::to_string(bad)));
    REQUIRE_THAT(e.what(), Catch::Contains("sample " + std::to_string(bad)));
  }
  REQUIRE(batches <= 2 * p.batches_per_epoch());
  REQUIRE_THROWS_AS(p.next(), PipelineError);   // the error sticks
}

TEST_CASE("pipeline: a failure that comes while the consumer takes a batch is thrown and never ends the stream",
          "[pipeline][error]") {
  // The consumer takes batches as fast as they come while a worker fails, so
  // the failure lands at every point of next() in turn; an endless stream
  // that ends is a failure swallowed.
  Config c = small_config();
  c.batch_size = 1;
  c.epochs = 0;
  c.workers = 2;
  // Under TSan, where the window is widest, a next() that read the error
  // before the stop swallowed about one failure in 400 trials. 1,000 trials
  // take about a second idle (6 s under TSan); on a machine loaded with other
  // work each thread start takes far longer, so the trials also stop at 20 s.
  std::size_t ended = 0, trials = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (; trials < 1000 && std::chrono::steady_clock::now() < give_up; ++trials) {
    std::atomic<int> fills{0};
    Pipeline p(c, 64, {[&fills](Sample& s) {
                 fill_pattern(s);
                 if (fills.fetch_add(1, std::memory_order_relaxed) == 100) throw std::runtime_error("fill 100 failed");
               }});
    try {
      while (p.next()) {
      }
      ++ended;
    } catch (const PipelineError& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("fill 100 failed"));
    }
  }
  INFO(trials << " trials");
  REQUIRE(ended == 0);
}

// A caller's own exception type, thrown in a filler.
struct SensorFault : std::runtime_error {
  int code;
  explicit SensorFault(int c) : std::runtime_error("sensor fault " + std::to_string(c)), code(c) {}
};

TEST_CASE("pipeline: the filler's exception keeps its type, recoverable at the consumer", "[pipeline][error]") {
  Config c = small_config();
  Pipeline p(c, 50, {[](Sample& s) {
               fill_pattern(s);
               if (s.index == 17) throw SensorFault(7);
             }});
  try {
    while (p.next()) {
    }
    FAIL("no error surfaced");
  } catch (const PipelineError& e) {
    REQUIRE(e.sample() == 17);
    REQUIRE(e.cause());
    REQUIRE_THROWS_AS(e.rethrow_cause(), SensorFault);
    try {
      e.rethrow_cause();
    } catch (const SensorFault& f) {
      REQUIRE(f.code == 7);
    }
  }
  try {  // every later call throws the same error, its cause with it
    (void)p.next();
    FAIL("the error did not stick");
  } catch (const PipelineError& e) {
    REQUIRE_THROWS_AS(e.rethrow_cause(), SensorFault);
  }
}

TEST_CASE("pipeline: skipped samples are listed and the rest stay dense and exact", "[pipeline][skip]") {
  const auto workers = GENERATE(1, 3, 8);
  const auto shuffle = GENERATE(false, true);
  Config c = small_config();
  c.workers = std::size_t(workers);
  c.shuffle = shuffle;
  c.epochs = 3;
  const std::size_t n = 50;
  // Index 7..13 (a whole batch when unshuffled), 20 and 49 (the last, short batch) fail in every epoch,
  // 30 only in epoch 1.
  auto skipped_here = [](std::uint64_t epoch, std::uint64_t index) {
    return (index >= 7 && index <= 13) || index == 20 || index == 49 || (index == 30 && epoch == 1);
  };
  Pipeline p(c, n, {[&](Sample& s) {
               if (skipped_here(s.epoch, s.index)) return s.skip("bad sample " + std::to_string(s.index));
               fill_pattern(s);
             }});
  std::map<std::uint64_t, std::set<std::uint64_t>> delivered, skipped;
  std::vector<std::byte> want(c.sample_bytes);
  std::size_t bad = 0;
  while (auto b = p.next()) {
    const Batch& batch = **b;
    REQUIRE(batch.size() + batch.skipped.size() == p.sampler().batch_length(batch.index));
    for (std::size_t j = 0; j < batch.size(); ++j) {
      expected_bytes(c.seed, batch.epoch, batch.indices[j], want);
      const auto got = batch.sample(j);
      bad += !std::equal(got.begin(), got.end(), want.begin()) || batch.labels[j] != std::int64_t(batch.indices[j] * 3);
      REQUIRE(delivered[batch.epoch].insert(batch.indices[j]).second);
    }
    for (const auto& k : batch.skipped) {
      REQUIRE(k.epoch == batch.epoch);
      REQUIRE(k.reason == "bad sample " + std::to_string(k.index));
      REQUIRE(skipped[batch.epoch].insert(k.index).second);
    }
  }
  REQUIRE(bad == 0);
  for (std::uint64_t e = 0; e < 3; ++e) {
    REQUIRE(delivered[e].size() + skipped[e].size() == n);
    for (std::uint64_t i = 0; i < n; ++i) REQUIRE(skipped[e].count(i) == (skipped_here(e, i) ? 1u : 0u));
  }
  // Each distinct skip once, with its count and epochs: bounded by the
  // dataset, not by the epochs run.
  const auto all = p.skipped();
  std::set<std::uint64_t> distinct;
  std::uint64_t times = 0;
  for (const auto& k : all) {
    REQUIRE(distinct.insert(k.index).second);
    REQUIRE(k.times == std::uint64_t(skipped_here(0, k.index)) + skipped_here(1, k.index) + skipped_here(2, k.index));
    REQUIRE(k.epoch <= k.last_epoch);
    times += k.times;
  }
  REQUIRE(times == skipped[0].size() + skipped[1].size() + skipped[2].size());
  REQUIRE(p.stats().samples_skipped == times);
  REQUIRE(p.stats().samples + times == 3 * n);
}

TEST_CASE("pipeline: non-standard exceptions and transfer failures surface too", "[pipeline][error]") {
  Config c = small_config();
  {
    Pipeline p(c, 50, {[](Sample& s) {
                 if (s.index == 3) throw 42;
               }});
    REQUIRE_THROWS_WITH([&] { while (p.next()) {} }(), Catch::Contains("unknown exception"));
  }
  {
    StageFunctions st{fill_pattern};
    st.transfer = [](Batch& b) {
      if (b.index == 2) throw std::runtime_error("link down");
    };
    Pipeline p(c, 50, st);
    try {
      while (p.next()) {
      }
      FAIL("no error surfaced");
    } catch (const PipelineError& e) {
      REQUIRE(e.stage() == "transfer");
      REQUIRE_THAT(e.what(), Catch::Contains("link down"));
      REQUIRE_THAT(e.what(), Catch::Contains("batch 2"));
    }
  }
}

namespace {

// What a two-phase transfer (StageFunctions::finish) was asked to do, in the
// delivery thread's order: each step is (start or finish, batch sequence).
struct PhaseLog {
  enum Phase { start, finish };
  std::mutex mu;
  std::vector<std::pair<Phase, std::uint64_t>> steps;
  std::set<const std::byte*> in_transfer;  // buffers started and not finished
  std::size_t recycled_in_transfer = 0;    // buffers that went back to the pool so
  void add(Phase phase, const Batch& b) {
    std::lock_guard lk(mu);
    steps.emplace_back(phase, b.sequence);
    if (phase == start) {
      in_transfer.insert(b.data);
    } else {
      in_transfer.erase(b.data);
    }
  }
  // An allocator whose recycle counts the buffers that return while their transfer is under way.
  Allocator watching_allocator() {
    Allocator a = Allocator::host();
    a.recycle = [this](std::byte* data, std::size_t) {
      std::lock_guard lk(mu);
      recycled_in_transfer += in_transfer.count(data);
    };
    return a;
  }
  // "s0 s1 f0 s2 f1 ...": the steps, for a failure's message.
  std::string trace() {
    std::lock_guard lk(mu);
    std::string out;
    for (auto [phase, seq] : steps) out += (phase == start ? " s" : " f") + std::to_string(seq);
    return out;
  }
  // Requires each started batch finished exactly once, after its start and in
  // start order, with at most one batch started and not finished at any time.
  // Returns how many finishes came after the next batch's start (the overlap).
  std::size_t check_and_count_overlaps() {
    std::lock_guard lk(mu);
    std::vector<std::uint64_t> started;
    std::size_t finished = 0, overlaps = 0;
    for (auto [phase, seq] : steps) {
      if (phase == start) {
        started.push_back(seq);
        REQUIRE(started.size() - finished <= 2);  // the one in flight and this one
      } else {
        REQUIRE(finished < started.size());
        REQUIRE(started[finished] == seq);
        if (started.size() - finished == 2) ++overlaps;
        ++finished;
      }
    }
    REQUIRE(finished == started.size());
    REQUIRE(recycled_in_transfer == 0);
    return overlaps;
  }
};

}  // namespace

TEST_CASE("pipeline: a two-phase transfer overlaps batch N's start with N-1's finish, and delivers exactly once",
          "[pipeline][transfer]") {
  for (std::size_t workers : {1, 3}) {
    for (std::size_t depth : {1, 2}) {
      for (bool would_wait : {false, true}) {
        DYNAMIC_SECTION("workers " << workers << " depth " << depth << " transfer_would_wait " << would_wait) {
          auto task = std::async(std::launch::async, [&] {
            Config c = small_config();
            c.workers = workers;
            c.host_queue_depth = depth;
            c.device_queue_depth = depth;
            PhaseLog log;
            StageFunctions st{fill_pattern};
            st.allocator = log.watching_allocator();
            st.transfer = [&](Batch& b) { log.add(PhaseLog::start, b); };
            // A slow finish (a DMA): the workers have the next batch ready by the time it is asked for.
            st.finish = [&](Batch& b) {
              std::this_thread::sleep_for(std::chrono::milliseconds(2));
              log.add(PhaseLog::finish, b);
            };
            st.transfer_would_wait = [&] { return would_wait; };
            const std::size_t n = 100;  // 15 batches an epoch, the last short
            Pipeline p(c, n, st);
            std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
            std::uint64_t expect_sequence = 0;
            while (auto b = p.next()) {
              REQUIRE((*b)->sequence == expect_sequence++);  // published in order
              REQUIRE(bad_samples(c, **b, p.sampler().epoch_order((*b)->epoch)) == 0);
              for (auto i : (*b)->indices) ++seen[{(*b)->epoch, i}];
            }
            REQUIRE(seen.size() == 2 * n);
            for (auto& [key, count] : seen) REQUIRE(count == 1);
            const std::size_t overlaps = log.check_and_count_overlaps();
            INFO("steps:" << log.trace());
            if (would_wait) {
              REQUIRE(overlaps == 0);  // N-1 was finished before N started, every time
            } else if (depth >= 2) {
              // Of 29 finishes, all but those that found no batch ready. (With depth 1 the
              // next batch is a worker's wake-up away, which a loaded machine may exceed.)
              REQUIRE(overlaps >= 10);
            }
          });
          REQUIRE(task.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
          task.get();
        }
      }
    }
  }
}

TEST_CASE("pipeline: a two-phase transfer finishes its batch in flight when stopped or failing", "[pipeline][transfer]") {
  SECTION("stopped mid-run") {
    Config c = small_config();
    c.epochs = 0;  // endless
    PhaseLog log;
    StageFunctions st{fill_pattern};
    st.allocator = log.watching_allocator();
    st.transfer = [&](Batch& b) { log.add(PhaseLog::start, b); };
    st.finish = [&](Batch& b) { log.add(PhaseLog::finish, b); };
    {
      Pipeline p(c, 40, st);
      for (int k = 0; k < 5; ++k) REQUIRE(p.next());
    }  // destroyed while the delivery thread runs ahead
    (void)log.check_and_count_overlaps();  // every start has its finish
  }
  SECTION("a finish that throws fails the pipeline, and the next started batch is still finished") {
    Config c = small_config();
    PhaseLog log;
    StageFunctions st{fill_pattern};
    st.allocator = log.watching_allocator();
    st.transfer = [&](Batch& b) { log.add(PhaseLog::start, b); };
    st.finish = [&](Batch& b) {
      log.add(PhaseLog::finish, b);
      if (b.sequence == 3) throw std::runtime_error("copy failed on the device");
    };
    {
      Pipeline p(c, 100, st);
      try {
        while (p.next()) {
        }
        FAIL("no error surfaced");
      } catch (const PipelineError& e) {
        REQUIRE(e.stage() == "transfer");
        REQUIRE_THAT(e.what(), Catch::Contains("batch 3: copy failed on the device"));
      }
    }
    (void)log.check_and_count_overlaps();
  }
}


namespace {

// Records what a pipeline's observer is told: every (epoch, sample) filled,
// and per worker the entries not yet exited, so that nesting can be checked.
struct FillLog final : Observer {
  std::mutex mu;
  std::map<std::pair<std::uint64_t, std::uint64_t>, int> filled;  // exits by (epoch, sample)
  std::map<std::size_t, int> open;                                // entries without exit, by worker
  int bad_nesting = 0;
  void on_entry(const WorkItem& w) noexcept override {
    std::lock_guard lk(mu);
    if (w.what != Work::fill || open[w.worker]++ != 0) ++bad_nesting;
  }
  void on_exit(const WorkItem& w) noexcept override {
    std::lock_guard lk(mu);
    if (w.what != Work::fill || --open[w.worker] != 0) ++bad_nesting;
    ++filled[{w.epoch, w.index}];
  }
};

}  // namespace

TEST_CASE("pipeline: the observer sees each sample's fill once, entry and exit on its worker, also when it throws",
          "[pipeline][observer]") {
  const auto workers = GENERATE(1, 3);
  Config c = small_config();
  c.workers = std::size_t(workers);
  auto log = std::make_shared<FillLog>();
  StageFunctions stages{fill_pattern};
  stages.observer = log;
  {
    Pipeline p(c, 30, std::move(stages));
    while (p.next()) {
    }
  }
  CHECK(log->bad_nesting == 0);
  REQUIRE(log->filled.size() == 60);  // 2 epochs of 30
  for (const auto& [key, n] : log->filled) CHECK(n == 1);

  auto failing = std::make_shared<FillLog>();
  StageFunctions throws{[](Sample& s) {
    if (s.index == 4) throw std::runtime_error("bad sample");
    fill_pattern(s);
  }};
  throws.observer = failing;
  Pipeline p(c, 30, std::move(throws));
  REQUIRE_THROWS_AS([&] { while (p.next()) {} }(), PipelineError);
  p.stop();
  CHECK(failing->bad_nesting == 0);
  for (const auto& [worker, open] : failing->open) CHECK(open == 0);  // the throwing fill was exited too
  CHECK(failing->filled.count({0, 4}) == 1);
}
