// Test support: deterministic pictures built in memory (gradients, photo-like
// content, checkers, grayscale and palette versions) and broken inputs
// (truncated, random bytes), so tests need no files. The writers of every
// format the decoder handles are image_writers.h (JPEG: jpeg_writer.h).
#pragma once

#include <algorithm>
#include <array>
#include <csetjmp>
#include <cmath>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor::test {

// ---------------------------------------------------------------------------
// Pictures
// ---------------------------------------------------------------------------

// An RGB8 test picture: width*height*3 bytes, row-major HWC.
struct Rgb {
  int width = 0, height = 0;
  std::vector<unsigned char> px;

  // A black w x h picture.
  static Rgb sized(int w, int h) { return Rgb{w, h, std::vector<unsigned char>(std::size_t(w) * std::size_t(h) * 3)}; }
  unsigned char* at(int x, int y) { return &px[(std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3]; }
  const unsigned char* at(int x, int y) const {
    return &px[(std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3];
  }
};

namespace detail {

inline void check_dims(int w, int h) {
  if (w < 1 || h < 1) throw std::invalid_argument("image dimensions must be >= 1");
}

// splitmix64: tiny deterministic generator, identical on every platform.
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
};

inline unsigned char clamp8(double v) { return static_cast<unsigned char>(std::clamp(std::lround(v), 0L, 255L)); }

// BT.601 luma in 8.8 fixed point: (77 R + 150 G + 29 B + 128) >> 8. White maps to 255.
inline unsigned char luma(const unsigned char* p) { return static_cast<unsigned char>((77 * p[0] + 150 * p[1] + 29 * p[2] + 128) >> 8); }

// 6x6x6 colour cube: each channel snaps to the nearest multiple of 51.
inline int cube_level(unsigned char v) { return (v * 5 + 127) / 255; }
inline unsigned char cube_index(const unsigned char* p) {
  return static_cast<unsigned char>(36 * cube_level(p[0]) + 6 * cube_level(p[1]) + cube_level(p[2]));
}

inline void put_be16(std::vector<unsigned char>& f, unsigned v) {
  f.push_back(static_cast<unsigned char>(v >> 8));
  f.push_back(static_cast<unsigned char>(v));
}
inline void put_be32(std::vector<unsigned char>& f, std::uint32_t v) {
  put_be16(f, v >> 16);
  put_be16(f, v & 0xFFFF);
}
inline void put_le16(std::vector<unsigned char>& f, unsigned v) {
  f.push_back(static_cast<unsigned char>(v));
  f.push_back(static_cast<unsigned char>(v >> 8));
}
inline void put_str(std::vector<unsigned char>& f, const std::string& s) { f.insert(f.end(), s.begin(), s.end()); }

}  // namespace detail

// ---------------------------------------------------------------------------
// Content generators (deterministic)
// ---------------------------------------------------------------------------

// Smooth ramps: r = x*255/(w-1), g = y*255/(h-1), b = (x+y)*255/(w+h-2);
// a 1-pixel dimension gives 0 on that axis.
inline Rgb gradient(int w, int h) {
  detail::check_dims(w, h);
  Rgb img = Rgb::sized(w, h);
  const int dx = std::max(1, w - 1), dy = std::max(1, h - 1), dxy = std::max(1, w + h - 2);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      unsigned char* p = img.at(x, y);
      p[0] = static_cast<unsigned char>(x * 255 / dx);
      p[1] = static_cast<unsigned char>(y * 255 / dy);
      p[2] = static_cast<unsigned char>((x + y) * 255 / dxy);
    }
  return img;
}

// Resembles a natural photo (for PSNR tests of lossy/scaled decoding):
//  1. a base colour plus 3 low-frequency sinusoids per channel,
//  2. 4 soft Gaussian colour blobs,
//  3. two sharp edges: a half-plane shifted in colour, and a flat-ish disc,
//  4. mild noise: luminance noise in [-5,5] plus per-channel [-1,1] (|n| <= 6).
// Coordinates are normalised to [0,1) so the look does not depend on size.
inline Rgb photo_like(int w, int h, std::uint64_t seed) {
  detail::check_dims(w, h);
  detail::SplitMix rng{seed};
  struct Wave { double fx, fy, phase, amp[3]; };
  struct Blob { double cx, cy, inv2s2, amp[3]; };
  Wave waves[3];
  Blob blobs[4];
  double base[3], shift[3], disc_colour[3];
  for (double& b : base) b = rng.uniform(70, 180);
  for (Wave& wv : waves) {
    wv = {rng.uniform(-1.5, 1.5), rng.uniform(-1.5, 1.5), rng.uniform(0, 6.2832), {}};
    for (double& a : wv.amp) a = rng.uniform(-25, 25);
  }
  for (Blob& bl : blobs) {
    const double s = rng.uniform(0.10, 0.30);
    bl = {rng.uniform(0, 1), rng.uniform(0, 1), 1.0 / (2 * s * s), {}};
    for (double& a : bl.amp) a = rng.uniform(-70, 70);
  }
  for (double& s : shift) s = rng.uniform(-45, 45);
  for (double& c : disc_colour) c = rng.uniform(20, 235);
  // Half-plane edge: points with (u-ex)*cos + (v-ey)*sin > 0 get `shift`.
  const double ex = rng.uniform(0.3, 0.7), ey = rng.uniform(0.3, 0.7), angle = rng.uniform(0, 6.2832);
  const double ecos = std::cos(angle), esin = std::sin(angle);
  // Disc edge: inside, the colour is 75% `disc_colour`.
  const double dcx = rng.uniform(0.2, 0.8), dcy = rng.uniform(0.2, 0.8), dr = rng.uniform(0.08, 0.18);

  Rgb img = Rgb::sized(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const double u = (x + 0.5) / w, v = (y + 0.5) / h;
      detail::SplitMix noise{seed ^ (std::uint64_t(y) << 32 | std::uint32_t(x)) * 0xD6E8FEB86659FD93ULL};
      const double luma_noise = double(noise.next() % 11) - 5;
      const bool shifted = (u - ex) * ecos + (v - ey) * esin > 0;
      const bool in_disc = (u - dcx) * (u - dcx) + (v - dcy) * (v - dcy) * (double(h) * h) / (double(w) * w) < dr * dr;
      for (int c = 0; c < 3; ++c) {
        double val = base[c];
        for (const Wave& wv : waves) val += wv.amp[c] * std::sin(6.2832 * (wv.fx * u + wv.fy * v) + wv.phase);
        for (const Blob& bl : blobs)
          val += bl.amp[c] * std::exp(-((u - bl.cx) * (u - bl.cx) + (v - bl.cy) * (v - bl.cy)) * bl.inv2s2);
        if (shifted) val += shift[c];
        if (in_disc) val = 0.25 * val + 0.75 * disc_colour[c];
        val += luma_noise + double(noise.next() % 3) - 1;
        img.at(x, y)[c] = detail::clamp8(val);
      }
    }
  return img;
}

// High-contrast colourful cells of `cell` pixels. Every channel value is a
// multiple of 51, so the 6x6x6 palette (PNG palette8, GIF) holds it EXACTLY;
// neighbouring cells (including across the row) always differ.
inline Rgb checker(int w, int h, int cell) {
  detail::check_dims(w, h);
  if (cell < 1) throw std::invalid_argument("checker cell must be >= 1");
  static constexpr unsigned char colours[8][3] = {{255, 0, 0},   {0, 204, 51},  {0, 51, 255},  {255, 255, 0},
                                                  {204, 0, 204}, {0, 255, 255}, {255, 153, 0}, {0, 0, 0}};
  Rgb img = Rgb::sized(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const unsigned char* c = colours[(x / cell + 2 * (y / cell)) % 8];
      std::copy(c, c + 3, img.at(x, y));
    }
  return img;
}

// (Y,Y,Y) with Y = BT.601 luma (77 R + 150 G + 29 B + 128) >> 8: what every
// gray writer here stores (PNG gray kinds, JPEG gray), replicated to RGB.
inline Rgb to_gray(const Rgb& img) {
  Rgb out = img;
  for (std::size_t i = 0; i < out.px.size(); i += 3) std::fill_n(&out.px[i], 3, detail::luma(&img.px[i]));
  return out;
}

// Each channel snapped to the nearest multiple of 51 (6x6x6 cube, 216 colours).
inline Rgb quantize_216(const Rgb& img) {
  Rgb out = img;
  for (unsigned char& v : out.px) v = static_cast<unsigned char>(51 * detail::cube_level(v));
  return out;
}

// ---------------------------------------------------------------------------
// Error-case inputs and helpers
// ---------------------------------------------------------------------------

// The first `keep` bytes of `file` (all of it when keep >= size).
inline std::vector<unsigned char> truncated(std::vector<unsigned char> file, std::size_t keep) {
  file.resize(std::min(keep, file.size()));
  return file;
}

// n deterministic pseudo-random bytes.
inline std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  detail::SplitMix rng{seed};
  std::vector<unsigned char> out(n);
  for (unsigned char& b : out) b = static_cast<unsigned char>(rng.next() >> 56);
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

// PSNR over all channels with an 8-bit peak; +inf when identical.
inline double psnr(const Rgb& a, const Rgb& b) {
  if (a.width != b.width || a.height != b.height || a.px.size() != b.px.size())
    throw std::invalid_argument("psnr: pictures differ in size");
  double se = 0;
  for (std::size_t i = 0; i < a.px.size(); ++i) {
    const double d = double(a.px[i]) - double(b.px[i]);
    se += d * d;
  }
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 * double(a.px.size()) / se);
}

}  // namespace conveyor::test