// Resize arithmetic, one output value at a time: the fixed-point triangle
// filter of resize_triangle() (image/resize.h), written once for the host and
// the CUDA kernels (CONVEYOR_HD marks it __host__ __device__ under nvcc, as
// normalize_value is), so the GPU decode path's resize is tested on the CPU.
//
// resize_triangle() runs the same sums row by row in SIMD; resize_reference()
// below runs them pixel by pixel through resize_value(), the function a kernel
// calls, and tests require the two to give the same bits.
//
// Fixed point: each axis's weights sum to 1 << kResizeWeightBits. A vertical
// sum keeps kResizeRowBits fraction bits (255 << 7 fits int16); the horizontal
// sum over those rounds to the output byte. Integer arithmetic only, so host and
// device agree exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "image/normalize.h"  // CONVEYOR_HD

namespace conveyor {

inline constexpr int kResizeWeightBits = 14;
inline constexpr int kResizeRowBits = 7;
inline constexpr int kResizeVShift = kResizeWeightBits - kResizeRowBits;
inline constexpr int kResizeHShift = kResizeWeightBits + kResizeRowBits;

// The taps of one axis: output pixel o reads input pixels first[o] ..
// first[o] + count[o] - 1 with weights[o * max_taps + k] (zero past count[o]).
struct ResizeTaps {
  std::vector<std::int32_t> first, count;
  std::vector<std::int16_t> weights;
  int max_taps = 0;
};

// Device-copyable view of one axis's taps.
struct ResizeTapsView {
  const std::int32_t* first = nullptr;
  const std::int32_t* count = nullptr;
  const std::int16_t* weights = nullptr;
  int max_taps = 0;
};
inline ResizeTapsView view(const ResizeTaps& t) { return {t.first.data(), t.count.data(), t.weights.data(), t.max_taps}; }

// The source box [u0, u1) x [v0, v1) as resize_triangle() uses it: clamped
// into the image, at least 1e-6 wide, and at most 64 input pixels per output
// pixel (the widest support the taps keep).
struct ResizeBox {
  double u0, v0, u1, v1;
};
ResizeBox clamp_resize_box(double u0, double v0, double u1, double v1, int width, int height, int out_width,
                           int out_height);

// The input pixels a resize may read, [u0, u1) x [v0, v1) in the source's own
// pixels (partly covered pixels included), beside the image's bounds:
// torchvision crops and then resizes what is left, so a sample near the crop's
// edge renormalizes over the crop's pixels, not the image's. Default:
// unbounded, the whole image.
struct ResizeWindow {
  static constexpr double kOpen = std::numeric_limits<double>::infinity();
  double u0 = -kOpen, v0 = -kOpen, u1 = kOpen, v1 = kOpen;
};

// The triangle filter's taps for out_size output pixels over [start, end) of
// in_size input pixels (antialiased when shrinking), reading only pixels of
// [window_lo, window_hi) (see ResizeWindow). Host only: it rounds doubles, and
// a kernel receives the result.
void make_resize_taps(double start, double end, int in_size, int out_size, ResizeTaps& taps,
                      double window_lo = -ResizeWindow::kOpen, double window_hi = ResizeWindow::kOpen);

// The vertical sum for input column `x` (byte offset x * 3 + c within a row)
// at output row `oy`: 7 fraction bits.
CONVEYOR_HD inline std::int32_t resize_vertical(const unsigned char* src, std::ptrdiff_t stride, ResizeTapsView y,
                                                int oy, std::ptrdiff_t byte) {
  const std::int16_t* w = y.weights + std::ptrdiff_t(oy) * y.max_taps;
  const unsigned char* p = src + std::ptrdiff_t(y.first[oy]) * stride + byte;
  std::int32_t acc = 1 << (kResizeVShift - 1);
  for (int k = 0; k < y.count[oy]; ++k) acc += std::int32_t(w[k]) * std::int32_t(p[std::ptrdiff_t(k) * stride]);
  return acc >> kResizeVShift;
}

// Output channel c of pixel (ox, oy) (before any mirroring): the horizontal sum
// of vertical sums, rounded and clamped to a byte.
CONVEYOR_HD inline unsigned char resize_value(const unsigned char* src, std::ptrdiff_t stride, ResizeTapsView x,
                                              ResizeTapsView y, int ox, int oy, int c) {
  const std::int16_t* w = x.weights + std::ptrdiff_t(ox) * x.max_taps;
  std::int32_t acc = 1 << (kResizeHShift - 1);
  for (int k = 0; k < x.count[ox]; ++k) {
    acc += std::int32_t(w[k]) * resize_vertical(src, stride, y, oy, std::ptrdiff_t(x.first[ox] + k) * 3 + c);
  }
  acc >>= kResizeHShift;
  return (unsigned char)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
}

// resize_triangle()'s result computed pixel by pixel through resize_value():
// the host twin of the GPU kernel. Same arguments and contract; slow (it
// repeats each vertical sum per horizontal tap), for tests and the host
// backend's GPU-decode twin.
void resize_reference(const unsigned char* src, int width, int height, std::ptrdiff_t src_stride, double u0, double v0,
                      double u1, double v1, unsigned char* dst, int out_width, int out_height,
                      std::ptrdiff_t dst_stride, bool mirror = false, ResizeWindow window = {});

}  // namespace conveyor
