// The C++ half of tests/photometric_test.py: applies image/photometric.h's
// ops to the images that script sends, so it can hold each to torchvision's.
//
//   photometric_ref IN OUT
// IN holds records, each a text line "OP WIDTH HEIGHT P1 P2 P3 P4\n" and then
// WIDTH * HEIGHT * 3 bytes of interleaved RGB8; OUT receives each record's
// image after the op, concatenated. Exits 1 with one line on a bad record.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "image/photometric.h"

using namespace conveyor;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: photometric_ref IN OUT\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::ofstream out(argv[2], std::ios::binary);
  if (!in || !out) {
    std::fprintf(stderr, "photometric_ref: cannot open %s or %s\n", argv[1], argv[2]);
    return 1;
  }
  PhotometricScratch scratch;
  std::string header;
  for (int record = 0; std::getline(in, header); ++record) {
    std::istringstream h(header);
    std::string op;
    int w = 0, hgt = 0;
    double p[4] = {0, 0, 0, 0};
    if (!(h >> op >> w >> hgt >> p[0] >> p[1] >> p[2] >> p[3]) || w < 1 || hgt < 1 || w > 8192 || hgt > 8192) {
      std::fprintf(stderr, "photometric_ref: record %d: bad header '%s'\n", record, header.c_str());
      return 1;
    }
    std::vector<std::uint8_t> px(std::size_t(w) * std::size_t(hgt) * 3);
    if (!in.read(reinterpret_cast<char*>(px.data()), std::streamsize(px.size()))) {
      std::fprintf(stderr, "photometric_ref: record %d: image cut short\n", record);
      return 1;
    }
    const RgbView v{px.data(), w, hgt, std::ptrdiff_t(w) * 3};
    try {
      if (op == "brightness") adjust_brightness(v, p[0]);
      else if (op == "contrast") adjust_contrast(v, p[0]);
      else if (op == "saturation") adjust_saturation(v, p[0]);
      else if (op == "hue") adjust_hue(v, p[0]);
      else if (op == "grayscale") to_grayscale(v);
      else if (op == "solarize") solarize(v, p[0]);
      else if (op == "posterize") posterize(v, int(p[0]));
      else if (op == "autocontrast") autocontrast(v);
      else if (op == "equalize") equalize(v);
      else if (op == "invert") invert(v);
      else if (op == "sharpness") adjust_sharpness(v, p[0], scratch);
      else if (op == "blur") gaussian_blur(v, int(p[0]), int(p[1]), p[2], p[3], scratch);
      else throw std::invalid_argument("unknown op '" + op + "'");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "photometric_ref: record %d: %s\n", record, e.what());
      return 1;
    }
    out.write(reinterpret_cast<const char*>(px.data()), std::streamsize(px.size()));
  }
  return out ? 0 : 1;
}
