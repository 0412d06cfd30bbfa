#include "stages/resize.h"

#include <algorithm>
#include <cmath>

namespace conveyor {
namespace {

constexpr int kWeightBits = 14;  // weights sum to 1 << 14

// Filter taps for each output pixel along one axis: the input pixels within the
// triangle's support (its radius grows with the shrink factor) and their weights.
void make_taps(double start, double end, int in_size, int out_size, std::vector<std::int32_t>& first,
               std::vector<std::int32_t>& count, std::vector<std::int16_t>& weights) {
  const double scale = (end - start) / out_size;  // input pixels per output pixel
  const double support = std::max(1.0, scale);     // antialias: widen when shrinking
  const int max_taps = int(std::ceil(support)) * 2 + 1;
  first.resize(std::size_t(out_size));
  count.resize(std::size_t(out_size));
  weights.assign(std::size_t(out_size) * max_taps, 0);
  double w[64 * 2 + 1];
  for (int o = 0; o < out_size; ++o) {
    const double centre = start + (o + 0.5) * scale;
    const int lo = std::max(0, int(std::floor(centre - support)));
    const int hi = std::min({in_size - 1, int(std::ceil(centre + support)), lo + max_taps - 1});
    double sum = 0;
    int n = 0;
    for (int i = lo; i <= hi && n < 129; ++i, ++n) {
      w[n] = std::max(0.0, 1 - std::abs((i + 0.5 - centre) / support));
      sum += w[n];
    }
    if (sum <= 0) {  // the centre lies past the last pixel: take the nearest one
      w[0] = sum = 1;
      n = 1;
    }
    first[std::size_t(o)] = lo;
    count[std::size_t(o)] = n;
    // Round each weight, then give the rounding error to the largest so they sum exactly.
    int total = 0, biggest = 0;
    std::int16_t* out = &weights[std::size_t(o) * max_taps];
    for (int k = 0; k < n; ++k) {
      out[k] = std::int16_t(std::lround(w[k] / sum * (1 << kWeightBits)));
      total += out[k];
      if (out[k] > out[biggest]) biggest = k;
    }
    out[biggest] = std::int16_t(out[biggest] + ((1 << kWeightBits) - total));
  }
}

// The horizontal pass of one row for taps padded to N (zero weights beyond a
// pixel's count), so the tap loop has a fixed length the compiler unrolls:
// this pass cannot be vectorized across pixels (each has its own taps) and was
// the resize's hot spot with a variable-length loop.
template <int N>
void horizontal_row(const std::uint16_t* row, const std::int32_t* first, const std::int16_t* weights, int out_width,
                    int taps, unsigned char* out) {
  constexpr int shift = kWeightBits + 8;  // the rows carry 8 fraction bits
  const int n = N > 0 ? N : taps;
  for (int o = 0; o < out_width; ++o) {
    const std::int16_t* w = weights + std::size_t(o) * std::size_t(n);
    const std::uint16_t* p = row + std::ptrdiff_t(first[o]) * 3;
    std::int32_t r = 1 << (shift - 1), g = r, b = r;
    for (int k = 0; k < n; ++k) {
      r += w[k] * std::int32_t(p[3 * k]);
      g += w[k] * std::int32_t(p[3 * k + 1]);
      b += w[k] * std::int32_t(p[3 * k + 2]);
    }
    out[o * 3 + 0] = (unsigned char)std::clamp(r >> shift, 0, 255);
    out[o * 3 + 1] = (unsigned char)std::clamp(g >> shift, 0, 255);
    out[o * 3 + 2] = (unsigned char)std::clamp(b >> shift, 0, 255);
  }
}

}  // namespace

void resize_triangle(const unsigned char* src, int width, int height, std::ptrdiff_t src_stride, double u0, double v0,
                     double u1, double v1, unsigned char* dst, int out_width, int out_height, std::ptrdiff_t dst_stride,
                     ResizeScratch& s) {
  // Supports wider than 64 input pixels per output pixel would need more taps than
  // make_taps keeps; shrink factors that large cannot occur in one JPEG-scaled crop,
  // but clamp the box so the filter stays defined whatever the caller passes.
  u0 = std::clamp(u0, 0.0, double(width));
  u1 = std::clamp(u1, u0 + 1e-6, double(width));
  v0 = std::clamp(v0, 0.0, double(height));
  v1 = std::clamp(v1, v0 + 1e-6, double(height));
  const double max_shrink = 64;
  if ((u1 - u0) / out_width > max_shrink) u1 = u0 + max_shrink * out_width;
  if ((v1 - v0) / out_height > max_shrink) v1 = v0 + max_shrink * out_height;
  make_taps(u0, u1, width, out_width, s.x_first, s.x_count, s.x_weights);
  make_taps(v0, v1, height, out_height, s.y_first, s.y_count, s.y_weights);
  const int x_taps = int(s.x_weights.size() / std::size_t(out_width));
  const int y_taps = int(s.y_weights.size() / std::size_t(out_height));

  // Vertical pass first, over just the input columns the horizontal taps read:
  // it runs over contiguous memory and vectorizes, and it leaves out_height
  // rows (not the box's input rows) for the horizontal pass, which does not.
  const int col_lo = s.x_first.front();
  const int cols = s.x_first.back() + s.x_count.back() - col_lo;
  const std::size_t in_len = std::size_t(cols) * 3;
  const std::size_t stride = std::size_t(cols + x_taps) * 3;  // zero padding: fixed-length taps stay inside
  s.rows.resize(std::size_t(out_height) * stride);
  s.acc.resize(in_len);
  constexpr int vshift = kWeightBits - 8, vhalf = 1 << (vshift - 1);  // keep 8 fraction bits
  for (int o = 0; o < out_height; ++o) {
    const std::int16_t* w = &s.y_weights[std::size_t(o) * y_taps];
    const unsigned char* base = src + std::ptrdiff_t(s.y_first[std::size_t(o)]) * src_stride + std::ptrdiff_t(col_lo) * 3;
    std::int32_t* acc = s.acc.data();
    std::fill(acc, acc + in_len, vhalf);
    for (int k = 0; k < s.y_count[std::size_t(o)]; ++k) {
      const unsigned char* row = base + std::ptrdiff_t(k) * src_stride;
      const std::int32_t wk = w[k];
      for (std::size_t x = 0; x < in_len; ++x) acc[x] += wk * std::int32_t(row[x]);
    }
    std::uint16_t* out = s.rows.data() + std::size_t(o) * stride;
    for (std::size_t x = 0; x < in_len; ++x) out[x] = std::uint16_t(std::clamp(acc[x] >> vshift, 0, 65535));
    std::fill(out + in_len, out + stride, std::uint16_t{0});
  }
  // Horizontal pass over the out_height filtered rows; x_first relative to col_lo.
  for (auto& f : s.x_first) f -= col_lo;
  auto pass = horizontal_row<0>;
  switch (x_taps) {
    case 3: pass = horizontal_row<3>; break;
    case 5: pass = horizontal_row<5>; break;
    case 7: pass = horizontal_row<7>; break;
    case 9: pass = horizontal_row<9>; break;
    default: break;  // wider supports: the generic loop
  }
  for (int o = 0; o < out_height; ++o) {
    pass(s.rows.data() + std::size_t(o) * stride, s.x_first.data(), s.x_weights.data(), out_width, x_taps,
         dst + o * dst_stride);
  }
}

}  // namespace conveyor
