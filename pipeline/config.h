// Config: every knob of a Pipeline, with its default. Validated once, when the
// pipeline is built; an invalid value throws ConfigError naming the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "pipeline/sampler.h"

namespace conveyor {

class ConfigError : public std::invalid_argument {
 public:
  // `field` is the Config member's name; what() reads "config: <field> <problem>".
  ConfigError(std::string field, const std::string& problem)
      : std::invalid_argument("config: " + field + " " + problem), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// Byte counts compared with a memory budget: a * b and a + b, SIZE_MAX where
// they would wrap (a mistyped --batch must read as "too much", not as little).
constexpr std::size_t saturating_mul(std::size_t a, std::size_t b) {
  return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}
constexpr std::size_t saturating_add(std::size_t a, std::size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// The settings that fix the order of the samples (batch_size, seed, shuffle,
// drop_last, rank, world_size, shard_policy) are its base, SampleOrder
// (pipeline/sample_order.h), with their defaults; the rest only change how
// fast batches come.
struct Config : SampleOrder {
  // The upper limits validate() enforces, for callers that check earlier (a
  // command line's parser).
  static constexpr std::size_t kMaxBatchSize = std::size_t{1} << 24;  // the slot field of a work ticket
  static constexpr std::size_t kMaxWorkers = 1024;
  static constexpr std::size_t kMaxWaitYields = 1000000;
  // Queue depths and buffer counts: far past any use (a batch per slot), and
  // small enough that the pools' counts and the queues' semaphores (signed
  // counts) cannot wrap, so an unsigned -1 is refused instead of hanging.
  static constexpr std::size_t kMaxQueueDepth = std::size_t{1} << 16;
  static constexpr std::size_t kMaxBuffers = std::size_t{1} << 20;
  static constexpr std::size_t kMaxWorldSize = std::size_t{1} << 20;

  // Bytes of one sample's slot in the batch buffer. 0 is allowed (labels only).
  // Default: 0.
  std::size_t sample_bytes = 0;

  // Worker threads running the filler. Default: 2. Range 1 .. kMaxWorkers.
  std::size_t workers = 2;

  // Let the pipeline choose how many of its `workers` threads work, from what
  // it measures (pipeline/autotune.h): it starts all of them, runs one a core
  // at first (at most `workers`), more while images/s rises and half a core
  // is free, fewer when the workers wait on the stages after them. `workers`
  // is then the ceiling (the buffer pool is sized for it). Output is the same
  // whatever it chooses.
  // Default: false.
  bool tune_workers = false;

  // The tuner's window: it measures images/s and the stages' shares over
  // windows this long, each from a quarter window after its last change
  // (queues refill, woken workers start); the queue tuners decide every half
  // window (QueueTuner::kWindowShare), and the worker tuner may jump half-way
  // through its first window. Default: 200 ms. Range 10 .. 60000.
  std::size_t tune_window_ms = 200;

  // Finished batches waiting for the delivery thread. Default: 2. Range 1 .. kMaxQueueDepth.
  std::size_t host_queue_depth = 2;

  // Let the pipeline choose the host queue's depth from the jitter it
  // measures (pipeline/autotune.h, QueueTuner): it starts at
  // host_queue_start() and goes deeper while the consumer waits for batches
  // that workers with room to spare could have finished. host_queue_depth is
  // then the ceiling: host_pool_bytes() (the memory budget's figure) counts
  // it, while the pool starts with host_buffer_start() buffers and allocates
  // the others only as the depth grows. Not with host_buffers, which fixes
  // the pool. Output is the same whatever it chooses. Default: false.
  bool tune_host_queue = false;
  static constexpr std::size_t kTunedHostQueueStart = 2;

  // Delivered (and transferred) batches waiting for the consumer. Default: 2. Range 1 .. kMaxQueueDepth.
  std::size_t device_queue_depth = 2;

  // Let the pipeline choose the device queue's depth (pipeline/autotune.h,
  // QueueTuner): it starts at device_queue_start() and goes deeper while the
  // consumer waits for batches the transfer could have moved earlier, had
  // the queue had room (a consumer whose steps come in bursts). As with
  // tune_host_queue, device_queue_depth is then the ceiling the memory
  // budget counts, and the buffers and device slots the depths above the
  // start would add are allocated only as it grows. Not with device_buffers.
  // Output is the same whatever it chooses. Default: false.
  bool tune_device_queue = false;
  static constexpr std::size_t kTunedDeviceQueueStart = 2;

  // Batch buffers in the pool, which bounds the batches in flight.
  // Default: 0, meaning workers + host_queue_depth + device_queue_depth + 2
  // (batches being filled, queued both sides, one being delivered, one held by the
  // consumer), or workers + host_queue_depth + device_buffers where that is
  // more: a batch a DevicePipeline's consumer holds keeps its host buffer, so
  // every device slot can be held. Fewer buffers than that still work, with
  // less overlap (and, under a DevicePipeline, fewer batches to hold).
  // At most kMaxBuffers.
  std::size_t host_buffers = 0;

  // Device-side buffers, for transfer backends that copy. Default: 0, meaning
  // device_queue_depth + 2. At most kMaxBuffers.
  std::size_t device_buffers = 0;

  // Deliver batches in sampler order (true) or as they complete (false; epochs
  // still come one after another). Default: true.
  bool ordered = true;

  // How a thread waits on a full or empty queue or an empty buffer pool: it
  // yields its core up to this many times, looking again after each, before it
  // sleeps. With more pipeline threads than cores this hands the core to the
  // thread being waited for and saves a kernel wake-up per hand-off (halves the
  // per-batch overhead on a 2-core VM; docs/benchmarks.md). 0 sleeps at once,
  // which suits a machine whose other processes need every spare cycle.
  // Default: 16. At most 1000000.
  std::size_t wait_yields = 16;

  // Epochs to produce, counted from epoch 0; the stream ends after the last.
  // Default: 0, meaning no end (workers keep prefetching until stopped).
  std::uint64_t epochs = 0;

  // Throws ConfigError naming the first invalid field.
  void validate() const;

  // The sampler's settings for a dataset of dataset_size samples: the order's
  // and the size. The one place a Config becomes
  // SamplerOptions (Pipeline, ResidentDataset and `conveyor run --serial` use it).
  SamplerOptions sampler_options(std::size_t dataset_size) const;

  // host_buffers and device_buffers with 0 replaced by their defaults.
  std::size_t host_buffer_count() const;
  // Under tune_host_queue: the first depth, kTunedHostQueueStart or the
  // ceiling where that is less, and the buffers the pool starts with (those
  // of host_buffer_count() the depths above it would add left out).
  // Otherwise host_queue_depth and host_buffer_count().
  // Under tune_device_queue, the pool leaves out the buffers of the device
  // queue's depths above its start as well.
  std::size_t host_queue_start() const;
  std::size_t host_buffer_start() const;
  std::size_t device_buffer_count() const;
  // Under tune_device_queue: the first depth (kTunedDeviceQueueStart or the
  // ceiling where that is less) and the device slots a DevicePipeline starts
  // with (the depths above it left out). Otherwise device_queue_depth and
  // device_buffer_count().
  std::size_t device_queue_start() const;
  std::size_t device_buffer_start() const;
  // Bytes of host memory a Pipeline with this config allocates and touches
  // for its buffers: host_buffer_count() buffers of batch_size * sample_bytes
  // (plain host memory; an allocator may add room of its own), and per slot
  // of each, the index, the label and the skip reason's pointer (kSlotBytes).
  // Saturates at SIZE_MAX instead of overflowing, so a caller can compare it
  // with a memory budget before anything is allocated. Throws nothing.
  static constexpr std::size_t kSlotBytes = 3 * sizeof(std::uint64_t);
  std::size_t host_pool_bytes() const;
  // Bytes a Pipeline with this config allocates over dataset_size samples
  // besides its pool: the epoch's order (8 bytes a sample), the plan and the
  // consumer's position (8 bytes a batch of an epoch each), and each worker's
  // read-ahead list (two batches of indices). Saturates; throws nothing.
  std::size_t bookkeeping_bytes(std::size_t dataset_size) const;
};

// The cores this process may run on: its affinity mask (taskset, a
// container's cpuset), not every core of the machine. At least 1.
std::size_t usable_cores();

// The worker threads a tuned pipeline (Config::tune_workers) starts when the
// caller names no ceiling (`--workers auto`, workers="auto"): twice
// usable_cores(), room for workers that wait on reads, within kMaxWorkers.
std::size_t default_worker_ceiling();

// The deepest a tuned host queue (Config::tune_host_queue) goes when the
// caller names no ceiling (`--host-queue auto`, host_queue="auto"): 8
// batches, room for a stall of 6 of the consumer's steps beyond the default
// depth of 2.
inline constexpr std::size_t kDefaultHostQueueCeiling = 8;

// The same for a tuned device queue (Config::tune_device_queue): 8 batches.
inline constexpr std::size_t kDefaultDeviceQueueCeiling = 8;

// The default ceiling on a pipeline's batch pools (host and device together),
// for the command line's --max-memory-mb and the Python module's
// max_memory_mb=: a quarter of physical memory, 4 GiB where that is unknown.
// Pools beyond it are a mistyped setting far more often than a plan, and the
// decoders, the consumer and the OS need the rest. Throws nothing.
std::uint64_t default_pool_budget_bytes();

}  // namespace conveyor
