// The C++ half of tests/photometric_test.py: applies image/photometric.h's and
// image/affine.h's ops, and TrivialAugmentWide's and RandAugment's op for a
// given draw (image/auto_augment.h), to the images that script sends, so it
// can hold each to torchvision's.
//
//   photometric_ref IN OUT
// IN holds records, each a text line "OP WIDTH HEIGHT P1 P2 ..." (up to 16
// numbers) and then WIDTH * HEIGHT * 3 bytes of interleaved RGB8; OUT receives
// each record's image after the op, concatenated. Exits 1 with one line on a
// bad record.
//
//   photometric_ref --space SPACE BINS WIDTH HEIGHT
// prints "OP BIN MAGNITUDE" for every op and bin of the policy's augmentation
// space (SPACE 0: TrivialAugmentWide, 1: RandAugment).
//
//   photometric_ref --draws SPACE SAMPLES SEED BINS [NUM_OPS MAGNITUDE]
// prints "OP BIN NEGATIVE" for each op drawn for samples 0 .. SAMPLES-1 from
// Rng(SEED, 0, sample), as Augment::plan_pixels draws them.
//
//   photometric_ref --erase SAMPLES SEED HEIGHT WIDTH P SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX
// prints "TOP LEFT H W" for RandomErasing's rectangle of each sample 0 ..
// SAMPLES-1 drawn from Rng(SEED, 0, sample) (image/random_erasing.h), or
// "none" where it erases nothing.
//
//   photometric_ref --mix BATCHES SEED HEIGHT WIDTH MIXUP_ALPHA CUTMIX_ALPHA
// prints "mixup LAMBDA" or "cutmix LAMBDA X1 Y1 X2 Y2" for each batch 0 ..
// BATCHES-1 drawn from Rng(SEED, 0, batch) (image/mixing.h); an alpha of 0
// leaves that op out.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "image/affine.h"
#include "image/auto_augment.h"
#include "image/photometric.h"
#include "image/mixing.h"
#include "image/random_erasing.h"

using namespace conveyor;

namespace {

Fill fill_at(const std::vector<double>& p, std::size_t i) {
  return fill_bytes({p[i], p[i + 1], p[i + 2]});
}

// rotate: angle fill*3. affine: angle tx ty scale shear_x shear_y has_center cx cy fill*3.
// autoaugment: space op bin negative bins fill*3.
void apply(const std::string& op, const std::vector<double>& p, RgbView v, PhotometricScratch& scratch) {
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
  else if (op == "rotate") rotate(v, p[0], fill_at(p, 1), scratch);
  else if (op == "affine") {
    AffineParams a{p[0], p[1], p[2], p[3], p[4], p[5], std::nullopt};
    if (p[6] != 0) a.center = std::array<double, 2>{p[7], p[8]};
    affine(v, a, fill_at(p, 9), scratch);
  } else if (op == "autoaugment") {
    const auto space = AutoAugmentSpace(int(p[0]));
    const auto which = AutoAugmentOp(int(p[1]));
    double m = auto_augment_magnitude(space, which, int(p[2]), int(p[4]), {v.height, v.width});
    if (p[3] != 0 && is_signed(which)) m = -m;
    if (const auto pixel_op = auto_augment_pixel_op(which, m, fill_at(p, 5))) apply_pixel_ops({*pixel_op}, v, scratch);
  } else {
    throw std::invalid_argument("unknown op '" + op + "'");
  }
}

int space(int argc, char** argv) {
  if (argc != 6) return 2;
  const auto s = AutoAugmentSpace(std::atoi(argv[2]));
  const int bins = std::atoi(argv[3]);
  const Size image{std::atoi(argv[5]), std::atoi(argv[4])};
  for (int op = 0; op < kAutoAugmentOps; ++op) {
    for (int bin = 0; bin < bins; ++bin) {
      std::printf("%d %d %.17g\n", op, bin, auto_augment_magnitude(s, AutoAugmentOp(op), bin, bins, image));
    }
  }
  return 0;
}

int draws(int argc, char** argv) {
  if (argc != 6 && argc != 8) return 2;
  const bool rand_augment = std::atoi(argv[2]) == 1;
  const long samples = std::atol(argv[3]);
  const auto seed = std::strtoull(argv[4], nullptr, 10);
  TrivialAugmentWide ta;
  RandAugment ra;
  ta.num_magnitude_bins = ra.num_magnitude_bins = std::atoi(argv[5]);
  if (argc == 8) {
    ra.num_ops = std::atoi(argv[6]);
    ra.magnitude = std::atoi(argv[7]);
  }
  for (long i = 0; i < samples; ++i) {
    Rng rng(seed, 0, std::uint64_t(i));
    for (int k = 0; k < (rand_augment ? ra.num_ops : 1); ++k) {
      const AutoAugmentDraw d = rand_augment ? draw_rand_augment(ra, rng) : draw_trivial_augment(ta, rng);
      std::printf("%d %d %d\n", int(d.op), d.bin, d.negative ? 1 : 0);
    }
  }
  return 0;
}

int erase_boxes(int argc, char** argv) {
  if (argc != 11) return 2;
  const long samples = std::atol(argv[2]);
  const auto seed = std::strtoull(argv[3], nullptr, 10);
  const auto height = std::size_t(std::atol(argv[4])), width = std::size_t(std::atol(argv[5]));
  RandomErasing e;
  e.p = std::atof(argv[6]);
  e.scale = {std::atof(argv[7]), std::atof(argv[8])};
  e.ratio = {std::atof(argv[9]), std::atof(argv[10])};
  e.validate();
  for (long i = 0; i < samples; ++i) {
    Rng rng(seed, 0, std::uint64_t(i));
    if (const auto b = draw_erase_box(e, height, width, rng)) {
      std::printf("%u %u %u %u\n", b->top, b->left, b->height, b->width);
    } else {
      std::printf("none\n");
    }
  }
  return 0;
}

// N batches' mixing draws: "mixup LAMBDA" or "cutmix LAMBDA X1 Y1 X2 Y2".
// MIXUP_ALPHA or CUTMIX_ALPHA 0 leaves that op out.
int mix_draws(int argc, char** argv) {
  if (argc != 8) return 2;
  const long batches = std::atol(argv[2]);
  const auto seed = std::strtoull(argv[3], nullptr, 10);
  const auto height = std::size_t(std::atol(argv[4])), width = std::size_t(std::atol(argv[5]));
  BatchMixing m;
  if (const double a = std::atof(argv[6]); a > 0) m.mixup = MixUp{a};
  if (const double a = std::atof(argv[7]); a > 0) m.cutmix = CutMix{a};
  m.validate();
  for (long i = 0; i < batches; ++i) {
    Rng rng(seed, 0, std::uint64_t(i));
    const MixDraw d = draw_mix(m, height, width, rng);
    if (d.cutmix) {
      std::printf("cutmix %.17g %u %u %u %u\n", d.lambda, d.x1, d.y1, d.x2, d.y2);
    } else {
      std::printf("mixup %.17g\n", d.lambda);
    }
  }
  return 0;
}

int records(const char* in_path, const char* out_path) {
  std::ifstream in(in_path, std::ios::binary);
  std::ofstream out(out_path, std::ios::binary);
  if (!in || !out) {
    std::fprintf(stderr, "photometric_ref: cannot open %s or %s\n", in_path, out_path);
    return 1;
  }
  PhotometricScratch scratch;
  std::string header;
  for (int record = 0; std::getline(in, header); ++record) {
    std::istringstream h(header);
    std::string op;
    int w = 0, hgt = 0;
    std::vector<double> p;
    const bool sized = bool(h >> op >> w >> hgt);
    for (double v; h >> v;) p.push_back(v);
    if (!sized || !h.eof() || w < 1 || hgt < 1 || w > 8192 || hgt > 8192 || p.size() > 16) {
      std::fprintf(stderr, "photometric_ref: record %d: bad header '%s'\n", record, header.c_str());
      return 1;
    }
    std::vector<std::uint8_t> px(std::size_t(w) * std::size_t(hgt) * 3);
    if (!in.read(reinterpret_cast<char*>(px.data()), std::streamsize(px.size()))) {
      std::fprintf(stderr, "photometric_ref: record %d: image cut short\n", record);
      return 1;
    }
    try {
      p.resize(16, 0.0);
      apply(op, p, RgbView{px.data(), w, hgt, std::ptrdiff_t(w) * 3}, scratch);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "photometric_ref: record %d: %s\n", record, e.what());
      return 1;
    }
    out.write(reinterpret_cast<const char*>(px.data()), std::streamsize(px.size()));
  }
  return out ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int rc = 2;
  if (argc >= 2 && std::string(argv[1]) == "--space") rc = space(argc, argv);
  else if (argc >= 2 && std::string(argv[1]) == "--draws") rc = draws(argc, argv);
  else if (argc >= 2 && std::string(argv[1]) == "--erase") rc = erase_boxes(argc, argv);
  else if (argc >= 2 && std::string(argv[1]) == "--mix") rc = mix_draws(argc, argv);
  else if (argc == 3) rc = records(argv[1], argv[2]);
  if (rc == 2) std::fprintf(stderr, "usage: photometric_ref IN OUT | --space SPACE BINS W H | --draws SPACE N SEED BINS [OPS M] | "
                                "--erase N SEED H W P SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX | "
                                "--mix N SEED H W MIXUP_ALPHA CUTMIX_ALPHA\n");
  return rc;
}
