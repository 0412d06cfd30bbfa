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

using namespace conveyor;
using conveyor::test::eventually;
using conveyor::test::expected_bytes;
using conveyor::test::fill_pattern;

namespace {

Config small_config() {
  Config c;
  c.batch_size = 7;
  c.sample_bytes = 24;
  c.workers = 3;
  c.seed = 3;
  c.epochs = 2;
  return c;
}

// Checks every sample of a batch against the reference bytes, indices and labels.
// Returns the number of mismatching samples (0 when the batch is right).
std::size_t bad_samples(const Config& c, const Batch& b, const std::vector<std::uint64_t>& order) {
  std::size_t bad = 0;
  std::vector<std::byte> want(c.sample_bytes);
  for (std::size_t j = 0; j < b.size(); ++j) {
    expected_bytes(c.seed, b.epoch, b.indices[j], want);
    const auto got = b.sample(j);
    bad += !std::equal(got.begin(), got.end(), want.begin()) || b.indices[j] != order[b.index * c.batch_size + j] ||
           b.labels[j] != std::int64_t(b.indices[j] * 3);
  }
  return bad;
}

// The consumer holds a batch and takes no more. Once the device queue is full
// and the pool has no free buffer, both stay so, and every thread ends up
// blocked: the delivery thread pushing into the device queue, the workers
// pushing into the host queue or waiting for a buffer. (Whether the host queue
// fills too depends on how many batches the delivery thread holds back to
// restore order.) Counts come from the snapshot's push and pop totals.
bool consumer_away_filled_everything(const PipelineStats& s) {
  const auto items = [](const NamedQueueStats& q) { return q.stats.pushes - q.stats.pops; };
  return items(s.queues[1]) == s.queues[1].stats.capacity && items(s.queues[2]) == 0;
}

double seconds_to_stop(Pipeline& p) {
  const auto t0 = std::chrono::steady_clock::now();
  p.stop();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Digests of every batch of the run, by (epoch, batch index).
std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> run_digests(const Config& c, std::size_t n) {
  Pipeline p(c, n, {fill_pattern});
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> out;
  while (auto b = p.next()) out[{(*b)->epoch, (*b)->index}] = batch_digest(**b);
  return out;
}

}  // namespace

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

TEST_CASE("pipeline: resume delivers exactly the batches after k, bit-identical", "[pipeline][resume]") {
  Config c = small_config();
  c.epochs = 3;
  c.workers = 3;
  const std::size_t n = 100;  // 15 batches an epoch, the last one short
  std::vector<std::uint64_t> reference;
  {
    Pipeline p(c, n, {fill_pattern});
    while (auto b = p.next()) reference.push_back(batch_digest(**b));
  }
  REQUIRE(reference.size() == 45);
  const auto k = GENERATE(0, 1, 7, 14, 15, 16, 30, 44, 45);
  CAPTURE(k);
  std::string saved;
  {
    Pipeline p(c, n, {fill_pattern});
    for (int i = 0; i < k; ++i) {
      auto b = p.next();
      REQUIRE(b);
      REQUIRE(batch_digest(**b) == reference[std::size_t(i)]);
    }
    saved = p.state().serialize();
  }  // destroyed mid-run, with workers prefetching
  Pipeline resumed(c, n, {fill_pattern}, PipelineState::parse(saved));
  std::vector<std::uint64_t> rest;
  while (auto b = resumed.next()) rest.push_back(batch_digest(**b));
  REQUIRE(rest == std::vector<std::uint64_t>(reference.begin() + k, reference.end()));
}

TEST_CASE("pipeline: unordered resume delivers the rest of the epoch", "[pipeline][resume]") {
  Config c = small_config();
  c.ordered = false;
  c.workers = 4;
  const auto reference = run_digests(c, 100);
  PipelineState s;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> got;
  {
    Pipeline p(c, 100, {fill_pattern});
    for (int i = 0; i < 20; ++i) {
      auto b = p.next();
      REQUIRE(got.emplace(std::pair{(*b)->epoch, (*b)->index}, batch_digest(**b)).second);
    }
    s = p.state();
  }
  Pipeline resumed(c, 100, {fill_pattern}, s);
  while (auto b = resumed.next()) REQUIRE(got.emplace(std::pair{(*b)->epoch, (*b)->index}, batch_digest(**b)).second);
  REQUIRE(got == reference);
}

TEST_CASE("pipeline: a state from other settings is refused", "[pipeline][resume]") {
  Config c = small_config();
  PipelineState s;
  {
    Pipeline p(c, 100, {fill_pattern});
    (void)p.next();
    s = p.state();
  }
  c.seed = 4;
  // Only the fields that differ are named, each with both values.
  REQUIRE_THROWS_WITH(Pipeline(c, 100, {fill_pattern}, s),
                      Catch::Equals("resume: state was taken with other settings: seed=3 there, 4 here"));
  c.seed = 3;
  c.batch_size = 9;
  REQUIRE_THROWS_WITH(Pipeline(c, 101, {fill_pattern}, s),
                      Catch::Equals("resume: state was taken with other settings: dataset_size=100 there, 101 here, "
                                    "batch_size=7 there, 9 here"));
  c.batch_size = 7;
  s.delivered = {99};
  REQUIRE_THROWS_WITH(Pipeline(c, 100, {fill_pattern}, s), Catch::Contains("delivered"));
  // An epoch near 2^64 (a corrupt checkpoint) once crashed a worker: ~0 is the
  // order cache's "none yet" marker.
  s.delivered.clear();
  s.epoch = ~std::uint64_t{0};
  REQUIRE_THROWS_WITH(Pipeline(c, 100, {fill_pattern}, s), Catch::Contains("epoch 18446744073709551615 is out of range"));
  c.epochs = 0;  // no end: the largest epoch and the next are produced
  s = initial_state(c, 100);
  s.epoch = kMaxEpoch;
  Pipeline p(c, 100, {fill_pattern}, s);
  const auto b = p.next();
  REQUIRE(b);
  REQUIRE((*b)->epoch == kMaxEpoch);
}

TEST_CASE("pipeline: epoch() must name the consumer's epoch", "[pipeline]") {
  Config c = small_config();
  Pipeline p(c, 20, {fill_pattern});
  REQUIRE_THROWS_AS(p.epoch(1), std::logic_error);
  std::size_t n = 0;
  for (auto& b : p.epoch(0)) n += b->size();
  REQUIRE(n == 20);
  REQUIRE(p.state().epoch == 1);
  for (auto& b : p.epoch(1)) n += b->size();
  REQUIRE(n == 40);
  REQUIRE(p.epoch(2).size() == 0);  // past the configured epochs
}

TEST_CASE("pipeline: initial_state at epoch e resumes there", "[pipeline][resume]") {
  Config c = small_config();
  c.epochs = 3;
  const auto reference = run_digests(c, 50);  // (epoch, index) -> digest
  PipelineState s = initial_state(c, 50);
  REQUIRE(s == Pipeline(c, 50, {fill_pattern}).state());
  s.epoch = 2;
  Pipeline p(c, 50, {fill_pattern}, s);
  std::size_t n = 0;
  while (auto b = p.next()) {
    REQUIRE((*b)->epoch == 2);
    REQUIRE(batch_digest(**b) == reference.at({2, (*b)->index}));
    ++n;
  }
  REQUIRE(n == p.batches_per_epoch());
}

TEST_CASE("pipeline: a state with its epoch wholly delivered resumes at the next epoch's start", "[pipeline][resume]") {
  // state() never shows such a state (it moves on to the next epoch), but a
  // hand-made or foreign one may: its epoch() range must be the whole next
  // epoch, not that epoch's first batch alone.
  Config c = small_config();
  c.epochs = 3;
  const auto reference = run_digests(c, 50);
  PipelineState s = initial_state(c, 50);
  Pipeline probe(c, 50, {fill_pattern});
  s.epoch = 0;
  for (std::uint64_t b = 0; b < probe.batches_per_epoch(); ++b) s.delivered.push_back(b);
  Pipeline p(c, 50, {fill_pattern}, s);
  REQUIRE(p.state().epoch == 1);
  REQUIRE(p.state().delivered.empty());
  std::size_t n = 0;
  for (auto& b : p.epoch(1)) {
    REQUIRE(b->epoch == 1);
    REQUIRE(b->index == n);
    REQUIRE(batch_digest(*b) == reference.at({1, b->index}));
    ++n;
  }
  REQUIRE(n == p.batches_per_epoch());
  // At the last epoch a state may hold, the next is out of range: refused, as
  // state() of such a pipeline would be on its way back.
  s.epoch = kMaxEpoch;
  REQUIRE_THROWS_WITH(Pipeline(c, 50, {fill_pattern}, s), Catch::Contains("is out of range"));
}

TEST_CASE("pipeline: wait_ready times out while workers are held, then says ready", "[pipeline][stop]") {
  Config c = small_config();
  c.epochs = 1;
  std::atomic<bool> go{false};
  Pipeline p(c, 20, {[&](Sample& s) {
               while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
               fill_pattern(s);
             }});
  REQUIRE_FALSE(p.wait_ready(std::chrono::milliseconds(20)));  // nothing filled yet
  const auto consumer = p.stats().stages.back();
  REQUIRE(consumer.name == "consumer");
  REQUIRE(consumer.starved_s >= 0.015);  // waiting in wait_ready is starving, not busy
  REQUIRE(consumer.busy_s < 0.015);
  go = true;
  REQUIRE(eventually([&] { return p.wait_ready(std::chrono::milliseconds(10)); }));
  std::size_t batches = 0;
  for (;;) {
    REQUIRE(p.wait_ready(std::chrono::seconds(60)));  // true for a batch and for the end alike
    if (!p.next()) break;
    ++batches;
  }
  REQUIRE(batches == p.batches_per_epoch());
  Pipeline stopped(c, 20, {[](Sample& s) {  // a stalled read: returns only when stopping
                     while (!s.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                   }});
  stopped.stop();
  REQUIRE(stopped.wait_ready(std::chrono::seconds(60)));  // a stopped pipeline is "ready": next() ends at once
  REQUIRE_FALSE(stopped.next());
}

TEST_CASE("pipeline: stop returns promptly with threads blocked on full or empty queues", "[pipeline][stop]") {
  Config c = small_config();
  c.epochs = 0;  // endless: nothing ends on its own
  c.workers = 4;
  SECTION("the consumer stays away: every queue fills and every thread blocks") {
    // The consumer holds one batch and takes no more: the device queue fills,
    // the delivery thread blocks pushing into it, and the workers block pushing
    // into the host queue or waiting for a buffer.
    Pipeline p(c, 1000, {fill_pattern});
    auto held = p.next();
    REQUIRE(held);
    REQUIRE(eventually([&] { return consumer_away_filled_everything(p.stats()); }));
    REQUIRE(seconds_to_stop(p) < 0.5);
    REQUIRE_FALSE(p.next());        // stopped: the stream ends
    REQUIRE((*held)->size() == 7);  // the held batch outlives the stop
  }
  SECTION("the workers are stuck in the filler: the delivery thread waits on an empty queue") {
    // A filler that waits until the pipeline stops, as a stalled read does:
    // nothing reaches the host queue, so the delivery thread is starved.
    std::atomic<std::size_t> inside{0};
    Pipeline p(c, 1000, {[&](Sample& s) {
                 ++inside;
                 while (!s.stop_requested()) std::this_thread::yield();
               }});
    REQUIRE(eventually([&] { return inside.load() == c.workers; }));
    REQUIRE(eventually([&] { return p.stats().stages[1].starved_s > 0; }));  // the wait under way shows
    REQUIRE(seconds_to_stop(p) < 0.5);
    REQUIRE_FALSE(p.next());
  }
}

TEST_CASE("pipeline: buffers are allocated once, bounded, and all freed", "[pipeline][buffers]") {
  std::atomic<int> allocs{0}, frees{0};
  Allocator counting{"counting",
                     [&](std::size_t bytes) {
                       ++allocs;
                       return Allocator::host().allocate(bytes);
                     },
                     [&](void* ptr, std::size_t bytes) {
                       ++frees;
                       Allocator::host().deallocate(ptr, bytes);
                     }};
  Config c = small_config();
  c.host_buffers = 4;
  c.epochs = 5;
  std::optional<BatchHandle> kept;
  {
    Pipeline p(c, 300, {fill_pattern, {}, counting});
    REQUIRE(allocs == 4);
    std::set<const std::byte*> buffers;
    while (auto b = p.next()) {
      buffers.insert((*b)->data);
      kept = std::move(b);  // a handle may outlive the pipeline
    }
    REQUIRE(buffers.size() <= 4);
    REQUIRE(allocs == 4);
  }
  REQUIRE((*kept)->size() > 0);  // still readable after the pipeline is gone
  REQUIRE(frees == 0);
  kept.reset();
  REQUIRE(frees == 4);
}

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
  // At most the whole interval: stats() reads the counters, then its clock
  // (1e-9 is the rounding of the sums; when the clock came first, a wait that
  // ended in between was counted past it, 1.2e-6 over under TSan once).
  REQUIRE(d.stages[0].blocked_fraction() <= 1.0 + 1e-9);
  REQUIRE(d.stages[1].blocked_fraction() <= 1.0 + 1e-9);
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
  std::size_t snapshots = 0, items_back = 0, over_time = 0;
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
  std::size_t batches = 0;
  while (auto b = p.next()) {
    if (++batches % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // the consumer's step
  }
  done = true;
  watcher.join();
  INFO(first_fault);
  INFO(snapshots << " snapshots");
  REQUIRE(batches == 40 * ((100 + 6) / 7));
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
  // A 2 ms step per batch: with every batch made during the sleep, a consumer
  // that only counted would live a few microseconds, in which the bookkeeping
  // between its steps is no small share (under TSan, 11% of it once).
  while (auto b = p.next()) {
    ++batches;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
  std::size_t live = 0, polls = 0;
  Allocator a = Allocator::host();
  const auto plain_allocate = a.allocate;
  const auto plain_deallocate = a.deallocate;
  a.allocate = [&, plain_allocate](std::size_t bytes) {
    ++live;
    return plain_allocate(bytes);
  };
  a.deallocate = [&, plain_deallocate](void* p, std::size_t bytes) {
    --live;
    plain_deallocate(p, bytes);
  };
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
