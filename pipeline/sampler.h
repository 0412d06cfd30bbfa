// Sampler: which dataset indices each batch of each epoch holds, for one rank.
//
// An epoch's order is a permutation derived from (seed, epoch) alone (or the
// identity when shuffle is off). Sharding follows PyTorch's DistributedSampler:
// the permuted list is padded (by repeating its head) or truncated to a multiple
// of world_size, and rank r takes elements r, r + W, r + 2W, ... So every rank has
// the same number of samples and batches, ranks are pairwise disjoint (except for
// the padding repeats), and their union is the dataset. The rank's samples are
// then cut into batches of batch_size; drop_last drops a short final batch.
//
// Thread safety: immutable after construction; every method is const and
// thread-safe. Cost: epoch_order() is O(dataset size); the rest are O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipeline/sample_order.h"

namespace conveyor {

// ceil(a / b) for b > 0, without the a + b - 1 that wraps near the type's
// maximum (an epoch of 0 batches). Throws nothing.
constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

// The sampler's settings: the order's (pipeline/sample_order.h) and the dataset's size.
struct SamplerOptions : SampleOrder {
  std::size_t dataset_size = 0;
};

class Sampler {
 public:
  // Throws std::invalid_argument for batch_size 0, world_size 0 or rank >= world_size.
  explicit Sampler(const SamplerOptions& options);

  const SamplerOptions& options() const { return o_; }

  // Samples this rank sees per epoch (before batching).
  std::size_t shard_size() const { return shard_size_; }
  // Batches per epoch, after drop_last.
  std::size_t batches_per_epoch() const { return batches_; }
  // Samples in batch b (0 <= b < batches_per_epoch()): batch_size, or less for a final short batch.
  std::size_t batch_length(std::size_t b) const;
  // Samples this rank delivers per epoch (shard_size() less a dropped short batch).
  std::size_t samples_per_epoch() const;

  // This rank's dataset indices for `epoch`, in delivery order; length shard_size().
  // Batch b is elements [b * batch_size, b * batch_size + batch_length(b)).
  std::vector<std::uint64_t> epoch_order(std::uint64_t epoch) const;
  // The same into `out`, reusing its memory: it holds dataset_size() elements
  // while the order is drawn, shard_size() after, and nothing else is
  // allocated beyond min(world_size, dataset_size) elements for the padding.
  void epoch_order(std::uint64_t epoch, std::vector<std::uint64_t>& out) const;

 private:
  SamplerOptions o_;
  std::size_t shard_size_ = 0;
  std::size_t batches_ = 0;
};

}  // namespace conveyor
