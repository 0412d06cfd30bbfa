#include "image/reencode.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace conveyor {

Size reencoded_size(int width, int height, int max_side) {
  const int longest = std::max(width, height);
  if (longest <= max_side) return {height, width};
  const double scale = double(max_side) / double(longest);
  const auto side = [&](int n) { return n == longest ? max_side : std::max(1, int(std::lround(double(n) * scale))); };
  return {side(height), side(width)};
}

std::optional<std::vector<unsigned char>> reencode_within(std::span<const unsigned char> file, const ReencodeSettings& settings,
                                                          ImageDecoder& decoder, ReencodeScratch& scratch) {
  if (settings.max_side < 1) throw std::invalid_argument("max_side must be >= 1, not " + std::to_string(settings.max_side));
  if (settings.quality < 1 || settings.quality > 100) {
    throw std::invalid_argument("quality must be 1 .. 100, not " + std::to_string(settings.quality));
  }
  const ImageInfo info = decoder.open(file);
  const Size out = reencoded_size(info.width, info.height, settings.max_side);
  if (out.width == info.width && out.height == info.height) return std::nullopt;
  // The smallest JPEG DCT scale that keeps at least the output's resolution
  // (libjpeg-turbo decodes an 8x reduction 4-6x faster), then the resize.
  const double min_scale = std::max(double(out.width) / info.width, double(out.height) / info.height);
  const DecodedView v = decoder.decode({0, 0, info.width, info.height}, min_scale);
  const bool gray = info.components <= 2;
  scratch.pixels.resize(std::size_t(out.width) * std::size_t(out.height) * 3);
  resize_triangle(v.pixels, v.width, v.height, v.stride, 0, 0, v.width, v.height, scratch.pixels.data(), out.width,
                  out.height, std::ptrdiff_t(out.width) * 3, scratch.resize);
  if (gray) {  // R = G = B in the decoder's RGB of a grey file: keep one channel
    for (std::size_t p = 0; p < std::size_t(out.width) * std::size_t(out.height); ++p) scratch.pixels[p] = scratch.pixels[3 * p];
  }
  // TurboJPEG rather than libjpeg's compress struct: one call, and the encoder
  // the embedded default dataset already uses (image/default_dataset.cpp).
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitCompress(), tjDestroy);
  if (!tj) throw std::runtime_error("JPEG encoder: tjInitCompress failed");
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int pitch = out.width * (gray ? 1 : 3);
  if (tjCompress2(tj.get(), scratch.pixels.data(), out.width, pitch, out.height, gray ? TJPF_GRAY : TJPF_RGB, &jpeg, &size,
                  gray ? TJSAMP_GRAY : TJSAMP_420, settings.quality, 0) != 0) {
    const std::string why = tjGetErrorStr2(tj.get());
    tjFree(jpeg);
    throw std::runtime_error("JPEG encoder: " + why);
  }
  std::vector<unsigned char> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  return bytes;
}

std::vector<unsigned char> raw_within(std::span<const unsigned char> file, int max_side, ImageDecoder& decoder,
                                      ReencodeScratch& scratch) {
  if (max_side < 1) throw std::invalid_argument("max_side must be >= 1, not " + std::to_string(max_side));
  const ImageInfo info = decoder.open(file);
  const Size out = reencoded_size(info.width, info.height, max_side);
  const double min_scale = std::max(double(out.width) / info.width, double(out.height) / info.height);
  const DecodedView v = decoder.decode({0, 0, info.width, info.height}, min_scale);
  std::string header = "P6\n";  // built by appending: GCC 12 at -O3 takes "lit" + string for an overlapping copy
  header.append(std::to_string(out.width)).append(" ").append(std::to_string(out.height)).append("\n255\n");
  const std::size_t row = std::size_t(out.width) * 3;
  std::vector<unsigned char> bytes(header.size() + row * std::size_t(out.height));
  std::copy(header.begin(), header.end(), bytes.begin());
  unsigned char* pixels = bytes.data() + header.size();
  if (out.width == v.width && out.height == v.height) {  // within max_side at full scale: the pixels as decoded
    for (int y = 0; y < out.height; ++y) std::copy_n(v.pixels + std::ptrdiff_t(y) * v.stride, row, pixels + row * std::size_t(y));
  } else {
    resize_triangle(v.pixels, v.width, v.height, v.stride, 0, 0, v.width, v.height, pixels, out.width, out.height,
                    std::ptrdiff_t(row), scratch.resize);
  }
  return bytes;
}

}  // namespace conveyor
