// Re-encoding an image at a reduced resolution, for `conveyor pack --max-side N
// --quality Q` (FFCV's max_resolution): lossy and opt-in; and storing it as
// decoded pixels, for `conveyor pack --raw N` (FFCV's RAW write mode): a
// binary PPM the decoder reads without decoding. Stateless ops over one file's
// bytes.
//
//   ImageDecoder decoder;                      // reused across files (its buffers grow once)
//   ReencodeScratch scratch;
//   if (auto smaller = reencode_within(file, {256, 90}, decoder, scratch)) write(*smaller);  // else keep file
//   write(raw_within(file, 64, decoder, scratch));
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "image/augment.h"
#include "image/decode.h"
#include "image/resize.h"

namespace conveyor {

struct ReencodeSettings {
  // The longest side allowed, in pixels (>= 1). Default: 512.
  int max_side = 512;
  // JPEG quality 1..100 of the re-encoded file (libjpeg's scale, as FFCV's
  // jpeg_quality). Default: 90.
  int quality = 90;
};

struct ReencodeScratch {
  std::vector<unsigned char> pixels;
  ResizeScratch resize;
};

// The size an image of width x height gets: itself when its longest side is
// at most max_side, else scaled so that side is max_side, the other side
// rounded to the nearest pixel (at least 1). Aspect kept within half a pixel.
Size reencoded_size(int width, int height, int max_side);

// When the image in `file` is larger than settings.max_side on its longest
// side: its pixels resized to reencoded_size (the triangle filter of the CPU
// path, antialiased) and encoded as a baseline JPEG at settings.quality,
// 4:2:0, or grayscale when the file is (ImageInfo::components 1 or 2; alpha is
// dropped). Otherwise nullopt: the file is kept as it is, not re-encoded, so
// an image already small enough loses nothing. Throws DecodeError (or what
// the decoder throws) for a file it cannot decode, std::invalid_argument for
// settings out of range, std::runtime_error when the encoder fails.
std::optional<std::vector<unsigned char>> reencode_within(std::span<const unsigned char> file, const ReencodeSettings& settings,
                                                          ImageDecoder& decoder, ReencodeScratch& scratch);

// The image in `file` as a binary PPM (P6, 8-bit RGB, maxval 255: "P6\nW H\n255\n"
// then the pixels, row by row), resized first (as reencode_within resizes)
// when it is larger than max_side on its longest side. A grey file's pixels
// are stored as RGB too: the decoder then hands the file's bytes on as they
// are (image/decode.h). Lossless for an image within max_side but for alpha
// (dropped) and 16-bit samples (8 kept). Throws what reencode_within throws.
std::vector<unsigned char> raw_within(std::span<const unsigned char> file, int max_side, ImageDecoder& decoder,
                                      ReencodeScratch& scratch);

}  // namespace conveyor
