// ImageDecoder: JPEG through libjpeg-turbo, PNG/BMP/TGA/GIF through stb_image,
// binary PNM (P5/P6, 8 or 16 bit, any maxval) by hand (decode.cpp says why),
// chosen by the file's bytes (real datasets hold PNGs named .JPEG).
//
// open() reads the header only and checks the limits before any pixel memory
// exists, so a decompression bomb is an error, never an allocation. decode()
// then produces RGB8 pixels for a region of the image. For JPEG it pays only for
// that region: columns outside it are cropped (jpeg_crop_scanline), rows above
// it skipped (jpeg_skip_scanlines), decoding stops after its last row, and the
// DCT scale is reduced when the caller will downscale by at least that much.
// Of a JPEG with restart markers aligned to its rows (`conveyor pack` writes
// them), only the restart intervals that cover the region and a small margin
// are handed to libjpeg-turbo, and so entropy-decoded (image/jpeg_restart.h).
// stb_image cannot decode part of an image, so other formats decode whole.
//
// Thread safety: none; use one decoder per thread. It keeps its libjpeg state and
// scratch buffers between images, so the steady state does not allocate for
// JPEG. Errors throw DecodeError with a one-line reason (the caller names the file).
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

namespace conveyor {

struct RestartScratch;  // image/jpeg_restart.h

enum class ImageFormat { unknown, jpeg, png, bmp, pnm, tga, gif };
const char* format_name(ImageFormat f);
// By magic bytes; TGA has none, so anything else stb_image's header probe accepts
// is tga, except the PSD, HDR and PIC files stb would also read (unknown here).
ImageFormat sniff_format(std::span<const unsigned char> bytes);

struct DecodeLimits {
  // Largest width * height accepted, checked from the header. Default: 64 MP.
  std::uint64_t max_pixels = 64'000'000;
  // Largest file accepted, checked before it is read. Default: 256 MiB.
  std::uint64_t max_file_bytes = std::uint64_t{256} << 20;
};

// DCT scales (numerator over 8) the JPEG path may decode at; 8 (full size) is
// always allowed. Default {1, 2, 4, 8}, chosen by measurement
// (`conveyor-bench-images scales`, docs/benchmarks.md): 4/8, 2/8 and 1/8 decode
// in 0.87, 0.82 and 0.76 of a full decode's time, while 5/8, 6/8 and 7/8 take
// 1.13-1.51 times as long (no SIMD path) and 3/8 is slower than 4/8.
std::vector<int> default_jpeg_scales();

class DecodeError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ImageInfo {
  ImageFormat format = ImageFormat::unknown;
  int width = 0, height = 0;
  int components = 0;  // in the file: 1 gray, 2 gray+alpha, 3 colour, 4 colour+alpha or CMYK
  // JPEG only: how it is coded (what a GPU decoder may refuse).
  bool progressive = false;  // progressive scans (SOF2/SOF10), not sequential
  bool arithmetic = false;   // arithmetic entropy coding, not Huffman
  bool gray_or_ycc = false;  // grayscale or YCbCr colour; false for RGB-coded, CMYK and YCCK
};

// Whole source pixels [x, x + w) x [y, y + h).
struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

// Decoded RGB8 pixels covering at least the asked region. Pixel column c covers
// source x in [x0 + c / scale_x, x0 + (c + 1) / scale_x), likewise for rows.
// Valid until the decoder's next open(), and while the bytes given to open()
// live: a binary PPM of 8-bit RGB (P6, maxval 255, as `conveyor pack --raw`
// writes) is its own pixels, and the view points into those bytes.
struct DecodedView {
  const unsigned char* pixels = nullptr;
  int width = 0, height = 0;
  std::ptrdiff_t stride = 0;  // bytes per row
  double x0 = 0, y0 = 0;      // source position of the view's top-left corner
  double scale_x = 1, scale_y = 1;
  int dct_scale = 8;          // JPEG: the M of the M/8 scale used; 8 otherwise
  // JPEG: only the restart intervals covering the region were decoded
  // (image/jpeg_restart.h), not every row from the top.
  bool restart_subset = false;
};

class ImageDecoder {
 public:
  explicit ImageDecoder(DecodeLimits limits = {}, std::vector<int> jpeg_scales = default_jpeg_scales());
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Reads the header of `bytes` (which must outlive the decode() that follows).
  // Throws DecodeError: unknown format, corrupt header, 12-bit JPEG, or over the
  // pixel limit (the file-size limit is the caller's, who reads the file).
  ImageInfo open(std::span<const unsigned char> bytes);

  // Decodes at least `region` (inside the image) of the image open() read, at
  // the smallest allowed JPEG scale s with s >= min_scale (output pixels per
  // source pixel the caller needs; 1 for full resolution). Throws DecodeError
  // for corrupt or truncated data. Call once per open().
  DecodedView decode(Rect region, double min_scale);

  const DecodeLimits& limits() const { return limits_; }

 private:
  struct Jpeg;
  DecodedView decode_jpeg(Rect region, double min_scale);
  DecodedView decode_pnm();
  DecodedView decode_stb();
  // Throws DecodeError naming the format and size when width x height is over max_pixels.
  void check_pixel_limit(ImageFormat format, std::uint64_t width, std::uint64_t height) const;

  DecodeLimits limits_;
  std::vector<int> scales_;  // sorted ascending, includes 8
  std::unique_ptr<Jpeg> jpeg_;
  std::vector<unsigned char> subset_bytes_;  // the region's restart intervals as a JPEG
  std::unique_ptr<RestartScratch> restart_scratch_;
  std::span<const unsigned char> bytes_;
  ImageInfo info_;
  std::vector<unsigned char> pixels_, row_;                  // JPEG or PNM output; a CMYK row
  std::unique_ptr<unsigned char, void (*)(void*)> stb_pixels_;  // stb_image's own allocation
};

}  // namespace conveyor
