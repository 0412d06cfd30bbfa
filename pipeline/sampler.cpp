#include "pipeline/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

#include "pipeline/rng.h"

namespace conveyor {

namespace {
// The shuffle's stream: a key no sample index can take, so the epoch's order and
// sample i's augmentation never share random numbers.
constexpr std::uint64_t kShuffleStream = ~std::uint64_t{0};
}  // namespace

Sampler::Sampler(const SamplerOptions& options) : o_(options) {
  if (o_.batch_size == 0) throw std::invalid_argument("sampler: batch_size must be >= 1");
  if (o_.world_size == 0) throw std::invalid_argument("sampler: world_size must be >= 1");
  if (o_.rank >= o_.world_size) {
    throw std::invalid_argument("sampler: rank " + std::to_string(o_.rank) + " must be < world_size " +
                                std::to_string(o_.world_size));
  }
  const std::size_t n = o_.dataset_size, w = o_.world_size;
  shard_size_ = o_.shard_policy == ShardPolicy::pad ? ceil_div(n, w) : n / w;
  batches_ = o_.drop_last ? shard_size_ / o_.batch_size : ceil_div(shard_size_, o_.batch_size);
}

std::size_t Sampler::batch_length(std::size_t b) const {
  const std::size_t start = b * o_.batch_size;
  return std::min(o_.batch_size, shard_size_ - start);
}

std::size_t Sampler::samples_per_epoch() const {
  return o_.drop_last ? batches_ * o_.batch_size : shard_size_;
}

std::vector<std::uint64_t> Sampler::epoch_order(std::uint64_t epoch) const {
  std::vector<std::uint64_t> out;
  epoch_order(epoch, out);
  return out;
}

void Sampler::epoch_order(std::uint64_t epoch, std::vector<std::uint64_t>& order) const {
  const std::size_t n = o_.dataset_size, w = o_.world_size;
  order.resize(n);
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  if (o_.shuffle && n > 1) {
    Rng rng(o_.seed, epoch, kShuffleStream);
    for (std::size_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      std::swap(order[i], order[rng.below(i + 1)]);
    }
  }
  if (w == 1) return;  // shard_size() == n: the order is the shard
  // Rank r takes positions r, r + W, ... of the padded or truncated order,
  // compacted in place: position k reads r + kW >= k, not yet overwritten,
  // except a padding read past n, which wraps to the head: kept aside first.
  const std::vector<std::uint64_t> head(order.begin(), order.begin() + std::ptrdiff_t(std::min(w, n)));
  for (std::size_t k = 0; k < shard_size_; ++k) {
    const std::size_t pos = o_.rank + k * w;
    order[k] = pos < n ? order[pos] : head[(pos - n) % n];  // pos >= n only when padding, and then pos - n < W
  }
  order.resize(shard_size_);
}

}  // namespace conveyor
