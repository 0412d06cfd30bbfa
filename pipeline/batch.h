// Batch, BatchPool and BatchHandle: the reusable batch buffers.
//
// A BatchPool allocates `count` batches once, at construction, through an
// injected Allocator (plain host memory by default; the CUDA backend passes
// pinned memory). Nothing is allocated afterwards. acquire() hands out a
// BatchHandle, a move-only owner that gives the batch back to the pool when it is
// destroyed, so the pool's count bounds the batches in flight.
//
// Thread safety: BatchPool's methods are thread-safe. A Batch and its handle
// belong to one thread at a time (they move between threads through queues).
// Lifetime: handles share ownership of the pool's storage, so a handle that
// outlives its pipeline stays valid; after close() returned batches are kept,
// not recycled, and freed with the pool.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/bounded_queue.h"

namespace conveyor {

// Polled during a long start-up allocation (a pool's buffers and their first
// touch); true abandons it. Called on the constructing thread; must be cheap.
using Interrupt = std::function<bool()>;

// Thrown when an Interrupt returned true: a start-up allocation was abandoned
// (Ctrl-C while a pipeline's pools were being allocated). Everything allocated
// so far is freed before it is thrown; nothing else changed.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted while the batch pools were being allocated") {}
};

// Bytes first_touch() writes between two polls of its Interrupt: a few
// milliseconds of page faults, so an interrupt is seen well within 50 ms.
inline constexpr std::size_t kTouchChunk = std::size_t{16} << 20;

// Writes zeros over [data, data + bytes), kTouchChunk at a time, polling
// `interrupted` (when set) before each chunk, so every page is resident when it
// returns. Throws Interrupted when the poll says so. Never allocates.
void first_touch(void* data, std::size_t bytes, const Interrupt& interrupted);

// Grows v to n value-initialized elements (so its pages are resident), a
// kTouchChunk at a time, polling `interrupted` between chunks; throws
// Interrupted, or std::bad_alloc, leaving v valid.
template <class T>
void grow_touched(std::vector<T>& v, std::size_t n, const Interrupt& interrupted) {
  v.reserve(n);
  const std::size_t step = std::max<std::size_t>(1, kTouchChunk / sizeof(T));
  while (v.size() < n) {
    if (interrupted && interrupted()) throw Interrupted();
    v.resize(v.size() + std::min(step, n - v.size()));
  }
}

// Where batch memory comes from. Both functions are called only while the pool
// is built and destroyed, never in the steady state.
struct Allocator {
  std::string name = "host";
  // Asked for 0 bytes too (labels-only batches, sample_bytes 0): returns a
  // pointer deallocate takes. Throws on failure; a null pointer counts as one.
  std::function<void*(std::size_t bytes)> allocate;
  std::function<void(void* ptr, std::size_t bytes)> deallocate;  // never throws
  // Optional: called on the releasing thread as a batch's buffer returns to the
  // pool, before any worker can see it again (a debug backend writes a poison
  // pattern here, so a stage that reads a buffer after its release is caught).
  std::function<void(std::byte* data, std::size_t bytes)> recycle;
  // Optional: polled by the pool between buffers (and between chunks as it
  // first touches each buffer's index and label slots) while it is built; true
  // abandons the build with Interrupted. `allocate` may poll it too.
  Interrupt interrupted;

  // 64-byte aligned host memory: operator new, or mmap for buffers of 1 MiB
  // and more (returned to the system when freed; see batch.cpp).
  static Allocator host();
};

// A sample its filler left out (Sample::skip), with the filler's reason. In a
// batch: one skip, in `epoch`. In a run's list (SkipLog, Pipeline::skipped()):
// one entry per distinct (index, reason), left out `times` times, in epochs
// `epoch` (the first) to `last_epoch`.
struct SkippedSample {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;  // dataset index
  std::string reason;
  std::uint64_t last_epoch = 0;  // a batch's own entry: 0 (read as `epoch`)
  std::uint64_t times = 1;
  bool operator==(const SkippedSample&) const = default;
};

struct Batch {
  // Identity, set when workers start filling it.
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;     // position within the epoch: 0 .. batches_per_epoch-1
  std::uint64_t sequence = 0;  // position in this pipeline's run: 0, 1, 2, ...
  bool last_in_epoch = false;

  // One entry per sample: the dataset index and the label the filler set.
  std::vector<std::uint64_t> indices;
  std::vector<std::int64_t> labels;
  // Samples of this batch its filler skipped; they are not in `indices`, and
  // indices.size() + skipped.size() is the batch's planned length.
  std::vector<SkippedSample> skipped;

  // batch_capacity * sample_bytes bytes (never null, even for 0); sample j lives at j * sample_bytes.
  std::byte* data = nullptr;
  std::size_t sample_bytes = 0;
  std::size_t batch_capacity = 0;

  std::size_t size() const { return indices.size(); }
  std::span<std::byte> sample(std::size_t j) { return {data + j * sample_bytes, sample_bytes}; }
  std::span<const std::byte> sample(std::size_t j) const { return {data + j * sample_bytes, sample_bytes}; }
  // The filled part: size() * sample_bytes bytes.
  std::span<const std::byte> bytes() const { return {data, size() * sample_bytes}; }

  // Free for a transfer backend to hang per-batch device state on; the core
  // never reads it.
  void* user = nullptr;

  // When the workers finished filling it (steady_clock, stats.h's Clock), set
  // as it goes to the delivery thread: a consumer can tell a batch decoded before
  // its epoch began (served from the pool's prefetch) from one it waited for.
  std::chrono::steady_clock::time_point filled_at{};

  // Nanoseconds of the current transfer phase (transfer or finish) spent
  // waiting for the consumer to give memory back: a free device slot, or the
  // device's own use of one (a training step still running on the GPU after the
  // consumer's thread moved on). The core zeroes it before each phase and counts
  // it as the delivery stage's blocked time rather than busy, so a consumer
  // bound by its device work is not reported as a slow transfer.
  std::uint64_t transfer_blocked_ns = 0;
  // Nanoseconds of the current transfer phase spent waiting for the batch's own
  // input from a helper stage (the GPU decode feed's decode of its samples):
  // counted as the delivery stage's starved time, zeroed with the above.
  std::uint64_t transfer_starved_ns = 0;
};

// FNV-1a over what a consumer sees of a batch: epoch, index, indices, labels,
// the skipped samples' indices and the filled bytes. Equal digests mean the same
// batch, for resume and worker-count equivalence checks.
std::uint64_t batch_digest(const Batch& b);

class BatchPool;

// Move-only owner of one pooled Batch; returns it to the pool on destruction.
class BatchHandle {
 public:
  BatchHandle() = default;
  BatchHandle(BatchHandle&& other) noexcept;
  BatchHandle& operator=(BatchHandle&& other) noexcept;
  BatchHandle(const BatchHandle&) = delete;
  BatchHandle& operator=(const BatchHandle&) = delete;
  ~BatchHandle() { reset(); }

  Batch* get() const { return batch_; }
  Batch* operator->() const { return batch_; }
  Batch& operator*() const { return *batch_; }
  explicit operator bool() const { return batch_ != nullptr; }

  // Gives the batch back to its pool now. Thread-safe with respect to the pool.
  void reset();

 private:
  friend class BatchPool;
  struct Core;
  BatchHandle(std::shared_ptr<Core> core, Batch* batch) : core_(std::move(core)), batch_(batch) {}
  std::shared_ptr<Core> core_;
  Batch* batch_ = nullptr;
};

// Memory ran out while a pool was being allocated; what() names what was being
// allocated, which buffer of how many, and its size.
class PoolAllocationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class BatchPool {
 public:
  // Allocates count batches of batch_capacity * sample_bytes bytes each, and
  // first touches each batch's index and label slots (batch_capacity of each),
  // so the memory the pool will use is resident from the start: an
  // over-committed host fails here, not hours into a run.
  // Throws std::invalid_argument for count 0 or batch_capacity 0,
  // Interrupted when allocator.interrupted says so,
  // PoolAllocationError when an allocation throws std::bad_alloc, and whatever
  // else the allocator throws (having freed, in every case, what it had allocated). wait_yields: how
  // acquire() waits for a free batch, as in BoundedQueue.
  //
  // max_count (0: count): the most batches grow() may bring the pool to.
  BatchPool(std::size_t count, std::size_t batch_capacity, std::size_t sample_bytes, Allocator allocator,
            std::size_t wait_yields = kDefaultWaitYields, std::size_t max_count = 0);
  ~BatchPool();
  BatchPool(const BatchPool&) = delete;
  BatchPool& operator=(const BatchPool&) = delete;

  // Blocks until a batch is free. Returns an empty optional once the pool is closed.
  std::optional<BatchHandle> acquire();
  // Wakes every thread blocked in acquire(); later acquires return empty. Idempotent.
  void close();

  // Allocates and first-touches `more` batches, as the constructor does, and
  // frees them for acquire(); stops at max_count. Returns the count now.
  // Called by one thread at a time (the pipeline's tuning thread) while
  // others acquire and release. Throws PoolAllocationError (the batches added
  // before it stay), or what the allocator throws.
  std::size_t grow(std::size_t more);

  std::size_t count() const;
  QueueStats stats() const;       // the free list: consumers starved = waits for a buffer

 private:
  std::shared_ptr<BatchHandle::Core> core_;
};

}  // namespace conveyor
