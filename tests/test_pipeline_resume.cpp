// The core pipeline's resume, epoch, stop and buffer-pool behaviour. Part of test_pipeline.

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

