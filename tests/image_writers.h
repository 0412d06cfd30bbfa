// Test support: builds test images IN MEMORY in every format the decoder
// must handle (JPEG kinds, PNG kinds, BMP, TGA, PPM/PGM, GIF), plus broken
// inputs (truncated, random, decompression bombs), so tests need no files.
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

#include <jpeglib.h>
#include <jerror.h>
#include <stb/stb_image_write.h>

// Exported by libstb but declared only in the implementation half of
// stb_image_write.h. Returns a malloc'd zlib stream (free() it), or null.
extern "C" unsigned char* stbi_zlib_compress(unsigned char* data, int data_len, int* out_len, int quality);

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
// libjpeg plumbing: errors never exit() and never throw through C frames.
// error_exit longjmps back to jpeg_guarded(), whose caller turns the failure
// into std::runtime_error after libjpeg's frames are gone. Functions run under
// jpeg_guarded() keep only trivially destructible locals (a longjmp skips them).
// ---------------------------------------------------------------------------
namespace detail {

struct JpegErr {
  jpeg_error_mgr mgr;  // first member: libjpeg's err pointer is also a JpegErr*
  std::jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
};

inline void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->msg);
  std::longjmp(e->jump, 1);
}
inline void jpeg_on_message(j_common_ptr) {}  // swallow warnings instead of printing

inline jpeg_error_mgr* jpeg_err_init(JpegErr& e) {
  jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jpeg_on_error;
  e.mgr.output_message = jpeg_on_message;
  e.msg[0] = '\0';
  return &e.mgr;
}

// Runs fn(ctx); false if libjpeg reported an error (message in e.msg).
inline bool jpeg_guarded(JpegErr& e, void (*fn)(void*), void* ctx) {
  if (setjmp(e.jump) != 0) return false;
  fn(ctx);
  return true;
}

// Destination manager appending to a std::vector owned by the caller.
struct JpegVecDest {
  jpeg_destination_mgr pub;  // first member, see JpegErr
  std::vector<unsigned char>* out;
  JOCTET buf[4096];
};

inline void jpeg_vec_flush(j_compress_ptr c, std::size_t n) {
  auto* d = reinterpret_cast<JpegVecDest*>(c->dest);
  bool ok = true;
  try {
    d->out->insert(d->out->end(), d->buf, d->buf + n);
  } catch (...) {
    ok = false;
  }
  if (!ok) ERREXIT(c, JERR_OUT_OF_MEMORY);  // longjmp only once the catch block is over
  d->pub.next_output_byte = d->buf;
  d->pub.free_in_buffer = sizeof d->buf;
}
inline void jpeg_vec_init(j_compress_ptr c) { jpeg_vec_flush(c, 0); }
inline boolean jpeg_vec_empty(j_compress_ptr c) {  // libjpeg wants the whole buffer written
  jpeg_vec_flush(c, sizeof reinterpret_cast<JpegVecDest*>(c->dest)->buf);
  return TRUE;
}
inline void jpeg_vec_term(j_compress_ptr c) {
  jpeg_vec_flush(c, sizeof reinterpret_cast<JpegVecDest*>(c->dest)->buf - c->dest->free_in_buffer);
}

}  // namespace detail

// ---------------------------------------------------------------------------
// JPEG
// ---------------------------------------------------------------------------

enum class JpegKind { baseline, progressive, arithmetic, gray, cmyk_adobe, twelve_bit_header };
struct JpegOptions {
  JpegKind kind = JpegKind::baseline;
  int quality = 95;
  bool subsample_420 = true;  // RGB kinds only: 2x2 luma sampling (else 4:4:4)
};

namespace detail {

struct JpegEncodeJob {
  jpeg_compress_struct cinfo;
  JpegErr err;
  JpegVecDest dest;
  const unsigned char* samples;  // height rows of width*components bytes
  int width, height, components;
  J_COLOR_SPACE color_space;
  JpegOptions opt;
};

// Runs under jpeg_guarded: libjpeg calls and trivial locals only.
inline void jpeg_encode_body(void* ctx) {
  JpegEncodeJob& j = *static_cast<JpegEncodeJob*>(ctx);
  j_compress_ptr c = &j.cinfo;
  jpeg_create_compress(c);
  c->dest = &j.dest.pub;
  c->image_width = JDIMENSION(j.width);
  c->image_height = JDIMENSION(j.height);
  c->input_components = j.components;
  c->in_color_space = j.color_space;
  jpeg_set_defaults(c);  // RGB -> YCbCr 4:2:0, CMYK -> CMYK + Adobe marker
  jpeg_set_quality(c, j.opt.quality, TRUE);
  if (j.color_space == JCS_RGB && !j.opt.subsample_420) c->comp_info[0].h_samp_factor = c->comp_info[0].v_samp_factor = 1;
  if (j.opt.kind == JpegKind::progressive) jpeg_simple_progression(c);
  if (j.opt.kind == JpegKind::arithmetic) c->arith_code = TRUE;
  if (j.color_space == JCS_CMYK) c->write_Adobe_marker = TRUE;
  jpeg_start_compress(c, TRUE);
  while (c->next_scanline < c->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(j.samples + std::size_t(c->next_scanline) * std::size_t(j.width) * std::size_t(j.components));
    jpeg_write_scanlines(c, &row, 1);
  }
  jpeg_finish_compress(c);
}

// Encodes interleaved samples; throws std::runtime_error with libjpeg's message.
inline std::vector<unsigned char> jpeg_encode(const unsigned char* samples, int w, int h, int components, J_COLOR_SPACE cs,
                                              JpegOptions opt) {
  std::vector<unsigned char> out;
  auto job = std::make_unique<JpegEncodeJob>();  // value-initialised: cinfo.mem == nullptr
  job->cinfo.err = jpeg_err_init(job->err);
  job->dest.pub.init_destination = jpeg_vec_init;
  job->dest.pub.empty_output_buffer = jpeg_vec_empty;
  job->dest.pub.term_destination = jpeg_vec_term;
  job->dest.out = &out;
  job->samples = samples;
  job->width = w;
  job->height = h;
  job->components = components;
  job->color_space = cs;
  job->opt = opt;
  const bool ok = jpeg_guarded(job->err, jpeg_encode_body, job.get());
  jpeg_destroy_compress(&job->cinfo);  // safe after a failure anywhere, even in create
  if (!ok) throw std::runtime_error(std::string("libjpeg: ") + job->err.msg);
  return out;
}

// Offset of the SOFn marker (FF C0..CF, except C4 DHT, C8 JPG, CC DAC), found
// by walking the header segments (so bytes inside tables cannot fool it).
// Layout from there: FF Cn, length(2), precision(1), height(2), width(2).
inline std::size_t jpeg_find_sof(const std::vector<unsigned char>& f) {
  std::size_t i = 2;  // after SOI
  while (i + 4 <= f.size() && f[i] == 0xFF) {
    const unsigned m = f[i + 1];
    if (m == 0xFF) { ++i; continue; }  // fill byte
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return i;
    if (m == 0xDA) break;  // SOS before any SOF
    i += 2 + (std::size_t(f[i + 2]) << 8 | f[i + 3]);
  }
  throw std::runtime_error("no SOF marker in JPEG header");
}

}  // namespace detail

// Encodes `img` with libjpeg at o.quality:
//  - baseline/progressive/arithmetic: RGB input, stored as YCbCr (4:2:0 when
//    o.subsample_420). progressive = jpeg_simple_progression (SOF2);
//    arithmetic = arith_code (SOF9). Expected decode: ~img.
//  - gray: 1 component holding BT.601 luma. Expected decode: ~to_gray(img).
//  - cmyk_adobe: 4 components, Adobe APP14 marker (transform 0). Adobe/Photoshop
//    CMYK is stored INVERTED (stored = 255 - ink), so a decoder computes
//    R = C'*K'/255, G = M'*K'/255, B = Y'*K'/255 from the stored C'M'Y'K'.
//    We store C'=R, M'=G, Y'=B, K'=255 (i.e. ink C=255-R, ..., no black ink),
//    so that formula gives back ~img.
//  - twelve_bit_header: the baseline file with the SOF0 precision byte patched
//    from 8 to 12: what a 12-bit JPEG looks like to an 8-bit-only decoder,
//    which must reject it (libjpeg: "Unsupported JPEG data precision 12").
inline std::vector<unsigned char> jpeg(const Rgb& img, JpegOptions o = {}) {
  detail::check_dims(img.width, img.height);
  if (o.quality < 1 || o.quality > 100) throw std::invalid_argument("JPEG quality must be 1..100");
  switch (o.kind) {
    case JpegKind::gray: {
      std::vector<unsigned char> y(img.px.size() / 3);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = detail::luma(&img.px[3 * i]);
      return detail::jpeg_encode(y.data(), img.width, img.height, 1, JCS_GRAYSCALE, o);
    }
    case JpegKind::cmyk_adobe: {
      std::vector<unsigned char> cmyk;
      cmyk.reserve(img.px.size() / 3 * 4);
      for (std::size_t i = 0; i < img.px.size(); i += 3) cmyk.insert(cmyk.end(), {img.px[i], img.px[i + 1], img.px[i + 2], 255});
      return detail::jpeg_encode(cmyk.data(), img.width, img.height, 4, JCS_CMYK, o);
    }
    case JpegKind::twelve_bit_header: {
      o.kind = JpegKind::baseline;
      std::vector<unsigned char> f = detail::jpeg_encode(img.px.data(), img.width, img.height, 3, JCS_RGB, o);
      f[detail::jpeg_find_sof(f) + 4] = 12;
      return f;
    }
    default: return detail::jpeg_encode(img.px.data(), img.width, img.height, 3, JCS_RGB, o);
  }
}

// A small valid baseline JPEG whose SOF0 claims width x height: a
// decompression bomb (the header promises far more pixels than the data holds).
inline std::vector<unsigned char> jpeg_claiming(std::uint16_t width, std::uint16_t height) {
  std::vector<unsigned char> f = jpeg(gradient(16, 16));
  const std::size_t sof = detail::jpeg_find_sof(f);
  f[sof + 5] = static_cast<unsigned char>(height >> 8);
  f[sof + 6] = static_cast<unsigned char>(height);
  f[sof + 7] = static_cast<unsigned char>(width >> 8);
  f[sof + 8] = static_cast<unsigned char>(width);
  return f;
}

// ---------------------------------------------------------------------------
// Reference JPEG decoding with libjpeg (any kind above, optional DCT scaling)
// ---------------------------------------------------------------------------

struct JpegInfo {
  int width = 0, height = 0, components = 0, precision = 0;
  bool progressive = false, arithmetic = false, adobe = false;
  J_COLOR_SPACE color_space = JCS_UNKNOWN;  // as libjpeg guesses it from the file
};

struct JpegDecoded {
  JpegInfo info;
  int out_components = 0;             // 1 gray, 3 RGB, 4 CMYK (stored, i.e. inverted, values)
  std::vector<unsigned char> samples;  // libjpeg's raw output, out_components per pixel
  Rgb rgb;                             // samples as RGB: gray replicated, CMYK via R = C*K/255
};

namespace detail {

struct JpegDecodeJob {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  const unsigned char* data;
  unsigned long size;
  unsigned scale_denom;
  bool header_only;
  unsigned char* out;  // stage 2: output_height rows of output_width*output_components
};

// Stage 1 (under jpeg_guarded): read the header, choose the output colour
// space and scale, and (unless header_only) start decompression.
inline void jpeg_decode_start(void* ctx) {
  JpegDecodeJob& j = *static_cast<JpegDecodeJob*>(ctx);
  j_decompress_ptr c = &j.cinfo;
  jpeg_create_decompress(c);
  jpeg_mem_src(c, j.data, j.size);
  jpeg_read_header(c, TRUE);
  if (j.header_only) return;
  const J_COLOR_SPACE cs = c->jpeg_color_space;
  c->out_color_space = cs == JCS_GRAYSCALE ? JCS_GRAYSCALE : (cs == JCS_CMYK || cs == JCS_YCCK) ? JCS_CMYK : JCS_RGB;
  c->scale_num = 1;
  c->scale_denom = j.scale_denom;
  jpeg_start_decompress(c);
}

// Stage 2 (under jpeg_guarded): read every scanline into j.out.
inline void jpeg_decode_rows(void* ctx) {
  JpegDecodeJob& j = *static_cast<JpegDecodeJob*>(ctx);
  j_decompress_ptr c = &j.cinfo;
  const std::size_t stride = std::size_t(c->output_width) * std::size_t(c->output_components);
  while (c->output_scanline < c->output_height) {
    JSAMPROW row = j.out + std::size_t(c->output_scanline) * stride;
    jpeg_read_scanlines(c, &row, 1);
  }
  jpeg_finish_decompress(c);
}

inline JpegDecoded jpeg_run_decode(const std::vector<unsigned char>& file, unsigned scale_denom, bool header_only) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
    throw std::invalid_argument("scale_denom must be 1, 2, 4 or 8");
  auto job = std::make_unique<JpegDecodeJob>();
  job->cinfo.err = jpeg_err_init(job->err);
  job->data = file.data();
  job->size = static_cast<unsigned long>(file.size());
  job->scale_denom = scale_denom;
  job->header_only = header_only;
  struct Destroy {  // frees libjpeg's state however we leave (it is safe after any failure)
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&job->cinfo};
  JpegDecoded d;
  bool ok = jpeg_guarded(job->err, jpeg_decode_start, job.get());
  if (ok) {
    const jpeg_decompress_struct& c = job->cinfo;
    d.info = {int(c.image_width), int(c.image_height), c.num_components, c.data_precision,
              bool(c.progressive_mode), bool(c.arith_code), bool(c.saw_Adobe_marker), c.jpeg_color_space};
    if (!header_only) {
      d.out_components = c.output_components;
      d.samples.resize(std::size_t(c.output_width) * c.output_height * std::size_t(c.output_components));
      d.rgb = Rgb::sized(int(c.output_width), int(c.output_height));
      job->out = d.samples.data();
      ok = jpeg_guarded(job->err, jpeg_decode_rows, job.get());
    }
  }
  if (!ok) throw std::runtime_error(std::string("libjpeg: ") + job->err.msg);
  return d;
}

}  // namespace detail

// Header only: dimensions, precision, coding flags. Throws std::runtime_error.
inline JpegInfo jpeg_info(const std::vector<unsigned char>& file) { return detail::jpeg_run_decode(file, 1, true).info; }

// Full decode with libjpeg, scaled by 1/scale_denom (1, 2, 4, 8) in the DCT
// domain. Throws std::runtime_error carrying libjpeg's message.
inline JpegDecoded jpeg_decode(const std::vector<unsigned char>& file, int scale_denom = 1) {
  JpegDecoded d = detail::jpeg_run_decode(file, static_cast<unsigned>(std::max(scale_denom, 0)), false);
  const std::size_t n = d.rgb.px.size() / 3;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char* s = &d.samples[i * std::size_t(d.out_components)];
    unsigned char* p = &d.rgb.px[3 * i];
    if (d.out_components == 1) std::fill_n(p, 3, s[0]);
    else if (d.out_components == 3) std::copy(s, s + 3, p);
    else for (int c = 0; c < 3; ++c) p[c] = static_cast<unsigned char>(s[c] * s[3] / 255);  // Adobe: stored = inverted
  }
  return d;
}

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
