// image/photometric.h: parameters outside torchvision's domain are refused by
// name, strides and empty images are honoured, and a few values worked by hand.
// tests/photometric_test.py holds every op to torchvision itself.
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include "catch_compat.h"

#include "image_writers.h"
#include "pipeline/pipeline.h"
#include "image/affine.h"
#include "image/augment.h"
#include "image/auto_augment.h"
#include "image/decode.h"
#include "image/image_ops.h"
#include "image/image_source.h"
#include "image/photometric.h"
#include "temp_dir.h"
#include "data/files/image_folder.h"

using namespace conveyor;
namespace t = conveyor::test;

namespace {
struct Image {
  int w, h;
  std::ptrdiff_t stride;
  std::vector<std::uint8_t> px;
  Image(int width, int height, int pad = 0)
      : w(width), h(height), stride(std::ptrdiff_t(width) * 3 + pad), px(std::size_t(stride) * std::size_t(height), 0) {}
  RgbView view() { return {px.data(), w, h, stride}; }
  std::uint8_t* at(int x, int y) { return px.data() + std::ptrdiff_t(y) * stride + std::ptrdiff_t(x) * 3; }
};
}  // namespace

TEST_CASE("photometric ops refuse parameters outside torchvision's domain, naming the op and parameter", "[photometric]") {
  Image img(4, 4);
  PhotometricScratch scratch;
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  REQUIRE(message([&] { adjust_brightness(img.view(), -0.1); }) == "adjust_brightness: brightness_factor must be finite and >= 0");
  REQUIRE(message([&] { adjust_contrast(img.view(), 1.0 / 0.0); }) == "adjust_contrast: contrast_factor must be finite and >= 0");
  REQUIRE(message([&] { adjust_hue(img.view(), 0.51); }) == "adjust_hue: hue_factor must be in [-0.5, 0.5]");
  REQUIRE(message([&] { posterize(img.view(), 9); }) == "posterize: bits must be in [0, 8]");
  REQUIRE(message([&] { solarize(img.view(), 256); }) == "solarize: threshold must be in [0, 255]");
  REQUIRE(message([&] { gaussian_blur(img.view(), 4, 3, 1, 1, scratch); }) == "gaussian_blur: kernel_size must be odd, 1 .. 255");
  REQUIRE(message([&] { gaussian_blur(img.view(), 3, 3, 0, 1, scratch); }) == "gaussian_blur: sigma must be finite and > 0");
  REQUIRE(message([&] { gaussian_blur(img.view(), 9, 3, 1, 1, scratch); }) ==
          "gaussian_blur: kernel_size // 2 must be below the image's width and height (reflect padding)");
  REQUIRE(message([&] { invert(RgbView{nullptr, 2, 2, 6}); }) == "invert: no pixels, or a row stride shorter than width * 3");
  REQUIRE(message([&] { invert(RgbView{img.px.data(), 4, 4, 11}); }) == "invert: no pixels, or a row stride shorter than width * 3");
  // An empty image is nothing to do.
  REQUIRE_NOTHROW(adjust_contrast(RgbView{nullptr, 0, 0, 0}, 2));
  REQUIRE_NOTHROW(gaussian_blur(RgbView{nullptr, 0, 3, 0}, 3, 3, 1, 1, scratch));
}

TEST_CASE("photometric ops: values worked by hand, and row padding left alone", "[photometric]") {
  Image img(3, 3, 5);  // 5 bytes of padding after each row
  for (std::size_t i = 0; i < img.px.size(); ++i) img.px[i] = 0xEE;  // the padding's marker
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) {
      img.at(x, y)[0] = std::uint8_t(10 + 40 * x);
      img.at(x, y)[1] = std::uint8_t(100);
      img.at(x, y)[2] = std::uint8_t(200 - 30 * y);
    }
  }
  Image original = img;
  PhotometricScratch scratch;
  Image a = original;
  adjust_brightness(a.view(), 1.5);
  REQUIRE(a.at(0, 0)[0] == 15);   // 10 * 1.5
  REQUIRE(a.at(0, 0)[2] == 255);  // 300, clamped
  Image b = original;
  invert(b.view());
  REQUIRE(b.at(2, 1)[0] == 255 - 90);
  Image c = original;
  posterize(c.view(), 3);
  REQUIRE(c.at(1, 0)[0] == (50 & 0xE0));
  Image d = original;
  solarize(d.view(), 100);
  REQUIRE(d.at(0, 0)[0] == 10);       // below the threshold: kept
  REQUIRE(d.at(0, 0)[1] == 255 - 100);  // at it: inverted
  Image e = original;
  to_grayscale(e.view());
  // 0.2989 * 10 + 0.587 * 100 + 0.114 * 200 = 84.489, truncated
  REQUIRE((e.at(0, 0)[0] == 84 && e.at(0, 0)[1] == 84 && e.at(0, 0)[2] == 84));
  Image f = original;
  autocontrast(f.view());
  REQUIRE((f.at(0, 0)[0] == 0 && f.at(2, 0)[0] == 255));
  REQUIRE(f.at(1, 1)[1] == 100);  // a flat channel is left as it is
  Image g = original;
  adjust_sharpness(g.view(), 1.0, scratch);  // factor 1 is the identity
  adjust_hue(g.view(), 0.0);                  // and so is a zero hue turn, to the grey level
  Image h = original;
  gaussian_blur(h.view(), 1, 1, 1, 1, scratch);  // a 1-tap kernel is the identity
  for (Image* m : {&a, &b, &c, &d, &e, &f, &g, &h}) {
    for (int y = 0; y < 3; ++y) {
      for (std::size_t k = 9; k < 14; ++k) REQUIRE(m->px[std::size_t(y) * std::size_t(m->stride) + k] == 0xEE);
    }
  }
  REQUIRE(h.px == original.px);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) {
      for (int ch = 0; ch < 3; ++ch) REQUIRE(std::abs(int(g.at(x, y)[ch]) - int(original.at(x, y)[ch])) <= 1);
    }
  }
}

TEST_CASE("colour transforms: validated by name, after the geometric ones, described as torchvision writes them",
          "[photometric][augment]") {
  const auto error = [](std::vector<Transform> chain) {
    try {
      Augment a(std::move(chain));
    } catch (const AugmentError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const RandomResizedCrop rrc{{32, 32}};
  REQUIRE(error({ColorJitter{}, rrc}) ==
          "RandomResizedCrop: geometric transforms must come before the colour transforms (Conveyor applies those to "
          "the cropped output)");
  REQUIRE(error({rrc, RandomGrayscale{}, RandomHorizontalFlip{}}).starts_with("RandomHorizontalFlip: geometric"));
  ColorJitter bad;
  bad.hue_max = 0.6;
  REQUIRE(error({rrc, bad}) == "ColorJitter: hue must be a range -0.5 <= min <= max <= 0.5");
  bad = ColorJitter{};
  bad.brightness_min = -0.1;
  REQUIRE(error({rrc, bad}) == "ColorJitter: brightness must be a range 0 <= min <= max");
  REQUIRE(error({rrc, GaussianBlur{4, 3}}) == "GaussianBlur: kernel_size must be odd, 1 .. 255");
  REQUIRE(error({rrc, GaussianBlur{3, 3, 0, 1}}) == "GaussianBlur: sigma must be a range 0 < min <= max");
  REQUIRE(error({rrc, GaussianBlur{65, 3}}) ==
          "GaussianBlur: kernel_size // 2 must be below the output's width and height (reflect padding)");
  REQUIRE(error({rrc, RandomSolarize{300}}) == "RandomSolarize: threshold must be in [0, 255]");
  REQUIRE(error({rrc, RandomPosterize{9}}) == "RandomPosterize: bits must be in [0, 8]");
  REQUIRE(error({rrc, RandomEqualize{1.5}}) == "RandomEqualize: p must be in [0, 1]");
  REQUIRE_THROWS_WITH(color_jitter(0.4, -1), "ColorJitter: contrast must be finite and >= 0");
  REQUIRE_THROWS_WITH(color_jitter(0, 0, 0, 0.7), "ColorJitter: hue must be in [0, 0.5]");

  const ColorJitter j = color_jitter(0.4, 1.5, 0, 0.1);  // torchvision's scalar form
  REQUIRE((j.brightness_min == Approx(0.6) && j.brightness_max == Approx(1.4)));
  REQUIRE((j.contrast_min == 0 && j.contrast_max == 2.5));  // 1 - 1.5 clipped at 0
  REQUIRE((j.saturation_min == 1 && j.saturation_max == 1));
  REQUIRE((j.hue_min == -0.1 && j.hue_max == 0.1));
  const Augment a({rrc, RandomHorizontalFlip{}, j, RandomGrayscale{}, GaussianBlur{5, 5}});
  REQUIRE(a.has_pixel_ops());
  REQUIRE_FALSE(Augment({rrc}).has_pixel_ops());
  REQUIRE(a.describe() ==
          "RandomResizedCrop(32, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5) + "
          "ColorJitter(brightness=(0.6, 1.4), contrast=(0, 2.5), saturation=(1, 1), hue=(-0.1, 0.1)) + "
          "RandomGrayscale(p=0.1) + GaussianBlur(kernel_size=(5, 5), sigma=(0.1, 2))");
}

TEST_CASE("colour transforms: parameters drawn as torchvision draws them", "[photometric][augment]") {
  const Augment a({RandomResizedCrop{{32, 32}}, color_jitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale{0.2},
                   GaussianBlur{3, 3, 0.1, 2.0, 0.5}, RandomSolarize{128, 0.3}});
  using K = PixelOp::Kind;
  std::map<std::array<int, 4>, int> orders;
  std::map<K, int> count;
  std::map<K, double> sum, lo, hi;
  std::vector<PixelOp> ops;
  const int n = 24000;
  for (int i = 0; i < n; ++i) {
    Rng rng(3, 0, std::uint64_t(i));
    a.plan_pixels(rng, ops);
    std::array<int, 4> order{};
    int k = 0;
    for (const PixelOp& op : ops) {
      if (k < 4) order[std::size_t(k++)] = int(op.kind);
      ++count[op.kind];
      sum[op.kind] += op.value;
      lo[op.kind] = count[op.kind] == 1 ? op.value : std::min(lo[op.kind], op.value);
      hi[op.kind] = count[op.kind] == 1 ? op.value : std::max(hi[op.kind], op.value);
    }
    ++orders[order];
  }
  // ColorJitter: all four every time, in each of the 24 orders about equally often (randperm(4)).
  for (const K kind : {K::brightness, K::contrast, K::saturation, K::hue}) REQUIRE(count[kind] == n);
  REQUIRE(orders.size() == 24);
  for (const auto& [order, times] : orders) REQUIRE(std::abs(times - n / 24) < n / 24 / 5);
  // Each factor uniform over its range: the bounds reached and the mean at the centre.
  for (const K kind : {K::brightness, K::contrast, K::saturation}) {
    REQUIRE(lo[kind] >= 0.6);
    REQUIRE(hi[kind] <= 1.4);
    REQUIRE((lo[kind] < 0.61 && hi[kind] > 1.39));
    REQUIRE(sum[kind] / n == Approx(1.0).margin(0.01));
  }
  REQUIRE((lo[K::hue] >= -0.1 && hi[K::hue] <= 0.1 && sum[K::hue] / n == Approx(0).margin(0.003)));
  // The Random* ones with their p, the blur's sigma uniform over [0.1, 2].
  REQUIRE(double(count[K::grayscale]) / n == Approx(0.2).margin(0.01));
  REQUIRE(double(count[K::blur]) / n == Approx(0.5).margin(0.015));
  REQUIRE(sum[K::blur] / count[K::blur] == Approx(1.05).margin(0.02));
  REQUIRE(double(count[K::solarize]) / n == Approx(0.3).margin(0.015));
  // A chain without colour transforms draws nothing: its samples keep their bits.
  Rng used(3, 0, 7), fresh(3, 0, 7);
  Augment({RandomResizedCrop{{32, 32}}}).plan_pixels(used, ops);
  REQUIRE(ops.empty());
  REQUIRE(used.next_u64() == fresh.next_u64());
}

TEST_CASE("colour transforms through the pipeline: the same bytes for 1 and 3 workers, and as applied by hand",
          "[photometric][pipeline]") {
  test::TempDir dir;
  for (int i = 0; i < 12; ++i) {
    const t::Rgb img = t::photo_like(50 + 7 * i, 40 + 5 * i, std::uint64_t(i));
    dir.write("c/" + std::to_string(i) + ".jpg", t::jpeg(img, {i % 3 == 2 ? t::JpegKind::gray : t::JpegKind::baseline}));
  }
  const Dataset ds = dataset_from_folder(dir.path());
  ImageConfig cfg;
  cfg.transforms = {RandomResizedCrop{{24, 24}}, RandomHorizontalFlip{}, color_jitter(0.4, 0.4, 0.4, 0.1),
                    RandomGrayscale{0.2}, GaussianBlur{3, 3}, RandomEqualize{0.3}, TrivialAugmentWide{},
                    RandAugment{2, 9, 31, {128, 128, 128}}};
  const auto run = [&](std::size_t workers) {
    ImageSource src(ds, cfg, workers);
    Config c;
    c.batch_size = 5;
    c.sample_bytes = src.sample_bytes();
    c.workers = workers;
    c.epochs = 2;
    c.seed = 9;
    Pipeline p(c, ds.size(), {src.filler()});
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::byte>> out;
    while (auto b = p.next()) {
      for (std::size_t j = 0; j < (*b)->size(); ++j) {
        const auto s = (*b)->sample(j);
        out[{(*b)->epoch, (*b)->indices[j]}].assign(s.begin(), s.end());
      }
    }
    return out;
  };
  const auto one = run(1), three = run(3);
  REQUIRE(one.size() == 24);
  REQUIRE(one == three);
  // By hand: plan, decode, render, then the drawn ops; the pipeline gives the same bits.
  ImageSource src(ds, cfg, 1);
  const SampleReader& reader = src.reader();
  const Augment augment(cfg.transforms);
  ImageDecoder dec;
  ResizeScratch scratch;
  PhotometricScratch photometric;
  std::vector<PixelOp> ops;
  int coloured = 0;
  for (std::uint64_t i = 0; i < ds.size(); ++i) {
    std::vector<unsigned char> file, got(src.sample_bytes()), want(src.sample_bytes());
    reader.read(i, file);
    Rng r1(4, 1, i), r2(4, 1, i);
    src.render_sample(i, r1, got, 0);
    const ImageInfo info = dec.open(file);
    const Geometry g = augment.plan(info.width, info.height, r2);
    augment.plan_pixels(r2, ops);
    coloured += !ops.empty();
    const DecodeRequest req = decode_request(g, info.width, info.height);
    render(dec.decode(req.region, req.min_scale), g, info.width, info.height, 0, want, scratch);
    apply_pixel_ops(ops, RgbView{want.data(), 24, 24, 24 * 3}, photometric);
    REQUIRE(got == want);
  }
  REQUIRE(coloured == int(ds.size()));  // ColorJitter draws every time
}

TEST_CASE("affine ops: shifts, half and quarter turns worked by hand, fill, and row padding left alone", "[photometric]") {
  Image src(5, 3, 2);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) {
      for (int c = 0; c < 3; ++c) src.at(x, y)[c] = std::uint8_t(100 + 10 * y + x + 50 * c);
    }
  }
  for (std::size_t i = 15; i < src.px.size(); i += std::size_t(src.stride)) src.px[i] = src.px[i + 1] = 7;  // padding
  PhotometricScratch scratch;
  const Fill fill{1, 2, 3};
  // translate=[2, -1]: output (x, y) is input (x - 2, y + 1), else the fill.
  Image img = src;
  AffineParams shift;
  shift.translate_x = 2;
  shift.translate_y = -1;
  affine(img.view(), shift, fill, scratch);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) {
      const bool inside = x - 2 >= 0 && y + 1 < 3;
      for (int c = 0; c < 3; ++c) REQUIRE(img.at(x, y)[c] == (inside ? src.at(x - 2, y + 1)[c] : fill[std::size_t(c)]));
    }
  }
  for (std::size_t i = 15; i < img.px.size(); i += std::size_t(img.stride)) REQUIRE((img.px[i] == 7 && img.px[i + 1] == 7));
  // 180 degrees about the centre of an odd-sized image: every pixel from its mirror, no fill.
  img = src;
  rotate(img.view(), 180, fill, scratch);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) REQUIRE(img.at(x, y)[0] == src.at(4 - x, 2 - y)[0]);
  }
  // 90 degrees counter-clockwise on a 3x3: output (x, y) from input (2 - y, x).
  Image sq(3, 3);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) sq.at(x, y)[0] = std::uint8_t(3 * y + x);
  }
  Image turned = sq;
  rotate(turned.view(), 90, fill, scratch);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) REQUIRE(turned.at(x, y)[0] == sq.at(2 - y, x)[0]);
  }
  REQUIRE_THROWS_WITH(rotate(img.view(), std::nan(""), fill, scratch), "rotate: angle must be finite");
  AffineParams bad;
  bad.scale = 0;
  REQUIRE_THROWS_WITH(affine(img.view(), bad, fill, scratch), "affine: scale must be finite and > 0");
}

TEST_CASE("policies: each op as torchvision's _apply_op calls it, drawn from the sample's Rng alone", "[photometric][augment]") {
  using K = PixelOp::Kind;
  using Op = AutoAugmentOp;
  const Fill f{9, 8, 7};
  // Colour factors are 1 + m; shear goes through degrees(atan(m)); translate and posterize truncate.
  REQUIRE(auto_augment_pixel_op(Op::brightness, -0.25, f)->value == 0.75);
  REQUIRE(auto_augment_pixel_op(Op::color, 0.5, f)->kind == K::saturation);
  REQUIRE(auto_augment_pixel_op(Op::shear_x, 1.0, f)->value == Approx(45.0));
  REQUIRE(auto_augment_pixel_op(Op::translate_y, -3.9, f)->value == -3.0);
  REQUIRE(auto_augment_pixel_op(Op::rotate, 12.5, f)->fill == f);
  REQUIRE(!auto_augment_pixel_op(Op::identity, 0, f));
  // The tables' ends: TrivialAugmentWide's wider ranges, RandAugment's translate by the image's size.
  const Size image{100, 331};
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::trivial_augment_wide, Op::rotate, 30, 31, image) == 135.0);
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::rand_augment, Op::rotate, 30, 31, image) == 30.0);
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::rand_augment, Op::translate_x, 30, 31, image) == 150.0);
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::trivial_augment_wide, Op::posterize, 30, 31, image) == 2.0);
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::rand_augment, Op::posterize, 30, 31, image) == 4.0);
  REQUIRE(auto_augment_magnitude(AutoAugmentSpace::rand_augment, Op::solarize, 0, 31, image) == 255.0);
  // One sample's key gives one list of ops; RandAugment draws num_ops ops (identity adds none).
  const Augment ta({CenterCrop{{16, 16}}, TrivialAugmentWide{}}), ra({CenterCrop{{16, 16}}, RandAugment{3, 9, 31, {}}});
  REQUIRE((ta.has_pixel_ops() && ra.has_pixel_ops()));  // so their samples stay off the GPU decoder
  std::vector<PixelOp> first, again;
  int drawn = 0;
  for (std::uint64_t i = 0; i < 200; ++i) {
    Rng a(5, 2, i), b(5, 2, i);
    ra.plan_pixels(a, first);
    ra.plan_pixels(b, again);
    REQUIRE(first.size() == again.size());
    for (std::size_t k = 0; k < first.size(); ++k) REQUIRE((first[k].kind == again[k].kind && first[k].value == again[k].value));
    REQUIRE(first.size() <= 3);
    drawn += int(first.size());
  }
  REQUIRE((drawn > 500 && drawn < 600));  // 3 ops a sample, 1 in 14 of them identity
}
