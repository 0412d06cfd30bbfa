// check_container: does a PNG, BMP, TGA or GIF file hold every byte its headers
// promise? Called before stb_image decodes one, because the stb_image in Debian 12
// (v2.27) does not ask: for a file cut short it fills the missing BMP and TGA
// pixels with zeros and returns a partial GIF frame, all without an error, so a
// half-downloaded file would train as a picture with black rows; and it grows its
// PNG buffer to whatever length an IDAT chunk claims (up to 2 GiB) before it
// finds the bytes missing.
//
// The checks walk the container only (headers, chunk and block lengths, TGA run
// packets, and each PNG chunk's CRC, which stb_image does not check: a flipped
// bit in IDAT decoded to wrong pixels); they decode nothing, and pass every
// well-formed file stb_image can read whole.
// What they cannot see: a compressed stream (PNG's zlib, GIF's LZW) that ends
// early inside bytes that are all there. For PNG, stb reports that itself; a GIF
// whose LZW data stops early still decodes partially.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "image/decode.h"

namespace conveyor {

// Throws DecodeError ("BMP: pixel data cut short: 4635 of 9216 bytes") when the
// file ends before the data its headers describe (or inside a header). Formats
// other than PNG, BMP, TGA and GIF pass unchecked.
void check_container(ImageFormat format, std::span<const unsigned char> bytes);

// The width and height a PNG, BMP, GIF or TGA header states, read by hand: when
// stb_image's own size limit refuses a header, stbi_info goes on to try every
// other format and reports the last one's failure ("unknown image type"), so
// the decoder checks its pixel limit on these figures first. nullopt for other
// formats and for a header too short to hold them. Throws nothing.
struct Dimensions {
  std::uint64_t width = 0, height = 0;
};
std::optional<Dimensions> container_dimensions(ImageFormat format, std::span<const unsigned char> bytes);

}  // namespace conveyor
