#include "image/container_check.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace conveyor {
namespace {

using Bytes = std::span<const unsigned char>;

std::uint32_t le16(Bytes b, std::size_t i) { return std::uint32_t(b[i]) | std::uint32_t(b[i + 1]) << 8; }
std::uint32_t le32(Bytes b, std::size_t i) { return le16(b, i) | le16(b, i + 2) << 16; }
std::uint32_t be32(Bytes b, std::size_t i) {
  return std::uint32_t(b[i]) << 24 | std::uint32_t(b[i + 1]) << 16 | std::uint32_t(b[i + 2]) << 8 | b[i + 3];
}

[[noreturn]] void cut_short(const char* format, std::uint64_t have, std::uint64_t need) {
  throw DecodeError(std::string(format) + ": pixel data cut short: " + std::to_string(have) + " of " +
                    std::to_string(need) + " bytes");
}

// A chunk's four-letter type as text, '?' for a byte that is no letter.
std::string chunk_type(Bytes b, std::size_t at) {
  std::string type;
  for (std::size_t i = at + 4; i < at + 8; ++i) type += (b[i] >= 32 && b[i] < 127) ? char(b[i]) : '?';
  return type;
}

// CRC-32 as PNG and zlib define it (reflected, polynomial 0xEDB88320),
// "slicing by 8": eight bytes a step through eight tables made at compile time
// (a byte-at-a-time table ran at 0.5 GB/s and cost 14% of a full-size PNG
// decode). Written here rather than taking zlib on as a dependency for one
// function: stb_image checks no PNG CRC (nor zlib's Adler-32), so a flipped
// bit in IDAT decoded silently to wrong pixels where Pillow and libpng refuse
// the file.
using CrcTables = std::array<std::array<std::uint32_t, 256>, 8>;
constexpr CrcTables kCrc = [] {
  CrcTables t{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][n] = c;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t n = 0; n < 256; ++n) t[k][n] = (t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF];
  }
  return t;
}();

std::uint32_t crc32(Bytes b) {
  std::uint32_t c = 0xFFFFFFFFu;
  std::size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    const std::uint32_t one = le32(b, i) ^ c, two = le32(b, i + 4);
    c = kCrc[7][one & 0xFF] ^ kCrc[6][(one >> 8) & 0xFF] ^ kCrc[5][(one >> 16) & 0xFF] ^ kCrc[4][one >> 24] ^
        kCrc[3][two & 0xFF] ^ kCrc[2][(two >> 8) & 0xFF] ^ kCrc[1][(two >> 16) & 0xFF] ^ kCrc[0][two >> 24];
  }
  for (; i < b.size(); ++i) c = kCrc[0][(c ^ b[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// Chunks: length (4, big-endian), type (4), data, CRC (4, over type and data), up to IEND.
void check_png(Bytes b) {
  std::size_t at = 8;  // after the signature
  while (at + 8 <= b.size()) {
    const std::uint32_t length = be32(b, at);
    const std::size_t left = b.size() - at - 8;  // after the chunk's length and type
    if (length > left) {
      throw DecodeError("PNG: chunk '" + chunk_type(b, at) + "' claims " + std::to_string(length) +
                        " bytes, the file holds " + std::to_string(left) + " more");
    }
    if (length + 4 > left) {
      throw DecodeError("PNG: chunk '" + chunk_type(b, at) + "' cut short: its CRC is missing");
    }
    const std::uint32_t stored = be32(b, at + 8 + length);
    const std::uint32_t computed = crc32(b.subspan(at + 4, 4 + std::size_t(length)));
    if (stored != computed) {
      char hex[64];
      std::snprintf(hex, sizeof hex, " (stored %08x, computed %08x)", unsigned(stored), unsigned(computed));
      throw DecodeError("PNG: chunk '" + chunk_type(b, at) + "' at byte " + std::to_string(at) +
                        " fails its CRC check: the file is corrupt" + hex);
    }
    if (b[at + 4] == 'I' && b[at + 5] == 'E' && b[at + 6] == 'N' && b[at + 7] == 'D') return;
    at += 12 + std::size_t(length);
  }
}

// Uncompressed rows (stb_image reads no RLE BMP) from the header's pixel data
// offset, each padded to 4 bytes; the last row's padding may be missing.
void check_bmp(Bytes b) {
  if (b.size() < 30) throw DecodeError("BMP: header cut short");
  const std::uint32_t offset = le32(b, 10);
  const std::uint32_t header = le32(b, 14);
  std::uint64_t width = 0, height = 0, bpp = 0;
  if (header == 12) {
    width = le16(b, 18);
    height = le16(b, 20);
    bpp = le16(b, 24);
  } else {
    width = le32(b, 18);
    height = std::uint64_t(std::abs(std::int64_t(std::int32_t(le32(b, 22)))));  // negative: rows top-down
    bpp = le16(b, 28);
  }
  if (width == 0 || height == 0 || bpp == 0) return;
  const std::uint64_t stride = (width * bpp + 31) / 32 * 4;
  const std::uint64_t need = stride * (height - 1) + (width * bpp + 7) / 8;
  const std::uint64_t have = b.size() > offset ? b.size() - offset : 0;
  if (have < need) cut_short("BMP", have, need);
}

// Header (18), image ID, colour map (stb_image skips `first entry` bytes before
// it), then pixels: raw, or run-length packets of 1 + (h & 127) pixels that hold
// one pixel value (h & 128) or one per pixel.
void check_tga(Bytes b) {
  if (b.size() < 18) throw DecodeError("TGA: header cut short");
  const bool indexed = b[1] != 0;
  const bool rle = b[2] >= 8;
  const std::uint64_t pixels = std::uint64_t(le16(b, 12)) * le16(b, 14);
  const std::uint64_t pixel_bytes = (b[16] + 7u) / 8u;
  std::uint64_t at = 18 + std::uint64_t(b[0]);
  if (indexed) at += le16(b, 3) + std::uint64_t(le16(b, 5)) * ((b[7] + 7u) / 8u);
  if (pixels == 0 || pixel_bytes == 0) return;
  if (!rle) {
    const std::uint64_t have = b.size() > at ? b.size() - at : 0;
    if (have < pixels * pixel_bytes) cut_short("TGA", have, pixels * pixel_bytes);
    return;
  }
  std::uint64_t done = 0;
  while (done < pixels) {
    if (at >= b.size()) {
      throw DecodeError("TGA: run-length data cut short after " + std::to_string(done) + " of " + std::to_string(pixels) +
                        " pixels");
    }
    const unsigned packet = b[at++];
    const std::uint64_t count = std::min<std::uint64_t>(1 + (packet & 127), pixels - done);
    at += (packet & 128) ? pixel_bytes : count * pixel_bytes;
    if (at > b.size()) {
      throw DecodeError("TGA: run-length data cut short after " + std::to_string(done) + " of " + std::to_string(pixels) +
                        " pixels");
    }
    done += count;
  }
}

// Header (13), global colour table, then blocks up to the end of the first
// image's data, which is all stb_image decodes: extensions (0x21, label,
// sub-blocks) and the image (0x2C, 9 bytes, local colour table, LZW code size,
// sub-blocks). A sub-block is a length byte and that many bytes; 0 ends a list.
void check_gif(Bytes b) {
  if (b.size() < 13) throw DecodeError("GIF: header cut short");
  std::uint64_t at = 13;
  if (b[10] & 0x80) at += 3u * (2u << (b[10] & 7));
  auto cut = [] { throw DecodeError("GIF: the first frame's data is cut short"); };
  auto skip_sub_blocks = [&] {
    for (;;) {
      if (at >= b.size()) cut();
      const unsigned length = b[at++];
      if (length == 0) return;
      at += length;
    }
  };
  for (;;) {
    if (at >= b.size()) cut();
    const unsigned char tag = b[at++];
    if (tag == 0x21) {  // extension
      ++at;             // label
      skip_sub_blocks();
    } else if (tag == 0x2C) {  // the first image
      if (at + 9 > b.size()) cut();
      const unsigned flags = b[at + 8];
      at += 9;
      if (flags & 0x80) at += 3u * (2u << (flags & 7));
      ++at;  // LZW minimum code size
      skip_sub_blocks();
      return;
    } else {
      return;  // the trailer or an unknown block: stb_image reports it
    }
  }
}

}  // namespace

void check_container(ImageFormat format, Bytes bytes) {
  switch (format) {
    case ImageFormat::png: return check_png(bytes);
    case ImageFormat::bmp: return check_bmp(bytes);
    case ImageFormat::tga: return check_tga(bytes);
    case ImageFormat::gif: return check_gif(bytes);
    default: return;
  }
}

std::optional<Dimensions> container_dimensions(ImageFormat format, Bytes b) {
  switch (format) {
    case ImageFormat::png:  // signature (8), IHDR's length (4) and type (4), then width and height
      if (b.size() < 24 || b[12] != 'I' || b[13] != 'H' || b[14] != 'D' || b[15] != 'R') return std::nullopt;
      return Dimensions{be32(b, 16), be32(b, 20)};
    case ImageFormat::bmp:
      if (b.size() < 26) return std::nullopt;
      if (le32(b, 14) == 12) return Dimensions{le16(b, 18), le16(b, 20)};  // OS/2 BITMAPCOREHEADER
      return Dimensions{le32(b, 18), std::uint64_t(std::abs(std::int64_t(std::int32_t(le32(b, 22)))))};
    case ImageFormat::gif:  // the logical screen
      if (b.size() < 10) return std::nullopt;
      return Dimensions{le16(b, 6), le16(b, 8)};
    case ImageFormat::tga:
      if (b.size() < 16) return std::nullopt;
      return Dimensions{le16(b, 12), le16(b, 14)};
    default:
      return std::nullopt;
  }
}

}  // namespace conveyor
