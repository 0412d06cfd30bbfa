#include "device/resident.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "device/kernels/gather.h"
#include "device/kernels/normalize.h"
#include "device/nvtx.h"

namespace conveyor {

struct ResidentDataset::Slot {
  std::unique_ptr<Buffer> out, labels;
  std::unique_ptr<Event> consumed;
  bool held = false;
};

std::size_t HostSamples::row_elements() const {
  std::size_t n = 1;
  for (auto d : row_shape) n = saturating_mul(n, d);
  return n;
}

HostSamples host_samples(const NpyArray& array) {
  HostSamples s;
  if (array.type == NpyType::uint8) {
    s.dtype = DType::uint8;
  } else if (array.type == NpyType::float32) {
    s.dtype = DType::float32;
  } else {
    throw std::invalid_argument(std::string("resident dataset: samples must be uint8 or float32, not ") +
                                npy_type_name(array.type));
  }
  s.data = array.data.data();
  s.rows = array.rows();
  s.row_shape.assign(array.shape.begin() + 1, array.shape.end());
  return s;
}

namespace {
// Rounded up to MiB, or exact below one: "1 MiB" for 5459 bytes against 5458 read as equal.
std::string mib(std::size_t bytes) {
  if (bytes < (std::size_t{1} << 20)) return std::to_string(bytes) + " bytes";
  if (bytes == SIZE_MAX) return "more than 2^64 bytes";  // a saturated size: a shape whose product wraps
  return std::to_string(bytes / (1 << 20) + (bytes % (1 << 20) != 0)) + " MiB";
}
}  // namespace

ResidentDataset::ResidentDataset(std::shared_ptr<Device> device, const HostSamples& samples,
                                 std::span<const std::int64_t> labels, const Config& config, ResidentConfig resident)
    : device_(std::move(device)),
      config_(config),
      resident_(std::move(resident)),
      sampler_(config.sampler_options(samples.rows)),
      layout_(samples) {
  if (!device_) throw std::invalid_argument("resident dataset: device is required");
  config_.validate();  // ConfigError naming the field: batch_size past kMaxBatchSize was a bad_alloc
  if (samples.dtype != DType::uint8 && samples.dtype != DType::float32) {
    throw std::invalid_argument(std::string("resident dataset: samples must be uint8 or float32, not ") +
                                dtype_name(samples.dtype));
  }
  if (labels.size() != samples.rows) {
    throw std::invalid_argument("resident dataset: " + std::to_string(labels.size()) + " labels for " +
                                std::to_string(samples.rows) + " samples");
  }
  if (samples.rows > 0 && !samples.data) throw std::invalid_argument("resident dataset: samples.data is null");
  if (resident_.buffers == 0 || resident_.buffers > Config::kMaxBuffers) {
    throw std::invalid_argument("resident dataset: buffers must be 1 to " + std::to_string(Config::kMaxBuffers) +
                                " (got " + std::to_string(resident_.buffers) + ")");
  }
  const std::size_t row_bytes = samples.row_bytes();
  if (const auto& n = resident_.normalize) {
    if (samples.dtype != DType::uint8 || samples.row_shape.size() != 3 || samples.row_shape[0] != n->height ||
        samples.row_shape[1] != n->width || samples.row_shape[2] != n->channels) {
      throw std::invalid_argument("resident dataset: normalize needs uint8 rows of shape {" +
                                  std::to_string(n->height) + ", " + std::to_string(n->width) + ", " +
                                  std::to_string(n->channels) + "} (H, W, C)");
    }
    validate_normalization(*n, row_bytes);  // channels 1..3, std > 0, a float output
    out_row_bytes_ = n->output_bytes();
  } else {
    out_row_bytes_ = row_bytes;
  }

  // The budget: the resident data itself. Output buffers and indices are extra, and small.
  // Saturating, as row_bytes: a product that wraps must read as over budget.
  const std::size_t data_bytes =
      saturating_add(saturating_mul(samples.rows, row_bytes), saturating_mul(samples.rows, sizeof(std::int64_t)));
  if (data_bytes > resident_.budget_bytes) {
    throw std::invalid_argument("resident dataset: " + mib(data_bytes) + " of samples and labels exceed budget_bytes (" +
                                mib(resident_.budget_bytes) + "); stream the dataset with DevicePipeline instead");
  }

  // Everything allocated now, nothing in the steady state. Each device call
  // runs on the device without changing the caller's current one.
  stream_ = device_->wrap_stream(resident_.consumer_stream);
  samples_ = device_->allocate(samples.rows * row_bytes);
  labels_ = device_->allocate(samples.rows * sizeof(std::int64_t));
  staging_count_ = sampler_.shard_size();
  indices_ = device_->allocate(staging_count_ * sizeof(std::uint64_t));
  staging_ = Staging(static_cast<std::uint64_t*>(device_->allocate_host(staging_count_ * sizeof(std::uint64_t))),
                     HostFree{device_.get()});
  uploaded_ = device_->create_event();
  slots_.resize(resident_.buffers);
  for (auto& s : slots_) {
    s.out = device_->allocate(config.batch_size * out_row_bytes_);
    s.labels = device_->allocate(config.batch_size * sizeof(std::int64_t));
    s.consumed = device_->create_event();
  }
  device_bytes_ = samples_->bytes() + labels_->bytes() + indices_->bytes() +
                  resident_.buffers * config.batch_size * (out_row_bytes_ + sizeof(std::int64_t));

  // The one upload. From pageable memory the copy is staged by the runtime and
  // returns when the source may be reused; synchronize to make that explicit.
  device_->copy_to_device(samples_->data(), samples.data, samples.rows * row_bytes, *stream_);
  device_->copy_to_device(labels_->data(), labels.data(), labels.size_bytes(), *stream_);
  device_->synchronize(*stream_);
  layout_.data = nullptr;
}

ResidentDataset::~ResidentDataset() {
  try {
    device_->synchronize(*stream_);  // our gathers are done before their buffers go
  } catch (...) {
    // A device in error has nothing left to run.
  }
  if (held_ != 0) {
    std::fprintf(stderr, "conveyor: ResidentDataset destroyed while %zu batch(es) are held; they are now invalid\n",
                 held_);
  }
}

void ResidentDataset::start_epoch(std::uint64_t epoch) {
  order_ = sampler_.epoch_order(epoch);
  device_->synchronize(*uploaded_);  // the previous epoch's upload has left the staging buffer
  std::memcpy(staging_.get(), order_.data(), order_.size() * sizeof(std::uint64_t));
  // Earlier gathers that read the index buffer are before this copy on the same stream.
  device_->copy_to_device(indices_->data(), staging_.get(), order_.size() * sizeof(std::uint64_t), *stream_);
  device_->record(*uploaded_, *stream_);
  epoch_started_ = true;
}

std::optional<ResidentBatch> ResidentDataset::next() {
  NvtxRange range("conveyor.resident.next");
  if (!release_error_.empty()) throw DeviceError("resident dataset: releasing a batch: " + release_error_);
  const std::size_t per_epoch = sampler_.batches_per_epoch();
  if (per_epoch == 0) return std::nullopt;
  if (batch_ == per_epoch) {
    ++epoch_;
    batch_ = 0;
    epoch_started_ = false;
  }
  if (config_.epochs != 0 && epoch_ >= config_.epochs) return std::nullopt;
  // The oldest free slot (batches may be released out of order).
  for (std::size_t k = 0; k < slots_.size() && slots_[next_slot_].held; ++k) next_slot_ = (next_slot_ + 1) % slots_.size();
  Slot& s = slots_[next_slot_];
  if (s.held) {
    throw std::logic_error("resident dataset: all " + std::to_string(slots_.size()) +
                           " output buffers are held; release a batch before taking another (or raise buffers)");
  }
  if (!epoch_started_) start_epoch(epoch_);

  const std::size_t offset = batch_ * config_.batch_size, count = sampler_.batch_length(batch_);
  const auto* idx = static_cast<const std::uint64_t*>(indices_->data()) + offset;
  device_->wait(*stream_, *s.consumed);  // the slot's last batch was released on the stream
  if (const auto& n = resident_.normalize) {
    // Gather and normalize in one pass.
    kernels::normalize(*device_, n->job(static_cast<const std::uint8_t*>(samples_->data()), s.out->data(), count, idx),
                       *stream_);
  } else {
    kernels::gather(*device_,
                    GatherJob{static_cast<const std::byte*>(samples_->data()), static_cast<std::byte*>(s.out->data()),
                              idx, count, layout_.row_bytes()},
                    *stream_);
  }
  kernels::gather(*device_,
                  GatherJob{static_cast<const std::byte*>(labels_->data()), static_cast<std::byte*>(s.labels->data()),
                            idx, count, sizeof(std::int64_t)},
                  *stream_);

  ResidentBatch b;
  b.owner_ = this;
  b.alive_ = alive_;
  b.slot_ = next_slot_;
  b.epoch = epoch_;
  b.index = batch_;
  b.indices_.assign(order_.begin() + offset, order_.begin() + offset + count);
  b.data_ = s.out->data();
  b.labels_ = static_cast<const std::int64_t*>(s.labels->data());
  if (const auto& n = resident_.normalize) {
    b.dtype_ = n->out_type;
    b.shape_ = {std::int64_t(count), std::int64_t(n->channels), std::int64_t(n->height), std::int64_t(n->width)};
  } else {
    b.dtype_ = layout_.dtype;
    b.shape_ = {std::int64_t(count)};
    for (auto d : layout_.row_shape) b.shape_.push_back(std::int64_t(d));
  }
  s.held = true;
  ++held_;
  next_slot_ = (next_slot_ + 1) % slots_.size();
  ++batch_;
  return b;
}

void ResidentDataset::release(std::size_t slot) noexcept {
  Slot& s = slots_[slot];
  --held_;
  try {
    device_->record(*s.consumed, *stream_);
  } catch (const std::exception& e) {
    // Not recorded: the consumer's work may still read the slot, so it stays out
    // of rotation, and the error (perhaps not sticky: later calls may succeed)
    // is kept for next() to throw.
    try {
      if (release_error_.empty()) release_error_ = e.what();
    } catch (...) {
      release_error_ = "unknown error";  // out of memory: short enough for SSO
    }
    return;
  }
  s.held = false;
}

ResidentBatch& ResidentBatch::operator=(ResidentBatch&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    alive_ = std::move(other.alive_);
    slot_ = other.slot_;
    epoch = other.epoch;
    index = other.index;
    indices_ = std::move(other.indices_);
    data_ = other.data_;
    labels_ = other.labels_;
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
  }
  return *this;
}

void ResidentBatch::reset() noexcept {
  ResidentDataset* owner = std::exchange(owner_, nullptr);
  // A batch that outlived its dataset has nothing to give back (the dataset said so on stderr).
  if (owner && !alive_.expired()) owner->release(slot_);
  alive_.reset();
}

}  // namespace conveyor
