#include "image/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace conveyor {

void flip_rows(std::span<unsigned char> image, int height, int width) {
  for (int y = 0; y < height; ++y) {
    unsigned char* row = image.data() + std::size_t(y) * width * 3;
    for (int l = 0, r = width - 1; l < r; ++l, --r) {
      for (int c = 0; c < 3; ++c) std::swap(row[l * 3 + c], row[r * 3 + c]);
    }
  }
}

void flip_vertical(std::span<unsigned char> image, int height, int width) {
  const std::size_t row = std::size_t(width) * 3;
  for (int t = 0, b = height - 1; t < b; ++t, --b) {
    std::swap_ranges(image.data() + std::size_t(t) * row, image.data() + std::size_t(t + 1) * row,
                     image.data() + std::size_t(b) * row);
  }
}

DecodeRequest decode_request(const Geometry& g, int image_width, int image_height) {
  // The box, and as far past it as the filter reaches (its support, a pixel
  // more) inside the window: a resize after Resize -> CenterCrop reads the
  // resized image beyond the crop, as torchvision's does.
  const double mx = std::ceil(std::max(1.0, (g.x1 - g.x0) / g.out.width)) + 1;
  const double my = std::ceil(std::max(1.0, (g.y1 - g.y0) / g.out.height)) + 1;
  const auto near = [](double v, int hi) { return int(std::clamp(v, -1.0, double(hi))); };  // never an int overflow
  const int x0 = std::clamp(near(std::floor(std::max(g.x0 - mx, g.window.u0)), image_width), 0, image_width - 1);
  const int y0 = std::clamp(near(std::floor(std::max(g.y0 - my, g.window.v0)), image_height), 0, image_height - 1);
  const int x1 = std::clamp(near(std::ceil(std::min(g.x1 + mx, g.window.u1)), image_width), x0 + 1, image_width);
  const int y1 = std::clamp(near(std::ceil(std::min(g.y1 + my, g.window.v1)), image_height), y0 + 1, image_height);
  return {{x0, y0, x1 - x0, y1 - y0}, std::max(g.out.width / (g.x1 - g.x0), g.out.height / (g.y1 - g.y0))};
}

void render(const DecodedView& src, const Geometry& g, int image_width, int image_height, unsigned char pad_value,
            std::span<unsigned char> dst, ResizeScratch& scratch) {
  const int ow = g.out.width, oh = g.out.height;
  // The part of the box inside the image and the window, and where it lands in the output.
  const double ix0 = std::max({g.x0, g.window.u0, 0.0}), ix1 = std::min({g.x1, g.window.u1, double(image_width)});
  const double iy0 = std::max({g.y0, g.window.v0, 0.0}), iy1 = std::min({g.y1, g.window.v1, double(image_height)});
  const double sx = ow / (g.x1 - g.x0), sy = oh / (g.y1 - g.y0);
  const int ox0 = std::clamp(int(std::lround((ix0 - g.x0) * sx)), 0, ow);
  const int ox1 = std::clamp(int(std::lround((ix1 - g.x0) * sx)), 0, ow);
  const int oy0 = std::clamp(int(std::lround((iy0 - g.y0) * sy)), 0, oh);
  const int oy1 = std::clamp(int(std::lround((iy1 - g.y0) * sy)), 0, oh);
  if (ox0 > 0 || oy0 > 0 || ox1 < ow || oy1 < oh) std::memset(dst.data(), pad_value, dst.size());  // padding
  bool mirrored = false;
  if (ox1 > ox0 && oy1 > oy0) {
    // The inside part in the decoded view's pixel coordinates.
    const double u0 = (ix0 - src.x0) * src.scale_x, u1 = (ix1 - src.x0) * src.scale_x;
    const double v0 = (iy0 - src.y0) * src.scale_y, v1 = (iy1 - src.y0) * src.scale_y;
    const std::ptrdiff_t out_stride = std::ptrdiff_t(ow) * 3;
    unsigned char* out = dst.data() + oy0 * out_stride + std::ptrdiff_t(ox0) * 3;
    const int cw = ox1 - ox0, ch = oy1 - oy0;
    const bool pixel_for_pixel = u0 == std::floor(u0) && v0 == std::floor(v0) && u1 - u0 == cw && v1 - v0 == ch;
    // A flip of a full-width resize is folded into the resize: no second pass.
    mirrored = g.flip && !pixel_for_pixel && ox0 == 0 && ox1 == ow;
    if (pixel_for_pixel) {  // e.g. RandomCrop at full scale: copy rows, no filtering
      for (int y = 0; y < ch; ++y) {
        std::memcpy(out + y * out_stride, src.pixels + (std::ptrdiff_t(v0) + y) * src.stride + std::ptrdiff_t(u0) * 3,
                    std::size_t(cw) * 3);
      }
    } else {
      const ResizeWindow window{(g.window.u0 - src.x0) * src.scale_x, (g.window.v0 - src.y0) * src.scale_y,
                                (g.window.u1 - src.x0) * src.scale_x, (g.window.v1 - src.y0) * src.scale_y};
      resize_triangle(src.pixels, src.width, src.height, src.stride, u0, v0, u1, v1, out, cw, ch, out_stride, scratch,
                      mirrored, window);
    }
  }
  if (g.flip && !mirrored) flip_rows(dst, oh, ow);
  // A second pass: the box's rows are rendered top down, then reversed (the
  // resize's taps are symmetric, so this is the resize of the flipped box).
  if (g.vflip) flip_vertical(dst, oh, ow);
}

NormalizeTable::NormalizeTable(const Normalize& norm) {
  for (int c = 0; c < 3; ++c) {
    const ChannelAffine a = channel_affine(norm.mean[c], norm.std[c]);
    for (int v = 0; v < 256; ++v) lut[c][v] = normalize_value((unsigned char)v, a);
  }
}

void to_float_chw(std::span<const unsigned char> hwc, int height, int width, const NormalizeTable& table,
                  std::span<float> chw) {
  const std::size_t plane = std::size_t(height) * width;
  float *r = chw.data(), *g = r + plane, *b = g + plane;
  const unsigned char* in = hwc.data();
  for (std::size_t i = 0; i < plane; ++i, in += 3) {
    r[i] = table.lut[0][in[0]];
    g[i] = table.lut[1][in[1]];
    b[i] = table.lut[2][in[2]];
  }
}

}  // namespace conveyor
