// Image stages end to end: every format and colour input against known content,
// every error case naming the file, ROI/scaled decode quality, worker-count
// independence and skip accounting. Images are generated here (image_writers.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "catch_compat.h"

#include "image_writers.h"
#include "pipeline/pipeline.h"
#include "image/image_ops.h"
#include "image/image_source.h"
#include "temp_dir.h"
#include "data/files/image_folder.h"

using namespace conveyor;
namespace t = conveyor::test;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

// Full-resolution decode of a whole file into an Rgb.
t::Rgb decode_whole(const std::vector<unsigned char>& bytes, ImageFormat* format = nullptr) {
  ImageDecoder dec;
  const ImageInfo info = dec.open(bytes);
  if (format) *format = info.format;
  const DecodedView v = dec.decode({0, 0, info.width, info.height}, 1.0);
  REQUIRE(v.width == info.width);
  REQUIRE(v.height == info.height);
  t::Rgb out = t::Rgb::sized(info.width, info.height);
  for (int y = 0; y < v.height; ++y) std::memcpy(out.at(0, y), v.pixels + y * v.stride, std::size_t(v.width) * 3);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("images: lossless formats decode to the exact expected pixels", "[images][decode]") {
  const t::Rgb img = t::checker(37, 23, 5);
  const t::Rgb grad = t::gradient(37, 23);
  for (auto kind : {t::PngKind::rgb8, t::PngKind::rgba8, t::PngKind::gray8, t::PngKind::gray_alpha8,
                    t::PngKind::palette8, t::PngKind::rgb16, t::PngKind::gray16}) {
    INFO("png kind " << int(kind));
    ImageFormat f;
    REQUIRE(decode_whole(t::png(grad, kind), &f).px == t::png_expected(grad, kind).px);
    REQUIRE(f == ImageFormat::png);
  }
  ImageFormat f;
  REQUIRE(decode_whole(t::bmp(grad), &f).px == grad.px);
  REQUIRE(f == ImageFormat::bmp);
  REQUIRE(decode_whole(t::tga(grad), &f).px == grad.px);
  REQUIRE(f == ImageFormat::tga);
  REQUIRE(decode_whole(t::tga_raw(grad), &f).px == grad.px);
  REQUIRE(f == ImageFormat::tga);
  REQUIRE(decode_whole(t::ppm(grad), &f).px == grad.px);
  REQUIRE(f == ImageFormat::pnm);
  REQUIRE(decode_whole(t::pgm(grad)).px == t::pgm_expected(grad).px);
  REQUIRE(decode_whole(t::gif(img, 3), &f).px == t::gif_expected(img).px);  // the first of 3 frames
  REQUIRE(f == ImageFormat::gif);
}

TEST_CASE("images: PNM of every maxval, 8 and 16 bit, grey and colour", "[images][decode][pnm]") {
  const t::Rgb img = t::gradient(37, 23);
  for (const bool gray : {false, true}) {
    const t::Rgb exact = gray ? t::pgm_expected(img) : img;
    for (const int maxval : {255, 256, 1000, 65535}) {  // one byte per sample, then two
      INFO("gray " << gray << " maxval " << maxval);
      ImageFormat f;
      REQUIRE(decode_whole(t::pnm_maxval(img, maxval, gray), &f).px == exact.px);
      REQUIRE(f == ImageFormat::pnm);
    }
    for (const int maxval : {1, 15, 100}) {  // fewer levels than 8 bits: scaled up to 0..255
      INFO("gray " << gray << " maxval " << maxval);
      const t::Rgb got = decode_whole(t::pnm_maxval(img, maxval, gray));
      REQUIRE(got.px == t::pnm_expected(img, maxval, gray).px);
      REQUIRE(*std::max_element(got.px.begin(), got.px.end()) == 255);
    }
  }
}

TEST_CASE("images: a cut or malformed PNM is an error, never made-up pixels", "[images][errors][pnm]") {
  const t::Rgb img = t::gradient(16, 9);
  for (const int maxval : {255, 65535}) {
    for (const bool gray : {false, true}) {
      const auto whole = t::pnm_maxval(img, maxval, gray);
      for (const std::size_t cut : {std::size_t(1), std::size_t(2), whole.size() / 2}) {
        INFO("maxval " << maxval << " gray " << gray << " cut " << cut);
        const auto file = t::truncated(whole, whole.size() - cut);  // the header is whole
        ImageDecoder dec;
        dec.open(file);
        REQUIRE_THROWS_WITH(dec.decode({0, 0, 16, 9}, 1.0), Catch::Contains("PNM: pixel data cut short"));
      }
    }
  }
  // What fuzz_decode found in stb_image 2.27: a 16-bit grey header over a short
  // raster made stb read past its own buffer (fuzz/regressions/decode/ holds the file).
  std::vector<unsigned char> found(std::size_t(150), 0);
  const std::string header = "P5\n614 25\n307 291\n3";
  std::copy(header.begin(), header.end(), found.begin());
  ImageDecoder dec;
  const ImageInfo info = dec.open(found);
  REQUIRE((info.width == 614 && info.height == 25 && info.components == 1));
  REQUIRE_THROWS_WITH(dec.decode({0, 0, 614, 25}, 1.0), "PNM: pixel data cut short: 136 of 30700 bytes");

  auto open_error = [](const std::string& text) {
    ImageDecoder d;
    return error_of([&] { d.open(std::vector<unsigned char>(text.begin(), text.end())); });
  };
  CHECK(open_error("P6") == "PNM header: no width");
  CHECK(open_error("P6 3 # 2 255\n") == "PNM header: no height");
  CHECK(open_error("P6 3 2") == "PNM header: no maxval");
  CHECK(open_error("P6 3 2 0 ") == "PNM header: maxval 0");
  CHECK(open_error("P6 3 2 65536 ") == "PNM header: maxval over 65535");
  CHECK(open_error("P5 99999999999 2 255 ") == "PNM header: width over 2147483647");
  CHECK(open_error("P6 3 2 255") == "PNM header: no whitespace after maxval");
  CHECK(open_error("P6 0 2 255 ") == "image has no pixels");
  CHECK(open_error("P5 100000 100000 255 ") == "PNM header claims 100000x100000 = 10000000000 pixels, over the limit of 64000000 (max_pixels)");
  // Formats stb_image would also read, which this decoder does not offer; stb
  // takes FF FF D8 for a JPEG start, libjpeg-turbo (this decoder's JPEG) does not.
  CHECK(sniff_format(std::vector<unsigned char>{0xFF, 0xFF, 0xD8, 0xFF, 0xE0}) == ImageFormat::unknown);
  CHECK(sniff_format(std::vector<unsigned char>{0xFF, 0xD8, 0xFF, 0xE0}) == ImageFormat::jpeg);
  CHECK_THAT(open_error("8BPS\x00\x01rest of a Photoshop header"), Catch::StartsWith("not an image this decoder reads"));
  CHECK_THAT(open_error("#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 2 +X 2\n"), Catch::StartsWith("not an image this decoder reads"));
}

TEST_CASE("images: a PNG chunk longer than the file is an error, not a huge buffer", "[images][errors]") {
  // stb_image would first grow its buffer to the claimed 2 GiB (fuzz_decode found it).
  std::vector<unsigned char> file = t::png(t::gradient(16, 9), t::PngKind::rgb8);
  const auto idat = std::search(file.begin(), file.end(), std::begin("IDAT"), std::end("IDAT") - 1);
  REQUIRE(idat != file.end());
  const std::size_t left = std::size_t(file.end() - idat) - 4;
  std::fill(idat - 4, idat, 0x7F);  // length 0x7F7F7F7F
  ImageDecoder dec;
  dec.open(file);  // the header is whole
  REQUIRE_THROWS_WITH(dec.decode({0, 0, 16, 9}, 1.0),
                      "PNG: chunk 'IDAT' claims 2139062143 bytes, the file holds " + std::to_string(left) + " more");
}

TEST_CASE("images: a PNG, BMP, GIF or TGA header over the pixel limit says so, not 'unknown image type'",
          "[images][errors]") {
  // stbi_info refuses a 20000 x 20000 PNG itself, then tries the other formats
  // and reports the last one's failure: the decoder reads the header first.
  const auto set_be32 = [](std::vector<unsigned char>& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + std::size_t(i)] = (unsigned char)(v >> (24 - 8 * i));
  };
  std::vector<unsigned char> png = t::png(t::gradient(16, 9), t::PngKind::rgb8);
  set_be32(png, 16, 20000);
  set_be32(png, 20, 20000);
  ImageDecoder dec;
  CHECK(error_of([&] { dec.open(png); }) ==
        "PNG header claims 20000x20000 = 400000000 pixels, over the limit of 64000000 (max_pixels)");

  std::vector<unsigned char> bmp = t::bmp(t::gradient(16, 9));
  for (std::size_t at : {std::size_t(18), std::size_t(22)}) {  // width and height, little-endian
    bmp[at] = 0x20;  // 20000 = 0x4E20
    bmp[at + 1] = 0x4E;
  }
  CHECK(error_of([&] { dec.open(bmp); }) ==
        "BMP header claims 20000x20000 = 400000000 pixels, over the limit of 64000000 (max_pixels)");

  // Within the limit, the image still opens: the hand-read figures agree with stb's.
  const std::vector<unsigned char> ok = t::png(t::gradient(16, 9), t::PngKind::rgb8);
  const ImageInfo info = dec.open(ok);
  CHECK((info.width == 16 && info.height == 9));
}

namespace {

// "" when the whole file decodes, else the decoder's error.
std::string decode_error(const std::vector<unsigned char>& bytes) {
  return error_of([&] { decode_whole(bytes); });
}

}  // namespace

TEST_CASE("images: a BMP, TGA or GIF cut anywhere is an error, never zero-filled pixels", "[images][errors]") {
  // stb_image 2.27 decodes all three "successfully" when cut short, making up what
  // is missing; check_container() finds the cut first.
  for (auto [w, h] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}, {17, 1}, {37, 23}}) {
    const t::Rgb img = t::photo_like(w, h, 4);
    const t::Rgb flat = t::Rgb{w, h, std::vector<unsigned char>(img.px.size(), 90)};  // long TGA runs
    struct File {
      const char* kind;
      std::vector<unsigned char> bytes;
      std::size_t may_lose;  // trailing bytes no decoder needs
    };
    const std::size_t bmp_padding = std::size_t((4 - w * 3 % 4) % 4);  // of the last row
    const File files[] = {{"bmp", t::bmp(img), bmp_padding}, {"tga rle", t::tga(img), 0}, {"tga rle flat", t::tga(flat), 0},
                          {"tga raw", t::tga_raw(img), 0},      {"gif", t::gif(img), 1}};  // 1: the GIF trailer
    for (const File& f : files) {
      INFO(f.kind << " " << w << "x" << h << ", " << f.bytes.size() << " bytes");
      REQUIRE(decode_error(f.bytes) == "");
      for (std::size_t lose = 1; lose <= f.may_lose; ++lose) REQUIRE(decode_error(t::truncated(f.bytes, f.bytes.size() - lose)) == "");
      for (std::size_t keep = 0; keep + f.may_lose < f.bytes.size(); ++keep) {
        INFO("cut to " << keep << " bytes");
        REQUIRE(decode_error(t::truncated(f.bytes, keep)) != "");
      }
    }
  }
  CHECK(decode_error(t::truncated(t::bmp(t::gradient(16, 8)), 200)) == "BMP: pixel data cut short: 146 of 384 bytes");
  CHECK(decode_error(t::truncated(t::tga_raw(t::gradient(16, 8)), 200)) == "TGA: pixel data cut short: 182 of 384 bytes");
  CHECK_THAT(decode_error(t::truncated(t::tga(t::photo_like(16, 8, 1)), 100)), Catch::StartsWith("TGA: run-length data cut short after "));
  CHECK(decode_error(t::truncated(t::gif(t::gradient(16, 8)), 100)) == "GIF: the first frame's data is cut short");
}

TEST_CASE("images: a PNG with any byte of a chunk flipped fails its CRC, never decodes to other pixels", "[images][errors]") {
  // stb_image checks neither PNG's chunk CRCs nor zlib's Adler-32: one flipped
  // bit inside IDAT decoded "successfully" to wrong pixels.
  const std::vector<unsigned char> good = t::png(t::photo_like(19, 7, 3), t::PngKind::rgb8);
  REQUIRE(decode_error(good) == "");
  for (std::size_t at = 8; at < good.size(); ++at) {  // every byte after the signature
    std::vector<unsigned char> bad = good;
    bad[at] ^= 0x10;
    INFO("byte " << at << " of " << good.size());
    REQUIRE(decode_error(bad) != "");
  }
  std::vector<unsigned char> bad = good;
  bad[good.size() - 20] ^= 0x01;  // inside the last IDAT
  CHECK_THAT(decode_error(bad), Catch::Contains("fails its CRC check: the file is corrupt (stored "));
}

TEST_CASE("images: every JPEG kind decodes to RGB close to its source", "[images][decode][jpeg]") {
  const t::Rgb img = t::photo_like(96, 64, 5);
  for (auto kind : {t::JpegKind::baseline, t::JpegKind::progressive, t::JpegKind::arithmetic, t::JpegKind::gray,
                    t::JpegKind::cmyk_adobe}) {
    INFO("jpeg kind " << int(kind));
    const t::Rgb want = kind == t::JpegKind::gray ? t::to_gray(img) : img;
    const t::Rgb got = decode_whole(t::jpeg(img, {kind, 95}));
    REQUIRE(t::psnr(got, want) > 30);
  }
  // No chroma subsampling, too.
  REQUIRE(t::psnr(decode_whole(t::jpeg(img, {t::JpegKind::baseline, 95, false})), img) > 30);
}

TEST_CASE("images: each bad file gives an error naming the file and the reason", "[images][errors]") {
  TempDir dir;
  const t::Rgb img = t::photo_like(64, 48, 2);
  const auto good_jpeg = t::jpeg(img);
  struct Case {
    std::string name;
    std::vector<unsigned char> bytes;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"truncated.jpg", t::truncated(good_jpeg, good_jpeg.size() / 3), "JPEG"},
      {"header-cut.jpg", t::truncated(good_jpeg, 100), "JPEG"},
      {"truncated.png", t::truncated(t::png(img, t::PngKind::rgb8), 200), "PNG"},
      {"empty.jpg", {}, "empty file"},
      {"random.jpg", t::random_bytes(5000, 7), "not an image"},
      {"text.jpg", std::vector<unsigned char>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'},
       "not an image"},
      {"twelve.jpg", t::jpeg(img, {t::JpegKind::twelve_bit_header}), "precision 12"},
      {"bomb.jpg", t::jpeg_claiming(60000, 50000), "over the limit"},
      {"bomb.png", t::png_header_only(100000, 100000), "PNG"},
  };
  Dataset ds = [&] {
    std::vector<fs::path> paths;
    for (const auto& c : cases) paths.push_back(dir.write(c.name, c.bytes));
    paths.push_back(dir.path() / "missing.jpg");
    return Dataset(paths, std::vector<std::int64_t>(paths.size(), 0));
  }();
  ImageSource src(ds, ImageConfig{}, 1);
  std::vector<unsigned char> out(src.sample_bytes());
  for (std::size_t i = 0; i < ds.size(); ++i) {
    Rng rng(1, 0, i);
    const std::string e = error_of([&] { src.render_sample(i, rng, out); });
    INFO(ds.path(i).string() << " -> '" << e << "'");
    REQUIRE_THAT(e, Catch::StartsWith(ds.path(i).string() + ": "));
    if (i < cases.size()) REQUIRE_THAT(e, Catch::Contains(cases[i].reason));
    REQUIRE(e.find('\n') == std::string::npos);  // one line
  }
  // The file-size limit is checked before reading.
  ImageConfig small;
  small.limits.max_file_bytes = 100;
  ImageSource strict(Dataset({dir.write("ok.jpg", good_jpeg)}, {0}), small, 1);
  Rng rng(1, 0, 0);
  REQUIRE_THAT(error_of([&] { strict.render_sample(0, rng, out); }), Catch::Contains("over the limit of 100"));
  // And the pixel limit from the header, configurable.
  ImageConfig tiny;
  tiny.limits.max_pixels = 64 * 47;
  ImageSource pixels(Dataset({dir.path() / "ok.jpg"}, {0}), tiny, 1);
  REQUIRE_THAT(error_of([&] { pixels.render_sample(0, rng, out); }), Catch::Contains("max_pixels"));
}

TEST_CASE("images: the decoder goes by bytes, not by the extension", "[images][decode]") {
  TempDir dir;
  const t::Rgb img = t::gradient(300, 200);
  const auto png_path = dir.write("really-a-png.jpg", t::png(img, t::PngKind::rgb8));
  const auto jpg_path = dir.write("really-a-jpeg.png", t::jpeg(img));
  ImageConfig cfg;
  cfg.transforms = {CenterCrop{{200, 300}}};
  ImageSource src(Dataset({png_path, jpg_path}, {3, 4}), cfg, 1);
  std::vector<unsigned char> out(src.sample_bytes());
  Rng rng(1, 0, 0);
  src.render_sample(0, rng, out);
  REQUIRE(out == img.px);  // exact: a pixel-for-pixel crop of a lossless file
  src.render_sample(1, rng, out);
  t::Rgb got = t::Rgb::sized(300, 200);
  got.px = out;
  REQUIRE(t::psnr(got, img) > 30);
}

TEST_CASE("images: ROI and DCT-scaled decode match a full decode plus the same resize", "[images][quality]") {
  // RandomResizedCrop boxes over a photo-like picture, rendered twice: through the
  // ROI path (crop + skip + reduced scale), and from a full-size, full-image decode.
  const t::Rgb img = t::photo_like(1024, 768, 11);
  const auto file = t::jpeg(img, {t::JpegKind::baseline, 92});
  for (const int out_size : {64, 224}) {
    const Augment augment({RandomResizedCrop{{out_size, out_size}}, RandomHorizontalFlip{}});
    ImageDecoder roi({}, {1, 2, 4});  // allow every fast scale so that 1/8 .. 1/2 all get exercised
    ImageDecoder full({}, {8});
    ResizeScratch scratch;
    std::set<int> scales_seen;
    double worst = 1e9;
    for (std::uint64_t i = 0; i < 40; ++i) {
      Rng r1(4, 0, i), r2(4, 0, i);
      const ImageInfo info = roi.open(file);
      const Geometry g = augment.plan(info.width, info.height, r1);
      const DecodeRequest want = decode_request(g, info.width, info.height);
      const DecodedView a = roi.decode(want.region, want.min_scale);
      scales_seen.insert(a.dct_scale);
      t::Rgb ra = t::Rgb::sized(out_size, out_size), rb = ra;
      render(a, g, info.width, info.height, 0, ra.px, scratch);
      full.open(file);
      const DecodedView b = full.decode({0, 0, info.width, info.height}, 1.0);
      REQUIRE(b.dct_scale == 8);
      const Geometry g2 = augment.plan(info.width, info.height, r2);
      render(b, g2, info.width, info.height, 0, rb.px, scratch);
      worst = std::min(worst, t::psnr(ra, rb));
    }
    INFO("output " << out_size << ", scales used " << scales_seen.size());
    REQUIRE(worst >= 30);
    if (out_size == 64) REQUIRE(scales_seen.size() >= 3);  // the test really ran reduced scales
  }
}

TEST_CASE("images: at full scale, a region decode renders the bits a whole decode does", "[images][decode][jpeg]") {
  // The resize reads its window (the crop it resizes) and the region covers the
  // filter's reach inside it, so a JPEG decoded in part and a PNG decoded whole
  // give one picture: the GPU path's twin and the CPU path agree bit for bit.
  const t::Rgb img = t::photo_like(317, 203, 9);
  const auto file = t::jpeg(img, {t::JpegKind::baseline, 90});
  ImageDecoder part({}, {8}), whole({}, {8});
  ResizeScratch scratch;
  for (const AugmentPreset preset : {AugmentPreset::rrc, AugmentPreset::crop, AugmentPreset::center}) {
    const Augment augment(preset_transforms(preset, 96));
    for (std::uint64_t i = 0; i < 30; ++i) {
      CAPTURE(int(preset), i);
      Rng r1(6, 0, i), r2(6, 0, i);
      const ImageInfo info = part.open(file);
      const Geometry g = augment.plan(info.width, info.height, r1);
      const DecodeRequest want = decode_request(g, info.width, info.height);
      t::Rgb a = t::Rgb::sized(96, 96), b = a;
      render(part.decode(want.region, want.min_scale), g, info.width, info.height, 0, a.px, scratch);
      whole.open(file);
      render(whole.decode({0, 0, info.width, info.height}, 1.0), augment.plan(info.width, info.height, r2), info.width,
             info.height, 0, b.px, scratch);
      REQUIRE(a.px == b.px);
    }
  }
}

TEST_CASE("images: a JPEG region decodes to the same pixels as the whole image", "[images][decode][jpeg]") {
  // 4:2:0 chroma, fancy upsampling: jpeg_crop_scanline took the crop's edge
  // for the image's, and the first or last column differed from a whole
  // decode by up to 21 levels (copied as is by CenterCrop and RandomCrop).
  const t::Rgb img = t::photo_like(301, 97, 5);
  const auto file = t::jpeg(img, {t::JpegKind::baseline, 90});
  ImageDecoder whole({}, {8}), part({}, {8});
  const ImageInfo info = whole.open(file);
  const DecodedView all = whole.decode({0, 0, info.width, info.height}, 1.0);
  std::vector<unsigned char> reference(std::size_t(all.stride) * all.height);
  std::memcpy(reference.data(), all.pixels, reference.size());
  for (const int x : {1, 2, 7, 8, 15, 16, 17, 32, 111, 112, 113}) {
    for (const int w : {1, 2, 33, 64, 65, 96, 188 - x}) {
      INFO("columns " << x << " .. " << x + w);
      part.open(file);
      const DecodedView v = part.decode({x, 3, w, 40}, 1.0);
      REQUIRE(v.dct_scale == 8);
      int differ = 0;
      for (int row = 3; row < 43; ++row) {
        for (int col = x; col < x + w; ++col) {
          const unsigned char* a = reference.data() + std::ptrdiff_t(row) * all.stride + col * 3;
          const unsigned char* b = v.pixels + std::ptrdiff_t(row - int(v.y0)) * v.stride + (col - int(v.x0)) * 3;
          differ += std::memcmp(a, b, 3) != 0;
        }
      }
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("images: tiny and extreme shapes decode and crop in bounds", "[images][shapes]") {
  TempDir dir;
  std::vector<fs::path> paths;
  for (auto [w, h] : std::vector<std::pair<int, int>>{{1, 1}, {4000, 40}, {40, 4000}, {2, 3}, {17, 1}}) {
    const t::Rgb img = t::gradient(w, h);
    paths.push_back(dir.write(std::to_string(w) + "x" + std::to_string(h) + ".jpg", t::jpeg(img)));
    paths.push_back(dir.write(std::to_string(w) + "x" + std::to_string(h) + ".png", t::png(img, t::PngKind::rgb8)));
  }
  const Dataset ds(paths, std::vector<std::int64_t>(paths.size(), 1));
  for (const auto& chain : std::vector<std::vector<Transform>>{{RandomResizedCrop{{32, 32}}, RandomHorizontalFlip{}},
                                                               {Resize{36}, CenterCrop{{32, 32}}},
                                                               {RandomCrop{{32, 32}, 4, 4, 4, 4, true}}}) {
    ImageConfig cfg;
    cfg.transforms = chain;
    ImageSource src(ds, cfg, 1);
    std::vector<unsigned char> out(src.sample_bytes());
    for (std::size_t i = 0; i < ds.size(); ++i) {
      for (std::uint64_t e = 0; e < 20; ++e) {
        Rng rng(1, e, i);
        INFO(ds.path(i) << " with " << src.augment().describe());
        REQUIRE_NOTHROW(src.render_sample(i, rng, out));
      }
    }
  }
}

namespace {

// A folder dataset of generated JPEGs and PNGs, a few of them broken.
struct Folder {
  TempDir dir;
  Dataset dataset{std::vector<fs::path>{}, {}};
  std::set<std::string> broken;
  explicit Folder(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::string cls = "class" + std::to_string(i % 3);
      fs::create_directories(dir.path() / cls);
      const t::Rgb img = t::photo_like(40 + int(i * 7 % 90), 30 + int(i * 13 % 70), i);
      std::string name = cls + "/img" + std::to_string(100 + i);
      if (i % 11 == 5) {
        name += ".jpg";
        dir.write(name, t::random_bytes(300, i));
        broken.insert((dir.path() / name).string());
      } else if (i % 4 == 1) {
        dir.write(name + ".png", t::png(img, t::PngKind::rgb8));
      } else {
        dir.write(name + ".jpg", t::jpeg(img, {i % 2 ? t::JpegKind::progressive : t::JpegKind::baseline}));
      }
    }
    dataset = dataset_from_folder(dir.path());
  }
};

std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::byte>> run_images(const Dataset& ds,
                                                                                     std::size_t workers,
                                                                                     ErrorPolicy policy,
                                                                                     std::vector<SkippedSample>* skips) {
  ImageConfig cfg;
  // Both flips: each sample's draws (crop, then the two flips) come from its own Rng.
  cfg.transforms = {RandomResizedCrop{{24, 24}}, RandomHorizontalFlip{}, RandomVerticalFlip{}};
  cfg.on_error = policy;
  ImageSource src(ds, cfg, workers);
  Config c;
  c.batch_size = 5;
  c.sample_bytes = src.sample_bytes();
  c.workers = workers;
  c.epochs = 2;
  c.seed = 42;
  Pipeline p(c, ds.size(), {src.filler()});
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::byte>> out;
  while (auto b = p.next()) {
    for (std::size_t j = 0; j < (*b)->size(); ++j) {
      const auto s = (*b)->sample(j);
      REQUIRE((*b)->labels[j] == ds.label((*b)->indices[j]));
      out[{(*b)->epoch, (*b)->indices[j]}].assign(s.begin(), s.end());
    }
  }
  if (skips) *skips = p.skipped();
  return out;
}

}  // namespace

TEST_CASE("images: output is bit-identical with 1 and 4 workers", "[images][pipeline]") {
  Folder f(30);
  std::vector<SkippedSample> s1, s4;
  const auto one = run_images(f.dataset, 1, ErrorPolicy::skip, &s1);
  const auto four = run_images(f.dataset, 4, ErrorPolicy::skip, &s4);
  REQUIRE(one.size() == 2 * (30 - f.broken.size()));
  REQUIRE(one == four);
  REQUIRE(s1 == s4);
}

TEST_CASE("images: skip policy accounts for every sample, fail policy stops naming it", "[images][pipeline][skip]") {
  Folder f(40);
  REQUIRE(f.broken.size() == 4);
  std::vector<SkippedSample> skips;
  const auto got = run_images(f.dataset, 3, ErrorPolicy::skip, &skips);
  for (std::uint64_t e = 0; e < 2; ++e) {
    std::size_t delivered = 0, skipped = 0;
    for (const auto& [key, bytes] : got) delivered += key.first == e;
    for (const auto& s : skips) {  // each broken file once, with the epochs it was skipped in
      REQUIRE(s.times == 2);
      if (e < s.epoch || e > s.last_epoch) continue;
      ++skipped;
      const std::string path = f.dataset.path(s.index).string();
      REQUIRE(f.broken.count(path) == 1);
      REQUIRE_THAT(s.reason, Catch::StartsWith(path + ": ") && Catch::Contains("not an image"));
    }
    REQUIRE(skipped == f.broken.size());
    REQUIRE(delivered + skipped == f.dataset.size());
  }
  // fail: the consumer's error names the sample index and the file.
  try {
    run_images(f.dataset, 3, ErrorPolicy::fail, nullptr);
    FAIL("no error");
  } catch (const PipelineError& e) {
    REQUIRE(e.sample() < f.dataset.size());
    REQUIRE(f.broken.count(f.dataset.path(e.sample()).string()) == 1);
    REQUIRE_THAT(e.what(), Catch::Contains(f.dataset.path(e.sample()).string()));
  }
}

TEST_CASE("images: a pipeline that does not match its source fails, even under the skip policy",
          "[images][pipeline][skip]") {
  // Built for 1 worker, run by 3 (or over a dataset_size past the dataset): 23
  // of 24 samples were "skipped" with a vector::at message, and the run ended
  // as if all were well.
  Folder f(24);
  ImageConfig cfg;
  cfg.transforms = {RandomResizedCrop{{8, 8}}};
  cfg.on_error = ErrorPolicy::skip;
  ImageSource src(f.dataset, cfg, 1);
  Config c;
  c.batch_size = 4;
  c.sample_bytes = src.sample_bytes();
  c.workers = 1;
  c.epochs = 1;
  std::string error = "no error";
  try {
    Pipeline p(c, f.dataset.size() + 3, {src.filler()});
    while (p.next()) {
    }
  } catch (const PipelineError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("is past the dataset's 24 samples"));
  // Worker 2 of a pipeline with 3: called directly, since in a run worker 0 may take every sample first.
  std::vector<std::byte> slot(src.sample_bytes());
  Sample s{0, 0, 0, slot, 0, Rng(1, 0, 0)};
  s.worker = 2;
  CHECK_THROWS_WITH(src.fill(s), Catch::Contains("built for 1 worker(s), but the pipeline's worker 2"));
  s.worker = 0;
  s.index = f.dataset.size();
  CHECK_THROWS_WITH(src.fill(s), Catch::Contains("is past the dataset's 24 samples"));
}

TEST_CASE("images: normalizing in the workers writes the device's float32 CHW bits", "[images][normalize]") {
  Folder f(12);
  ImageConfig plain;
  plain.transforms = {RandomResizedCrop{{20, 28}}, RandomHorizontalFlip{}};
  plain.on_error = ErrorPolicy::skip;
  ImageConfig normalized = plain;
  normalized.normalize = Normalize{{0.5f, 0.25f, 0.125f}, {0.2f, 0.3f, 0.4f}};
  ImageSource u8(f.dataset, plain, 1), fl(f.dataset, normalized, 1);
  const std::size_t plane = 20 * 28;
  REQUIRE(u8.sample_bytes() == plane * 3);
  REQUIRE(fl.sample_bytes() == plane * 3 * sizeof(float));
  std::vector<unsigned char> hwc(u8.sample_bytes());
  std::vector<float> chw(plane * 3);
  std::size_t compared = 0;
  for (std::size_t i = 0; i < f.dataset.size(); ++i) {
    if (f.broken.count(f.dataset.path(i).string())) continue;
    Rng r1(9, 0, i), r2(9, 0, i);
    u8.render_sample(i, r1, hwc);
    fl.render_sample(i, r2, {reinterpret_cast<unsigned char*>(chw.data()), chw.size() * sizeof(float)});
    for (int c = 0; c < 3; ++c) {
      const ChannelAffine a = channel_affine(normalized.normalize->mean[std::size_t(c)], normalized.normalize->std[std::size_t(c)]);
      for (std::size_t p = 0; p < plane; ++p) {
        const float want = normalize_value(hwc[p * 3 + std::size_t(c)], a);  // the CUDA kernel's function
        REQUIRE(std::memcmp(&chw[std::size_t(c) * plane + p], &want, sizeof want) == 0);
      }
    }
    ++compared;
  }
  REQUIRE(compared == f.dataset.size() - f.broken.size());

  ImageConfig bad = plain;
  bad.normalize = Normalize{{0, 0, 0}, {1, 0, 1}};
  REQUIRE_THROWS_WITH(ImageSource(f.dataset, bad, 1), Catch::Contains("normalize.std[1]"));
}
