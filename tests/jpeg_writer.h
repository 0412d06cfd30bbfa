// Test support: JPEGs of every kind the decoder must handle, written in memory
// with libjpeg (baseline, progressive, arithmetic, restart markers, subsampling,
// grayscale, CMYK...), and a reference libjpeg decode with optional DCT scaling.
// Errors never exit() and never throw through C frames: writers throw
// std::invalid_argument on bad arguments and std::runtime_error when libjpeg fails.
// Link: -ljpeg.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>
#include <jerror.h>

#include "pictures.h"

namespace conveyor::test {

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
  bool optimize = false;      // Huffman tables fitted to the image (libjpeg's optimize_coding), as most cameras' are not
  bool scan_per_component = false;  // sequential, but one scan a component (each with its own tables when optimized)
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
  jpeg_scan_info scans[MAX_COMPS_IN_SCAN];  // for scan_per_component
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
  c->optimize_coding = j.opt.optimize ? TRUE : FALSE;
  if (j.opt.scan_per_component && c->num_components <= MAX_COMPS_IN_SCAN) {
    for (int ci = 0; ci < c->num_components; ++ci) j.scans[ci] = jpeg_scan_info{1, {ci, 0, 0, 0}, 0, 63, 0, 0};
    c->scan_info = j.scans;
    c->num_scans = c->num_components;
  }
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

}  // namespace conveyor::test
