#include "libtorch/tensors.h"

#include <memory>
#include <stdexcept>
#include <string>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include "device/mix_step.h"

namespace conveyor {

namespace {

c10::ScalarType scalar_type(DType t) {
  switch (t) {
    case DType::uint8: return torch::kUInt8;
    case DType::float32: return torch::kFloat32;
    case DType::float16: return torch::kFloat16;
    case DType::bfloat16: return torch::kBFloat16;
  }
  throw std::invalid_argument("to_tensors: unknown dtype");
}

}  // namespace

torch::Device torch_device(const Device& device) {
  if (device.backend() == Backend::host) return torch::Device(torch::kCPU);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device.ordinal()));
}

void* torch_consumer_stream(const Device& device) {
  if (device.backend() == Backend::host) return nullptr;
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument("torch_consumer_stream: this LibTorch was built without CUDA; use the host backend");
  }
  // Asked through the device-generic interface, so this file builds against a
  // CPU-only LibTorch too (the CUDA stream API lives in c10/cuda).
  const torch::Device d = torch_device(device);
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  if (guard->getStream(d) != guard->getDefaultStream(d)) {
    throw std::invalid_argument(
        "torch_consumer_stream: LibTorch's current CUDA stream is not its default stream; pass "
        "at::cuda::getCurrentCUDAStream().stream() as TransferConfig::consumer_stream");
  }
  return nullptr;  // the default stream is the legacy stream 0
}

namespace {
// c10::Stream::native_handle() arrived in LibTorch 2.1: use it where it exists.
template <typename S>
void* native_stream(const S& stream, const c10::impl::DeviceGuardImplInterface& guard, const torch::Device& d) {
  if constexpr (requires { stream.native_handle(); }) {
    (void)guard;
    (void)d;
    return stream.native_handle();
  } else {
    if (stream != guard.getDefaultStream(d)) {
      throw std::invalid_argument(
          "torch_current_stream: LibTorch's current CUDA stream is not its default stream, and this LibTorch "
          "(before 2.1) cannot name it; pass at::cuda::getCurrentCUDAStream().stream() as "
          "TransferConfig::consumer_stream");
    }
    return nullptr;  // the default stream is the legacy stream 0
  }
}
}  // namespace

std::function<void*()> torch_current_stream(const Device& device) {
  if (device.backend() == Backend::host) return {};
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument("torch_current_stream: this LibTorch was built without CUDA; use the host backend");
  }
  const torch::Device d = torch_device(device);
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return [guard, d] { return native_stream(guard->getStream(d), *guard, d); };
}

void TensorBatch::record_stream(void* stream) const {
  if (auto batch = owner.lock()) batch->record_stream(stream);
}

TensorBatch to_tensors(DeviceBatch batch, ImageShape shape) {
  if (!batch) throw std::invalid_argument("to_tensors: empty batch");
  const Device& device = batch.device();
  if (device.backend() == Backend::cuda && !torch::cuda::is_available()) {
    throw std::invalid_argument("to_tensors: a CUDA batch, but this LibTorch was built without CUDA (use the host backend)");
  }
  const auto n = static_cast<std::int64_t>(batch.size());
  std::vector<std::int64_t> sizes = batch.shape();
  torch::ScalarType type = scalar_type(batch.dtype());
  if (batch.dtype() == DType::uint8) {
    const std::int64_t sample = sizes[1];
    const std::int64_t element = shape.float32_chw ? std::int64_t(sizeof(float)) : 1;
    // The product in unsigned arithmetic, saturating: a signed one could overflow (undefined) and wrap onto `sample`.
    const auto product = [&] {
      std::size_t p = saturating_mul(std::size_t(shape.height), std::size_t(shape.width));
      return saturating_mul(saturating_mul(p, std::size_t(shape.channels)), std::size_t(element));
    };
    if (shape.height <= 0 || shape.width <= 0 || shape.channels <= 0 || product() != std::size_t(sample)) {
      throw std::invalid_argument("to_tensors: un-normalized samples of " + std::to_string(sample) +
                                  " bytes need a shape (" + std::to_string(shape.height) + "x" +
                                  std::to_string(shape.width) + "x" + std::to_string(shape.channels) +
                                  (shape.float32_chw ? " float32" : " uint8") + " does not match)");
    }
    if (shape.float32_chw) {
      sizes = {n, shape.channels, shape.height, shape.width};
      type = torch::kFloat32;
    } else {
      sizes = {n, shape.height, shape.width, shape.channels};
    }
  }

  TensorBatch t;
  const Batch& host = batch.host();
  t.epoch = host.epoch;
  t.index = host.index;
  t.skipped = host.skipped.size();
  t.last_in_epoch = host.last_in_epoch;
  void* images = batch.data();
  void* labels = const_cast<std::int64_t*>(batch.labels());  // on the device, with the images
  const torch::Device where = torch_device(device);

  // One owner for both tensors: the deleter of the last one to die drops it,
  // and DeviceBatch's destructor releases the slot (protocol point 7).
  auto owner = std::make_shared<DeviceBatch>(std::move(batch));
  t.owner = owner;
  auto release = [owner](void*) mutable { owner.reset(); };
  t.images = torch::from_blob(images, sizes, release, torch::TensorOptions().dtype(type).device(where));
  t.labels = torch::from_blob(labels, {n}, release, torch::TensorOptions().dtype(torch::kInt64).device(where));
  if (const BatchTensor* soft = owner->extras().tensor(kSoftLabels)) {
    t.soft_labels = torch::from_blob(soft->data, soft->shape, release,
                                     torch::TensorOptions().dtype(scalar_type(soft->dtype)).device(where));
  }
  if (const auto lambda = owner->extras().value(kMixLambda)) t.mix_lambda = *lambda;
  return t;
}

}  // namespace conveyor
