#include "image/decode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <stb/stb_image.h>

#include "image/container_check.h"
#include "image/jpeg_errors.h"
#include "image/jpeg_restart.h"

namespace conveyor {

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::png: return "PNG";
    case ImageFormat::bmp: return "BMP";
    case ImageFormat::pnm: return "PNM";
    case ImageFormat::tga: return "TGA";
    case ImageFormat::gif: return "GIF";
    case ImageFormat::unknown: break;
  }
  return "unknown";
}

ImageFormat sniff_format(std::span<const unsigned char> b) {
  auto starts = [&](std::initializer_list<unsigned char> magic) {
    return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
  };
  if (starts({0xFF, 0xD8, 0xFF})) return ImageFormat::jpeg;
  if (starts({0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})) return ImageFormat::png;
  if (starts({'G', 'I', 'F', '8'})) return ImageFormat::gif;
  if (starts({'B', 'M'})) return ImageFormat::bmp;
  if (b.size() >= 2 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) return ImageFormat::pnm;  // binary PNM
  // stb_image also reads PSD, Radiance HDR and Softimage PIC, and takes FF (FF)* D8
  // for a JPEG start; this decoder offers none of them (its JPEGs are libjpeg-turbo's),
  // so they must not reach stb's loaders through the TGA probe below.
  if (starts({'8', 'B', 'P', 'S'}) || starts({'#', '?'}) || starts({0x53, 0x80, 0xF6, 0x34})) return ImageFormat::unknown;
  if (!b.empty() && b[0] == 0xFF) {
    const auto first_other = std::find_if(b.begin(), b.end(), [](unsigned char c) { return c != 0xFF; });
    if (first_other != b.end() && *first_other == 0xD8) return ImageFormat::unknown;
  }
  // TGA has no magic number: ask stb_image's header probe, the decoder that will read it.
  int w = 0, h = 0, n = 0;
  if (!b.empty() && b.size() <= std::size_t(INT32_MAX) && stbi_info_from_memory(b.data(), int(b.size()), &w, &h, &n)) {
    return ImageFormat::tga;
  }
  return ImageFormat::unknown;
}

std::vector<int> default_jpeg_scales() { return {1, 2, 4, 8}; }

// ---- libjpeg: errors become a longjmp back into the function that called it
// (image/jpeg_errors.h), which turns them into DecodeError once no libjpeg frame
// is on the stack.

using detail::JpegErrors;

struct ImageDecoder::Jpeg {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  Jpeg() {
    cinfo.err = detail::jpeg_errors_init(errors);
    jpeg_create_decompress(&cinfo);  // only fails on out-of-memory, which cannot happen before any allocation
  }
  ~Jpeg() { jpeg_destroy_decompress(&cinfo); }
};

namespace {

// Header of a JPEG into j. False (with j.errors.message) on a libjpeg error.
bool jpeg_read_header_safely(jpeg_decompress_struct& cinfo, JpegErrors& err, std::span<const unsigned char> bytes) {
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, bytes.data(), (unsigned long)bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

struct JpegJob {
  unsigned scale = 8;           // M of M/8
  Rect region;                  // in source pixels
  std::vector<unsigned char>* out = nullptr;
  std::vector<unsigned char>* row = nullptr;  // CMYK scratch
  // Results: the decoded window in scaled pixels.
  JDIMENSION x = 0, y = 0, width = 0, height = 0;
};

// CMYK to RGB. Adobe (Photoshop) files store the inks inverted, which the
// Adobe marker announces; others store them plainly.
void cmyk_to_rgb(const unsigned char* in, unsigned char* out, JDIMENSION n, bool inverted) {
  for (JDIMENSION i = 0; i < n; ++i, in += 4, out += 3) {
    const unsigned k = inverted ? in[3] : 255u - in[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned ink = inverted ? in[c] : 255u - in[c];
      out[c] = (unsigned char)((ink * k + 127) / 255);
    }
  }
}

// Decodes the job's region; false (with err.message) on a libjpeg error.
bool jpeg_decode_safely(jpeg_decompress_struct& cinfo, JpegErrors& err, JpegJob& job) {
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg-turbo expands grey to RGB itself
  cinfo.scale_num = job.scale;
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);

  // The region in scaled pixels: source x maps to x * M / 8.
  // Two more columns each side where the image has them: jpeg_crop_scanline's
  // fancy upsampling takes the crop's edge for the image's, so with 4:2:0
  // chroma the first and last columns decoded differ from a whole decode (by
  // up to 21 levels). With a chroma sample more each side they are not used.
  const double s = job.scale / 8.0;
  constexpr JDIMENSION kEdge = 2;
  JDIMENSION x0 = JDIMENSION(std::floor(job.region.x * s));
  x0 = x0 > kEdge ? x0 - kEdge : 0;
  JDIMENSION x1 = std::min(cinfo.output_width, JDIMENSION(std::ceil((job.region.x + job.region.w) * s) + kEdge));
  const JDIMENSION y0 = JDIMENSION(std::floor(job.region.y * s));
  const JDIMENSION y1 = std::min(cinfo.output_height, JDIMENSION(std::ceil((job.region.y + job.region.h) * s)));
  x1 = std::max(x1, x0 + 1);
  JDIMENSION width = x1 - x0;
  if (x0 > 0 || width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x0, &width);  // widens to iMCU edges
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);
  const JDIMENSION rows = std::max<JDIMENSION>(1, y1 - y0);

  job.out->resize(std::size_t(rows) * width * 3);
  if (cmyk) job.row->resize(std::size_t(width) * 4);
  for (JDIMENSION r = 0; r < rows;) {
    unsigned char* dst = job.out->data() + std::size_t(r) * width * 3;
    JSAMPROW line = cmyk ? job.row->data() : dst;
    if (jpeg_read_scanlines(&cinfo, &line, 1) != 1) continue;  // only suspending sources return 0
    if (cmyk) cmyk_to_rgb(line, dst, width, cinfo.saw_Adobe_marker);
    ++r;
  }
  jpeg_abort_decompress(&cinfo);  // stop after the last needed row: the rest is never decoded
  job.x = x0;
  job.y = y0;
  job.width = width;
  job.height = rows;
  return true;
}

// ---- Binary PNM (P5 grey, P6 colour), read by hand rather than by stb_image:
// the stb_image in Debian 12 (v2.27) converts 16-bit grey to RGB with its 8-bit
// converter and reads past its own buffer (found by fuzz_decode; the input is in
// fuzz/regressions/decode/), returns uninitialised pixels for a raster cut short
// instead of an error, and ignores a maxval other than 255 or 65535. The format
// is a text header and raw samples, so reading it here is short and exact.

bool pnm_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

struct PnmHeader {
  int width = 0, height = 0, channels = 0;
  int maxval = 0;                 // 1..65535; samples take 2 bytes (big-endian) above 255
  std::size_t raster_offset = 0;  // first byte after the header
};

// "P5"|"P6", then width, height and maxval as decimal numbers separated by
// whitespace and "#" comments, then one whitespace byte. Throws DecodeError.
PnmHeader read_pnm_header(std::span<const unsigned char> b) {
  PnmHeader h;
  h.channels = b[1] == '5' ? 1 : 3;
  std::size_t i = 2;
  auto number = [&](const char* field, int max) {
    for (;;) {  // whitespace and comments before the number
      while (i < b.size() && pnm_space(b[i])) ++i;
      if (i >= b.size() || b[i] != '#') break;
      while (i < b.size() && b[i] != '\n' && b[i] != '\r') ++i;
    }
    if (i >= b.size() || b[i] < '0' || b[i] > '9') throw DecodeError(std::string("PNM header: no ") + field);
    std::int64_t v = 0;
    for (; i < b.size() && b[i] >= '0' && b[i] <= '9'; ++i) {
      v = v * 10 + (b[i] - '0');
      if (v > max) throw DecodeError(std::string("PNM header: ") + field + " over " + std::to_string(max));
    }
    return int(v);
  };
  h.width = number("width", INT32_MAX);
  h.height = number("height", INT32_MAX);
  h.maxval = number("maxval", 65535);
  if (h.maxval == 0) throw DecodeError("PNM header: maxval 0");
  if (i >= b.size() || !pnm_space(b[i])) throw DecodeError("PNM header: no whitespace after maxval");
  h.raster_offset = i + 1;
  return h;
}

// The raster as RGB8, each sample scaled from 0..maxval to 0..255 (rounded;
// samples over maxval, which the format forbids, count as maxval).
void pnm_to_rgb(std::span<const unsigned char> b, const PnmHeader& h, std::vector<unsigned char>& out) {
  const std::size_t sample_bytes = h.maxval > 255 ? 2 : 1;
  const std::size_t pixels = std::size_t(h.width) * std::size_t(h.height);
  const std::size_t need = pixels * std::size_t(h.channels) * sample_bytes;
  const std::size_t have = b.size() - std::min(b.size(), h.raster_offset);
  if (have < need) {
    throw DecodeError("PNM: pixel data cut short: " + std::to_string(have) + " of " + std::to_string(need) + " bytes");
  }
  const unsigned char* in = b.data() + h.raster_offset;
  const auto maxval = std::uint32_t(h.maxval);
  auto scaled = [maxval](std::uint32_t v) { return (std::min(v, maxval) * 255 + maxval / 2) / maxval; };
  std::uint8_t table[256];  // 8-bit samples: one lookup each
  if (sample_bytes == 1) {
    for (std::uint32_t v = 0; v < 256; ++v) table[v] = std::uint8_t(scaled(v));
  }
  out.resize(pixels * 3);
  unsigned char* o = out.data();
  const std::size_t samples = pixels * std::size_t(h.channels);
  for (std::size_t s = 0; s < samples; ++s) {
    const std::uint8_t v = sample_bytes == 1 ? table[in[s]] : std::uint8_t(scaled(std::uint32_t(in[2 * s]) << 8 | in[2 * s + 1]));
    if (h.channels == 3) {
      *o++ = v;
    } else {
      o[0] = o[1] = o[2] = v;
      o += 3;
    }
  }
}

}  // namespace

ImageDecoder::ImageDecoder(DecodeLimits limits, std::vector<int> jpeg_scales)
    : limits_(limits),
      scales_(std::move(jpeg_scales)),
      jpeg_(std::make_unique<Jpeg>()),
      restart_scratch_(std::make_unique<RestartScratch>()),
      stb_pixels_(nullptr, std::free) {
  for (int m : scales_) {
    if (m < 1 || m > 8) throw std::invalid_argument("jpeg scales: " + std::to_string(m) + " is not an M of M/8 in 1..8");
  }
  scales_.push_back(8);
  std::sort(scales_.begin(), scales_.end());
  scales_.erase(std::unique(scales_.begin(), scales_.end()), scales_.end());
}

ImageDecoder::~ImageDecoder() = default;

void ImageDecoder::check_pixel_limit(ImageFormat format, std::uint64_t width, std::uint64_t height) const {
  const std::uint64_t pixels = width * height;  // each below 2^32: no overflow
  if (pixels > limits_.max_pixels) {
    throw DecodeError(std::string(format_name(format)) + " header claims " + std::to_string(width) + "x" +
                      std::to_string(height) + " = " + std::to_string(pixels) + " pixels, over the limit of " +
                      std::to_string(limits_.max_pixels) + " (max_pixels)");
  }
}

ImageInfo ImageDecoder::open(std::span<const unsigned char> bytes) {
  stb_pixels_.reset();
  jpeg_abort_decompress(&jpeg_->cinfo);
  bytes_ = bytes;
  info_ = {};
  if (bytes.empty()) throw DecodeError("empty file");
  if (bytes.size() > limits_.max_file_bytes) {
    throw DecodeError("file of " + std::to_string(bytes.size()) + " bytes is over the limit of " +
                      std::to_string(limits_.max_file_bytes) + " (max_file_bytes)");
  }
  ImageInfo info;
  info.format = sniff_format(bytes);
  switch (info.format) {
    case ImageFormat::unknown:
      throw DecodeError("not an image this decoder reads (JPEG, PNG, BMP, PNM, TGA, GIF): unrecognised leading bytes");
    case ImageFormat::jpeg: {
      auto& cinfo = jpeg_->cinfo;
      if (!jpeg_read_header_safely(cinfo, jpeg_->errors, bytes)) {
        throw DecodeError(std::string("JPEG header: ") + jpeg_->errors.message);
      }
      if (cinfo.data_precision != 8) {  // libjpeg-turbo's 8-bit API normally refuses these already
        throw DecodeError("JPEG of " + std::to_string(cinfo.data_precision) + "-bit precision: only 8-bit is supported");
      }
      info.width = int(cinfo.image_width);
      info.height = int(cinfo.image_height);
      info.components = cinfo.num_components;
      info.progressive = cinfo.progressive_mode != 0;
      info.arithmetic = cinfo.arith_code != 0;
      info.gray_or_ycc = (cinfo.jpeg_color_space == JCS_GRAYSCALE && cinfo.num_components == 1) ||
                         (cinfo.jpeg_color_space == JCS_YCbCr && cinfo.num_components == 3);
      break;
    }
    case ImageFormat::pnm: {
      const PnmHeader h = read_pnm_header(bytes);
      info.width = h.width;
      info.height = h.height;
      info.components = h.channels;
      break;
    }
    default:
      if (const auto d = container_dimensions(info.format, bytes)) check_pixel_limit(info.format, d->width, d->height);
      if (bytes.size() > std::size_t(INT32_MAX) ||
          !stbi_info_from_memory(bytes.data(), int(bytes.size()), &info.width, &info.height, &info.components)) {
        throw DecodeError(std::string(format_name(info.format)) + " header: " + stbi_failure_reason());
      }
  }
  if (info.width < 1 || info.height < 1) throw DecodeError("image has no pixels");
  check_pixel_limit(info.format, std::uint64_t(info.width), std::uint64_t(info.height));
  info_ = info;
  return info;
}

DecodedView ImageDecoder::decode(Rect region, double min_scale) {
  if (info_.format == ImageFormat::unknown) throw std::logic_error("ImageDecoder::decode without a successful open()");
  region.x = std::clamp(region.x, 0, info_.width - 1);
  region.y = std::clamp(region.y, 0, info_.height - 1);
  region.w = std::clamp(region.w, 1, info_.width - region.x);
  region.h = std::clamp(region.h, 1, info_.height - region.y);
  DecodedView v = info_.format == ImageFormat::jpeg  ? decode_jpeg(region, min_scale)
                  : info_.format == ImageFormat::pnm ? decode_pnm()
                                                     : decode_stb();
  info_.format = ImageFormat::unknown;  // one decode per open
  return v;
}

DecodedView ImageDecoder::decode_jpeg(Rect region, double min_scale) {
  JpegJob job;
  job.region = region;
  job.out = &pixels_;
  job.row = &row_;
  // The smallest allowed scale that still gives the caller min_scale pixels per source pixel.
  job.scale = 8;
  for (int m : scales_) {
    if (m / 8.0 >= min_scale) {
      job.scale = unsigned(m);
      break;
    }
  }
  // A file with restart markers that line up with its rows: decode only the
  // intervals that cover the region (image/jpeg_restart.h). The view reaches
  // kEdge scaled pixels past the region (plus one for rounding), and the
  // subset must hold all of it: then libjpeg-turbo decodes the view's columns
  // as one crop window in both files, and upsampling reads no row of the
  // subset's edges (a chroma sample, two rows, beyond the view at most). So
  // 3 scaled pixels; tests/test_jpeg_restart.cpp checks every pixel of the
  // view against the whole file's, and sees differences with 1.
  RestartSubset subset;  // the whole file until a subset is made
  if (jpeg_->cinfo.restart_interval > 0) {
    const int margin = 24 / int(job.scale);  // 3 scaled pixels (2.5 at least for 5/8 or 7/8), in source pixels
    if (const auto s = restart_subset(bytes_, region, margin, subset_bytes_, *restart_scratch_)) {
      jpeg_abort_decompress(&jpeg_->cinfo);
      if (!jpeg_read_header_safely(jpeg_->cinfo, jpeg_->errors, subset_bytes_)) {
        throw DecodeError(std::string("JPEG (restart intervals of the region): ") + jpeg_->errors.message);
      }
      subset = *s;
      job.region.x -= s->x;
      job.region.y -= s->y;
    }
  }
  if (!jpeg_decode_safely(jpeg_->cinfo, jpeg_->errors, job)) throw DecodeError(std::string("JPEG: ") + jpeg_->errors.message);
  job.x += JDIMENSION(subset.x * int(job.scale) / 8);  // whole pixels: subset.x is a multiple of the MCU
  job.y += JDIMENSION(subset.y * int(job.scale) / 8);
  DecodedView v;
  v.pixels = pixels_.data();
  v.width = int(job.width);
  v.height = int(job.height);
  v.stride = std::ptrdiff_t(job.width) * 3;
  // Scaled output has ceil(W * M / 8) pixels: the scale is exactly M / 8 per axis.
  v.scale_x = v.scale_y = job.scale / 8.0;
  v.x0 = job.x / v.scale_x;
  v.y0 = job.y / v.scale_y;
  v.dct_scale = int(job.scale);
  v.restart_subset = subset.width > 0;
  return v;
}

DecodedView ImageDecoder::decode_pnm() {
  const PnmHeader h = read_pnm_header(bytes_);
  DecodedView v;
  v.width = info_.width;
  v.height = info_.height;
  v.stride = std::ptrdiff_t(info_.width) * 3;
  if (h.channels == 3 && h.maxval == 255) {  // RGB8 as it is (`pack --raw`): the file's own bytes, no copy
    const std::size_t need = std::size_t(h.width) * std::size_t(h.height) * 3;
    const std::size_t have = bytes_.size() - std::min(bytes_.size(), h.raster_offset);
    if (have < need) {
      throw DecodeError("PNM: pixel data cut short: " + std::to_string(have) + " of " + std::to_string(need) + " bytes");
    }
    v.pixels = bytes_.data() + h.raster_offset;
    return v;
  }
  pnm_to_rgb(bytes_, h, pixels_);
  v.pixels = pixels_.data();
  return v;
}

DecodedView ImageDecoder::decode_stb() {
  check_container(info_.format, bytes_);  // stb_image would make up what a cut file lacks
  int w = 0, h = 0, n = 0;
  // The 8-bit API converts 16-bit samples to 8, expands palettes and grey, and drops alpha (req_comp 3).
  stb_pixels_.reset(stbi_load_from_memory(bytes_.data(), int(bytes_.size()), &w, &h, &n, 3));
  if (!stb_pixels_) throw DecodeError(std::string(format_name(info_.format)) + ": " + stbi_failure_reason());
  if (w != info_.width || h != info_.height) throw DecodeError("image size differs between header and data");
  DecodedView v;
  v.pixels = stb_pixels_.get();
  v.width = w;
  v.height = h;
  v.stride = std::ptrdiff_t(w) * 3;
  return v;
}

}  // namespace conveyor
