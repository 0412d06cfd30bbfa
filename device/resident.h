// ResidentDataset: a small dataset uploaded to the device once and batched
// there. Each batch is one gather over the epoch's shuffled indices (fused with
// the normalize for uint8 images), so an epoch costs no host-to-device traffic
// but its index order (8 bytes a sample, one copy an epoch) and no per-sample
// work on the host: no workers, no queues, no per-sample calls.
//
// Use it when the decoded samples fit in device memory: an in-memory tensor
// (a NumPy .npy uint8 or float32 array plus labels) or images decoded once at a
// fixed size. Larger datasets stream through DevicePipeline.
//
// Order and sharding are the Sampler's: the same (seed, epoch) gives the same
// batches as a DevicePipeline with the same Config.
//
// Everything runs on the consumer's stream, in order with the training step;
// a batch's memory is reused only after its release was recorded on that
// stream (the slot protocol's consumed event). All memory, streams and events
// are allocated in the constructor.
// Release every batch before destroying the dataset: a batch released after it
// gives nothing back and its memory is gone (the destructor says so on stderr).
// Thread safety: one consumer thread. Errors: DeviceError from the device (a
// failed release is kept, and thrown by every later next()); std::invalid_argument
// (naming the field) for bad input or a budget overrun. Every device call runs
// on the dataset's device and leaves the thread's current device as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/device_pipeline.h"  // TransferConfig::Normalization
#include "pipeline/config.h"
#include "pipeline/sampler.h"
#include "data/npy.h"

namespace conveyor {

// Samples in host memory, row-major: rows x (row_shape...) elements of dtype
// (uint8 or float32). Not owned: the constructor copies them to the device.
struct HostSamples {
  const std::byte* data = nullptr;
  DType dtype = DType::uint8;
  std::size_t rows = 0;
  std::vector<std::size_t> row_shape;  // e.g. {28, 28} or {32, 32, 3}
  // Both saturate at SIZE_MAX (a shape whose product wraps reads as too much).
  std::size_t row_elements() const;
  std::size_t row_bytes() const { return saturating_mul(row_elements(), dtype_size(dtype)); }
};

// A view of an array read with read_npy (uint8 or float32; its first axis is
// the samples). Throws std::invalid_argument naming the type for any other.
HostSamples host_samples(const NpyArray& array);

struct ResidentConfig {
  // Device memory the samples and labels may take; larger data is refused
  // (stream it with DevicePipeline). Default: 1 GiB.
  std::size_t budget_bytes = std::size_t{1} << 30;

  // Output batches the consumer may hold at once. Default: 2. Range 1 ..
  // Config::kMaxBuffers.
  std::size_t buffers = 2;

  // For uint8 HWC image rows (row_shape {H, W, C}): normalize in the gather,
  // giving out_type NCHW. Default: none (rows are gathered as they are).
  std::optional<TransferConfig::Normalization> normalize;

  // The training step's stream (see TransferConfig::consumer_stream). Default: nullptr.
  void* consumer_stream = nullptr;
};

class ResidentDataset;

// One batch on the device. Move-only; release (reset or destroy) before taking
// `buffers` more.
class ResidentBatch {
 public:
  ResidentBatch() = default;
  ResidentBatch(ResidentBatch&& other) noexcept { *this = std::move(other); }
  ResidentBatch& operator=(ResidentBatch&& other) noexcept;
  ResidentBatch(const ResidentBatch&) = delete;
  ResidentBatch& operator=(const ResidentBatch&) = delete;
  ~ResidentBatch() { reset(); }

  explicit operator bool() const { return owner_ != nullptr; }
  std::uint64_t epoch = 0, index = 0;  // index: batch position in the epoch
  std::span<const std::uint64_t> indices() const { return indices_; }  // dataset indices, host copy
  std::size_t size() const { return indices_.size(); }
  void* data() const { return data_; }                      // device: [size, row] or [size, C, H, W]
  const std::int64_t* labels() const { return labels_; }    // device: [size]
  DType dtype() const { return dtype_; }
  std::vector<std::int64_t> shape() const { return shape_; }

  void reset() noexcept;

 private:
  friend class ResidentDataset;
  ResidentDataset* owner_ = nullptr;
  std::weak_ptr<void> alive_;  // expired once the dataset is gone
  std::size_t slot_ = 0;
  std::vector<std::uint64_t> indices_;
  void* data_ = nullptr;
  const std::int64_t* labels_ = nullptr;
  DType dtype_ = DType::uint8;
  std::vector<std::int64_t> shape_;
};

class ResidentDataset {
 public:
  // Uploads samples and labels (labels.size() == samples.rows) once. The
  // Config's batch_size, seed, shuffle, drop_last, sharding and epochs apply;
  // its worker and queue settings do not.
  ResidentDataset(std::shared_ptr<Device> device, const HostSamples& samples, std::span<const std::int64_t> labels,
                  const Config& config, ResidentConfig resident = {});
  ~ResidentDataset();
  ResidentDataset(const ResidentDataset&) = delete;
  ResidentDataset& operator=(const ResidentDataset&) = delete;

  // Enqueues the next batch's gather on the consumer stream and returns it (its
  // data is ready in stream order). Empty after the configured epochs. Throws
  // std::logic_error if every output buffer is still held.
  std::optional<ResidentBatch> next();

  std::size_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  // Device bytes held: samples, labels, indices and output buffers.
  std::size_t device_bytes() const { return device_bytes_; }
  Device& device() const { return *device_; }

 private:
  friend class ResidentBatch;
  struct Slot;
  void release(std::size_t slot) noexcept;
  void start_epoch(std::uint64_t epoch);

  std::shared_ptr<Device> device_;
  Config config_;
  ResidentConfig resident_;
  Sampler sampler_;
  HostSamples layout_;  // data pointer cleared: the device copy is the data
  std::size_t out_row_bytes_ = 0;
  std::size_t device_bytes_ = 0;

  std::unique_ptr<Buffer> samples_, labels_, indices_;
  std::vector<Slot> slots_;
  std::unique_ptr<Event> uploaded_;  // the epoch's index upload left the staging buffer
  struct HostFree {
    Device* device;
    void operator()(std::uint64_t* p) const { device->free_host(p); }
  };
  using Staging = std::unique_ptr<std::uint64_t, HostFree>;
  Staging staging_{nullptr, HostFree{nullptr}};  // pinned host copy of the epoch order
  std::size_t staging_count_ = 0;
  std::unique_ptr<Stream> stream_;    // last: destroyed first

  std::uint64_t epoch_ = 0, batch_ = 0;
  bool epoch_started_ = false;
  std::vector<std::uint64_t> order_;
  std::size_t next_slot_ = 0;
  std::size_t held_ = 0;
  std::string release_error_;  // the first failed release, thrown by next()
  std::shared_ptr<void> alive_ = std::make_shared<int>(0);  // batches hold a weak_ptr to it
};

}  // namespace conveyor
