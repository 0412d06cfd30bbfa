// Augment: crop boxes for every image shape, torchvision parameter semantics,
// flips, validation, and the pixel ops that render a box into a slot.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "catch_compat.h"

#include "image/augment.h"
#include "image/image_ops.h"

using namespace conveyor;

namespace {

const std::vector<std::pair<int, int>> kShapes = {{1, 1},     {2, 3},     {3, 2},    {4000, 40}, {40, 4000},
                                                  {224, 224}, {500, 375}, {375, 500}, {7, 10000}, {31, 33}};

bool inside(const Geometry& g, int w, int h) {
  const double eps = 1e-9;
  return g.x0 >= -eps && g.y0 >= -eps && g.x1 <= w + eps && g.y1 <= h + eps && g.x1 > g.x0 && g.y1 > g.y0;
}

}  // namespace

TEST_CASE("augment: RandomResizedCrop boxes stay inside any image", "[augment]") {
  const Augment a({RandomResizedCrop{{224, 224}}, RandomHorizontalFlip{}});
  REQUIRE(a.output() == Size{224, 224});
  for (auto [w, h] : kShapes) {
    for (std::uint64_t i = 0; i < 2000; ++i) {
      Rng rng(1, 0, i);
      const Geometry g = a.plan(w, h, rng);
      INFO(w << "x" << h << " sample " << i);
      REQUIRE(inside(g, w, h));
      REQUIRE(g.out == Size{224, 224});
    }
  }
}

TEST_CASE("augment: Resize then CenterCrop stays inside, CenterCrop alone pads small images", "[augment]") {
  const Augment val({Resize{256}, CenterCrop{{224, 224}}});
  const Augment crop_only({CenterCrop{{224, 224}}});
  for (auto [w, h] : kShapes) {
    Rng rng(1, 0, 0);
    INFO(w << "x" << h);
    const Geometry g = val.plan(w, h, rng);
    REQUIRE(inside(g, w, h));
    // Centred: equal margins on both sides (within a rounding pixel of the resized image).
    REQUIRE(std::abs(g.x0 - (w - g.x1)) <= double(w) / 256 * 1.01 + 1e-9);
    const Geometry c = crop_only.plan(w, h, rng);
    REQUIRE(c.x1 - c.x0 == Approx(224));
    REQUIRE(c.y1 - c.y0 == Approx(224));
    if (w >= 224 && h >= 224) REQUIRE(inside(c, w, h));
    if (w < 224) REQUIRE(c.x0 < 0);
  }
  // torchvision: Resize(256) of 500x375 gives 341x256; CenterCrop(224) takes left = round(58.5) = 58 (half to even).
  Rng rng(1, 0, 0);
  const Geometry g = val.plan(500, 375, rng);
  REQUIRE(g.x0 == Approx(58 * 500.0 / 341));
  REQUIRE(g.x1 - g.x0 == Approx(224 * 500.0 / 341));
  REQUIRE(g.y0 == Approx(16 * 375.0 / 256));
  // Larger than the image, torchvision pads (crop - size) // 2 before: 97x61 to 100x64 starts at
  // (-1, -1). round(-1.5) = -2 put the image a pixel off whenever crop - size was 3 mod 4.
  const Augment pad({CenterCrop{{64, 100}}});
  const Geometry p = pad.plan(97, 61, rng);
  CHECK(p.x0 == -1);
  CHECK(p.y0 == -1);
  const Geometry mixed = pad.plan(97, 70, rng);  // pads across, crops down: round((70 - 64) / 2) = 3
  CHECK(mixed.x0 == -1);
  CHECK(mixed.y0 == 3);
  CHECK(pad.plan(93, 57, rng).x0 == -3);  // 7 // 2 = 3, not round(-3.5) = -4
}

TEST_CASE("augment: RandomResizedCrop draws scale and ratio in range", "[augment]") {
  const RandomResizedCrop t{{64, 64}, 0.25, 0.5, 0.5, 2.0};
  const Augment a({t});
  const int w = 1000, h = 800;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    Rng rng(9, 1, i);
    const Geometry g = a.plan(w, h, rng);
    const double area = (g.x1 - g.x0) * (g.y1 - g.y0) / (double(w) * h);
    const double ratio = (g.x1 - g.x0) / (g.y1 - g.y0);
    // Sizes are rounded to whole pixels, so allow a pixel's worth.
    REQUIRE(area >= 0.25 - 0.01);
    REQUIRE(area <= 0.5 + 0.01);
    REQUIRE(ratio >= 0.5 * 0.98);
    REQUIRE(ratio <= 2.0 * 1.02);
    REQUIRE(g.x0 == std::floor(g.x0));  // integer crop offsets, as torchvision
  }
}

TEST_CASE("augment: RandomResizedCrop falls back to a clamped central crop", "[augment]") {
  // A 4000x40 image cannot hold a 3/4..4/3 crop of 8%..100% area in 10 tries: the fallback is
  // the central crop with the ratio clamped to 4/3: h = 40, w = round(40 * 4/3) = 53.
  const Augment a({RandomResizedCrop{{32, 32}, 0.5, 1.0}});
  Rng rng(1, 0, 0);
  const Geometry g = a.plan(4000, 40, rng);
  REQUIRE(g.x1 - g.x0 == Approx(53));
  REQUIRE(g.y1 - g.y0 == Approx(40));
  REQUIRE(g.x0 == Approx((4000 - 53) / 2));
}

TEST_CASE("augment: RandomCrop with padding covers offsets -pad..+pad", "[augment]") {
  const Augment a({RandomCrop{{32, 32}, 4, 4, 4, 4}, RandomHorizontalFlip{}});
  std::vector<int> seen(9, 0);
  for (std::uint64_t i = 0; i < 3000; ++i) {
    Rng rng(2, 0, i);
    const Geometry g = a.plan(32, 32, rng);
    REQUIRE(g.x1 - g.x0 == Approx(32));
    REQUIRE(g.x0 >= -4);
    REQUIRE(g.x0 <= 4);
    ++seen[std::size_t(g.x0 + 4)];
  }
  for (int c : seen) REQUIRE(c > 0);
  // Too small without padding: a clear error. pad_if_needed pads instead.
  Rng rng(1, 0, 0);
  const Augment strict({RandomCrop{{32, 32}}});
  REQUIRE_THROWS_WITH(strict.plan(1, 1, rng), Catch::Contains("smaller than 32"));
  const Augment lenient({RandomCrop{{32, 32}, 0, 0, 0, 0, true}});
  const Geometry g = lenient.plan(1, 1, rng);
  REQUIRE(g.x1 - g.x0 == Approx(32));
}

TEST_CASE("augment: flip probability and determinism", "[augment]") {
  const Augment never({CenterCrop{{8, 8}}, RandomHorizontalFlip{0}});
  const Augment always({CenterCrop{{8, 8}}, RandomHorizontalFlip{1}});
  const Augment half({RandomResizedCrop{{8, 8}}, RandomHorizontalFlip{0.5}});
  int flips = 0;
  for (std::uint64_t i = 0; i < 4000; ++i) {
    Rng r1(3, 0, i), r2(3, 0, i), r3(3, 0, i), r4(3, 0, i);
    REQUIRE_FALSE(never.plan(64, 48, r1).flip);
    REQUIRE(always.plan(64, 48, r2).flip);
    const Geometry a = half.plan(64, 48, r3), b = half.plan(64, 48, r4);
    REQUIRE(a.x0 == b.x0);  // same stream, same parameters
    REQUIRE(a.flip == b.flip);
    flips += a.flip;
  }
  REQUIRE(flips > 1800);
  REQUIRE(flips < 2200);
  // A flip before a crop mirrors where the crop lands.
  const Augment flip_then_crop({RandomHorizontalFlip{1}, CenterCrop{{10, 10}}, Resize{0, {10, 10}}});
  Rng rng(1, 0, 0);
  const Geometry g = flip_then_crop.plan(30, 10, rng);
  REQUIRE(g.flip);
  REQUIRE(g.x0 == Approx(10));
}

TEST_CASE("augment: vertical flip probability, determinism and where it folds", "[augment]") {
  const Augment never({CenterCrop{{8, 8}}, RandomVerticalFlip{0}});
  const Augment always({CenterCrop{{8, 8}}, RandomVerticalFlip{1}});
  const Augment both({RandomResizedCrop{{8, 8}}, RandomHorizontalFlip{0.5}, RandomVerticalFlip{0.5}});
  int vflips = 0, together = 0;
  for (std::uint64_t i = 0; i < 4000; ++i) {
    Rng r1(3, 0, i), r2(3, 0, i), r3(3, 0, i), r4(3, 0, i);
    REQUIRE_FALSE(never.plan(64, 48, r1).vflip);
    const Geometry up = always.plan(64, 48, r2);
    REQUIRE((up.vflip && !up.flip && up.y0 == 20 && up.y1 == 28));  // the box itself stays top down
    const Geometry a = both.plan(64, 48, r3), b = both.plan(64, 48, r4);
    REQUIRE((a.x0 == b.x0 && a.y0 == b.y0 && a.flip == b.flip && a.vflip == b.vflip));  // same stream, same draws
    REQUIRE(inside(a, 64, 48));
    vflips += a.vflip;
    together += a.vflip && a.flip;
  }
  REQUIRE((vflips > 1800 && vflips < 2200));
  REQUIRE((together > 800 && together < 1200));  // the two draws are independent
  // torchvision's CenterCrop(6) of 11 rows starts at round(2.5) = 2: rows [2, 8)
  // of the flipped image are the source's rows [3, 9), upside down.
  const Augment flip_then_crop({RandomVerticalFlip{1}, CenterCrop{{6, 6}}});
  Rng rng(1, 0, 0);
  const Geometry g = flip_then_crop.plan(6, 11, rng);
  REQUIRE((g.vflip && g.y0 == 3 && g.y1 == 9));
  // A resize after the flip reads the whole (flipped) image: its window is the image.
  const Geometry r = Augment({RandomVerticalFlip{1}, Resize{0, {10, 10}}}).plan(20, 30, rng);
  REQUIRE((r.vflip && r.window.v0 == 0 && r.window.v1 == 30 && r.y0 == 0 && r.y1 == 30));
  REQUIRE(Augment({CenterCrop{{8, 8}}, RandomVerticalFlip{}}).describe() == "CenterCrop(8) + RandomVerticalFlip(0.5)");
  REQUIRE_THROWS_WITH(Augment({CenterCrop{{8, 8}}, RandomVerticalFlip{1.5}}), "RandomVerticalFlip: p must be in [0, 1]");
}

TEST_CASE("augment: invalid chains name the transform", "[augment]") {
  REQUIRE_THROWS_AS(Augment({}), AugmentError);
  REQUIRE_THROWS_WITH(Augment({Resize{256}}), Catch::Contains("output size depends on the image"));
  REQUIRE_THROWS_WITH(Augment({RandomResizedCrop{{224, 224}, 0.5, 0.1}}), Catch::Contains("RandomResizedCrop: scale"));
  REQUIRE_THROWS_WITH(Augment({RandomResizedCrop{{224, 224}, 0.1, 1, 2, 1}}), Catch::Contains("ratio"));
  REQUIRE_THROWS_WITH(Augment({CenterCrop{{0, 3}}}), Catch::Contains("CenterCrop: size"));
  REQUIRE_THROWS_WITH(Augment({RandomCrop{{3, 3}, -1}}), Catch::Contains("padding"));
  REQUIRE_THROWS_WITH(Augment({CenterCrop{{3, 3}}, RandomHorizontalFlip{1.5}}), Catch::Contains("p must be"));
  // Past kMaxCrop the canvas's int arithmetic overflowed (a zero-width box, a false "add padding").
  REQUIRE_THROWS_WITH(Augment({RandomResizedCrop{{kMaxCrop + 1, 224}}}), Catch::Contains("at most 16384"));
  REQUIRE_THROWS_WITH(Augment({Resize{2000000000}, CenterCrop{{224, 224}}}), Catch::Contains("Resize: shorter side"));
  REQUIRE_THROWS_WITH(Augment({RandomCrop{{224, 224}, 1500000000, 0, 1500000000, 0}}),
                      Catch::Contains("padding must be at most"));
  REQUIRE_THROWS_WITH(Augment({RandomResizedCrop{{224, 224}, 0.08, 1, 0.75, std::numeric_limits<double>::infinity()}}),
                      Catch::Contains("ratio"));
  REQUIRE_NOTHROW(Augment({RandomResizedCrop{{kMaxCrop, kMaxCrop}}}));
  REQUIRE(Augment({RandomResizedCrop{{224, 224}}, RandomHorizontalFlip{}}).describe() ==
          "RandomResizedCrop(224, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5)");
}

TEST_CASE("image ops: a resize reads the crop it resizes, as torchvision's crop-then-resize does",
          "[augment][ops]") {
  // A 60x80 image: random pixels inside the 40x50 centre, and outside it either
  // black or white. CenterCrop(50x40) -> Resize(25x20) resizes the crop alone
  // (torchvision cuts, then resizes what is left), so the outside cannot show;
  // a whole decoded PNG let the filter read it (up to 24 levels at the edges),
  // a region-decoded JPEG did not. Resize -> CenterCrop resizes the whole image
  // first, so there the pixels just outside the crop do count.
  const int w = 60, h = 80;
  Rng fill(5, 0, 0);
  std::vector<unsigned char> random(std::size_t(w) * h * 3);
  for (auto& b : random) b = (unsigned char)fill.below(256);
  // The random pixels inside [x0, x1) x [y0, y1), `outside` elsewhere.
  const auto image = [&](int x0, int y0, int x1, int y1, unsigned char outside) {
    std::vector<unsigned char> img = random;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        if (x < x0 || x >= x1 || y < y0 || y >= y1) std::fill_n(&img[(std::size_t(y) * w + x) * 3], 3, outside);
    return img;
  };
  const auto run = [&](const Augment& a, const std::vector<unsigned char>& img) {
    Rng rng(1, 0, 0);
    const Geometry g = a.plan(w, h, rng);
    const DecodedView v{img.data(), w, h, w * 3};
    ResizeScratch scratch;
    std::vector<unsigned char> out(std::size_t(g.out.width) * g.out.height * 3);
    render(v, g, w, h, 0, out, scratch);
    return out;
  };
  // The crop: x [10, 50), y [15, 65).
  const Augment crop_then_resize({CenterCrop{{50, 40}}, Resize{0, {25, 20}}});
  CHECK(run(crop_then_resize, image(10, 15, 50, 65, 0)) == run(crop_then_resize, image(10, 15, 50, 65, 255)));
  // Halved to 30x40, then its centre 20x24: source x [10, 50), y [16, 64); the filter reaches past it.
  const Augment shrink_then_crop({Resize{0, {40, 30}}, CenterCrop{{24, 20}}});
  CHECK(run(shrink_then_crop, image(10, 16, 50, 64, 0)) != run(shrink_then_crop, image(10, 16, 50, 64, 255)));
  // RandomResizedCrop is a crop then a resize: whatever the draw, its box is its window.
  const Augment rrc({RandomResizedCrop{{24, 24}}});
  for (std::uint64_t i = 0; i < 50; ++i) {
    Rng rng(2, 0, i);
    const Geometry g = rrc.plan(w, h, rng);
    CHECK((g.window.u0 == g.x0 && g.window.u1 == g.x1 && g.window.v0 == g.y0 && g.window.v1 == g.y1));
  }
}

TEST_CASE("image ops: render copies, pads, flips exactly", "[augment][ops]") {
  // A 6x4 image whose pixel (x, y) holds (x, y, x + 10 y).
  const int w = 6, h = 4;
  std::vector<unsigned char> img(w * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      unsigned char* p = &img[(y * w + x) * 3];
      p[0] = (unsigned char)x;
      p[1] = (unsigned char)y;
      p[2] = (unsigned char)(x + 10 * y);
    }
  DecodedView v{img.data(), w, h, w * 3};
  ResizeScratch scratch;
  // Pixel for pixel with padding: box [-1, 3) x [1, 4) of a 4x3 output.
  Geometry g{-1, 1, 3, 4, {3, 4}, false};
  std::vector<unsigned char> out(4 * 3 * 3, 0xAB);
  render(v, g, w, h, 7, out, scratch);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) {
      const unsigned char* p = &out[(y * 4 + x) * 3];
      if (x == 0) {
        REQUIRE((p[0] == 7 && p[1] == 7 && p[2] == 7));
      } else {
        REQUIRE((p[0] == x - 1 && p[1] == y + 1 && p[2] == (x - 1) + 10 * (y + 1)));
      }
    }
  // The flip is the exact mirror of the unflipped output.
  std::vector<unsigned char> flipped(out.size());
  g.flip = true;
  render(v, g, w, h, 7, flipped, scratch);
  flip_rows(out, 3, 4);
  REQUIRE(flipped == out);
  // A resized box stays within the source's value range and fills every pixel.
  Geometry down{0, 0, 6, 4, {2, 3}, false};
  std::vector<unsigned char> small(2 * 3 * 3, 0xFF);
  render(v, down, w, h, 0, small, scratch);
  for (int i = 0; i < 6; ++i) REQUIRE(small[i * 3] <= 5);
  // Flipped resizes mirror the unflipped ones: full width (the flip folded into
  // the resize) and with padding at the sides (flipped as a second pass).
  for (Geometry box : {Geometry{0.5, 0, 5.5, 4, {3, 2}, false}, Geometry{-1.5, 0.25, 6.5, 3.5, {5, 3}, false}}) {
    const std::size_t n = std::size_t(box.out.width) * box.out.height * 3;
    std::vector<unsigned char> plain(n), mirror(n);
    render(v, box, w, h, 9, plain, scratch);
    box.flip = true;
    render(v, box, w, h, 9, mirror, scratch);
    flip_rows(plain, box.out.height, box.out.width);
    REQUIRE(mirror == plain);
  }
}

TEST_CASE("image ops: a vertical flip renders the exact upside-down output", "[augment][ops]") {
  const int w = 7, h = 5;
  std::vector<unsigned char> img(w * h * 3);
  for (std::size_t i = 0; i < img.size(); ++i) img[i] = (unsigned char)(i * 37 % 251);
  DecodedView v{img.data(), w, h, w * 3};
  ResizeScratch scratch;
  // Pixel for pixel with padding below, a resize, a padded resize, and both flips.
  for (Geometry box : {Geometry{1, 2, 5, 6, {4, 4}, false}, Geometry{0.5, 0, 6.5, 5, {3, 4}, false},
                       Geometry{-1.5, 0.25, 7.5, 6.5, {5, 3}, true}}) {
    const std::size_t n = std::size_t(box.out.width) * box.out.height * 3;
    std::vector<unsigned char> plain(n), upside_down(n);
    render(v, box, w, h, 9, plain, scratch);
    box.vflip = true;
    render(v, box, w, h, 9, upside_down, scratch);
    flip_vertical(plain, box.out.height, box.out.width);
    REQUIRE(upside_down == plain);
  }
  // Rows reversed, each row's pixels kept: (x, y) goes to (x, h - 1 - y).
  std::vector<unsigned char> copy = img;
  flip_vertical(copy, h, w);
  for (int y = 0; y < h; ++y) {
    REQUIRE(std::equal(copy.begin() + y * w * 3, copy.begin() + (y + 1) * w * 3, img.begin() + (h - 1 - y) * w * 3));
  }
}

TEST_CASE("image ops: float CHW normalize matches the plain formula", "[ops]") {
  std::vector<unsigned char> hwc(5 * 3 * 3);
  for (std::size_t i = 0; i < hwc.size(); ++i) hwc[i] = (unsigned char)(i * 17);
  const Normalize n;
  std::vector<float> chw(hwc.size());
  to_float_chw(hwc, 3, 5, NormalizeTable(n), chw);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 15; ++i) {
      const double want = (hwc[i * 3 + c] / 255.0 - n.mean[c]) / n.std[c];
      REQUIRE(chw[c * 15 + i] == Approx(want).margin(1e-5));
    }
}

namespace {

// The triangle filter of image/resize.cpp in double precision, one axis at a
// time, without fixed point or padding: what resize_triangle must equal to
// within the rounding of its 14-bit weights and 8-bit intermediate fraction.
std::vector<double> reference_weights(double start, double end, int in_size, int out_size, int o, int& lo) {
  const double scale = (end - start) / out_size, support = std::max(1.0, scale);
  const int max_taps = int(std::ceil(support)) * 2 + 1;
  const double centre = start + (o + 0.5) * scale;
  lo = std::max(0, int(std::floor(centre - support)));
  const int hi = std::min({in_size - 1, int(std::ceil(centre + support)), lo + max_taps - 1});
  std::vector<double> w;
  double sum = 0;
  for (int i = lo; i <= hi; ++i) {
    w.push_back(std::max(0.0, 1 - std::abs((i + 0.5 - centre) / support)));
    sum += w.back();
  }
  if (sum <= 0) return {1.0};
  for (auto& x : w) x /= sum;
  return w;
}

}  // namespace

TEST_CASE("resize_triangle equals a double-precision triangle filter within one level", "[augment][resize]") {
  // Boxes that shrink by 1x to 6x (every fixed tap count: 3, 5, 7, 9, and the
  // generic loop beyond), enlarge, and touch every edge, over random pixels.
  Rng rng(7, 0, 0);
  ResizeScratch scratch;
  int worst = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int w = 20 + int(rng.next_u64() % 300), h = 20 + int(rng.next_u64() % 300);
    std::vector<unsigned char> img(std::size_t(w) * h * 3);
    for (auto& p : img) p = (unsigned char)(rng.next_u64() & 255);
    const double u0 = rng.uniform() * w * 0.5, v0 = rng.uniform() * h * 0.5;
    const double u1 = u0 + (w - u0) * (0.2 + 0.8 * rng.uniform()), v1 = v0 + (h - v0) * (0.2 + 0.8 * rng.uniform());
    const int ow = 4 + int(rng.next_u64() % 64), oh = 4 + int(rng.next_u64() % 64);
    std::vector<unsigned char> out(std::size_t(ow) * oh * 3);
    resize_triangle(img.data(), w, h, w * 3, u0, v0, u1, v1, out.data(), ow, oh, ow * 3, scratch);
    // Mirrored, into rows with guard bytes between them: the same pixels right
    // to left, and not one byte written outside the pixels.
    const std::ptrdiff_t guarded = std::ptrdiff_t(ow) * 3 + 5;
    std::vector<unsigned char> mirrored(std::size_t(guarded) * oh + 5, 0xEE);
    resize_triangle(img.data(), w, h, w * 3, u0, v0, u1, v1, mirrored.data(), ow, oh, guarded, scratch, true);
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox)
        for (int c = 0; c < 3; ++c)
          REQUIRE(mirrored[std::size_t(oy * guarded + (ow - 1 - ox) * 3 + c)] == out[(std::size_t(oy) * ow + ox) * 3 + c]);
      for (int g = 0; g < 5; ++g) REQUIRE(mirrored[std::size_t(oy * guarded + ow * 3 + g)] == 0xEE);
    }
    for (int oy = 0; oy < oh; ++oy) {
      int ylo = 0;
      const auto wy = reference_weights(v0, v1, h, oh, oy, ylo);
      for (int ox = 0; ox < ow; ++ox) {
        int xlo = 0;
        const auto wx = reference_weights(u0, u1, w, ow, ox, xlo);
        for (int c = 0; c < 3; ++c) {
          double v = 0;
          for (std::size_t j = 0; j < wy.size(); ++j)
            for (std::size_t i = 0; i < wx.size(); ++i)
              v += wy[j] * wx[i] * img[(std::size_t(ylo + int(j)) * w + std::size_t(xlo + int(i))) * 3 + c];
          const int got = out[(std::size_t(oy) * ow + ox) * 3 + c];
          worst = std::max(worst, std::abs(got - int(std::lround(v))));
        }
      }
    }
  }
  REQUIRE(worst <= 1);
}
