// Stateless pixel operations on RGB8 HWC images: render a Geometry's box from
// decoded pixels straight into a batch slot, mirror rows, and convert to float
// CHW with per-channel mean and std.
//
// Every function writes into memory the caller owns (the slot) and keeps no
// state; all are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "image/augment.h"
#include "image/decode.h"
#include "image/normalize.h"
#include "image/resize.h"

namespace conveyor {

// What to ask the decoder for a geometry: the whole source pixels its box
// touches, clipped to the image, and the output pixels per source pixel it
// needs (a reduced JPEG scale may serve down to that).
struct DecodeRequest {
  Rect region;
  double min_scale = 1;
};
DecodeRequest decode_request(const Geometry& g, int image_width, int image_height);

// Writes out.height x out.width RGB8 pixels (dst.size() == out.height * out.width * 3)
// sampled from the geometry's box: resize_triangle() (bilinear, antialiased when
// downscaling), or a plain copy when the box maps pixel for pixel. Output pixels
// whose source lies outside the image_width x image_height image take `pad_value`
// (padding). Mirrors when g.flip, turns upside down when g.vflip. Allocates
// only through `scratch`.
void render(const DecodedView& src, const Geometry& g, int image_width, int image_height, unsigned char pad_value,
            std::span<unsigned char> dst, ResizeScratch& scratch);

// Reverses the pixel order of every row: an exact horizontal flip.
void flip_rows(std::span<unsigned char> image, int height, int width);
// Reverses the order of the rows: an exact vertical flip.
void flip_vertical(std::span<unsigned char> image, int height, int width);

// normalize_value() (the function the GPU kernel uses) of every uint8 value
// for each channel. Each channel has only 256 possible outputs, so a lookup
// gives the same bits as the arithmetic without an fmaf per element (a libm
// call where the compiler may not assume an FMA instruction).
struct NormalizeTable {
  explicit NormalizeTable(const Normalize& norm);
  float lut[3][256];
};

// uint8 HWC RGB -> float CHW: out[c][y][x] = (in[y][x][c] / 255 - mean[c]) / std[c],
// bit for bit what the device's normalize writes for the same pixels.
void to_float_chw(std::span<const unsigned char> hwc, int height, int width, const NormalizeTable& table,
                  std::span<float> chw);

}  // namespace conveyor
