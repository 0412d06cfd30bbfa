// image/reencode.h (`conveyor pack --max-side --quality`, `--raw`): the sizes,
// the pixels against the same resize of the original, grey kept grey, a small
// image left alone, raw pixels bit for bit and read without a copy, and bad
// settings or files refused.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "catch_compat.h"

#include "image_writers.h"
#include "image/decode.h"
#include "image/reencode.h"
#include "image/resize.h"

using namespace conveyor;
namespace t = conveyor::test;

TEST_CASE("reencode: the longest side becomes max_side, the aspect kept, a small image unchanged", "[reencode]") {
  REQUIRE(reencoded_size(400, 300, 256) == Size{192, 256});
  REQUIRE(reencoded_size(300, 400, 256) == Size{256, 192});
  REQUIRE(reencoded_size(256, 100, 256) == Size{100, 256});  // not larger: itself
  REQUIRE(reencoded_size(100, 50, 256) == Size{50, 100});
  REQUIRE(reencoded_size(1000, 1, 10) == Size{1, 10});       // at least one pixel
  REQUIRE(reencoded_size(333, 333, 100) == Size{100, 100});
  REQUIRE(reencoded_size(501, 250, 100) == Size{50, 100});   // 49.9 rounds to 50
}

namespace {
double psnr(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  REQUIRE(a.size() == b.size());
  double se = 0;
  for (std::size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / (se / double(a.size())));
}

// The decoder's RGB pixels of a file, full size.
std::vector<unsigned char> pixels(const std::vector<unsigned char>& file, int& w, int& h) {
  ImageDecoder d;
  const ImageInfo info = d.open(file);
  const DecodedView v = d.decode({0, 0, info.width, info.height}, 1.0);
  w = v.width;
  h = v.height;
  std::vector<unsigned char> out(std::size_t(w) * std::size_t(h) * 3);
  for (int y = 0; y < h; ++y) std::copy_n(v.pixels + y * v.stride, std::size_t(w) * 3, out.data() + std::size_t(y) * w * 3);
  return out;
}
}  // namespace

TEST_CASE("reencode: a larger JPEG becomes a baseline JPEG of the reduced size, close to the same resize of the original",
          "[reencode]") {
  ImageDecoder decoder;
  ReencodeScratch scratch;
  for (const bool gray : {false, true}) {
    CAPTURE(gray);
    const auto file = t::jpeg(t::photo_like(320, 240, 7), {gray ? t::JpegKind::gray : t::JpegKind::baseline, 95});
    const auto smaller = reencode_within(file, {100, 95}, decoder, scratch);
    REQUIRE(smaller);
    ImageDecoder check;
    const ImageInfo info = check.open(*smaller);
    REQUIRE(info.format == ImageFormat::jpeg);
    REQUIRE((info.width == 100 && info.height == 75));
    REQUIRE_FALSE(info.progressive);
    REQUIRE(info.components == (gray ? 1 : 3));
    // Against the full-size decode resized by the same filter: only the JPEG
    // coding (and the DCT-scaled decode) differ.
    int w = 0, h = 0;
    const auto original = pixels(file, w, h);
    std::vector<unsigned char> want(100 * 75 * 3);
    ResizeScratch rs;
    resize_triangle(original.data(), w, h, std::ptrdiff_t(w) * 3, 0, 0, w, h, want.data(), 100, 75, 300, rs);
    int ow = 0, oh = 0;
    const auto got = pixels(*smaller, ow, oh);
    CHECK(psnr(got, want) > 30.0);
  }
  // Already within max_side: kept as it is.
  const auto small = t::jpeg(t::photo_like(64, 48, 3));
  REQUIRE_FALSE(reencode_within(small, {100, 90}, decoder, scratch));
  // A PNG larger than max_side becomes a JPEG too.
  const auto png = t::png(t::photo_like(200, 50, 4), t::PngKind::rgb8);
  const auto from_png = reencode_within(png, {100, 90}, decoder, scratch);
  REQUIRE(from_png);
  REQUIRE(ImageDecoder().open(*from_png).format == ImageFormat::jpeg);
}

TEST_CASE("reencode: settings out of range and undecodable files are refused", "[reencode]") {
  ImageDecoder decoder;
  ReencodeScratch scratch;
  const auto file = t::jpeg(t::photo_like(320, 240, 1));
  REQUIRE_THROWS_AS(reencode_within(file, {0, 90}, decoder, scratch), std::invalid_argument);
  REQUIRE_THROWS_AS(reencode_within(file, {100, 0}, decoder, scratch), std::invalid_argument);
  REQUIRE_THROWS_AS(reencode_within(file, {100, 101}, decoder, scratch), std::invalid_argument);
  REQUIRE_THROWS(reencode_within(t::truncated(file, file.size() / 2), {100, 90}, decoder, scratch));
  const std::vector<unsigned char> junk(100, 0x42);
  REQUIRE_THROWS(reencode_within(junk, {100, 90}, decoder, scratch));
}

TEST_CASE("raw: a PPM of the decoded pixels, bit for bit within max_side, the same resize above it", "[reencode]") {
  ImageDecoder decoder;
  ReencodeScratch scratch;
  for (const bool gray : {false, true}) {
    CAPTURE(gray);
    const auto file = t::jpeg(t::photo_like(40, 30, 5), {gray ? t::JpegKind::gray : t::JpegKind::baseline, 90});
    int w = 0, h = 0;
    const auto original = pixels(file, w, h);
    const auto raw = raw_within(file, 64, decoder, scratch);
    const std::string header = "P6\n40 30\n255\n";
    REQUIRE(raw.size() == header.size() + 40 * 30 * 3);
    CHECK(std::string(raw.begin(), raw.begin() + std::ptrdiff_t(header.size())) == header);
    int rw = 0, rh = 0;
    CHECK(pixels(raw, rw, rh) == original);  // the decoder's pixels, as they were
    // Larger than max_side: the triangle resize of the full decode.
    const auto big = t::png(t::photo_like(200, 50, 4), t::PngKind::rgb8);
    const auto raw_big = raw_within(big, 100, decoder, scratch);
    const auto full = pixels(big, w, h);
    std::vector<unsigned char> want(100 * 25 * 3);
    ResizeScratch rs;
    resize_triangle(full.data(), w, h, std::ptrdiff_t(w) * 3, 0, 0, w, h, want.data(), 100, 25, 300, rs);
    CHECK(pixels(raw_big, rw, rh) == want);
    CHECK((rw == 100 && rh == 25));
  }
  REQUIRE_THROWS_AS(raw_within(t::jpeg(t::photo_like(8, 8, 1)), 0, decoder, scratch), std::invalid_argument);
  const std::vector<unsigned char> junk(100, 0x42);
  REQUIRE_THROWS(raw_within(junk, 64, decoder, scratch));
}

TEST_CASE("raw: an 8-bit RGB PPM is read in place, without a copy, and one cut short is refused", "[reencode]") {
  ImageDecoder decoder;
  ReencodeScratch scratch;
  const auto raw = raw_within(t::jpeg(t::photo_like(16, 12, 2)), 64, decoder, scratch);
  ImageDecoder reader;
  const ImageInfo info = reader.open(raw);
  REQUIRE(info.format == ImageFormat::pnm);
  const DecodedView v = reader.decode({0, 0, 16, 12}, 1.0);
  CHECK(v.pixels == raw.data() + (raw.size() - 16 * 12 * 3));
  CHECK(v.stride == 16 * 3);
  const std::vector<unsigned char> cut(raw.begin(), raw.end() - 5);
  ImageDecoder short_reader;
  short_reader.open(cut);
  CHECK_THROWS_WITH(short_reader.decode({0, 0, 16, 12}, 1.0), Catch::StartsWith("PNM: pixel data cut short: "));
}
