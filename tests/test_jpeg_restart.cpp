// image/jpeg_restart.h: the lossless re-encode with restart markers keeps
// every pixel; the decoder's subset of a region's restart intervals gives the
// same pixels as decoding the original file, bit for bit, for 4:4:4, 4:2:2,
// 4:2:0, 4:4:0 and grey, at every DCT scale (M/8, M = 1..8), for regions at every edge and
// across interval boundaries; a file whose markers are missing, out of order or
// cut short is decoded as a whole (or refused) as before.
#include <turbojpeg.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.h"

#include "image_writers.h"
#include "image/decode.h"
#include "image/jpeg_restart.h"

using namespace conveyor;
namespace t = conveyor::test;

namespace {

// A JPEG of a photo-like picture through TurboJPEG, which offers every subsampling.
std::vector<unsigned char> encode(int w, int h, int subsampling, std::uint64_t seed) {
  const t::Rgb img = t::photo_like(w, h, seed);
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitCompress(), tjDestroy);
  REQUIRE(tj);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(tj.get(), img.px.data(), w, w * 3, h, TJPF_RGB, &out, &size, subsampling, 92, 0) == 0);
  std::vector<unsigned char> bytes(out, out + size);
  tjFree(out);
  return bytes;
}

struct View {
  int width = 0, height = 0;
  double x0 = 0, y0 = 0;
  bool subset = false;
  std::vector<unsigned char> px;
};

View decode(const std::vector<unsigned char>& file, Rect region, int scale) {
  ImageDecoder d(DecodeLimits{}, {1, 2, 3, 4, 5, 6, 7, 8});  // every M/8, not only the default ones
  d.open(file);
  const DecodedView v = d.decode(region, scale / 8.0);
  REQUIRE(v.dct_scale == scale);
  View out{v.width, v.height, v.x0, v.y0, v.restart_subset, {}};
  for (int y = 0; y < v.height; ++y) out.px.insert(out.px.end(), v.pixels + y * v.stride, v.pixels + y * v.stride + v.width * 3);
  return out;
}

// The length of the segment starting at file[i] (its marker), marker included.
std::size_t segment_bytes(const std::vector<unsigned char>& file, std::size_t i) {
  return 2 + (std::size_t(file[i + 2]) << 8 | file[i + 3]);
}

// `file` without its segments of marker `code` (between SOI and SOS).
std::vector<unsigned char> without_segment(const std::vector<unsigned char>& file, unsigned char code) {
  std::vector<unsigned char> out(file.begin(), file.begin() + 2);
  std::size_t i = 2;
  for (; file[i + 1] != 0xDA; i += segment_bytes(file, i)) {
    if (file[i + 1] != code) out.insert(out.end(), file.begin() + std::ptrdiff_t(i), file.begin() + std::ptrdiff_t(i + segment_bytes(file, i)));
  }
  out.insert(out.end(), file.begin() + std::ptrdiff_t(i), file.end());
  return out;
}

// The RST markers in a JPEG's entropy data, in order (0..7 each).
std::vector<int> restart_markers(const std::vector<unsigned char>& file) {
  std::size_t i = 2;
  while (file[i + 1] != 0xDA) i += segment_bytes(file, i);
  std::vector<int> seen;
  for (i += segment_bytes(file, i); i + 1 < file.size(); ++i) {
    if (file[i] == 0xFF && file[i + 1] >= 0xD0 && file[i + 1] <= 0xD7) seen.push_back(file[i + 1] - 0xD0);
  }
  return seen;
}

// The Huffman tables a JPEG defines, each as its DHT bytes (class and slot,
// the 16 counts, the symbols).
std::vector<std::vector<unsigned char>> huffman_tables(const std::vector<unsigned char>& file) {
  std::vector<std::vector<unsigned char>> tables;
  for (std::size_t i = 2; file[i + 1] != 0xDA; i += segment_bytes(file, i)) {
    if (file[i + 1] != 0xC4) continue;
    for (std::size_t p = i + 4; p < i + segment_bytes(file, i);) {
      std::size_t symbols = 0;
      for (int l = 1; l <= 16; ++l) symbols += file[p + std::size_t(l)];
      tables.emplace_back(file.begin() + std::ptrdiff_t(p), file.begin() + std::ptrdiff_t(p + 17 + symbols));
      p += 17 + symbols;
    }
  }
  return tables;
}

struct Kind {
  const char* name;
  int tj;
};
constexpr Kind kKinds[] = {{"4:4:4", TJSAMP_444}, {"4:2:2", TJSAMP_422}, {"4:2:0", TJSAMP_420},
                           {"4:4:0", TJSAMP_440}, {"grey", TJSAMP_GRAY}};

}  // namespace

TEST_CASE("jpeg_restart: the interval is the divisor of a row's MCUs nearest 48 pixels", "[jpeg_restart]") {
  // 16-pixel MCUs (4:2:0, 4:2:2): 3 MCUs wanted.
  CHECK(restart_interval_for(32, 16) == 4);  // 4 is nearer 3 in ratio than 2 is
  CHECK(restart_interval_for(24, 16) == 3);
  CHECK(restart_interval_for(10, 16) == 2);  // 2 against 5: ratios of 1.5 and 1.67
  CHECK(restart_interval_for(23, 16) == 23);  // prime: one per row, never one per MCU (+8% bytes)
  CHECK(restart_interval_for(7, 16) == 7);
  CHECK(restart_interval_for(1, 16) == 1);
  CHECK(restart_interval_for(9, 32) == 1);  // 32-pixel MCUs (4:1:1): 1.5 wanted, one per MCU allowed
  // 8-pixel MCUs (4:4:4, grey): 6 wanted.
  CHECK(restart_interval_for(63, 8) == 7);
  CHECK(restart_interval_for(48, 8) == 6);
  CHECK(restart_interval_for(47, 8) == 47);  // prime: one per row
}

TEST_CASE("jpeg_restart: the re-encode keeps every pixel and adds aligned restart markers", "[jpeg_restart]") {
  for (const Kind& kind : kKinds) {
    for (const auto& [w, h] : {std::pair{203, 157}, std::pair{64, 48}, std::pair{17, 9}}) {
      INFO(kind.name << " " << w << "x" << h);
      const auto original = encode(w, h, kind.tj, 5);
      const auto marked = add_restart_markers(original);
      REQUIRE(marked);
      const View a = decode(original, {0, 0, w, h}, 8), b = decode(*marked, {0, 0, w, h}, 8);
      REQUIRE((b.width == w && b.height == h));
      CHECK(a.px == b.px);
      // The markers are there: a region away from the top decodes from a subset.
      if (h > 40) CHECK(decode(*marked, {0, h - 8, w, 8}, 8).subset);
    }
  }
  // CMYK with and without an Adobe segment (whose presence says the inks are
  // stored inverted): the same pixels, so the segment is kept or left out as it was.
  const auto cmyk = t::jpeg(t::photo_like(64, 48, 3), {t::JpegKind::cmyk_adobe, 90});
  for (const auto& file : {cmyk, without_segment(cmyk, 0xEE)}) {
    const auto marked = add_restart_markers(file);
    REQUIRE(marked);
    CHECK(decode(file, {0, 0, 64, 48}, 8).px == decode(*marked, {0, 0, 64, 48}, 8).px);
    CHECK((without_segment(*marked, 0xEE) == *marked) == (without_segment(file, 0xEE) == file));
  }
  // EXIF, ICC and comments travel with the pixels (an APP1 put in by hand).
  auto exif = encode(40, 30, TJSAMP_420, 8);
  const std::vector<unsigned char> app1 = {0xFF, 0xE1, 0x00, 0x0E, 'E', 'x', 'i', 'f', 0, 0, 'o', 'r', 'i', 'e', 'n', 't'};
  exif.insert(exif.begin() + 2, app1.begin(), app1.end());
  const auto exif_marked = *add_restart_markers(exif);
  CHECK(std::search(exif_marked.begin(), exif_marked.end(), app1.begin(), app1.end()) != exif_marked.end());
  // The whole image's coefficients are held at once: not over the pixel limit.
  CHECK_THROWS_AS(add_restart_markers(exif, DecodeLimits{1000, 1 << 20}), DecodeError);
  // Progressive and arithmetic-coded files are kept as they are.
  const t::Rgb img = t::photo_like(64, 64, 1);
  CHECK_FALSE(add_restart_markers(t::jpeg(img, {t::JpegKind::progressive, 90})));
  CHECK_FALSE(add_restart_markers(t::jpeg(img, {t::JpegKind::arithmetic, 90})));
  // A file cut short is an error, not a file with grey rows.
  auto cut = encode(64, 64, TJSAMP_420, 2);
  cut.resize(cut.size() / 2);
  CHECK_THROWS_AS(add_restart_markers(cut), DecodeError);
}

TEST_CASE("jpeg_restart: the re-encode keeps the file's AC tables and fits its DC tables to the new intervals", "[jpeg_restart]") {
  const auto pixels = [](const std::vector<unsigned char>& file, int w, int h) { return decode(file, {0, 0, w, h}, 8).px; };
  const auto dc_symbols = [](const std::vector<unsigned char>& file) {
    std::size_t most = 0;
    for (const auto& table : huffman_tables(file)) {
      if (table[0] >> 4 == 0) most = std::max(most, table.size() - 17);
    }
    return most;
  };
  SECTION("files with standard tables: their AC tables are written again as they were") {
    for (const Kind& kind : kKinds) {
      INFO(kind.name);
      const auto original = encode(203, 157, kind.tj, 3);
      const auto kept = *add_restart_markers(original), optimized = *add_restart_markers(original, {}, false);
      CHECK(pixels(kept, 203, 157) == pixels(original, 203, 157));
      CHECK(pixels(optimized, 203, 157) == pixels(original, 203, 157));
      for (const auto& table : huffman_tables(original)) {
        if (table[0] >> 4 != 1) continue;  // AC tables
        const auto in = [&](const std::vector<unsigned char>& file) {
          return std::search(file.begin(), file.end(), table.begin(), table.end()) != file.end();
        };
        CHECK(in(kept));
        CHECK_FALSE(in(optimized));  // what the optimize pass would have made instead
      }
      CHECK(kept.size() < original.size() * 103 / 100);
    }
  }
  SECTION("files with optimized tables: within half a percent of optimizing every table") {
    // A smooth picture's own DC table has few categories (small differences
    // between neighbours), while each interval starts from a DC of 0: the
    // re-encode needs categories the file never coded, and must find codes for them.
    t::Rgb smooth = t::Rgb::sized(160, 96);
    for (int y = 0; y < 96; ++y) {
      for (int x = 0; x < 160; ++x) {
        for (int c = 0; c < 3; ++c) smooth.at(x, y)[c] = static_cast<unsigned char>(200 + c * 20 - x / 8);
      }
    }
    const t::Rgb photo = t::photo_like(203, 157, 4);
    for (const t::Rgb* img : std::initializer_list<const t::Rgb*>{&photo, &smooth}) {
      for (const auto& [kind, subsample] : {std::pair{t::JpegKind::baseline, true}, std::pair{t::JpegKind::baseline, false},
                                            std::pair{t::JpegKind::gray, false}}) {
        const int w = img->width, h = img->height;
        INFO(w << "x" << h << (kind == t::JpegKind::gray ? " grey" : subsample ? " 4:2:0" : " 4:4:4"));
        const auto original = t::jpeg(*img, {kind, 90, subsample, true});
        if (img == &smooth) REQUIRE(dc_symbols(original) < 12);
        const auto kept = *add_restart_markers(original), optimized = *add_restart_markers(original, {}, false);
        CHECK(pixels(kept, w, h) == pixels(original, w, h));
        // Bytes, plus 32: a DC table lists every category, used or not (up to 11 bytes more each).
        CHECK(kept.size() <= optimized.size() * 1005 / 1000 + 32);
      }
    }
  }
  SECTION("every table optimized for a file of one scan a component, each with its own tables in the same slot") {
    const t::Rgb img = t::photo_like(120, 88, 7);
    t::JpegOptions o{t::JpegKind::baseline, 90, true, true};
    o.scan_per_component = true;
    const auto original = t::jpeg(img, o);
    const auto kept = *add_restart_markers(original);
    CHECK(pixels(kept, 120, 88) == pixels(original, 120, 88));
    CHECK(kept == *add_restart_markers(original, {}, false));
  }
  SECTION("a table defined again after the scan: the scan's own is kept") {
    auto file = encode(96, 64, TJSAMP_420, 8);
    // Before EOI, AC table 0 becomes one code for end-of-block alone.
    const std::vector<unsigned char> dht = {0xFF, 0xC4, 0x00, 0x14, 0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00};
    const auto original = file;
    file.insert(file.end() - 2, dht.begin(), dht.end());
    CHECK(pixels(file, 96, 64) == pixels(original, 96, 64));
    CHECK(pixels(*add_restart_markers(file), 96, 64) == pixels(original, 96, 64));
  }
  SECTION("every table optimized for a run past a block's end, which libjpeg decodes into its last coefficient unwarned") {
    // A grey 8x8 JPEG of one block, entropy-coded by hand with a table of
    // three AC symbols: (0,1) coded 0, end-of-block 10, and (14,1) 110. The
    // block: DC category 0 (the DC table's one code, 0); (0,1) with bit 1:
    // coefficient 1 (in zigzag order) is 1; (14,1) with bit 1: coefficient
    // 16; again: 31, 46, 61; again: 76, past the end, which libjpeg stores in
    // coefficient 63. Bits 0 01 1101 1101 1101 1101 1101, padded with a 1:
    // 3B BB BB. A re-encode would code coefficient 63 after one zero, as
    // (1,1): no such code in this table.
    std::vector<unsigned char> file = {0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00};
    file.insert(file.end(), 64, 1);  // every quantizer 1
    const std::vector<unsigned char> rest = {
        0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x08, 0x00, 0x08, 0x01, 0x01, 0x11, 0x00,  // 8x8, one component
        0xFF, 0xC4, 0x00, 0x14, 0x00, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00,  // DC: category 0
        0xFF, 0xC4, 0x00, 0x16, 0x10, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0xE1,  // AC
        0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00,
        0x3B, 0xBB, 0xBB,
        0xFF, 0xD9};
    file.insert(file.end(), rest.begin(), rest.end());
    REQUIRE(pixels(file, 8, 8).size() == 8 * 8 * 3);
    const auto kept = *add_restart_markers(file);
    CHECK(pixels(kept, 8, 8) == pixels(file, 8, 8));
    CHECK(kept == *add_restart_markers(file, {}, false));
  }
  SECTION("a file whose decode warned: every table optimized, as the symbols it decoded may not be its own") {
    // Stray bytes before a marker: libjpeg warns, and reads on.
    auto stray = encode(64, 48, TJSAMP_420, 6);
    std::size_t i = 2;
    while (stray[i + 1] != 0xC4) i += segment_bytes(stray, i);
    stray.insert(stray.begin() + std::ptrdiff_t(i), {'x', 'y', 'z'});
    CHECK(pixels(stray, 64, 48) == pixels(encode(64, 48, TJSAMP_420, 6), 64, 48));
    CHECK(*add_restart_markers(stray) == *add_restart_markers(stray, {}, false));
  }
}

TEST_CASE("jpeg_restart: a region's intervals decode to the whole file's pixels, bit for bit", "[jpeg_restart]") {
  constexpr int W = 317, H = 229;  // neither a multiple of 16: partial MCUs at the right and bottom
  std::mt19937 rng(11);
  for (const Kind& kind : kKinds) {
    const auto original = encode(W, H, kind.tj, 9);
    const auto marked = *add_restart_markers(original);
    // Boxes at every edge and corner, the whole image, thin strips, and boxes
    // walking across interval boundaries one pixel at a time.
    std::vector<Rect> regions = {{0, 0, W, H},        {0, 0, 40, 30},     {W - 40, 0, 40, 30},  {0, H - 30, 40, 30},
                                 {W - 40, H - 30, 40, 30}, {0, 100, W, 20}, {150, 0, 20, H},    {W - 1, H - 1, 1, 1},
                                 {0, 0, 1, 1},        {100, 80, 1, 1},    {1, 1, W - 2, H - 2}, {0, 50, 10, H - 50}};
    for (int x = 56; x < 76; ++x) regions.push_back({x, 60 + x % 7, 50, 40});
    for (int y = 40; y < 52; ++y) regions.push_back({90, y, 70, 33});
    for (int i = 0; i < 40; ++i) {
      const int w = 1 + int(rng() % W), h = 1 + int(rng() % H);
      regions.push_back({int(rng() % unsigned(W - w + 1)), int(rng() % unsigned(H - h + 1)), w, h});
    }
    int subsets = 0;
    for (const int scale : {8, 7, 6, 5, 4, 3, 2, 1}) {
      for (const Rect& r : regions) {
        INFO(kind.name << " scale " << scale << "/8, region " << r.x << "," << r.y << " " << r.w << "x" << r.h);
        const View want = decode(original, r, scale), got = decode(marked, r, scale);
        REQUIRE_FALSE(want.subset);
        subsets += got.subset;
        REQUIRE((got.width == want.width && got.height == want.height && got.x0 == want.x0 && got.y0 == want.y0));
        REQUIRE(got.px == want.px);
      }
    }
    CHECK(subsets > int(regions.size()) * 6);  // most regions are decoded from a subset
  }
}

TEST_CASE("jpeg_restart: a subset holds the region's share of the data", "[jpeg_restart]") {
  const auto marked = *add_restart_markers(encode(512, 384, TJSAMP_420, 4));
  std::vector<unsigned char> out;
  RestartScratch scratch;
  const auto s = restart_subset(marked, {192, 144, 128, 96}, 5, out, scratch);  // a sixteenth of the image
  REQUIRE(s);
  CHECK(s->x == 128);  // intervals of 4 MCUs: 64 pixels
  CHECK(s->y == 128);
  CHECK((s->width == 256 && s->height == 128));
  CHECK(out.size() < marked.size() / 4);
  // 8 rows of 4 intervals: 31 markers, renumbered RST0..RST7 in turn.
  const std::vector<int> rst = restart_markers(out);
  REQUIRE(rst.size() == 31);
  for (std::size_t j = 0; j < rst.size(); ++j) CHECK(rst[j] == int(j % 8));
  // The whole image, or all of it from the top: nothing to skip, no subset.
  CHECK_FALSE(restart_subset(marked, {0, 0, 512, 384}, 5, out, scratch));
  CHECK_FALSE(restart_subset(marked, {0, 0, 512, 100}, 5, out, scratch));
  // A file without markers has none to use.
  CHECK_FALSE(restart_subset(encode(512, 384, TJSAMP_420, 4), {192, 144, 128, 96}, 5, out, scratch));
}

TEST_CASE("jpeg_restart: markers missing, out of order or cut short: the file is decoded as it is", "[jpeg_restart]") {
  const auto original = encode(256, 192, TJSAMP_420, 6);
  const auto marked = *add_restart_markers(original);
  const Rect region{100, 100, 60, 60};
  std::vector<unsigned char> out;
  RestartScratch scratch;
  REQUIRE(restart_subset(marked, region, 5, out, scratch));
  // The third marker renumbered: out of sequence.
  auto renumbered = marked;
  int seen = 0;
  for (std::size_t i = 0; i + 1 < renumbered.size(); ++i) {
    if (renumbered[i] == 0xFF && renumbered[i + 1] >= 0xD0 && renumbered[i + 1] <= 0xD7 && ++seen == 3) {
      renumbered[i + 1] = 0xD7;
      break;
    }
  }
  REQUIRE(seen == 3);
  CHECK_FALSE(restart_subset(renumbered, region, 5, out, scratch));
  // Cut inside the region's rows: no subset, and the decoder refuses the file as before.
  auto cut = marked;
  cut.resize(cut.size() * 2 / 3);
  CHECK_FALSE(restart_subset(cut, region, 5, out, scratch));
  ImageDecoder d;
  d.open(cut);
  CHECK_THROWS_AS(d.decode(region, 1.0), DecodeError);
  // Cut below the region: the region still decodes, as it did without markers.
  auto cut_below = marked;
  cut_below.resize(marked.size() * 95 / 100);
  const View a = decode(original, region, 8), b = decode(cut_below, region, 8);
  CHECK(b.subset);
  CHECK(a.px == b.px);
}
