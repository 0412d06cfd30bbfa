#include "image/photometric.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace conveyor {

namespace {

void check(bool ok, const char* op, const std::string& problem) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + problem);
}

void check_view(const RgbView& img, const char* op) {
  check(img.width >= 0 && img.height >= 0, op, "negative image size");
  check(img.width == 0 || img.height == 0 || (img.pixels && img.stride >= std::ptrdiff_t(img.width) * 3), op,
        "no pixels, or a row stride shorter than width * 3");
}

// torchvision's uint8 result: clamp to [0, 255] in float, then truncate.
inline std::uint8_t to_u8(float v) { return std::uint8_t(std::clamp(v, 0.0f, 255.0f)); }

// torchvision's rgb_to_grayscale on uint8: the float32 sum, truncated.
inline std::uint8_t luma(const std::uint8_t* p) {
  return std::uint8_t(0.2989f * float(p[0]) + 0.587f * float(p[1]) + 0.114f * float(p[2]));
}

template <typename F>
void each_pixel(RgbView img, F&& f) {
  for (int y = 0; y < img.height; ++y) {
    std::uint8_t* row = img.pixels + std::ptrdiff_t(y) * img.stride;
    for (int x = 0; x < img.width; ++x) f(row + std::ptrdiff_t(x) * 3);
  }
}

// _blend(img, other, ratio): ratio * img + (1 - ratio) * other in float32.
struct Blend {
  float a, b;
  explicit Blend(double ratio) : a(float(ratio)), b(float(1.0 - ratio)) {}
  std::uint8_t operator()(std::uint8_t v, float other) const { return to_u8(a * float(v) + b * other); }
};

void check_factor(double f, const char* op, const char* name) {
  check(std::isfinite(f) && f >= 0, op, std::string(name) + " must be finite and >= 0");
}

}  // namespace

void adjust_brightness(RgbView img, double factor) {
  check_view(img, "adjust_brightness");
  check_factor(factor, "adjust_brightness", "brightness_factor");
  const Blend blend(factor);
  each_pixel(img, [&](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = blend(p[c], 0.0f);
  });
}

void adjust_contrast(RgbView img, double factor) {
  check_view(img, "adjust_contrast");
  check_factor(factor, "adjust_contrast", "contrast_factor");
  if (img.width == 0 || img.height == 0) return;
  std::uint64_t sum = 0;
  each_pixel(img, [&](std::uint8_t* p) { sum += luma(p); });
  const float mean = float(double(sum) / (double(img.width) * double(img.height)));
  const Blend blend(factor);
  each_pixel(img, [&](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = blend(p[c], mean);
  });
}

void adjust_saturation(RgbView img, double factor) {
  check_view(img, "adjust_saturation");
  check_factor(factor, "adjust_saturation", "saturation_factor");
  const Blend blend(factor);
  each_pixel(img, [&](std::uint8_t* p) {
    const float grey = float(luma(p));
    for (int c = 0; c < 3; ++c) p[c] = blend(p[c], grey);
  });
}

void adjust_hue(RgbView img, double factor) {
  check_view(img, "adjust_hue");
  check(factor >= -0.5 && factor <= 0.5, "adjust_hue", "hue_factor must be in [-0.5, 0.5]");
  const float shift = float(factor);
  static const std::array<float, 256> unit = [] {  // v / 255.0f, the very values torchvision divides to
    std::array<float, 256> t{};
    for (std::size_t v = 0; v < 256; ++v) t[v] = float(v) / 255.0f;
    return t;
  }();
  each_pixel(img, [&](std::uint8_t* p) {
    // torchvision's _rgb2hsv, in float32 on values / 255.
    const float r = unit[p[0]], g = unit[p[1]], b = unit[p[2]];
    const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float h;
    if (maxc == r) {
      h = bc - gc;
    } else if (maxc == g) {
      h = 2.0f + rc - bc;
    } else {
      h = 4.0f + gc - rc;
    }
    // fmod(h / 6 + 1, 1) and then (h + shift) % 1, for arguments in [0, 2) and
    // [-0.5, 1.5): subtracting or adding 1 there is what both compute, exactly.
    h = h / 6.0f + 1.0f;
    if (h >= 1.0f) h -= 1.0f;
    h += shift;
    if (h >= 1.0f) {
      h -= 1.0f;
    } else if (h < 0.0f) {
      h += 1.0f;
    }
    // _hsv2rgb.
    const float v = maxc;
    const float i_f = std::floor(h * 6.0f);
    const float f = h * 6.0f - i_f;
    const int i = ((int(i_f) % 6) + 6) % 6;
    const float pp = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
    const float q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f);
    const float t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
    static constexpr std::array<std::array<int, 3>, 6> pick{{{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}}};
    const float choice[4] = {v, pp, q, t};  // pick's codes: 0 v, 1 p, 2 q, 3 t
    for (int c = 0; c < 3; ++c) p[c] = std::uint8_t(choice[pick[std::size_t(i)][std::size_t(c)]] * 255.0f);
  });
}

void to_grayscale(RgbView img) {
  check_view(img, "to_grayscale");
  each_pixel(img, [](std::uint8_t* p) { p[0] = p[1] = p[2] = luma(p); });
}

void solarize(RgbView img, double threshold) {
  check_view(img, "solarize");
  check(threshold >= 0 && threshold <= 255, "solarize", "threshold must be in [0, 255]");
  each_pixel(img, [&](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) {
      if (double(p[c]) >= threshold) p[c] = std::uint8_t(255 - p[c]);
    }
  });
}

void posterize(RgbView img, int bits) {
  check_view(img, "posterize");
  check(bits >= 0 && bits <= 8, "posterize", "bits must be in [0, 8]");
  const auto mask = std::uint8_t(0xFF & ~((1u << (8 - bits)) - 1u));
  each_pixel(img, [&](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = std::uint8_t(p[c] & mask);
  });
}

void autocontrast(RgbView img) {
  check_view(img, "autocontrast");
  std::array<std::uint8_t, 3> lo{255, 255, 255}, hi{0, 0, 0};
  each_pixel(img, [&](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) {
      lo[std::size_t(c)] = std::min(lo[std::size_t(c)], p[c]);
      hi[std::size_t(c)] = std::max(hi[std::size_t(c)], p[c]);
    }
  });
  std::array<float, 3> minimum{}, scale{};
  for (std::size_t c = 0; c < 3; ++c) {
    const bool flat = hi[c] == lo[c];  // 255 / 0 is not finite: torchvision leaves the channel
    minimum[c] = flat ? 0.0f : float(lo[c]);
    scale[c] = flat ? 1.0f : 255.0f / (float(hi[c]) - float(lo[c]));
  }
  each_pixel(img, [&](std::uint8_t* p) {
    for (std::size_t c = 0; c < 3; ++c) p[c] = to_u8((float(p[c]) - minimum[c]) * scale[c]);
  });
}

void equalize(RgbView img) {
  check_view(img, "equalize");
  for (int c = 0; c < 3; ++c) {
    std::array<std::int64_t, 256> hist{};
    each_pixel(img, [&](std::uint8_t* p) { ++hist[p[c]]; });
    // torchvision's _scale_channel: the step leaves out the last non-empty bin.
    std::int64_t total = 0, last = 0;
    for (const std::int64_t n : hist) {
      if (n) {
        total += n;
        last = n;
      }
    }
    const std::int64_t step = (total - last) / 255;
    if (step == 0) continue;
    std::array<std::uint8_t, 256> lut{};
    std::int64_t cumulative = 0;
    for (std::size_t v = 0; v < 256; ++v) {  // lut[v] = (cumsum up to v - 1 + step // 2) // step
      lut[v] = std::uint8_t(std::min<std::int64_t>(255, (cumulative + step / 2) / step));
      cumulative += hist[v];
    }
    each_pixel(img, [&](std::uint8_t* p) { p[c] = lut[p[c]]; });
  }
}

void invert(RgbView img) {
  check_view(img, "invert");
  each_pixel(img, [](std::uint8_t* p) {
    for (int c = 0; c < 3; ++c) p[c] = std::uint8_t(255 - p[c]);
  });
}

namespace {
// A copy of the image's pixels, packed (width * 3 bytes a row).
const std::uint8_t* packed_copy(const RgbView& img, PhotometricScratch& scratch) {
  const std::size_t row = std::size_t(img.width) * 3;
  scratch.copy.resize(row * std::size_t(img.height));
  for (int y = 0; y < img.height; ++y) {
    std::memcpy(scratch.copy.data() + row * std::size_t(y), img.pixels + std::ptrdiff_t(y) * img.stride, row);
  }
  return scratch.copy.data();
}

// torch.round then the cast: half to even (the default rounding mode).
inline std::uint8_t round_u8(float v) { return std::uint8_t(std::clamp(std::nearbyint(v), 0.0f, 255.0f)); }
}  // namespace

void adjust_sharpness(RgbView img, double factor, PhotometricScratch& scratch) {
  check_view(img, "adjust_sharpness");
  check_factor(factor, "adjust_sharpness", "sharpness_factor");
  if (img.width <= 2 || img.height <= 2) return;  // torchvision: no interior to smooth
  const std::uint8_t* src = packed_copy(img, scratch);
  const std::ptrdiff_t row = std::ptrdiff_t(img.width) * 3;
  const Blend blend(factor);
  // The border keeps its pixels in the smoothed copy, and is blended with
  // itself as torchvision does (in float32, a*v + (1-a)*v may truncate to v - 1).
  const auto self_blend = [&](std::uint8_t* p, std::ptrdiff_t n) {
    for (std::ptrdiff_t i = 0; i < n; ++i) p[i] = blend(p[i], float(p[i]));
  };
  self_blend(img.pixels, row);
  self_blend(img.pixels + std::ptrdiff_t(img.height - 1) * img.stride, row);
  for (int y = 1; y + 1 < img.height; ++y) {
    std::uint8_t* line = img.pixels + std::ptrdiff_t(y) * img.stride;
    self_blend(line, 3);
    self_blend(line + row - 3, 3);
  }
  for (int y = 1; y + 1 < img.height; ++y) {
    const std::uint8_t* r0 = src + std::ptrdiff_t(y - 1) * row;
    const std::uint8_t* r1 = r0 + row;
    const std::uint8_t* r2 = r1 + row;
    std::uint8_t* out = img.pixels + std::ptrdiff_t(y) * img.stride;
    for (std::ptrdiff_t i = 3; i < row - 3; ++i) {
      // The kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, in integers: n / 13
      // never ends in exactly .5 (13 is odd), and torchvision's float32 sum
      // stays far closer to it than the 1/26 to the nearest half, so rounding
      // n / 13 to nearest gives torchvision's round() of its convolution.
      const int n = r0[i - 3] + r0[i] + r0[i + 3] + r1[i - 3] + 5 * r1[i] + r1[i + 3] + r2[i - 3] + r2[i] + r2[i + 3];
      out[i] = blend(r1[i], float((n + 6) / 13));
    }
  }
}

void gaussian_blur(RgbView img, int kernel_x, int kernel_y, double sigma_x, double sigma_y, PhotometricScratch& scratch) {
  check_view(img, "gaussian_blur");
  check(kernel_x >= 1 && kernel_x % 2 == 1 && kernel_x <= 255 && kernel_y >= 1 && kernel_y % 2 == 1 && kernel_y <= 255,
        "gaussian_blur", "kernel_size must be odd, 1 .. 255");
  check(std::isfinite(sigma_x) && sigma_x > 0 && std::isfinite(sigma_y) && sigma_y > 0, "gaussian_blur",
        "sigma must be finite and > 0");
  if (img.width == 0 || img.height == 0) return;
  check(kernel_x / 2 < img.width && kernel_y / 2 < img.height, "gaussian_blur",
        "kernel_size // 2 must be below the image's width and height (reflect padding)");
  // torchvision's _get_gaussian_kernel1d in float32: x over [-(k-1)/2, (k-1)/2], exp(-x^2 / 2 sigma^2), summing to 1.
  const auto kernel = [](int k, double sigma) {
    std::vector<float> w(static_cast<std::size_t>(k));
    const float s = float(sigma);
    float sum = 0;
    for (int i = 0; i < k; ++i) {
      const float x = float(i - (k - 1) / 2) / s;
      w[std::size_t(i)] = std::exp(-0.5f * x * x);
      sum += w[std::size_t(i)];
    }
    for (float& v : w) v /= sum;
    return w;
  };
  const std::vector<float> kx = kernel(kernel_x, sigma_x), ky = kernel(kernel_y, sigma_y);
  // Reflect padding (torch's "reflect": the edge pixel is not repeated).
  const auto reflect = [](int i, int n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); };
  const int w = img.width, h = img.height, hx = kernel_x / 2, hy = kernel_y / 2;
  const std::ptrdiff_t row = std::ptrdiff_t(w) * 3;
  // Separable: each row, padded, through kx into float; then the columns
  // through ky. torchvision's 2-D kernel is the outer product of the two, so
  // the sums agree to float32 rounding (within a grey level after rounding).
  std::vector<float>& rows = scratch.rows;
  rows.resize(std::size_t(row) * std::size_t(h) + std::size_t(w + 2 * hx) * 3 + std::size_t(row));
  float* padded = rows.data() + std::size_t(row) * std::size_t(h);
  float* acc = padded + std::size_t(w + 2 * hx) * 3;
  for (int y = 0; y < h; ++y) {
    const std::uint8_t* in = img.pixels + std::ptrdiff_t(y) * img.stride;
    for (int x = -hx; x < w + hx; ++x) {
      const std::uint8_t* p = in + std::ptrdiff_t(reflect(x, w)) * 3;
      float* q = padded + std::ptrdiff_t(x + hx) * 3;
      q[0] = p[0];
      q[1] = p[1];
      q[2] = p[2];
    }
    float* out = rows.data() + std::ptrdiff_t(y) * row;
    for (std::ptrdiff_t i = 0; i < row; ++i) out[i] = 0;
    for (int k = 0; k < kernel_x; ++k) {
      const float weight = kx[std::size_t(k)];
      const float* q = padded + std::ptrdiff_t(k) * 3;
      for (std::ptrdiff_t i = 0; i < row; ++i) out[i] += weight * q[i];
    }
  }
  for (int y = 0; y < h; ++y) {
    for (std::ptrdiff_t i = 0; i < row; ++i) acc[i] = 0;
    for (int k = 0; k < kernel_y; ++k) {
      const float weight = ky[std::size_t(k)];
      const float* q = rows.data() + std::ptrdiff_t(reflect(y + k - hy, h)) * row;
      for (std::ptrdiff_t i = 0; i < row; ++i) acc[i] += weight * q[i];
    }
    std::uint8_t* out = img.pixels + std::ptrdiff_t(y) * img.stride;
    for (std::ptrdiff_t i = 0; i < row; ++i) out[i] = round_u8(acc[i]);
  }
}

}  // namespace conveyor
