// The erase kernel: RandomErasing's write (image/random_erasing.h). Sample n of
// an NCHW batch gets boxes[n] set to value[c] in every channel c; a box of
// height or width 0 leaves its sample as it is. torchvision's F.erase on each
// sample, with the value converted to the element type as the normalize kernel
// converts (device/dtype.h): float16 and bfloat16 rounded to nearest even,
// uint8 rounded and clamped.
//
// Enqueued on a Stream of `device` like any of its operations: asynchronous to
// the caller, in order with the stream's other work. Host twin: erase_host.cpp,
// on the stream's thread; CUDA twin: erase.cu. Thread safety: as the stream's.
// Never allocates device memory. Throws DeviceError (CUDA: the launch's, with
// file:line) or the host stream's earlier error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "device/dtype.h"
#include "image/random_erasing.h"  // EraseBox

namespace conveyor {

// data and boxes are memory of the device the job runs on.
struct EraseJob {
  void* data = nullptr;             // [samples, channels, height, width] of `type`
  const EraseBox* boxes = nullptr;  // [samples], each inside height x width
  std::size_t samples = 0, channels = 0, height = 0, width = 0;  // channels 1..4
  DType type = DType::float32;
  float value[4] = {0, 0, 0, 0};  // per channel
};

// value converted to `type`, in the low dtype_size(type) bytes: the bits both
// twins write.
inline std::uint32_t erase_element_bits(DType type, float value) {
  switch (type) {
    case DType::float32: return float_bits(value);
    case DType::float16: return float_to_half_bits(value);
    case DType::bfloat16: return float_to_bfloat16_bits(value);
    case DType::uint8: return value <= 0 ? 0u : value >= 255 ? 255u : std::uint32_t(value + 0.5f);
  }
  return 0;
}

namespace kernels {

void erase(Device& device, const EraseJob& job, Stream& stream);

}  // namespace kernels
}  // namespace conveyor
