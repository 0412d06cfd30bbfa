// Resize: a separable triangle filter (bilinear; antialiased when shrinking,
// like PIL's and torchvision's antialiased bilinear) from a sub-pixel box of
// an RGB8 image into an RGB8 output.
//
// Written by hand, not taken from stb_image_resize: Debian 12's libstb
// (stb_image_resize 0.97, built with assertions) aborts the process in
// stbir__normalize_downsample_coefficients for some downscale ratios (upstream
// nothings/stb#1449, open), which we hit on ordinary RandomResizedCrop boxes of
// ImageNet photos. An abort cannot be caught or skipped, so the library path
// cannot ship; `conveyor-bench-images resize` compares the two's speed
// (docs/benchmarks.md). Both passes use AVX2 where the CPU has it (chosen
// once at run time), else SSE2 (x86-64's baseline), with a scalar loop
// elsewhere; all three give the same bits. The arithmetic is
// resize_math.h's, which the GPU decode path's kernel shares; tests hold the
// two to the same bits.
//
// Stateless; thread-safe. Allocates only through the caller's ResizeScratch,
// which is reused between calls so the steady state does not allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "image/resize_math.h"

namespace conveyor {

struct ResizeScratch {
  ResizeTaps x, y;
  std::vector<std::int16_t> x_lanes;  // x.weights laid out for the horizontal pass
  std::vector<std::int16_t> rows;     // vertically filtered rows, 7 fraction bits, zero-padded
};

// The kernels resize_triangle runs in this process: "avx2", "sse2" or "scalar".
// AVX2 is used when the CPU has it, unless the environment has
// CONVEYOR_RESIZE_ISA=sse2 (read once, at the first resize; the tests run both
// paths this way). Any other value changes nothing: all paths give the same bits.
const char* resize_isa();

// Samples the box [u0, u1) x [v0, v1) (in pixels of src, 0 <= u0 < u1 <= width,
// likewise v) into out_width x out_height pixels at dst (row stride dst_stride
// bytes). Samples near the image's edge, or the window's (ResizeWindow: the
// crop a chain resizes), renormalize over the pixels that exist there.
// mirror flips the output left to right (RandomHorizontalFlip folded into the
// resize, saving a pass over the output). Writes only the out_width x
// out_height pixels at dst, never the bytes between rows.
void resize_triangle(const unsigned char* src, int width, int height, std::ptrdiff_t src_stride, double u0, double v0,
                     double u1, double v1, unsigned char* dst, int out_width, int out_height, std::ptrdiff_t dst_stride,
                     ResizeScratch& scratch, bool mirror = false, ResizeWindow window = {});

}  // namespace conveyor
