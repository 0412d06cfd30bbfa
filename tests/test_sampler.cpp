#include <algorithm>
#include <numeric>
#include <set>

#include "catch_compat.h"

#include "pipeline/pipeline.h"
#include "pipeline/rng.h"
#include "pipeline/sampler.h"

using namespace conveyor;

TEST_CASE("rng: a stream depends on (seed, epoch, index) alone", "[rng]") {
  Rng a(7, 1, 42), b(7, 1, 42);
  for (int i = 0; i < 100; ++i) REQUIRE(a.next_u64() == b.next_u64());
  // Each key element changes the stream.
  const std::uint64_t base = Rng(7, 1, 42).next_u64();
  REQUIRE(Rng(8, 1, 42).next_u64() != base);
  REQUIRE(Rng(7, 2, 42).next_u64() != base);
  REQUIRE(Rng(7, 1, 43).next_u64() != base);
  // Swapping epoch and index gives another stream.
  REQUIRE(Rng(7, 42, 1).next_u64() != base);
}

TEST_CASE("rng: below() and uniform() stay in range and cover it", "[rng]") {
  Rng r(1, 2, 3);
  std::vector<int> hits(10);
  for (int i = 0; i < 10000; ++i) {
    const auto v = r.below(10);
    REQUIRE(v < 10);
    hits[v]++;
    const double u = r.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
  for (int h : hits) REQUIRE(h > 800);  // ~1000 each
  REQUIRE(r.below(1) == 0);
}

TEST_CASE("sampler: each epoch is a permutation fixed by (seed, epoch)", "[sampler]") {
  SamplerOptions o;
  o.dataset_size = 1000;
  o.batch_size = 10;
  o.seed = 5;
  Sampler s(o);
  const auto e0 = s.epoch_order(0), e1 = s.epoch_order(1);
  REQUIRE(e0 == Sampler(o).epoch_order(0));
  REQUIRE(e0 != e1);
  for (const auto& e : {e0, e1}) {
    auto sorted = e;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(1000);
    std::iota(all.begin(), all.end(), 0);
    REQUIRE(sorted == all);
  }
  o.seed = 6;
  REQUIRE(Sampler(o).epoch_order(0) != e0);
  o.shuffle = false;
  const auto ident = Sampler(o).epoch_order(3);
  for (std::size_t i = 0; i < ident.size(); ++i) REQUIRE(ident[i] == i);
}

TEST_CASE("sampler: batches and drop_last", "[sampler]") {
  SamplerOptions o;
  o.batch_size = 7;
  o.dataset_size = 100;
  Sampler keep(o);
  REQUIRE(keep.batches_per_epoch() == 15);
  REQUIRE(keep.batch_length(13) == 7);
  REQUIRE(keep.batch_length(14) == 2);
  REQUIRE(keep.samples_per_epoch() == 100);
  o.drop_last = true;
  Sampler drop(o);
  REQUIRE(drop.batches_per_epoch() == 14);
  REQUIRE(drop.samples_per_epoch() == 98);
  o.dataset_size = 0;
  REQUIRE(Sampler(o).batches_per_epoch() == 0);
  o.dataset_size = 6;  // smaller than one batch
  REQUIRE(Sampler(o).batches_per_epoch() == 0);
  o.drop_last = false;
  REQUIRE(Sampler(o).batches_per_epoch() == 1);
}

TEST_CASE("sampler: shards are disjoint, cover the dataset and have equal batch counts", "[sampler][shard]") {
  const auto n = GENERATE(0, 1, 5, 16, 97, 100);
  const auto world = GENERATE(1, 2, 3, 4, 8);
  const auto policy = GENERATE(ShardPolicy::pad, ShardPolicy::drop);
  const auto drop_last = GENERATE(false, true);
  SamplerOptions o;
  o.dataset_size = std::size_t(n);
  o.batch_size = 4;
  o.seed = 11;
  o.world_size = std::size_t(world);
  o.shard_policy = policy;
  o.drop_last = drop_last;
  std::multiset<std::uint64_t> all;
  std::size_t batches = 0, shard = 0;
  for (int r = 0; r < world; ++r) {
    o.rank = std::size_t(r);
    Sampler s(o);
    if (r == 0) batches = s.batches_per_epoch(), shard = s.shard_size();
    REQUIRE(s.batches_per_epoch() == batches);
    REQUIRE(s.shard_size() == shard);
    for (auto i : s.epoch_order(2)) {
      REQUIRE(i < std::uint64_t(n));
      all.insert(i);
    }
  }
  const std::set<std::uint64_t> distinct(all.begin(), all.end());
  if (policy == ShardPolicy::pad) {
    REQUIRE(shard == (std::size_t(n) + world - 1) / world);
    REQUIRE(distinct.size() == std::size_t(n));                         // union = dataset
    REQUIRE(all.size() - distinct.size() == shard * world - std::size_t(n));  // only padding repeats
  } else {
    REQUIRE(shard == std::size_t(n) / world);
    REQUIRE(all.size() == distinct.size());  // pairwise disjoint
    REQUIRE(distinct.size() == shard * world);
  }
}

TEST_CASE("sampler: invalid options are rejected", "[sampler]") {
  SamplerOptions o;
  o.batch_size = 0;
  REQUIRE_THROWS_AS(Sampler(o), std::invalid_argument);
  o.batch_size = 1;
  o.world_size = 2;
  o.rank = 2;
  REQUIRE_THROWS_WITH(Sampler(o), Catch::Contains("rank 2"));
}

TEST_CASE("plan: positions map to epochs and batches, resuming mid-epoch", "[plan]") {
  Plan fresh(4, 0, {0, 1, 2, 3}, 3);
  REQUIRE(fresh.total() == 12);
  REQUIRE(fresh.at(5).epoch == 1);
  REQUIRE(fresh.at(5).batch == 1);
  REQUIRE(fresh.epoch_end(5) == 8);
  Plan resumed(4, 1, {1, 3}, 3);  // epoch 1 with batches 0 and 2 already consumed
  REQUIRE(resumed.total() == 6);
  REQUIRE(resumed.at(0).batch == 1);
  REQUIRE(resumed.at(1).batch == 3);
  REQUIRE(resumed.at(2).epoch == 2);
  REQUIRE(resumed.at(2).batch == 0);
  REQUIRE(resumed.epoch_end(0) == 2);
  REQUIRE(resumed.epoch_end(2) == 6);
  REQUIRE(Plan(0, 0, {}, Plan::kUnbounded).total() == 0);
  REQUIRE(Plan(4, 3, {0, 1, 2, 3}, 3).total() == 0);
  REQUIRE(Plan(4, 0, {0, 1, 2, 3}, Plan::kUnbounded).total() == Plan::kUnbounded);
}

TEST_CASE("state: serialize and parse round-trip, and bad text names the field", "[state]") {
  PipelineState s;
  s.epoch = 3;
  s.delivered = {0, 1, 2, 5, 7, 8};
  s.seed = 99;
  s.dataset_size = 1000;
  s.batch_size = 64;
  s.drop_last = true;
  s.rank = 1;
  s.world_size = 4;
  s.shard_policy = ShardPolicy::drop;
  const std::string text = s.serialize();
  REQUIRE_THAT(text, Catch::Contains("delivered=0-2,5,7-8"));
  REQUIRE(PipelineState::parse(text) == s);
  s.delivered.clear();
  REQUIRE(PipelineState::parse(s.serialize()) == s);
  REQUIRE_THROWS_WITH(PipelineState::parse("hello"), Catch::Contains("conveyor-state"));
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=x"), Catch::Contains("'epoch'"));
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=1"), Catch::Contains("'delivered' is missing"));
  std::string extra = s.serialize() + " bogus=1";
  REQUIRE_THROWS_WITH(PipelineState::parse(extra), Catch::Contains("'bogus'"));
}

TEST_CASE("state: an edited line is refused, not replayed or allocated", "[state]") {
  // 10 batches of 7 in an epoch of 64 samples
  const std::string tail = " seed=1 dataset_size=64 batch_size=7 shuffle=1 drop_last=0 rank=0 world_size=1 shard_policy=pad";
  REQUIRE(PipelineState::parse("conveyor-state 1 epoch=0 delivered=0-9" + tail).delivered.size() == 10);
  // A cut line: "delivered=" read as none delivered replayed the epoch's batches.
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=0 delivered=" + tail),
                      Catch::Contains("'delivered' is empty"));
  // 2^32 + 1 batch indices (32 GiB) from a 10-batch epoch: refused before allocating.
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=0 delivered=0-4294967296" + tail),
                      Catch::Contains("names batch 4294967296, past the 10"));
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=0 delivered=10" + tail),
                      Catch::Contains("names batch 10, past the 10"));
  // The last of two values won.
  REQUIRE_THROWS_WITH(PipelineState::parse("conveyor-state 1 epoch=0 delivered=- seed=2" + tail),
                      Catch::Contains("'seed' appears twice"));
}

TEST_CASE("sampler: shard and batch counts do not wrap near SIZE_MAX", "[sampler]") {
  // (n + w - 1) / w wrapped to 0: epochs of no batches, without a word.
  SamplerOptions o;
  o.dataset_size = SIZE_MAX;
  o.world_size = 2;
  o.batch_size = 1;
  const Sampler pad(o);
  CHECK(pad.shard_size() == SIZE_MAX / 2 + 1);
  CHECK(pad.batches_per_epoch() == SIZE_MAX / 2 + 1);
  o.dataset_size = 10;
  o.world_size = SIZE_MAX;
  const Sampler wide(o);
  CHECK(wide.shard_size() == 1);
  o.dataset_size = SIZE_MAX;
  o.world_size = 1;
  o.batch_size = 64;
  CHECK(Sampler(o).batches_per_epoch() == SIZE_MAX / 64 + 1);
}

TEST_CASE("sampler: the order drawn in place equals DistributedSampler's, fewer samples than ranks included", "[sampler]") {
  for (std::size_t n : {0, 1, 3, 10, 17}) {
    for (std::size_t w : {1, 2, 4, 7}) {
      for (ShardPolicy policy : {ShardPolicy::pad, ShardPolicy::drop}) {
        for (std::size_t r = 0; r < w; ++r) {
          const SamplerOptions o{{4, 9, true, false, r, w, policy}, n};
          const Sampler whole({{4, 9, true, false, 0, 1, policy}, n});
          const std::vector<std::uint64_t> order = whole.epoch_order(2);  // the full permutation
          const Sampler s(o);
          std::vector<std::uint64_t> want;
          for (std::size_t k = 0; k < s.shard_size(); ++k) want.push_back(order[(r + k * w) % n]);
          std::vector<std::uint64_t> reused(100, 5);  // memory of an earlier epoch, reused
          s.epoch_order(2, reused);
          INFO("n " << n << " w " << w << " r " << r);
          CHECK(reused == want);
          CHECK(s.epoch_order(2) == want);
        }
      }
    }
  }
}
