// Where the GPU decode render (gpu_decode/cuda_jpeg_decoder.cu, CudaJpegDecoder::render)
// puts each sample's resize tap tables in the one buffer it copies to the
// device: per item, its x axis block then its y axis block, each block the
// arrays first (int32 x outputs), count (int32 x outputs) and weights (int16 x
// outputs x max_taps), back to back.
//
// Every block starts on a 16-byte boundary. The weights of an axis take
// outputs x max_taps x 2 bytes, and make_resize_taps' max_taps is odd, so with
// an odd output size they end 2 bytes off a 4-byte boundary: the next block's
// int32 arrays must not start there (the kernel's loads of them would fault
// with cudaErrorMisalignedAddress, which ends the CUDA context).
//
// Pure C++ with no CUDA header, so the unit test (tests/test_taps_layout.cpp)
// checks it in every build. constexpr; never allocates; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace conveyor {

inline constexpr std::size_t kTapsBlockAlign = 16;

constexpr std::size_t taps_align_up(std::size_t n) { return (n + kTapsBlockAlign - 1) / kTapsBlockAlign * kTapsBlockAlign; }

// One axis's tables, as byte offsets from the start of the buffer.
struct TapsAxisLayout {
  std::size_t first = 0;    // int32[outputs], 16-aligned: the block's start
  std::size_t count = 0;    // int32[outputs]
  std::size_t weights = 0;  // int16[outputs * max_taps]
  std::size_t end = 0;      // one past the weights, rounded up to 16: where the next block may start
};

// The tables of an axis of `outputs` output pixels and `max_taps` taps each,
// placed at the first 16-byte boundary at or after `at`.
constexpr TapsAxisLayout taps_axis_layout(std::size_t at, std::size_t outputs, std::size_t max_taps) {
  TapsAxisLayout l;
  l.first = taps_align_up(at);
  l.count = l.first + outputs * sizeof(std::int32_t);
  l.weights = l.count + outputs * sizeof(std::int32_t);
  l.end = taps_align_up(l.weights + outputs * max_taps * sizeof(std::int16_t));
  return l;
}

// One item's blocks: x at the first 16-byte boundary at or after `at`, y after
// it; `end` is where the next item may start (the buffer's size after the last).
struct TapsItemLayout {
  TapsAxisLayout x, y;
  std::size_t end = 0;
};

constexpr TapsItemLayout taps_item_layout(std::size_t at, std::size_t out_width, std::size_t x_taps,
                                          std::size_t out_height, std::size_t y_taps) {
  TapsItemLayout l;
  l.x = taps_axis_layout(at, out_width, x_taps);
  l.y = taps_axis_layout(l.x.end, out_height, y_taps);
  l.end = l.y.end;
  return l;
}

}  // namespace conveyor
