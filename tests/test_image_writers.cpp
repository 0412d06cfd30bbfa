// Checks tests/image_writers.h: every generated file is decoded by an
// independent decoder (stb_image, or libjpeg where stb cannot) and compared
// with the documented expected RGB.
#include "tests/image_writers.h"

#include "catch_compat.h"

#include <stb/stb_image.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

using namespace conveyor::test;

namespace {

// stb_image result: ok == false carries stbi_failure_reason().
struct StbResult {
  bool ok = false;
  int width = 0, height = 0, channels_in_file = 0;
  std::vector<unsigned char> px;  // `comps` per pixel
  std::string why;
};

StbResult stb_decode(const std::vector<unsigned char>& f, int comps = 3) {
  StbResult r;
  unsigned char* p = stbi_load_from_memory(f.data(), int(f.size()), &r.width, &r.height, &r.channels_in_file, comps);
  if (p == nullptr) {
    r.why = stbi_failure_reason() ? stbi_failure_reason() : "?";
    return r;
  }
  r.ok = true;
  r.px.assign(p, p + std::size_t(r.width) * std::size_t(r.height) * std::size_t(comps));
  stbi_image_free(p);
  return r;
}

Rgb stb_rgb(const std::vector<unsigned char>& f) {
  StbResult r = stb_decode(f, 3);
  INFO("stb: " << r.why);
  REQUIRE(r.ok);
  return Rgb{r.width, r.height, r.px};
}

// "" when equal, else a description of the first difference.
std::string diff(const Rgb& got, const Rgb& want) {
  if (got.width != want.width || got.height != want.height)
    return "size " + std::to_string(got.width) + "x" + std::to_string(got.height) + " vs " + std::to_string(want.width) + "x" +
           std::to_string(want.height);
  for (std::size_t i = 0; i < got.px.size(); ++i)
    if (got.px[i] != want.px[i]) {
      const std::size_t pix = i / 3;
      return "pixel (" + std::to_string(pix % std::size_t(got.width)) + "," + std::to_string(pix / std::size_t(got.width)) +
             ") channel " + std::to_string(i % 3) + ": " + std::to_string(got.px[i]) + " vs " + std::to_string(want.px[i]);
    }
  return "";
}

// Bit-at-a-time CRC-32, independent of the header's table-driven one.
std::uint32_t crc_bitwise(const unsigned char* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::uint32_t be32(const std::vector<unsigned char>& f, std::size_t i) {
  return std::uint32_t(f[i]) << 24 | std::uint32_t(f[i + 1]) << 16 | std::uint32_t(f[i + 2]) << 8 | f[i + 3];
}

struct PngChunk {
  std::string type;
  std::vector<unsigned char> data;
  bool crc_ok = false;
};

std::vector<PngChunk> png_chunks(const std::vector<unsigned char>& f) {
  const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(f.size() >= 8);
  REQUIRE(std::equal(sig, sig + 8, f.begin()));
  std::vector<PngChunk> out;
  for (std::size_t i = 8; i < f.size();) {
    REQUIRE(i + 12 <= f.size());
    const std::uint32_t len = be32(f, i);
    REQUIRE(i + 12 + len <= f.size());
    PngChunk c;
    c.type.assign(f.begin() + std::ptrdiff_t(i + 4), f.begin() + std::ptrdiff_t(i + 8));
    c.data.assign(f.begin() + std::ptrdiff_t(i + 8), f.begin() + std::ptrdiff_t(i + 8 + len));
    c.crc_ok = crc_bitwise(&f[i + 4], 4 + len) == be32(f, i + 8 + len);
    out.push_back(c);
    i += 12 + len;
  }
  return out;
}

// Box average by `f` with partial edge blocks, output ceil(w/f) x ceil(h/f)
// like libjpeg's scaled output.
Rgb box_down(const Rgb& img, int f) {
  Rgb out = Rgb::sized((img.width + f - 1) / f, (img.height + f - 1) / f);
  for (int oy = 0; oy < out.height; ++oy)
    for (int ox = 0; ox < out.width; ++ox)
      for (int c = 0; c < 3; ++c) {
        int sum = 0, n = 0;
        for (int y = oy * f; y < std::min(img.height, oy * f + f); ++y)
          for (int x = ox * f; x < std::min(img.width, ox * f + f); ++x, ++n) sum += img.at(x, y)[c];
        out.at(ox, oy)[c] = static_cast<unsigned char>((sum + n / 2) / n);
      }
  return out;
}

// Point sampling at block centres: a deliberately different downscaler.
Rgb point_down(const Rgb& img, int f) {
  Rgb out = Rgb::sized((img.width + f - 1) / f, (img.height + f - 1) / f);
  for (int oy = 0; oy < out.height; ++oy)
    for (int ox = 0; ox < out.width; ++ox) {
      const unsigned char* s = img.at(std::min(img.width - 1, ox * f + f / 2), std::min(img.height - 1, oy * f + f / 2));
      std::copy(s, s + 3, out.at(ox, oy));
    }
  return out;
}

const char* name(PngKind k) {
  switch (k) {
    case PngKind::rgb8: return "rgb8";
    case PngKind::rgba8: return "rgba8";
    case PngKind::gray8: return "gray8";
    case PngKind::gray_alpha8: return "gray_alpha8";
    case PngKind::palette8: return "palette8";
    case PngKind::rgb16: return "rgb16";
    case PngKind::gray16: return "gray16";
  }
  return "?";
}

const char* name(JpegKind k) {
  switch (k) {
    case JpegKind::baseline: return "baseline";
    case JpegKind::progressive: return "progressive";
    case JpegKind::arithmetic: return "arithmetic";
    case JpegKind::gray: return "gray";
    case JpegKind::cmyk_adobe: return "cmyk_adobe";
    case JpegKind::twelve_bit_header: return "twelve_bit_header";
  }
  return "?";
}

const PngKind all_png[] = {PngKind::rgb8,        PngKind::rgba8,    PngKind::gray8, PngKind::gray_alpha8,
                           PngKind::palette8,    PngKind::rgb16,    PngKind::gray16};

// Odd sizes on purpose: partial JPEG MCUs, BMP row padding, GIF bit packing.
std::vector<Rgb> sample_pictures() {
  return {gradient(37, 23), photo_like(61, 45, 7), checker(50, 30, 4), gradient(1, 1), checker(3, 1, 1)};
}

}  // namespace

TEST_CASE("generators are deterministic and have the documented content", "[image_writers]") {
  const Rgb g = gradient(11, 6);
  CHECK(std::vector<int>(g.at(0, 0), g.at(0, 0) + 3) == std::vector<int>{0, 0, 0});
  CHECK(std::vector<int>(g.at(10, 0), g.at(10, 0) + 3) == std::vector<int>{255, 0, 170});
  CHECK(std::vector<int>(g.at(10, 5), g.at(10, 5) + 3) == std::vector<int>{255, 255, 255});
  CHECK(int(g.at(5, 2)[0]) == 5 * 255 / 10);
  const Rgb one = gradient(1, 1);  // no division by zero
  CHECK(one.px == std::vector<unsigned char>{0, 0, 0});

  CHECK(photo_like(40, 30, 3).px == photo_like(40, 30, 3).px);
  CHECK(photo_like(40, 30, 3).px != photo_like(40, 30, 4).px);
  CHECK(checker(9, 9, 2).px == checker(9, 9, 2).px);

  const Rgb c = checker(40, 40, 5);
  for (unsigned char v : c.px) REQUIRE(v % 51 == 0);
  CHECK(quantize_216(c).px == c.px);
  for (int y = 0; y < 40; y += 5)
    for (int x = 5; x < 40; x += 5) {
      REQUIRE(std::vector<int>(c.at(x, y), c.at(x, y) + 3) != std::vector<int>(c.at(x - 5, y), c.at(x - 5, y) + 3));
      if (y >= 5) REQUIRE(std::vector<int>(c.at(x, y), c.at(x, y) + 3) != std::vector<int>(c.at(x, y - 5), c.at(x, y - 5) + 3));
    }

  CHECK_THROWS_AS(gradient(0, 4), std::invalid_argument);
  CHECK_THROWS_AS(checker(4, 4, 0), std::invalid_argument);
}

TEST_CASE("photo_like looks like a photo, not noise or a flat field", "[image_writers]") {
  for (std::uint64_t seed : {1u, 2u, 3u, 42u}) {
    const Rgb p = photo_like(128, 96, seed);
    double sum = 0, sum2 = 0, neighbour = 0;
    int sharp = 0;
    for (int y = 0; y < p.height; ++y)
      for (int x = 0; x < p.width; ++x)
        for (int c = 0; c < 3; ++c) {
          const double v = p.at(x, y)[c];
          sum += v;
          sum2 += v * v;
          if (x > 0) {
            const int d = std::abs(int(p.at(x, y)[c]) - int(p.at(x - 1, y)[c]));
            neighbour += d;
            sharp += d > 25;
          }
        }
    const double n = double(p.px.size());
    const double spread = std::sqrt(sum2 / n - (sum / n) * (sum / n));
    INFO("seed " << seed << " spread " << spread << " mean |dx| " << neighbour / n << " sharp steps " << sharp);
    CHECK(spread > 20);             // real content, not flat
    CHECK(neighbour / n < 8);       // mostly smooth: white noise gives ~85
    CHECK(neighbour / n > 1);       // but textured
    CHECK(sharp > 20);              // and has a few sharp edges
  }
}

TEST_CASE("PNG every kind decodes to png_expected", "[image_writers][png]") {
  for (const Rgb& img : sample_pictures())
    for (PngKind kind : all_png) {
      INFO(name(kind) << " " << img.width << "x" << img.height);
      const std::vector<unsigned char> f = png(img, kind);
      const Rgb want = png_expected(img, kind);
      CHECK(diff(stb_rgb(f), want) == "");

      // The documented conventions, recomputed here.
      const bool gray = kind == PngKind::gray8 || kind == PngKind::gray_alpha8 || kind == PngKind::gray16;
      for (int y = 0; y < img.height; ++y)
        for (int x = 0; x < img.width; ++x) {
          const unsigned char* s = img.at(x, y);
          const unsigned char* w = want.at(x, y);
          if (gray) {
            const int luma = (77 * s[0] + 150 * s[1] + 29 * s[2] + 128) >> 8;
            REQUIRE((w[0] == luma && w[1] == luma && w[2] == luma));
          } else if (kind == PngKind::palette8) {
            for (int c = 0; c < 3; ++c) REQUIRE((w[c] % 51 == 0 && std::abs(w[c] - s[c]) <= 25));
          } else {
            REQUIRE(std::equal(s, s + 3, w));
          }
        }

      if (kind == PngKind::rgba8 || kind == PngKind::gray_alpha8) {  // alpha survives, uncomposited
        const StbResult r = stb_decode(f, 4);
        REQUIRE(r.ok);
        CHECK(r.channels_in_file == (kind == PngKind::rgba8 ? 4 : 2));
        for (int y = 0; y < img.height; ++y)
          for (int x = 0; x < img.width; ++x) REQUIRE(r.px[(std::size_t(y) * std::size_t(img.width) + std::size_t(x)) * 4 + 3] == png_alpha(x, y));
      }
      if (kind == PngKind::rgb16 || kind == PngKind::gray16) {  // samples are v*257
        CHECK(stbi_is_16_bit_from_memory(f.data(), int(f.size())) == 1);
        int w = 0, h = 0, n = 0;
        std::unique_ptr<stbi_us, void (*)(void*)> p(stbi_load_16_from_memory(f.data(), int(f.size()), &w, &h, &n, 3), stbi_image_free);
        REQUIRE(p != nullptr);
        for (std::size_t i = 0; i < want.px.size(); ++i) REQUIRE(p.get()[i] == want.px[i] * 257);
      }
    }
}

TEST_CASE("PNG chunks are well formed with correct CRCs", "[image_writers][png]") {
  // Known answer: every PNG ends with IEND whose CRC is AE 42 60 82.
  const unsigned char iend[4] = {'I', 'E', 'N', 'D'};
  REQUIRE(crc_bitwise(iend, 4) == 0xAE426082u);

  const Rgb img = photo_like(29, 17, 5);
  const int depth[] = {8, 8, 8, 8, 8, 16, 16}, colour_type[] = {2, 6, 0, 4, 3, 2, 0}, bpp[] = {3, 4, 1, 2, 1, 6, 2};
  for (int k = 0; k < 7; ++k) {
    const PngKind kind = all_png[k];
    INFO(name(kind));
    const std::vector<unsigned char> f = png(img, kind);
    const std::vector<PngChunk> chunks = png_chunks(f);
    REQUIRE(chunks.size() == (kind == PngKind::palette8 ? 4u : 3u));
    for (const PngChunk& c : chunks) CHECK(c.crc_ok);
    CHECK(chunks.front().type == "IHDR");
    CHECK(chunks.back().type == "IEND");
    CHECK(chunks.back().data.empty());
    const std::vector<unsigned char>& ihdr = chunks[0].data;
    REQUIRE(ihdr.size() == 13);
    CHECK(be32(ihdr, 0) == 29);
    CHECK(be32(ihdr, 4) == 17);
    CHECK(int(ihdr[8]) == depth[k]);
    CHECK(int(ihdr[9]) == colour_type[k]);
    CHECK((ihdr[10] == 0 && ihdr[11] == 0 && ihdr[12] == 0));
    if (kind == PngKind::palette8) {
      CHECK(chunks[1].type == "PLTE");
      CHECK(chunks[1].data.size() == 216 * 3);
    }
    const PngChunk& idat = chunks[chunks.size() - 2];
    REQUIRE(idat.type == "IDAT");
    int raw_len = 0;
    std::unique_ptr<char, void (*)(void*)> raw(
        stbi_zlib_decode_malloc(reinterpret_cast<const char*>(idat.data.data()), int(idat.data.size()), &raw_len), stbi_image_free);
    REQUIRE(raw != nullptr);
    const int stride = 1 + 29 * bpp[k];
    REQUIRE(raw_len == 17 * stride);
    for (int y = 0; y < 17; ++y) CHECK(int(raw.get()[y * stride]) == 0);  // filter type 0
  }
}

TEST_CASE("BMP TGA PPM and PGM decode exactly", "[image_writers]") {
  for (const Rgb& img : sample_pictures()) {
    INFO(img.width << "x" << img.height);
    CHECK(diff(stb_rgb(bmp(img)), img) == "");
    CHECK(diff(stb_rgb(tga(img)), img) == "");
    CHECK(diff(stb_rgb(ppm(img)), img) == "");
    const Rgb gray = stb_rgb(pgm(img));
    CHECK(diff(gray, pgm_expected(img)) == "");
    for (std::size_t i = 0; i < img.px.size(); i += 3)
      REQUIRE((gray.px[i] == img.px[i] && gray.px[i + 1] == img.px[i] && gray.px[i + 2] == img.px[i]));
  }
  const std::vector<unsigned char> p = ppm(gradient(3, 2));
  CHECK(std::string(p.begin(), p.begin() + 11) == "P6\n3 2\n255\n");
  CHECK(p.size() == 11 + 18);
  const std::vector<unsigned char> g = pgm(gradient(3, 2));
  CHECK(std::string(g.begin(), g.begin() + 11) == "P5\n3 2\n255\n");
  CHECK(g.size() == 11 + 6);
  const std::vector<unsigned char> b = bmp(gradient(3, 2));
  CHECK(std::string(b.begin(), b.begin() + 2) == "BM");
}

TEST_CASE("GIF first frame decodes to gif_expected", "[image_writers][gif]") {
  for (const Rgb& img : sample_pictures()) {
    INFO(img.width << "x" << img.height);
    CHECK(diff(stb_rgb(gif(img)), gif_expected(img)) == "");
    CHECK(diff(stb_rgb(gif(img, 3)), gif_expected(img)) == "");  // a plain decoder returns frame 0
  }
  const Rgb c = checker(33, 21, 3);  // cube colours only: lossless
  CHECK(diff(stb_rgb(gif(c)), c) == "");
  const Rgb p = photo_like(33, 21, 9);
  CHECK(diff(gif_expected(p), quantize_216(p)) == "");
  CHECK(psnr(gif_expected(p), p) > 23);  // 6x6x6 quantization: errors up to 25, ~24.8 dB
}

TEST_CASE("GIF later frames hold different content", "[image_writers][gif]") {
  const Rgb img = photo_like(40, 24, 11);
  const std::vector<unsigned char> f = gif(img, 3);
  int w = 0, h = 0, z = 0, comp = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> all(stbi_load_gif_from_memory(f.data(), int(f.size()), nullptr, &w, &h, &z, &comp, 3),
                                                 stbi_image_free);
  REQUIRE(all != nullptr);
  REQUIRE((w == 40 && h == 24 && z == 3));
  const std::size_t frame_bytes = std::size_t(w) * std::size_t(h) * 3;
  for (int k = 0; k < 3; ++k) {
    INFO("frame " << k);
    const Rgb got{w, h, std::vector<unsigned char>(all.get() + std::size_t(k) * frame_bytes, all.get() + std::size_t(k + 1) * frame_bytes)};
    CHECK(diff(got, quantize_216(gif_frame(img, k))) == "");
    if (k > 0) CHECK(psnr(got, gif_expected(img)) < 20);
  }
}

TEST_CASE("GIF LZW codes all stay 9 bits wide", "[image_writers][gif]") {
  const Rgb img = photo_like(97, 13, 2);  // 1261 pixels: several CLEAR runs
  const std::vector<unsigned char> f = gif(img);
  // Header 13 + global palette 768, then GCE (8), image descriptor (10), min code size.
  REQUIRE(f.size() > 13 + 768 + 8 + 10 + 1);
  CHECK(int(f[10]) == 0xF7);
  std::size_t i = 13 + 768;
  REQUIRE((f[i] == 0x21 && f[i + 1] == 0xF9));
  i += 8;
  REQUIRE(f[i] == 0x2C);
  i += 10;
  REQUIRE(int(f[i++]) == 8);
  std::vector<unsigned char> data;
  while (f.at(i) != 0) {
    const std::size_t n = f[i];
    data.insert(data.end(), f.begin() + std::ptrdiff_t(i + 1), f.begin() + std::ptrdiff_t(i + 1 + n));
    i += 1 + n;
  }
  CHECK(f.at(i + 1) == 0x3B);
  CHECK(i + 2 == f.size());

  // Read 9-bit codes LSB first until EOI.
  std::vector<unsigned> codes;
  for (std::size_t bit = 0; bit + 9 <= data.size() * 8; bit += 9) {
    unsigned code = 0;
    for (int b = 0; b < 9; ++b) code |= unsigned((data[(bit + b) / 8] >> ((bit + b) % 8)) & 1) << b;
    codes.push_back(code);
    if (code == 257) break;
  }
  REQUIRE(!codes.empty());
  CHECK(codes.front() == 256);
  CHECK(codes.back() == 257);
  CHECK(data.size() == (codes.size() * 9 + 7) / 8);  // nothing after EOI but padding
  std::size_t literals = 0, run = 0, max_run = 0;
  for (std::size_t k = 0; k + 1 < codes.size(); ++k) {
    if (codes[k] == 256) {
      run = 0;
      continue;
    }
    REQUIRE(codes[k] < 216);
    max_run = std::max(max_run, ++run);
    ++literals;
  }
  CHECK(literals == 97u * 13u);
  CHECK(max_run <= 254);  // a 9-bit table holds 512 - 258 codes; the first after CLEAR adds none
}

TEST_CASE("JPEG baseline progressive and arithmetic decode above 30 dB", "[image_writers][jpeg]") {
  const Rgb pictures[] = {photo_like(96, 80, 1), photo_like(67, 41, 2), gradient(50, 33)};
  for (JpegKind kind : {JpegKind::baseline, JpegKind::progressive, JpegKind::arithmetic})
    for (bool sub : {true, false})
      for (const Rgb& img : pictures) {
        INFO(name(kind) << " 4:2:0 " << sub << " " << img.width << "x" << img.height);
        const std::vector<unsigned char> f = jpeg(img, {kind, 95, sub});
        const JpegDecoded d = jpeg_decode(f);
        CHECK(d.info.components == 3);
        CHECK(d.info.precision == 8);
        CHECK(d.info.progressive == (kind == JpegKind::progressive));
        CHECK(d.info.arithmetic == (kind == JpegKind::arithmetic));
        const unsigned sof = kind == JpegKind::baseline ? 0xC0 : kind == JpegKind::progressive ? 0xC2 : 0xC9;
        CHECK(unsigned(f[detail::jpeg_find_sof(f) + 1]) == sof);
        REQUIRE((d.rgb.width == img.width && d.rgb.height == img.height));
        const double db = psnr(d.rgb, img);
        INFO("PSNR " << db);
        CHECK(db > 30);
      }
  // Quality matters: a low-quality file is visibly further from the source.
  const Rgb img = photo_like(96, 80, 1);
  CHECK(psnr(jpeg_decode(jpeg(img, {JpegKind::baseline, 10, true})).rgb, img) < psnr(jpeg_decode(jpeg(img)).rgb, img) - 5);
}

TEST_CASE("stb_image reads baseline and progressive JPEG but not arithmetic", "[image_writers][jpeg]") {
  const Rgb img = photo_like(80, 64, 4);
  for (JpegKind kind : {JpegKind::baseline, JpegKind::progressive}) {
    INFO(name(kind));
    const double db = psnr(stb_rgb(jpeg(img, {kind, 95, true})), img);
    INFO("PSNR " << db);
    CHECK(db > 30);
  }
  CHECK_FALSE(stb_decode(jpeg(img, {JpegKind::arithmetic, 95, true})).ok);
}

TEST_CASE("JPEG gray holds the luma", "[image_writers][jpeg]") {
  const Rgb img = photo_like(64, 48, 8);
  const JpegDecoded d = jpeg_decode(jpeg(img, {JpegKind::gray, 95, true}));
  CHECK(d.info.components == 1);
  CHECK(d.info.color_space == JCS_GRAYSCALE);
  CHECK(d.out_components == 1);
  const double db = psnr(d.rgb, to_gray(img));
  INFO("PSNR " << db);
  CHECK(db > 30);
  CHECK(psnr(d.rgb, img) < 30);  // it really is gray
}

TEST_CASE("JPEG CMYK with Adobe marker stores inverted values", "[image_writers][jpeg]") {
  const Rgb img = photo_like(64, 48, 12);
  const JpegDecoded d = jpeg_decode(jpeg(img, {JpegKind::cmyk_adobe, 95, true}));
  CHECK(d.info.components == 4);
  CHECK(d.info.adobe);
  CHECK(d.info.color_space == JCS_CMYK);
  REQUIRE(d.out_components == 4);
  // R = C*K/255 on the stored (inverted) values, computed here independently.
  Rgb rgb = Rgb::sized(d.rgb.width, d.rgb.height);
  for (std::size_t i = 0; i < rgb.px.size() / 3; ++i) {
    const unsigned char* s = &d.samples[4 * i];
    CHECK(int(s[3]) >= 250);  // K' = 255: no black ink
    for (int c = 0; c < 3; ++c) rgb.px[3 * i + std::size_t(c)] = static_cast<unsigned char>(s[c] * s[3] / 255);
  }
  CHECK(diff(rgb, d.rgb) == "");
  const double db = psnr(rgb, img);
  INFO("PSNR " << db);
  CHECK(db > 30);
}

TEST_CASE("JPEG with a 12-bit precision header is rejected", "[image_writers][jpeg]") {
  const Rgb img = photo_like(32, 32, 6);
  const std::vector<unsigned char> eight = jpeg(img);
  const std::vector<unsigned char> twelve = jpeg(img, {JpegKind::twelve_bit_header, 95, true});
  REQUIRE(eight.size() == twelve.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < eight.size(); ++i) differing += eight[i] != twelve[i];
  CHECK(differing == 1);
  CHECK(int(twelve[detail::jpeg_find_sof(twelve) + 4]) == 12);
  CHECK(jpeg_info(eight).precision == 8);

  std::string message;
  try {
    jpeg_info(twelve);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  INFO("libjpeg said: " << message);
  CHECK(message.find("precision") != std::string::npos);
  CHECK_THROWS_AS(jpeg_decode(twelve), std::runtime_error);
  CHECK_FALSE(stb_decode(twelve).ok);
}

TEST_CASE("scaled libjpeg decode of photo_like stays above 30 dB", "[image_writers][jpeg]") {
  for (std::uint64_t seed : {1u, 5u, 9u}) {
    const Rgb img = photo_like(160, 120, seed);
    const std::vector<unsigned char> f = jpeg(img);
    for (int denom : {2, 4, 8}) {
      const JpegDecoded d = jpeg_decode(f, denom);
      const double db = psnr(d.rgb, box_down(img, denom));
      INFO("seed " << seed << " 1/" << denom << " PSNR " << db);
      CHECK(db > 30);
      // Smooth content: even a crude point-sampling reference agrees, so the
      // 30 dB bar does not hinge on which downscaler a test uses.
      if (denom < 8) CHECK(psnr(d.rgb, point_down(img, denom)) > 30);
    }
  }
  // White noise fails that second check badly: photo_like is not noise.
  const std::vector<unsigned char> bytes = random_bytes(160 * 120 * 3, 77);
  const Rgb noise{160, 120, bytes};
  CHECK(psnr(jpeg_decode(jpeg(noise), 2).rgb, point_down(noise, 2)) < 20);
}

// stb_image 2.27 is lenient with SOME truncations: it pads a cut JPEG scan,
// returns a partial GIF raster and fills missing PNM pixels. So only cuts that
// it must notice are checked: headers of every format, and PNG anywhere.
TEST_CASE("truncated and random inputs are rejected by stb_image", "[image_writers][errors]") {
  const Rgb img = photo_like(48, 40, 3);
  const std::vector<unsigned char> files[] = {png(img, PngKind::rgb8), png(img, PngKind::palette8), jpeg(img), gif(img), bmp(img)};
  for (const std::vector<unsigned char>& f : files) {
    REQUIRE(stb_decode(f).ok);  // whole: fine
    for (std::size_t keep : {std::size_t(0), std::size_t(1), std::size_t(8), std::size_t(20), std::size_t(40)}) {
      INFO("first byte " << int(f[0]) << " keep " << keep);
      CHECK_FALSE(stb_decode(truncated(f, keep)).ok);
    }
  }
  for (std::size_t k : {0u, 1u}) {  // PNG: inside IDAT, or just IEND missing
    INFO("file " << k);
    CHECK_FALSE(stb_decode(truncated(files[k], files[k].size() / 2)).ok);
    CHECK_FALSE(stb_decode(truncated(files[k], files[k].size() - 12)).ok);
  }
  CHECK(truncated(files[0], 1u << 30).size() == files[0].size());
  CHECK(truncated(files[0], 10).size() == 10);

  CHECK(random_bytes(64, 1) == random_bytes(64, 1));
  CHECK(random_bytes(64, 1) != random_bytes(64, 2));
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    INFO("seed " << seed);
    CHECK_FALSE(stb_decode(random_bytes(4096, seed)).ok);
  }
}

TEST_CASE("decompression bomb headers claim huge sizes", "[image_writers][errors]") {
  const std::vector<unsigned char> p = png_header_only(100000, 100000);
  const std::vector<PngChunk> chunks = png_chunks(p);
  REQUIRE(chunks.size() == 3);
  for (const PngChunk& c : chunks) CHECK(c.crc_ok);
  CHECK((be32(chunks[0].data, 0) == 100000 && be32(chunks[0].data, 4) == 100000));
  CHECK(p.size() < 100);
  const StbResult r = stb_decode(p);
  CHECK_FALSE(r.ok);
  CHECK(r.why == "too large");  // stb refuses from the header alone
  int w = 0, h = 0, n = 0;
  const std::vector<unsigned char> p2 = png_header_only(10000, 10000);  // below stb's limit: the header reads fine
  REQUIRE(stbi_info_from_memory(p2.data(), int(p2.size()), &w, &h, &n) == 1);
  CHECK((w == 10000 && h == 10000 && n == 3));

  const std::vector<unsigned char> j = jpeg_claiming(60000, 50000);
  const JpegInfo info = jpeg_info(j);
  CHECK((info.width == 60000 && info.height == 50000));
  CHECK(j.size() < 1000);
  REQUIRE(stbi_info_from_memory(j.data(), int(j.size()), &w, &h, &n) == 1);
  CHECK((w == 60000 && h == 50000));
  CHECK_FALSE(stb_decode(j).ok);
}

TEST_CASE("psnr write_file and error handling", "[image_writers]") {
  const Rgb a = gradient(4, 4);
  CHECK(std::isinf(psnr(a, a)));
  const Rgb black = Rgb::sized(1, 1);
  const Rgb red{1, 1, {255, 0, 0}};
  CHECK(psnr(black, red) == Approx(10 * std::log10(3.0)));
  CHECK_THROWS_AS(psnr(a, gradient(4, 5)), std::invalid_argument);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("conveyor_image_writers_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<unsigned char> bytes = png(a, PngKind::rgb8);
  write_file(dir / "a.png", bytes);
  std::ifstream in(dir / "a.png", std::ios::binary);
  const std::vector<unsigned char> back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(back == bytes);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(write_file(dir / "missing" / "x.png", bytes), std::runtime_error);

  CHECK_THROWS_AS(jpeg_info({}), std::runtime_error);
  CHECK_THROWS_AS(jpeg_info(random_bytes(100, 3)), std::runtime_error);
  CHECK_THROWS_AS(jpeg(a, {JpegKind::baseline, 0, true}), std::invalid_argument);
  CHECK_THROWS_AS(jpeg_decode(jpeg(a), 3), std::invalid_argument);
}
