// stages/photometric.h: parameters outside torchvision's domain are refused by
// name, strides and empty images are honoured, and a few values worked by hand.
// tests/photometric_test.py holds every op to torchvision itself.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "catch_compat.h"

#include "stages/photometric.h"

using namespace conveyor;

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
