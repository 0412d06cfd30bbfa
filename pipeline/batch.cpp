#include "pipeline/batch.h"

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <new>
#include <stdexcept>

#include "pipeline/fnv1a.h"

namespace conveyor {

// Shared by the pool and every handle, so the memory outlives whichever goes last.
struct BatchHandle::Core {
  Allocator allocator;
  std::size_t bytes_per_batch = 0;
  std::size_t batch_capacity = 0, sample_bytes = 0, max_count = 0;
  std::vector<std::unique_ptr<Batch>> batches;  // reserved for max_count: grow() never moves it
  std::atomic<std::size_t> allocated{0};  // batches.size(), for count() from any thread
  BoundedQueue<Batch*> free;

  Core(std::size_t count, Allocator a, std::size_t wait_yields)
      : allocator(std::move(a)), free(count, wait_yields) {}
  ~Core() {
    for (auto& b : batches) {
      if (b->data) allocator.deallocate(b->data, bytes_per_batch);
    }
  }
};

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// Buffers this large come straight from mmap and go straight back with munmap.
// Through malloc they did not: glibc raises its mmap threshold after the first
// large free, so a second pipeline's buffers (a resume from state() in the same
// process) came from the heap, whose freed space the process kept, and the RSS
// grew by a pool's worth at every stop and resume. Under ASan operator new is
// kept, so that an overrun of a slot is still caught.
constexpr std::size_t kMapAtLeast = std::size_t(1) << 20;
bool mapped(std::size_t bytes) { return !kAsan && bytes >= kMapAtLeast; }

}  // namespace

void first_touch(void* data, std::size_t bytes, const Interrupt& interrupted) {
  auto* p = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < bytes;) {
    if (interrupted && interrupted()) throw Interrupted();
    const std::size_t n = std::min(kTouchChunk, bytes - done);
    std::memset(p + done, 0, n);
    done += n;
  }
}

Allocator Allocator::host() {
  constexpr std::align_val_t kAlign{64};
  Allocator a;
  a.name = "host";
  a.allocate = [](std::size_t bytes) -> void* {
    if (!mapped(bytes)) return ::operator new(bytes, kAlign);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;  // page-aligned
  };
  a.deallocate = [](void* p, std::size_t bytes) {
    if (mapped(bytes)) {
      ::munmap(p, bytes);
    } else {
      ::operator delete(p, kAlign);
    }
  };
  return a;
}

BatchHandle::BatchHandle(BatchHandle&& other) noexcept
    : core_(std::move(other.core_)), batch_(std::exchange(other.batch_, nullptr)) {}

BatchHandle& BatchHandle::operator=(BatchHandle&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::move(other.core_);
    batch_ = std::exchange(other.batch_, nullptr);
  }
  return *this;
}

void BatchHandle::reset() {
  if (batch_) {
    Batch* b = std::exchange(batch_, nullptr);
    b->user = nullptr;
    if (core_->allocator.recycle && b->data) core_->allocator.recycle(b->data, core_->bytes_per_batch);
    // Capacity equals the batch count, so this never blocks; it fails only
    // after close(), when the batch simply stays with the core until it dies.
    (void)core_->free.try_push(b);
  }
  core_.reset();
}

BatchPool::BatchPool(std::size_t count, std::size_t batch_capacity, std::size_t sample_bytes, Allocator allocator,
                     std::size_t wait_yields, std::size_t max_count) {
  if (count == 0) throw std::invalid_argument("batch pool: count must be >= 1");
  if (batch_capacity == 0) throw std::invalid_argument("batch pool: batch capacity must be >= 1");
  if (max_count == 0) max_count = count;
  if (max_count < count) throw std::invalid_argument("batch pool: max_count must be >= count");
  if (!allocator.allocate || !allocator.deallocate) {
    throw std::invalid_argument("batch pool: allocator '" + allocator.name + "' lacks allocate or deallocate");
  }
  core_ = std::make_shared<BatchHandle::Core>(max_count, std::move(allocator), wait_yields);
  core_->bytes_per_batch = batch_capacity * sample_bytes;
  core_->batch_capacity = batch_capacity;
  core_->sample_bytes = sample_bytes;
  core_->max_count = max_count;
  core_->batches.reserve(max_count);
  grow(count);
}

std::size_t BatchPool::grow(std::size_t more) {
  BatchHandle::Core& c = *core_;
  const Interrupt& interrupted = c.allocator.interrupted;
  const std::size_t to = c.batches.size() + std::min(more, c.max_count - c.batches.size());
  while (c.batches.size() < to) {
    const std::size_t i = c.batches.size();
    if (interrupted && interrupted()) throw Interrupted();
    auto b = std::make_unique<Batch>();
    try {
      // Written once now, then emptied: the capacity stays, resident.
      grow_touched(b->indices, c.batch_capacity, interrupted);
      grow_touched(b->labels, c.batch_capacity, interrupted);
      b->indices.clear();
      b->labels.clear();
    } catch (const std::bad_alloc&) {
      throw PoolAllocationError("batch pool: out of memory allocating the index and label slots of buffer " +
                                std::to_string(i + 1) + " of " + std::to_string(to) + " (" +
                                std::to_string(c.batch_capacity) + " samples)");
    }
    b->sample_bytes = c.sample_bytes;
    b->batch_capacity = c.batch_capacity;
    // Even 0 bytes (labels only): an allocator may add room of its own (the
    // device pipeline's label tail), and data is never null for a stage to check.
    const auto out_of_memory = [&] {
      return PoolAllocationError("batch pool: out of memory allocating buffer " + std::to_string(i + 1) + " of " +
                                 std::to_string(to) + " (" + std::to_string(c.bytes_per_batch) + " bytes each, " +
                                 c.allocator.name + " memory)");
    };
    try {
      b->data = static_cast<std::byte*>(c.allocator.allocate(c.bytes_per_batch));
    } catch (const std::bad_alloc&) {
      throw out_of_memory();
    }
    if (!b->data) throw out_of_memory();
    c.batches.push_back(std::move(b));  // owned before anything else can throw
    c.allocated.store(c.batches.size(), std::memory_order_relaxed);
    if (!c.free.try_push(c.batches.back().get()) && !c.free.closed()) {
      throw std::logic_error("batch pool: free list full");
    }
  }
  return c.batches.size();
}

BatchPool::~BatchPool() { close(); }

std::optional<BatchHandle> BatchPool::acquire() {
  if (core_->free.closed()) return std::nullopt;  // a closed queue still drains: refuse here
  auto b = core_->free.pop();
  if (!b) return std::nullopt;
  return BatchHandle(core_, *b);
}

void BatchPool::close() { core_->free.close(); }
std::size_t BatchPool::count() const { return core_->allocated.load(std::memory_order_relaxed); }
QueueStats BatchPool::stats() const { return core_->free.stats(); }

std::uint64_t batch_digest(const Batch& b) {
  Fnv1a h;
  h.add_value(b.epoch);
  h.add_value(b.index);
  h.add(b.indices.data(), b.indices.size() * sizeof(b.indices[0]));
  h.add(b.labels.data(), b.labels.size() * sizeof(b.labels[0]));
  for (const SkippedSample& s : b.skipped) h.add_value(s.index);
  const auto bytes = b.bytes();
  h.add(bytes.data(), bytes.size());
  return h.value;
}

}  // namespace conveyor
