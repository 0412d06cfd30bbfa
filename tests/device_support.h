// What the device layer's tests share: a host device, the filler's reference
// bytes, a device with injectable faults, a consumer that reads each batch on
// its own stream, and the resident dataset's tensors.
#pragma once

#include <algorithm>
#include <atomic>
#include "catch_compat.h"
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>
#include <filesystem>
#include "device/backends.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/kernels/busy.h"
#include "device/resident.h"
#include "support.h"

namespace conveyor::test {

using namespace std::chrono_literals;

inline std::shared_ptr<Device> host_device(DeviceConfig cfg = {}) {
  cfg.backend = BackendChoice::host;
  return open_device(cfg);
}

// What (epoch, index) must hold in the device batch: its filler bytes.
inline bool sample_matches(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index, const std::byte* got,
                    std::size_t bytes) {
  std::vector<std::byte> want(bytes);
  test::expected_bytes(seed, epoch, index, want);
  return std::memcmp(want.data(), got, bytes) == 0;
}



// Forwards to a host device, with faults to inject: a call that throws, or a
// wait that does nothing (a broken protocol the checks must catch).
class FaultyDevice final : public Device {
 public:
  explicit FaultyDevice(std::shared_ptr<Device> inner) : inner_(std::move(inner)) {}
  std::atomic<int> copies_before_error{-1};   // copy_to_device throws when this reaches 0
  std::atomic<int> allocations_before_error{-1};  // allocate (device memory) throws when this reaches 0
  std::atomic<bool> fail_cpu_records{false};  // record on the CPU consumer's stream throws
  std::atomic<bool> fail_cpu_waits{false};    // wait on the CPU consumer's stream throws
  std::atomic<bool> skip_waits{false};
  std::atomic<int> waits_on_cpu_stream{0};  // wait() calls on the CPU consumer's (inline) stream
  // A transfer step that fails after its copy was enqueued: this call throws, once
  // (normalize: the normalize stream's wait for the copy, just before the kernel).
  enum class AfterCopy { none, normalize, record, synchronize };
  std::atomic<AfterCopy> fail_after_copy{AfterCopy::none};
  // Each copy first waits this long on its stream: a slow DMA, still reading its source.
  std::atomic<double> copy_delay_us{0};
  // Enqueueing a copy takes this long on the caller (the workers get ahead meanwhile).
  std::atomic<int> enqueue_delay_ms{0};
  // The last copy_to_device (on the delivery thread; read once the pipeline failed):
  // its destination, the bytes its source held when it was enqueued, its stream.
  void* copy_dst = nullptr;
  std::vector<std::byte> copy_source;
  Stream* copy_stream = nullptr;       // under sync_mu while the pipeline runs
  // The normalize stream: the one the delivery thread makes wait for the copy
  // stream (normalize is a kernel, not a Device call to observe); likewise.
  Stream* normalize_stream = nullptr;
  std::atomic<std::thread::id> delivery_thread{};  // copy_to_device's caller
  // For each synchronize(Event&) on an event last recorded on the copy or the
  // normalize stream (a slot's "copied"), how many copies had been enqueued by then.
  std::atomic<std::size_t> copies{0};
  std::mutex sync_mu;
  std::vector<std::size_t> copies_at_sync;
  std::set<const Event*> transfer_events;  // under sync_mu

  Backend backend() const override { return inner_->backend(); }
  std::string describe() const override { return "faulty " + inner_->describe(); }
  bool hands_over() const override { return inner_->hands_over(); }
  bool poisons_released() const override { return inner_->poisons_released(); }
  int ordinal() const override { return inner_->ordinal(); }
  void bind_thread() override { inner_->bind_thread(); }
  void* allocate_host(std::size_t bytes) override { return inner_->allocate_host(bytes); }
  void free_host(void* p) noexcept override { inner_->free_host(p); }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    if (allocations_before_error-- == 0) {
      throw DeviceError("cudaMalloc(...) at cuda/fake.cu:5: out of memory (injected)");
    }
    return inner_->allocate(bytes);
  }
  std::unique_ptr<Stream> create_stream() override { return inner_->create_stream(); }
  std::unique_ptr<Event> create_event(EventKind k) override { return inner_->create_event(k); }
  std::unique_ptr<Stream> wrap_stream(void* s) override { return inner_->wrap_stream(s); }
  void copy_to_device(void* d, const void* s, std::size_t n, Stream& st) override {
    if (copies_before_error-- == 0) throw DeviceError("cudaMemcpyAsync(...) at cuda/fake.cu:1: injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(enqueue_delay_ms.load()));
    kernels::busy(*inner_, copy_delay_us, st);
    inner_->copy_to_device(d, s, n, st);
    copy_dst = d;
    copy_source.assign(static_cast<const std::byte*>(s), static_cast<const std::byte*>(s) + n);
    {
      std::lock_guard lk(sync_mu);  // record() reads it on the consumer's thread
      copy_stream = &st;
    }
    delivery_thread = std::this_thread::get_id();
    ++copies;
  }
  void copy_to_host(void* d, const void* s, std::size_t n, Stream& st) override { inner_->copy_to_host(d, s, n, st); }
  void set_bytes(void* d, unsigned char v, std::size_t n, Stream& st) override { inner_->set_bytes(d, v, n, st); }
  void record(Event& e, Stream& st) override {
    if (fail_cpu_records && st.native() == nullptr) throw DeviceError("cudaEventRecord(...) at cuda/fake.cu:2: injected failure");
    if (st.native() != nullptr) fail_once(AfterCopy::record, "cudaEventRecord(...)");
    inner_->record(e, st);
    std::lock_guard lk(sync_mu);
    if (&st == copy_stream || &st == normalize_stream) transfer_events.insert(&e);
    else transfer_events.erase(&e);
  }
  void wait(Stream& st, Event& e) override {
    if (st.native() == nullptr) ++waits_on_cpu_stream;
    if (fail_cpu_waits && st.native() == nullptr) throw DeviceError("cudaStreamWaitEvent(...) at cuda/fake.cu:4: injected failure");
    if (std::this_thread::get_id() == delivery_thread.load()) {
      bool normalizing = false;
      {
        std::lock_guard lk(sync_mu);
        normalizing = &st != copy_stream;  // the transfer's other wait is the copy stream's, for consumed
        if (normalizing) normalize_stream = &st;
      }
      if (normalizing) fail_once(AfterCopy::normalize, "cudaStreamWaitEvent(normalize, staged)");
    }
    if (!skip_waits) inner_->wait(st, e);
  }
  void synchronize(Event& e) override {
    {
      std::lock_guard lk(sync_mu);
      if (transfer_events.count(&e)) copies_at_sync.push_back(copies.load());
    }
    fail_once(AfterCopy::synchronize, "cudaEventSynchronize(...)");
    inner_->synchronize(e);
  }
  void synchronize(Stream& st) override { inner_->synchronize(st); }
  double elapsed_ms(Event& a, Event& b) override { return inner_->elapsed_ms(a, b); }

 private:
  void fail_once(AfterCopy call, const char* what) {
    AfterCopy armed = call;
    if (fail_after_copy.compare_exchange_strong(armed, AfterCopy::none)) {
      throw DeviceError(std::string(what) + " at cuda/fake.cu:3: injected failure after the copy");
    }
  }

  std::shared_ptr<Device> inner_;
};

inline Config small_config(std::size_t workers, std::size_t depth, std::size_t device_buffers) {
  Config c;
  c.batch_size = 4;
  c.sample_bytes = 48;
  c.workers = workers;
  c.host_queue_depth = depth;
  c.device_queue_depth = depth;
  c.device_buffers = device_buffers;
  c.seed = 11;
  c.epochs = 2;
  return c;
}

// What a consumer's stream read of one batch: a copy to host memory enqueued
// on that stream, checked once the stream has run it.
struct StreamRead {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> indices;
  std::vector<std::byte> bytes;
  std::vector<std::int64_t> labels;
};
using StreamReads = std::vector<std::unique_ptr<StreamRead>>;  // each allocated before its copy is enqueued

// Enqueues on `stream`, after `step_us` of work there, a copy of b's bytes and labels.
inline void read_on(Device& device, Stream& stream, const DeviceBatch& b, double step_us, StreamReads& reads) {
  auto r = std::make_unique<StreamRead>();
  r->epoch = b.host().epoch;
  r->indices = b.host().indices;
  r->bytes.resize(b.bytes());
  r->labels.resize(b.size());
  kernels::busy(device, step_us, stream);  // the step takes a while on the device
  device.copy_to_host(r->bytes.data(), b.data(), b.bytes(), stream);
  device.copy_to_host(r->labels.data(), b.labels(), b.size() * sizeof(std::int64_t), stream);  // with the pixels
  reads.push_back(std::move(r));
}

// The samples whose bytes or label are not what fill_pattern wrote; counts each sample into *seen.
inline std::size_t wrong_samples(const StreamReads& reads, std::uint64_t seed, std::size_t sample_bytes,
                          std::map<std::pair<std::uint64_t, std::uint64_t>, int>* seen = nullptr) {
  std::size_t wrong = 0;
  for (auto& r : reads) {
    for (std::size_t j = 0; j < r->indices.size(); ++j) {
      if (seen) ++(*seen)[{r->epoch, r->indices[j]}];
      const bool bytes_ok = sample_matches(seed, r->epoch, r->indices[j], r->bytes.data() + j * sample_bytes, sample_bytes);
      if (!bytes_ok || r->labels[j] != std::int64_t(r->indices[j] * 3)) ++wrong;
    }
  }
  return wrong;
}

// A consumer whose "training step" runs on its own stream: for each batch it
// enqueues a copy of the batch to a host vector and releases the batch at once,
// so only the protocol's events keep the next copy off the slot until that
// read has run. Returns the number of samples whose bytes were wrong.
inline std::size_t run_stream_consumer(DevicePipeline& dp, Device& device, Stream& stream, std::uint64_t seed,
                                std::map<std::pair<std::uint64_t, std::uint64_t>, int>* seen, double step_us = 50) {
  StreamReads reads;
  while (auto b = dp.next()) {
    read_on(device, stream, *b, step_us, reads);
    b->reset();  // released right away: consumed is recorded after the copy above
  }
  device.synchronize(stream);
  return wrong_samples(reads, seed, 48, seen);
}



struct Tensor {
  std::vector<std::byte> bytes;
  std::vector<std::int64_t> labels;
  HostSamples samples;
};

inline Tensor make_tensor(std::size_t rows, std::vector<std::size_t> row_shape, DType dtype) {
  Tensor t;
  t.samples.dtype = dtype;
  t.samples.rows = rows;
  t.samples.row_shape = std::move(row_shape);
  t.bytes.resize(rows * t.samples.row_bytes());
  Rng rng(3, 1, rows);
  for (auto& b : t.bytes) b = std::byte(rng.below(256));
  t.samples.data = t.bytes.data();
  for (std::size_t i = 0; i < rows; ++i) t.labels.push_back(std::int64_t(i % 10) - 1);
  return t;
}


}  // namespace conveyor::test
