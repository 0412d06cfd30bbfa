// The normalize kernel: uint8 NHWC samples -> NCHW in an element type, each
// element store_normalized() (device/dtype.h) with its channel's affine, so the
// host twin and the CUDA kernel compute the same bits from one definition.
// With `indices`, a gather fused into it: output sample n reads input sample
// indices[n]. With `src_stride`, the input samples lie that many bytes apart
// (one view of a multi-view sample, the others between them); the output is
// dense.
//
// Enqueued on a Stream of `device` like any of its operations: asynchronous to
// the caller, in order with the stream's other work. On the host backend it
// runs on the stream's thread (normalize_host.cpp); on CUDA it is a kernel
// launched on the stream (normalize.cu). Thread safety: as the stream's, one
// thread at a time. Never allocates device memory; the host backend allocates
// the queued operation. Throws DeviceError (CUDA: the launch's, with file:line)
// or the host stream's earlier error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "device/dtype.h"

namespace conveyor {

// src, dst and indices are memory of the device the job runs on.
struct NormalizeJob {
  // Bytes from one input sample to the next.
  std::size_t input_stride() const { return src_stride ? src_stride : height * width * channels; }

  const std::uint8_t* src = nullptr;
  void* dst = nullptr;
  const std::uint64_t* indices = nullptr;
  std::size_t samples = 0, height = 0, width = 0, channels = 0;  // channels 1..4
  std::size_t src_stride = 0;  // bytes from one input sample to the next; 0: height * width * channels
  ChannelAffine affine[4];
  DType out_type = DType::float32;
};

namespace kernels {

void normalize(Device& device, const NormalizeJob& job, Stream& stream);

}  // namespace kernels
}  // namespace conveyor
