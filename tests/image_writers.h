// Test support: builds test images IN MEMORY in every format the decoder
// must handle (JPEG kinds, PNG kinds, BMP, TGA, PPM/PGM, GIF), plus broken
// inputs (truncated, random, decompression bombs), so tests need no files.
// The pictures and broken inputs are pictures.h; the JPEG writers and the
// reference decode, jpeg_writer.h; this header has the other formats and
// includes both.
//
// Each writer returns a complete file as std::vector<unsigned char>. Where a
// format cannot hold the source RGB exactly (gray, palette, GIF), a matching
// *_expected() helper returns the 8-bit RGB a correct decoder must produce.
//
// Link: -ljpeg -lstb (stb implementations live in libstb; this header never
// defines STB_*_IMPLEMENTATION). Writers throw std::invalid_argument on bad
// arguments and std::runtime_error when libjpeg/stb fail.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <stb/stb_image_write.h>

#include "jpeg_writer.h"
#include "pictures.h"

// Exported by libstb but declared only in the implementation half of
// stb_image_write.h. Returns a malloc'd zlib stream (free() it), or null.
extern "C" unsigned char* stbi_zlib_compress(unsigned char* data, int data_len, int* out_len, int quality);

namespace conveyor::test {

// ---------------------------------------------------------------------------
// PNG (hand-built: signature, IHDR, [PLTE], one IDAT, IEND)
// ---------------------------------------------------------------------------

// What a correct decoder returns as 8-bit RGB, per kind (see png_expected):
//   rgb8        img exactly
//   rgba8       img exactly; alpha = png_alpha(x,y) is NOT composited
//   gray8       to_gray(img): BT.601 luma replicated
//   gray_alpha8 to_gray(img); alpha = png_alpha(x,y), not composited
//   palette8    quantize_216(img): 216-entry 6x6x6 palette, index 36r+6g+b
//   rgb16       img exactly: samples are v*257 (big-endian bytes v,v), so
//               v16 >> 8, v16 / 257 and rounded v16*255/65535 all give v
//   gray16      to_gray(img), samples Y*257
enum class PngKind { rgb8, rgba8, gray8, gray_alpha8, palette8, rgb16, gray16 };

// Alpha of the alpha kinds: 128..227, varying along both axes.
inline unsigned char png_alpha(int x, int y) { return static_cast<unsigned char>(128 + (x + 2 * y) % 100); }

inline Rgb png_expected(const Rgb& img, PngKind kind) {
  switch (kind) {
    case PngKind::gray8:
    case PngKind::gray_alpha8:
    case PngKind::gray16: return to_gray(img);
    case PngKind::palette8: return quantize_216(img);
    default: return img;
  }
}

namespace detail {

// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320) as PNG requires.
inline std::uint32_t crc32(const unsigned char* p, std::size_t n) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// Appends length, type, data and CRC(type + data).
inline void png_chunk(std::vector<unsigned char>& f, const char* type, const std::vector<unsigned char>& data) {
  put_be32(f, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = f.size();
  f.insert(f.end(), type, type + 4);
  f.insert(f.end(), data.begin(), data.end());
  put_be32(f, crc32(&f[start], f.size() - start));
}

inline std::vector<unsigned char> png_ihdr(std::uint32_t w, std::uint32_t h, int depth, int colour_type) {
  std::vector<unsigned char> d;
  put_be32(d, w);
  put_be32(d, h);
  d.insert(d.end(), {static_cast<unsigned char>(depth), static_cast<unsigned char>(colour_type), 0, 0, 0});
  return d;  // compression 0, filter 0, no interlace
}

// zlib stream of `raw` via stb (quality 8, as stbi_write_png uses).
inline std::vector<unsigned char> zlib(std::vector<unsigned char> raw) {
  if (raw.size() > std::size_t(std::numeric_limits<int>::max())) throw std::invalid_argument("PNG data too large");
  int len = 0;
  unsigned char* z = stbi_zlib_compress(raw.data(), int(raw.size()), &len, 8);
  if (z == nullptr) throw std::runtime_error("stbi_zlib_compress failed");
  std::vector<unsigned char> out(z, z + len);
  std::free(z);
  return out;
}

inline void png_signature(std::vector<unsigned char>& f) { f.insert(f.end(), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}); }

// One pixel's samples for `kind` (16-bit samples v*257 are the bytes v, v).
inline void png_pixel(std::vector<unsigned char>& raw, const unsigned char* p, int x, int y, PngKind kind) {
  const unsigned char g = luma(p), a = png_alpha(x, y);
  switch (kind) {
    case PngKind::rgb8: raw.insert(raw.end(), {p[0], p[1], p[2]}); break;
    case PngKind::rgba8: raw.insert(raw.end(), {p[0], p[1], p[2], a}); break;
    case PngKind::gray8: raw.push_back(g); break;
    case PngKind::gray_alpha8: raw.insert(raw.end(), {g, a}); break;
    case PngKind::palette8: raw.push_back(cube_index(p)); break;
    case PngKind::rgb16: raw.insert(raw.end(), {p[0], p[0], p[1], p[1], p[2], p[2]}); break;
    case PngKind::gray16: raw.insert(raw.end(), {g, g}); break;
  }
}

}  // namespace detail

// Hand-built PNG of `img` as `kind`; decodes to png_expected(img, kind).
inline std::vector<unsigned char> png(const Rgb& img, PngKind kind) {
  detail::check_dims(img.width, img.height);
  const bool sixteen = kind == PngKind::rgb16 || kind == PngKind::gray16;
  int colour_type = 2;  // truecolour
  if (kind == PngKind::rgba8) colour_type = 6;
  if (kind == PngKind::gray8 || kind == PngKind::gray16) colour_type = 0;
  if (kind == PngKind::gray_alpha8) colour_type = 4;
  if (kind == PngKind::palette8) colour_type = 3;

  std::vector<unsigned char> raw;  // filter-0 scanlines
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    for (int x = 0; x < img.width; ++x) detail::png_pixel(raw, img.at(x, y), x, y, kind);
  }
  std::vector<unsigned char> f;
  detail::png_signature(f);
  detail::png_chunk(f, "IHDR", detail::png_ihdr(std::uint32_t(img.width), std::uint32_t(img.height), sixteen ? 16 : 8, colour_type));
  if (kind == PngKind::palette8) {
    std::vector<unsigned char> plte;
    for (int i = 0; i < 216; ++i)
      plte.insert(plte.end(), {static_cast<unsigned char>(51 * (i / 36)), static_cast<unsigned char>(51 * (i / 6 % 6)),
                               static_cast<unsigned char>(51 * (i % 6))});
    detail::png_chunk(f, "PLTE", plte);
  }
  detail::png_chunk(f, "IDAT", detail::zlib(std::move(raw)));
  detail::png_chunk(f, "IEND", {});
  return f;
}

// A valid RGB8 PNG header claiming width x height, followed by an IDAT of a
// single pixel's worth of data and IEND: a decompression bomb. (A width or
// height of 0 or above 2^31-1 is invalid PNG; that is the caller's choice.)
inline std::vector<unsigned char> png_header_only(std::uint32_t width, std::uint32_t height) {
  std::vector<unsigned char> f;
  detail::png_signature(f);
  detail::png_chunk(f, "IHDR", detail::png_ihdr(width, height, 8, 2));
  detail::png_chunk(f, "IDAT", detail::zlib({0, 0, 0, 0}));
  detail::png_chunk(f, "IEND", {});
  return f;
}

// ---------------------------------------------------------------------------
// BMP, TGA (stb_image_write), PPM, PGM — all exact; PGM holds the R channel
// ---------------------------------------------------------------------------

namespace detail {

// stb write callback context; exceptions are caught here, not thrown through stb.
struct StbSink {
  std::vector<unsigned char> out;
  bool failed = false;
};
inline void stb_sink_write(void* ctx, void* data, int size) {
  auto* s = static_cast<StbSink*>(ctx);
  try {
    const auto* b = static_cast<const unsigned char*>(data);
    s->out.insert(s->out.end(), b, b + size);
  } catch (...) {
    s->failed = true;
  }
}

inline std::vector<unsigned char> stb_write(int (*writer)(stbi_write_func*, void*, int, int, int, const void*), const Rgb& img) {
  check_dims(img.width, img.height);
  StbSink sink;
  if (writer(stb_sink_write, &sink, img.width, img.height, 3, img.px.data()) == 0 || sink.failed)
    throw std::runtime_error("stb_image_write failed");
  return std::move(sink.out);
}

inline std::vector<unsigned char> pnm(const char* magic, const Rgb& img, bool gray) {
  check_dims(img.width, img.height);
  std::vector<unsigned char> f;
  put_str(f, std::string(magic) + "\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n");
  if (!gray) f.insert(f.end(), img.px.begin(), img.px.end());
  else
    for (std::size_t i = 0; i < img.px.size(); i += 3) f.push_back(img.px[i]);
  return f;
}

}  // namespace detail

// 24-bit BMP (stbi_write_bmp_to_func). Decodes to img exactly.
inline std::vector<unsigned char> bmp(const Rgb& img) { return detail::stb_write(stbi_write_bmp_to_func, img); }

// 24-bit TGA (stbi_write_tga_to_func). RLE or not follows the global
// stbi_write_tga_with_rle (stb default 1); we leave that global alone. Exact.
inline std::vector<unsigned char> tga(const Rgb& img) { return detail::stb_write(stbi_write_tga_to_func, img); }

// Uncompressed 24-bit TGA, top row first (tga() writes run-length packets). Exact.
inline std::vector<unsigned char> tga_raw(const Rgb& img) {
  detail::check_dims(img.width, img.height);
  std::vector<unsigned char> f = {0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int v : {img.width, img.height}) {
    f.push_back(static_cast<unsigned char>(v & 0xFF));
    f.push_back(static_cast<unsigned char>(v >> 8));
  }
  f.push_back(24);
  f.push_back(0x20);  // rows top-down
  for (std::size_t i = 0; i < img.px.size(); i += 3) f.insert(f.end(), {img.px[i + 2], img.px[i + 1], img.px[i]});
  return f;
}

// P6 binary, maxval 255. Decodes to img exactly.
inline std::vector<unsigned char> ppm(const Rgb& img) { return detail::pnm("P6", img, false); }

// P5 binary, maxval 255, holding the R channel. Decodes to pgm_expected(img).
inline std::vector<unsigned char> pgm(const Rgb& img) { return detail::pnm("P5", img, true); }

// P6 (or P5 with gray: the R channel) with any maxval in 1..65535: each sample
// is round(v * maxval / 255), stored in 2 big-endian bytes above 255, after a
// header carrying a comment. Decodes to pnm_expected(img, maxval, gray).
inline std::vector<unsigned char> pnm_maxval(const Rgb& img, int maxval, bool gray) {
  detail::check_dims(img.width, img.height);
  if (maxval < 1 || maxval > 65535) throw std::invalid_argument("pnm_maxval: maxval outside 1..65535");
  std::vector<unsigned char> f;
  detail::put_str(f, std::string(gray ? "P5" : "P6") + " # written by the tests\n" + std::to_string(img.width) + "\n" +
                         std::to_string(img.height) + " #height\n" + std::to_string(maxval) + "\n");
  for (std::size_t i = 0; i < img.px.size(); ++i) {
    if (gray && i % 3 != 0) continue;
    const unsigned v = (img.px[i] * unsigned(maxval) + 127) / 255;
    if (maxval > 255) f.push_back(static_cast<unsigned char>(v >> 8));
    f.push_back(static_cast<unsigned char>(v & 0xFF));
  }
  return f;
}

// What pnm_maxval(img, maxval, gray) decodes to: each stored sample s scaled back
// as round(s * 255 / maxval), grey repeated in R, G and B. Exactly img (or
// pgm_expected(img)) for maxval >= 255.
inline Rgb pnm_expected(const Rgb& img, int maxval, bool gray) {
  Rgb out = img;
  const auto m = unsigned(maxval);
  for (std::size_t i = 0; i < out.px.size(); ++i) {
    const unsigned v = gray ? img.px[i - i % 3] : img.px[i];
    const unsigned stored = (v * m + 127) / 255;
    out.px[i] = static_cast<unsigned char>((stored * 255 + m / 2) / m);
  }
  return out;
}

// (R,R,R) for every pixel: what pgm(img) decodes to as RGB.
inline Rgb pgm_expected(const Rgb& img) {
  Rgb out = img;
  for (std::size_t i = 0; i < out.px.size(); i += 3) out.px[i + 1] = out.px[i + 2] = out.px[i];
  return out;
}

// ---------------------------------------------------------------------------
// GIF89a: global 256-entry palette (6x6x6 cube + 40 unused black), one image
// per frame, LZW with minimum code size 8 where a CLEAR code precedes every
// run of at most 250 literal codes, so the decoder's table never reaches 512
// entries and every code stays 9 bits wide ("uncompressed GIF").
// ---------------------------------------------------------------------------

// Content of frame k: frame 0 is img; frame k > 0 is img shifted left by k
// pixels (wrapping), channels rotated by k and inverted.
inline Rgb gif_frame(const Rgb& img, int k) {
  if (k == 0) return img;
  Rgb out = img;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      for (int c = 0; c < 3; ++c) out.at(x, y)[c] = static_cast<unsigned char>(255 - img.at((x + k) % img.width, y)[(c + k) % 3]);
  return out;
}

// What a decoder returns for gif(img, ...): the first frame, quantized.
inline Rgb gif_expected(const Rgb& img) { return quantize_216(img); }

namespace detail {

// Packs codes least-significant-bit first, as GIF's LZW requires.
struct LsbBitWriter {
  std::vector<unsigned char> bytes;
  std::uint32_t acc = 0;
  int bits = 0;
  void put(unsigned code, int width) {
    acc |= std::uint32_t(code) << bits;
    for (bits += width; bits >= 8; bits -= 8, acc >>= 8) bytes.push_back(static_cast<unsigned char>(acc));
  }
  void flush() {
    if (bits > 0) bytes.push_back(static_cast<unsigned char>(acc));
    acc = 0;
    bits = 0;
  }
};

inline constexpr int gif_max_run = 250;  // literal codes between CLEARs (table limit allows 254)

// LZW data (min code size 8) emitting only 9-bit literals, CLEAR and EOI.
inline std::vector<unsigned char> gif_lzw(const std::vector<unsigned char>& indices) {
  constexpr unsigned clear = 256, eoi = 257;
  LsbBitWriter w;
  int run = gif_max_run;  // forces the leading CLEAR
  for (unsigned char idx : indices) {
    if (run == gif_max_run) {
      w.put(clear, 9);
      run = 0;
    }
    w.put(idx, 9);
    ++run;
  }
  w.put(eoi, 9);
  w.flush();
  return w.bytes;
}

// Data sub-blocks (<= 255 bytes each, length-prefixed) and the 0 terminator.
inline void gif_sub_blocks(std::vector<unsigned char>& f, const std::vector<unsigned char>& data) {
  for (std::size_t i = 0; i < data.size(); i += 255) {
    const std::size_t n = std::min<std::size_t>(255, data.size() - i);
    f.push_back(static_cast<unsigned char>(n));
    f.insert(f.end(), data.begin() + std::ptrdiff_t(i), data.begin() + std::ptrdiff_t(i + n));
  }
  f.push_back(0);
}

// Graphic control extension (keep frame, 0.1 s, no transparency), image
// descriptor covering the whole screen (no local palette), LZW data.
inline void gif_image(std::vector<unsigned char>& f, const Rgb& frame) {
  f.insert(f.end(), {0x21, 0xF9, 4, 0x04, 10, 0, 0, 0});
  f.push_back(0x2C);
  put_le16(f, 0);
  put_le16(f, 0);
  put_le16(f, unsigned(frame.width));
  put_le16(f, unsigned(frame.height));
  f.push_back(0);
  f.push_back(8);  // LZW minimum code size
  std::vector<unsigned char> indices;
  indices.reserve(frame.px.size() / 3);
  for (std::size_t i = 0; i < frame.px.size(); i += 3) indices.push_back(cube_index(&frame.px[i]));
  gif_sub_blocks(f, gif_lzw(indices));
}

}  // namespace detail

// GIF89a of `frames` frames: gif_frame(img, 0..frames-1). A plain decoder
// returns gif_expected(img); frame k decodes to quantize_216(gif_frame(img, k)).
inline std::vector<unsigned char> gif(const Rgb& img, int frames = 1) {
  detail::check_dims(img.width, img.height);
  if (img.width > 65535 || img.height > 65535) throw std::invalid_argument("GIF dimensions are 16-bit");
  if (frames < 1) throw std::invalid_argument("GIF needs at least one frame");
  std::vector<unsigned char> f;
  detail::put_str(f, "GIF89a");
  detail::put_le16(f, unsigned(img.width));
  detail::put_le16(f, unsigned(img.height));
  f.insert(f.end(), {0xF7, 0, 0});  // global table of 2^(7+1) entries, colour resolution 8 bits; bg 0; aspect 0
  for (int i = 0; i < 256; ++i) {
    const bool used = i < 216;
    f.insert(f.end(), {static_cast<unsigned char>(used ? 51 * (i / 36) : 0), static_cast<unsigned char>(used ? 51 * (i / 6 % 6) : 0),
                       static_cast<unsigned char>(used ? 51 * (i % 6) : 0)});
  }
  if (frames > 1) {  // NETSCAPE2.0 application extension: loop forever
    f.insert(f.end(), {0x21, 0xFF, 11});
    detail::put_str(f, "NETSCAPE2.0");
    f.insert(f.end(), {3, 1, 0, 0, 0});
  }
  for (int k = 0; k < frames; ++k) detail::gif_image(f, gif_frame(img, k));
  f.push_back(0x3B);  // trailer
  return f;
}

}  // namespace conveyor::test
