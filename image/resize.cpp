#include "image/resize.h"

#include "image/resize_math.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>  // SSE2: baseline on x86-64
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>  // AVX2, compiled per function (target attribute) and chosen at run time
#define CONVEYOR_RESIZE_AVX2 1
#endif

namespace conveyor {
namespace {

constexpr int kWeightBits = kResizeWeightBits;  // resize_math.h: the arithmetic both paths share

// Fixed point: weights sum to 1 << kWeightBits; the vertically filtered rows
// keep kRowBits fraction bits in int16 (255 << 7 = 32640 fits), so both passes
// can multiply int16 by int16 into int32 (SSE2's pmaddwd, two taps at a time).
constexpr int kVShift = kResizeVShift, kVHalf = 1 << (kVShift - 1);
constexpr int kHShift = kResizeHShift, kHHalf = 1 << (kHShift - 1);

// Vertical pass of one output row: out[x] = sum_k w[k] * rows[k][x] over n
// input rows spaced stride bytes apart, for x < len.
void vertical_row(const unsigned char* base, std::ptrdiff_t stride, const std::int16_t* w, int n, std::size_t len,
                  std::int16_t* out) {
  std::size_t x = 0;
#if defined(__SSE2__)
  // 16 bytes at a time: two input rows interleaved per pmaddwd.
  const __m128i zero = _mm_setzero_si128();
  for (; x + 16 <= len; x += 16) {
    __m128i a0 = _mm_set1_epi32(kVHalf), a1 = a0, a2 = a0, a3 = a0;
    for (int k = 0; k < n; k += 2) {
      const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + k * stride + std::ptrdiff_t(x)));
      const bool pair = k + 1 < n;
      const __m128i r1 =
          pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + (k + 1) * stride + std::ptrdiff_t(x))) : zero;
      const __m128i wk = _mm_set1_epi32(int(std::uint32_t(std::uint16_t(w[k])) |
                                                (std::uint32_t(std::uint16_t(pair ? w[k + 1] : 0)) << 16)));
      const __m128i lo0 = _mm_unpacklo_epi8(r0, zero), lo1 = _mm_unpacklo_epi8(r1, zero);
      const __m128i hi0 = _mm_unpackhi_epi8(r0, zero), hi1 = _mm_unpackhi_epi8(r1, zero);
      a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(lo0, lo1), wk));
      a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(lo0, lo1), wk));
      a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(hi0, hi1), wk));
      a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(hi0, hi1), wk));
    }
    a0 = _mm_srai_epi32(a0, kVShift), a1 = _mm_srai_epi32(a1, kVShift);
    a2 = _mm_srai_epi32(a2, kVShift), a3 = _mm_srai_epi32(a3, kVShift);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_packs_epi32(a0, a1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x + 8), _mm_packs_epi32(a2, a3));
  }
#endif
  for (; x < len; ++x) {  // the tail, or every byte without SSE2
    std::int32_t acc = kVHalf;
    for (int k = 0; k < n; ++k) acc += w[k] * std::int32_t(base[k * stride + std::ptrdiff_t(x)]);
    out[x] = std::int16_t(acc >> kVShift);
  }
}

// Horizontal pass of one row: out_width RGB pixels, each a weighted sum of
// `taps` (padded with zero weights) consecutive pixels of the int16 row from
// first[o]. mirror writes pixel o at out_width - 1 - o (a folded horizontal
// flip). Each pixel has its own taps, so this is vectorized over the three
// channels and two taps at a time, not across pixels: one pmaddwd multiplies
// (c of pixel k, c of pixel k + 1) by (w[k], w[k + 1]) for c = r, g, b.
void horizontal_row(const std::int16_t* row, const std::int32_t* first, const std::int16_t* weights, int out_width,
                    int taps, bool mirror, unsigned char* out) {
#if defined(__SSE2__)
  const int pairs = (taps + 1) / 2;
  // Pixels in the order they land in out, so each 4-byte store's spare byte is
  // overwritten by the next pixel; the last one stores exactly 3 bytes.
  for (int q = 0; q < out_width; ++q) {
    const int o = mirror ? out_width - 1 - q : q;
    const std::int16_t* p = row + std::ptrdiff_t(first[o]) * 3;
    const std::int16_t* w = weights + std::size_t(o) * std::size_t(pairs) * 8;
    __m128i acc = _mm_set1_epi32(kHHalf);
    for (int j = 0; j < pairs; ++j) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6 * j));  // pixels 2j, 2j+1, part of 2j+2
      const __m128i ab = _mm_unpacklo_epi16(a, _mm_srli_si128(a, 6));                  // r r g g b b . .
      acc = _mm_add_epi32(acc, _mm_madd_epi16(ab, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * j))));
    }
    acc = _mm_srai_epi32(acc, kHShift);
    const __m128i px = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
    const std::uint32_t rgbx = std::uint32_t(_mm_cvtsi128_si32(px));
    if (q + 1 < out_width) {
      std::memcpy(out + std::ptrdiff_t(q) * 3, &rgbx, 4);
    } else {
      std::memcpy(out + std::ptrdiff_t(q) * 3, &rgbx, 3);  // little-endian: r, g, b
    }
  }
#else
  for (int q = 0; q < out_width; ++q) {
    const int o = mirror ? out_width - 1 - q : q;
    const std::int16_t* w = weights + std::size_t(o) * std::size_t(taps);
    const std::int16_t* p = row + std::ptrdiff_t(first[o]) * 3;
    std::int32_t r = kHHalf, g = r, b = r;
    for (int k = 0; k < taps; ++k) {
      r += w[k] * std::int32_t(p[3 * k]);
      g += w[k] * std::int32_t(p[3 * k + 1]);
      b += w[k] * std::int32_t(p[3 * k + 2]);
    }
    out[q * 3 + 0] = (unsigned char)std::clamp(r >> kHShift, 0, 255);
    out[q * 3 + 1] = (unsigned char)std::clamp(g >> kHShift, 0, 255);
    out[q * 3 + 2] = (unsigned char)std::clamp(b >> kHShift, 0, 255);
  }
#endif
}

#if defined(CONVEYOR_RESIZE_AVX2)
// The same two passes 256 bits wide, for CPUs that have AVX2 (resize_isa()).
// Every output value is the same integer sum in the same order as in the SSE2
// and scalar loops, so the three give the same bits (tests/test_gpu_decode_plan.cpp
// holds each to resize_reference(); CMake runs it again with CONVEYOR_RESIZE_ISA=sse2).

// 32 bytes at a time; the rest goes to the SSE2 loop.
__attribute__((target("avx2"))) void vertical_row_avx2(const unsigned char* base, std::ptrdiff_t stride,
                                                        const std::int16_t* w, int n, std::size_t len,
                                                        std::int16_t* out) {
  std::size_t x = 0;
  const __m256i zero = _mm256_setzero_si256();
  for (; x + 32 <= len; x += 32) {
    __m256i a0 = _mm256_set1_epi32(kVHalf), a1 = a0, a2 = a0, a3 = a0;
    for (int k = 0; k < n; k += 2) {
      const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + k * stride + std::ptrdiff_t(x)));
      const bool pair = k + 1 < n;
      const __m256i r1 =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + (k + 1) * stride + std::ptrdiff_t(x)))
               : zero;
      const __m256i wk = _mm256_set1_epi32(int(std::uint32_t(std::uint16_t(w[k])) |
                                               (std::uint32_t(std::uint16_t(pair ? w[k + 1] : 0)) << 16)));
      // Unpacks work within each 128-bit lane: a0..a3 hold bytes 0-3, 4-7, 8-11,
      // 12-15 of the low lane and 16-19, 20-23, 24-27, 28-31 of the high one.
      const __m256i lo0 = _mm256_unpacklo_epi8(r0, zero), lo1 = _mm256_unpacklo_epi8(r1, zero);
      const __m256i hi0 = _mm256_unpackhi_epi8(r0, zero), hi1 = _mm256_unpackhi_epi8(r1, zero);
      a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi16(lo0, lo1), wk));
      a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi16(lo0, lo1), wk));
      a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi16(hi0, hi1), wk));
      a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi16(hi0, hi1), wk));
    }
    a0 = _mm256_srai_epi32(a0, kVShift), a1 = _mm256_srai_epi32(a1, kVShift);
    a2 = _mm256_srai_epi32(a2, kVShift), a3 = _mm256_srai_epi32(a3, kVShift);
    const __m256i p01 = _mm256_packs_epi32(a0, a1);  // x 0-7 | x 16-23
    const __m256i p23 = _mm256_packs_epi32(a2, a3);  // x 8-15 | x 24-31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + x), _mm256_permute2x128_si256(p01, p23, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + x + 16), _mm256_permute2x128_si256(p01, p23, 0x31));
  }
  vertical_row(base + x, stride, w, n, len - x, out + x);
}

// Two output pixels at a time, one per 128-bit lane, each as the SSE2 loop
// computes one; an odd last pixel goes to the SSE2 loop.
__attribute__((target("avx2"))) void horizontal_row_avx2(const std::int16_t* row, const std::int32_t* first,
                                                          const std::int16_t* weights, int out_width, int taps,
                                                          bool mirror, unsigned char* out) {
  const int pairs = (taps + 1) / 2;
  int q = 0;
  for (; q + 1 < out_width; q += 2) {
    const int o0 = mirror ? out_width - 1 - q : q, o1 = mirror ? o0 - 1 : o0 + 1;
    const std::int16_t* p0 = row + std::ptrdiff_t(first[o0]) * 3;
    const std::int16_t* p1 = row + std::ptrdiff_t(first[o1]) * 3;
    const std::int16_t* w0 = weights + std::size_t(o0) * std::size_t(pairs) * 8;
    const std::int16_t* w1 = weights + std::size_t(o1) * std::size_t(pairs) * 8;
    __m256i acc = _mm256_set1_epi32(kHHalf);
    for (int j = 0; j < pairs; ++j) {
      const __m256i a = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 6 * j))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 6 * j)), 1);
      const __m256i ab = _mm256_unpacklo_epi16(a, _mm256_srli_si256(a, 6));  // per lane: r r g g b b . .
      const __m256i wv = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w0 + 8 * j))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w1 + 8 * j)), 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(ab, wv));
    }
    acc = _mm256_srai_epi32(acc, kHShift);
    const __m256i px = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);
    const std::uint32_t rgbx0 = std::uint32_t(_mm_cvtsi128_si32(_mm256_castsi256_si128(px)));
    const std::uint32_t rgbx1 = std::uint32_t(_mm_cvtsi128_si32(_mm256_extracti128_si256(px, 1)));
    std::memcpy(out + std::ptrdiff_t(q) * 3, &rgbx0, 4);  // its spare byte is pixel q + 1's, written next
    std::memcpy(out + std::ptrdiff_t(q + 1) * 3, &rgbx1, q + 2 < out_width ? 4 : 3);
  }
  if (q < out_width) {  // the odd last pixel: the SSE2 loop over a one-pixel row
    const int o = mirror ? 0 : q;
    horizontal_row(row, first + o, weights + std::size_t(o) * std::size_t(pairs) * 8, 1, taps, false,
                   out + std::ptrdiff_t(q) * 3);
  }
}
#endif

// The horizontal weights in the layout horizontal_row reads: with SSE2, per
// pixel and pair of taps, (w0 w1 w0 w1 w0 w1 0 0); without, the taps as made.
void layout_horizontal_weights(const std::vector<std::int16_t>& taps_weights, int out_width, int taps,
                               std::vector<std::int16_t>& out) {
#if defined(__SSE2__)
  const int pairs = (taps + 1) / 2;
  out.assign(std::size_t(out_width) * std::size_t(pairs) * 8, 0);
  for (int o = 0; o < out_width; ++o) {
    const std::int16_t* w = &taps_weights[std::size_t(o) * std::size_t(taps)];
    std::int16_t* v = &out[std::size_t(o) * std::size_t(pairs) * 8];
    for (int j = 0; j < pairs; ++j) {
      const std::int16_t w0 = w[2 * j], w1 = 2 * j + 1 < taps ? w[2 * j + 1] : std::int16_t(0);
      for (int c = 0; c < 3; ++c) {
        v[8 * j + 2 * c] = w0;
        v[8 * j + 2 * c + 1] = w1;
      }
    }
  }
#else
  (void)out_width;
  (void)taps;
  out = taps_weights;
#endif
}

}  // namespace

void make_resize_taps(double start, double end, int in_size, int out_size, ResizeTaps& taps, double window_lo,
                      double window_hi) {
  // The pixels the window covers, at least one, inside the image.
  const int first = window_lo <= 0 ? 0 : int(std::min(std::floor(window_lo), double(in_size - 1)));
  const int last = window_hi >= in_size ? in_size - 1 : std::max(first, int(std::ceil(window_hi)) - 1);
  const double scale = (end - start) / out_size;  // input pixels per output pixel
  const double support = std::max(1.0, scale);     // antialias: widen when shrinking
  const int max_taps = int(std::ceil(support)) * 2 + 1;
  taps.max_taps = max_taps;
  taps.first.resize(std::size_t(out_size));
  taps.count.resize(std::size_t(out_size));
  taps.weights.assign(std::size_t(out_size) * max_taps, 0);
  double w[64 * 2 + 1];
  for (int o = 0; o < out_size; ++o) {
    const double centre = start + (o + 0.5) * scale;
    const int lo = std::min(last, std::max(first, int(std::floor(centre - support))));
    const int hi = std::min({last, int(std::ceil(centre + support)), lo + max_taps - 1});
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
    taps.first[std::size_t(o)] = lo;
    taps.count[std::size_t(o)] = n;
    // Round each weight, then give the rounding error to the largest so they sum exactly.
    int total = 0, biggest = 0;
    std::int16_t* out = &taps.weights[std::size_t(o) * max_taps];
    for (int k = 0; k < n; ++k) {
      out[k] = std::int16_t(std::lround(w[k] / sum * (1 << kWeightBits)));
      total += out[k];
      if (out[k] > out[biggest]) biggest = k;
    }
    out[biggest] = std::int16_t(out[biggest] + ((1 << kWeightBits) - total));
  }
}

ResizeBox clamp_resize_box(double u0, double v0, double u1, double v1, int width, int height, int out_width,
                           int out_height) {
  // Supports wider than 64 input pixels per output pixel would need more taps than
  // make_resize_taps keeps; shrink factors that large cannot occur in one JPEG-scaled
  // crop, but clamp the box so the filter stays defined whatever the caller passes.
  u0 = std::clamp(u0, 0.0, double(width));
  u1 = std::clamp(u1, u0 + 1e-6, double(width));
  v0 = std::clamp(v0, 0.0, double(height));
  v1 = std::clamp(v1, v0 + 1e-6, double(height));
  const double max_shrink = 64;
  if ((u1 - u0) / out_width > max_shrink) u1 = u0 + max_shrink * out_width;
  if ((v1 - v0) / out_height > max_shrink) v1 = v0 + max_shrink * out_height;
  return {u0, v0, u1, v1};
}

void resize_reference(const unsigned char* src, int width, int height, std::ptrdiff_t src_stride, double u0, double v0,
                      double u1, double v1, unsigned char* dst, int out_width, int out_height,
                      std::ptrdiff_t dst_stride, bool mirror, ResizeWindow window) {
  const ResizeBox box = clamp_resize_box(u0, v0, u1, v1, width, height, out_width, out_height);
  ResizeTaps x, y;
  make_resize_taps(box.u0, box.u1, width, out_width, x, window.u0, window.u1);
  make_resize_taps(box.v0, box.v1, height, out_height, y, window.v0, window.v1);
  for (int oy = 0; oy < out_height; ++oy) {
    for (int q = 0; q < out_width; ++q) {
      const int ox = mirror ? out_width - 1 - q : q;
      for (int c = 0; c < 3; ++c) {
        dst[std::ptrdiff_t(oy) * dst_stride + std::ptrdiff_t(q) * 3 + c] =
            resize_value(src, src_stride, view(x), view(y), ox, oy, c);
      }
    }
  }
}

namespace {
enum class Isa { avx2, sse2, scalar };

// Chosen once, at the first resize (resize_isa()'s contract).
Isa chosen_isa() {
  static const Isa isa = [] {
#if defined(CONVEYOR_RESIZE_AVX2)
    const char* force = std::getenv("CONVEYOR_RESIZE_ISA");
    const bool baseline = force && std::strcmp(force, "sse2") == 0;
    if (!baseline && __builtin_cpu_supports("avx2")) return Isa::avx2;
#endif
#if defined(__SSE2__)
    return Isa::sse2;
#else
    return Isa::scalar;
#endif
  }();
  return isa;
}
}  // namespace

const char* resize_isa() {
  switch (chosen_isa()) {
    case Isa::avx2: return "avx2";
    case Isa::sse2: return "sse2";
    case Isa::scalar: break;
  }
  return "scalar";
}

void resize_triangle(const unsigned char* src, int width, int height, std::ptrdiff_t src_stride, double u0, double v0,
                     double u1, double v1, unsigned char* dst, int out_width, int out_height, std::ptrdiff_t dst_stride,
                     ResizeScratch& s, bool mirror, ResizeWindow window) {
#if defined(CONVEYOR_RESIZE_AVX2)
  const bool avx2 = chosen_isa() == Isa::avx2;
  const auto vertical = avx2 ? vertical_row_avx2 : vertical_row;
  const auto horizontal = avx2 ? horizontal_row_avx2 : horizontal_row;
#else
  const auto vertical = vertical_row;
  const auto horizontal = horizontal_row;
#endif
  const ResizeBox box = clamp_resize_box(u0, v0, u1, v1, width, height, out_width, out_height);
  make_resize_taps(box.u0, box.u1, width, out_width, s.x, window.u0, window.u1);
  make_resize_taps(box.v0, box.v1, height, out_height, s.y, window.v0, window.v1);
  const int x_taps = s.x.max_taps, y_taps = s.y.max_taps;

  // Vertical pass first, over just the input columns the horizontal taps read:
  // it runs over contiguous memory, and it leaves out_height rows (not the
  // box's input rows) for the horizontal pass, which costs more per pixel.
  const int col_lo = s.x.first.front();
  const int cols = s.x.first.back() + s.x.count.back() - col_lo;
  const std::size_t in_len = std::size_t(cols) * 3;
  // Zero padding of x_taps + 2 pixels: fixed-length taps, and the SIMD loads
  // of 8 values from a pair's first pixel, stay inside the row.
  const std::size_t stride = std::size_t(cols + x_taps + 2) * 3;
  s.rows.resize(std::size_t(out_height) * stride);
  for (int o = 0; o < out_height; ++o) {
    const unsigned char* base = src + std::ptrdiff_t(s.y.first[std::size_t(o)]) * src_stride + std::ptrdiff_t(col_lo) * 3;
    std::int16_t* out = s.rows.data() + std::size_t(o) * stride;
    vertical(base, src_stride, &s.y.weights[std::size_t(o) * y_taps], s.y.count[std::size_t(o)], in_len, out);
    std::fill(out + in_len, out + stride, std::int16_t{0});
  }
  // Horizontal pass over the out_height filtered rows; x_first relative to col_lo.
  for (auto& f : s.x.first) f -= col_lo;
  layout_horizontal_weights(s.x.weights, out_width, x_taps, s.x_lanes);
  for (int o = 0; o < out_height; ++o) {
    horizontal(s.rows.data() + std::size_t(o) * stride, s.x.first.data(), s.x_lanes.data(), out_width, x_taps, mirror,
               dst + o * dst_stride);
  }
}

}  // namespace conveyor
