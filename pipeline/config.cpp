#include "pipeline/config.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace conveyor {

namespace {
void require_at_least_1(const char* field, std::size_t value) {
  if (value < 1) throw ConfigError(field, "must be >= 1 (got " + std::to_string(value) + ")");
}
void require_at_most(const char* field, std::size_t value, std::size_t max) {
  if (value > max) throw ConfigError(field, "must be <= " + std::to_string(max) + " (got " + std::to_string(value) + ")");
}
}  // namespace

void Config::validate() const {
  require_at_least_1("batch_size", batch_size);
  require_at_most("batch_size", batch_size, kMaxBatchSize);
  require_at_least_1("workers", workers);
  require_at_most("workers", workers, kMaxWorkers);
  if (tune_window_ms < 10 || tune_window_ms > 60000) {
    throw ConfigError("tune_window_ms", "must be 10 .. 60000 (got " + std::to_string(tune_window_ms) + ")");
  }
  require_at_least_1("host_queue_depth", host_queue_depth);
  require_at_most("host_queue_depth", host_queue_depth, kMaxQueueDepth);
  require_at_least_1("device_queue_depth", device_queue_depth);
  require_at_most("device_queue_depth", device_queue_depth, kMaxQueueDepth);
  require_at_most("host_buffers", host_buffers, kMaxBuffers);
  if (tune_host_queue && host_buffers) {
    throw ConfigError("host_buffers", "fixes the buffer pool, which a tuned host queue sizes (tune_host_queue): "
                                      "leave it 0");
  }
  require_at_most("device_buffers", device_buffers, kMaxBuffers);
  if (tune_device_queue && device_buffers) {
    throw ConfigError("device_buffers", "fixes the device slots, which a tuned device queue sizes "
                                        "(tune_device_queue): leave it 0");
  }
  require_at_least_1("world_size", world_size);
  require_at_most("world_size", world_size, kMaxWorldSize);
  if (rank >= world_size) {
    throw ConfigError("rank", "must be < world_size " + std::to_string(world_size) + " (got " + std::to_string(rank) + ")");
  }
  if (shard_policy != ShardPolicy::pad && shard_policy != ShardPolicy::drop) {
    throw ConfigError("shard_policy", "must be pad or drop (got " + std::to_string(int(shard_policy)) + ")");
  }
  require_at_most("wait_yields", wait_yields, kMaxWaitYields);
  if (sample_bytes != 0 && batch_size > SIZE_MAX / sample_bytes) {
    throw ConfigError("sample_bytes", "times batch_size overflows");
  }
}

std::size_t Config::host_buffer_count() const {
  // Saturating: host_pool_bytes() promises a comparable figure even for a config validate() refuses.
  if (host_buffers) return host_buffers;
  return saturating_add(saturating_add(workers, host_queue_depth),
                        std::max(saturating_add(device_queue_depth, 2), device_buffers));
}

std::size_t Config::host_queue_start() const {
  return tune_host_queue ? std::min(kTunedHostQueueStart, host_queue_depth) : host_queue_depth;
}

std::size_t Config::host_buffer_start() const {
  if (host_buffers) return host_buffers;  // fixed (not with tune_host_queue): a tuned device queue grows within it
  return host_buffer_count() - (host_queue_depth - host_queue_start()) - (device_queue_depth - device_queue_start());
}

std::size_t Config::device_queue_start() const {
  return tune_device_queue ? std::min(kTunedDeviceQueueStart, device_queue_depth) : device_queue_depth;
}

std::size_t Config::device_buffer_start() const {
  return device_buffer_count() - (device_queue_depth - device_queue_start());
}

std::size_t Config::host_pool_bytes() const {
  // Each buffer: the pixels, plus an index, a label and a skip slot per sample.
  const std::size_t per_batch = saturating_mul(batch_size, sample_bytes);
  const std::size_t bookkeeping = saturating_mul(batch_size, kSlotBytes);
  return saturating_mul(host_buffer_count(), saturating_add(per_batch, bookkeeping));
}

std::size_t Config::bookkeeping_bytes(std::size_t dataset_size) const {
  constexpr std::size_t word = sizeof(std::uint64_t);
  const std::size_t order = saturating_mul(dataset_size, word);
  const std::size_t batches = batch_size ? std::size_t(ceil_div(dataset_size, batch_size)) : dataset_size;
  const std::size_t plan = saturating_mul(batches, 2 * word);
  const std::size_t ahead = saturating_mul(workers, saturating_mul(batch_size, 2 * word));
  return saturating_add(saturating_add(order, plan), ahead);
}

SamplerOptions Config::sampler_options(std::size_t dataset_size) const {
  return SamplerOptions{{static_cast<const SampleOrder&>(*this)}, dataset_size};
}

std::size_t Config::device_buffer_count() const {
  return device_buffers ? device_buffers : saturating_add(device_queue_depth, 2);
}

std::uint64_t default_pool_budget_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{4} << 30;
  return std::uint64_t(pages) * std::uint64_t(page) / 4;
}

std::size_t usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return std::size_t(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::size_t default_worker_ceiling() { return std::min(Config::kMaxWorkers, 2 * usable_cores()); }

}  // namespace conveyor
