// SampleOrder: the settings that fix which samples each batch holds, and in
// what order: the batch size, the seed, shuffling, drop_last and the shard.
// Together with the dataset's size they fix every batch of every epoch
// (pipeline/sampler.h says how). A Config (pipeline/config.h) holds them as its
// base, the Sampler's options too, and a PipelineState (pipeline/state.h)
// records them whole, so that a resume under other values is refused. The
// settings that only change how fast batches come (workers, queues, buffers)
// are not here: any value of them gives the same batches.
//
// A base rather than a member, so that `config.seed` reads as ever wherever
// a Config is filled in; a plain value: copy it, compare it with ==.
#pragma once

#include <cstddef>
#include <cstdint>

namespace conveyor {

// What to do with the samples that do not divide evenly among the ranks.
enum class ShardPolicy {
  pad,   // repeat samples from the head of the order so every rank gets ceil(N / W)
  drop,  // leave the tail out so every rank gets floor(N / W)
};

struct SampleOrder {
  // Samples per batch; an epoch's last batch may be shorter unless drop_last.
  // Default: 32. Range 1 .. 2^24 (Config::kMaxBatchSize).
  std::size_t batch_size = 32;

  // Seeds the epoch order and every sample's Rng. Default: 0.
  std::uint64_t seed = 0;

  // Permute each epoch (true) or keep dataset order (false). Default: true.
  bool shuffle = true;

  // Leave out an epoch's final short batch. Default: false.
  bool drop_last = false;

  // This process's shard, DistributedSampler style. Default: rank 0 of 1.
  // world_size: 1 .. Config::kMaxWorldSize; rank below it.
  std::size_t rank = 0;
  std::size_t world_size = 1;
  ShardPolicy shard_policy = ShardPolicy::pad;  // Default: pad. pad or drop.

  bool operator==(const SampleOrder&) const = default;
};

}  // namespace conveyor
