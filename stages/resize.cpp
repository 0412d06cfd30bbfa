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

  // Horizontal pass over just the input rows the vertical pass reads.
  const int row_lo = s.y_first.front();
  const int row_hi = s.y_first.back() + s.y_count.back();
  const std::size_t row_len = std::size_t(out_width) * 3;
  s.rows.resize(std::size_t(row_hi - row_lo) * row_len);
  for (int y = row_lo; y < row_hi; ++y) {
    const unsigned char* in = src + y * src_stride;
    std::uint16_t* out = s.rows.data() + std::size_t(y - row_lo) * row_len;
    for (int o = 0; o < out_width; ++o) {
      const std::int16_t* w = &s.x_weights[std::size_t(o) * x_taps];
      const unsigned char* p = in + std::ptrdiff_t(s.x_first[std::size_t(o)]) * 3;
      std::int32_t r = 0, g = 0, b = 0;
      for (int k = 0; k < s.x_count[std::size_t(o)]; ++k, p += 3) {
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      constexpr int shift = kWeightBits - 8, half = 1 << (shift - 1);  // keep 8 fraction bits
      out[o * 3 + 0] = std::uint16_t((r + half) >> shift);
      out[o * 3 + 1] = std::uint16_t((g + half) >> shift);
      out[o * 3 + 2] = std::uint16_t((b + half) >> shift);
    }
  }
  // Vertical pass: each output row is a weighted sum of filtered rows, accumulated
  // row by row so the inner loop runs over contiguous memory and vectorizes.
  constexpr int shift = kWeightBits + 8;
  s.acc.resize(row_len);
  for (int o = 0; o < out_height; ++o) {
    const std::int16_t* w = &s.y_weights[std::size_t(o) * y_taps];
    const std::uint16_t* base = s.rows.data() + std::size_t(s.y_first[std::size_t(o)] - row_lo) * row_len;
    std::int32_t* acc = s.acc.data();
    std::fill(acc, acc + row_len, 1 << (shift - 1));
    for (int k = 0; k < s.y_count[std::size_t(o)]; ++k) {
      const std::uint16_t* row = base + std::size_t(k) * row_len;
      const std::int32_t wk = w[k];
      for (std::size_t x = 0; x < row_len; ++x) acc[x] += wk * std::int32_t(row[x]);
    }
    unsigned char* out = dst + o * dst_stride;
    for (std::size_t x = 0; x < row_len; ++x) out[x] = (unsigned char)std::clamp(acc[x] >> shift, 0, 255);
  }
}

}  // namespace conveyor
