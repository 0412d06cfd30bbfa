// The mix kernel: MixUp's and CutMix's write (image/mixing.h), in place on a
// normalized NCHW batch, with the mixed soft labels. Sample j is paired with
// sample j - 1 (sample 0 with the last), torchvision's roll(1, 0):
//   MixUp (cut false): every element becomes
//     round(round(x[j-1] * other) + round(x[j] * own)),
//     each step rounded to the element type as torchvision's
//     x.roll(1, 0).mul_(1 - lam).add_(x.mul(lam)) rounds on a tensor of it
//     (float32: the same bits);
//   CutMix (cut true): the elements inside the box become x[j-1]'s, copied;
//   soft labels (when `soft` is set): soft[j][k] = (y[j-1] == k ? other : 0)
//     + (y[j] == k ? own : 0) in float32, torchvision's _mixup_label.
// The pairing needs each sample's value before its neighbour overwrites it:
// each thread (CUDA) or row (host) owns one position across the whole batch
// and carries the previous sample's original along, so the batch is mixed in
// place without a second buffer.
//
// Enqueued on a Stream of `device` like any of its operations: asynchronous to
// the caller, in order with the stream's other work. Host twin: mix_host.cpp,
// on the stream's thread; CUDA twin: mix.cu. Thread safety: as the stream's.
// Never allocates device memory. Throws DeviceError (CUDA: the launch's, with
// file:line) or the host stream's earlier error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"
#include "device/dtype.h"

namespace conveyor {

// data, labels and soft are memory of the device the job runs on.
struct MixJob {
  void* data = nullptr;  // [samples, channels, height, width] of `type`: float32, float16 or bfloat16
  std::size_t samples = 0, channels = 0, height = 0, width = 0;
  DType type = DType::float32;
  bool cut = false;                 // CutMix: copy the box; MixUp: blend it
  // lambda and 1 - lambda, as floats: MixUp's pixel weights, and the labels'
  // (CutMix's lambda is the box's, and its pixels are copied, not weighted).
  float own = 1, other = 0;
  std::uint32_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;  // the box [x1, x2) x [y1, y2); MixUp's is the whole image
  const std::int64_t* labels = nullptr;  // [samples], each in [0, classes)
  float* soft = nullptr;                 // [samples, classes] float32 out; null: no soft labels
  std::size_t classes = 0;
};

// One MixUp element, `cur` mixed with `prev` (the paired sample's), in the
// element type's bits; both twins call it. Products and sum rounded to the
// type one by one, as torchvision's three tensor ops are, with the weights in
// float32 as torch's CUDA kernels keep a Python scalar (torch 1.13's CPU
// kernels round it to float16 or bfloat16 first: a unit in the last place of
// the terms apart, python/tests/test_transforms.py).
template <DType T>
CONVEYOR_HD inline std::uint32_t mix_element(std::uint32_t cur, std::uint32_t prev, float own, float other) {
  if constexpr (T == DType::float32) {
#if defined(__CUDA_ARCH__)
    return float_bits(__fadd_rn(__fmul_rn(bits_float(prev), other), __fmul_rn(bits_float(cur), own)));
#else
    // No contraction into a fused multiply-add here (mix_host.cpp is built
    // with -ffp-contract=off): torchvision rounds each product.
    const float a = bits_float(prev) * other, b = bits_float(cur) * own;
    return float_bits(a + b);
#endif
  } else if constexpr (T == DType::float16) {
    const float a = half_bits_to_float(float_to_half_bits(half_bits_to_float(std::uint16_t(prev)) * other));
    const float b = half_bits_to_float(float_to_half_bits(half_bits_to_float(std::uint16_t(cur)) * own));
    return float_to_half_bits(a + b);
  } else {
    const float a = bfloat16_bits_to_float(float_to_bfloat16_bits(bfloat16_bits_to_float(std::uint16_t(prev)) * other));
    const float b = bfloat16_bits_to_float(float_to_bfloat16_bits(bfloat16_bits_to_float(std::uint16_t(cur)) * own));
    return float_to_bfloat16_bits(a + b);
  }
}

// One soft label: class k of a sample labelled `own_label`, paired with one labelled `other_label`.
CONVEYOR_HD inline float soft_label(std::int64_t own_label, std::int64_t other_label, std::int64_t k, float own,
                                    float other) {
  const float a = other_label == k ? other : 0.f, b = own_label == k ? own : 0.f;
  return a + b;
}

namespace kernels {

void mix(Device& device, const MixJob& job, Stream& stream);

}  // namespace kernels
}  // namespace conveyor
