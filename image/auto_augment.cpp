#include "image/auto_augment.h"

#include <cmath>
#include <numbers>

namespace conveyor {
namespace {

using Op = AutoAugmentOp;

// torch.linspace(start, end, steps)[i] in float32: from the start below the
// halfway point, from the end above it (RangeFactoriesKernel's scalar path).
double linspace(float start, float end, int steps, int i) {
  const float step = (end - start) / float(steps - 1);
  if (i < steps / 2) return double(start + step * float(i));
  return double(end - step * float(steps - i - 1));
}

// 8 - (torch.arange(bins) / ((bins - 1) / levels)).round().int(), as float32.
double posterize_bits(int bin, int bins, double levels) {
  const float divisor = float((bins - 1) / levels);
  return double(8 - int(std::nearbyint(float(bin) / divisor)));
}

// Python's math.degrees(math.atan(m)), operand for operand.
double shear_degrees(double m) { return std::atan(m) * (180.0 / std::numbers::pi); }

}  // namespace

bool has_magnitudes(Op op) { return op != Op::identity && op != Op::autocontrast && op != Op::equalize; }

bool is_signed(Op op) { return has_magnitudes(op) && op != Op::posterize && op != Op::solarize; }

double auto_augment_magnitude(AutoAugmentSpace space, Op op, int bin, int num_bins, Size image) {
  const bool wide = space == AutoAugmentSpace::trivial_augment_wide;
  const auto range = [&](double end) { return linspace(0.0f, float(end), num_bins, bin); };
  switch (op) {
    case Op::shear_x:
    case Op::shear_y: return range(wide ? 0.99 : 0.3);
    case Op::translate_x: return range(wide ? 32.0 : 150.0 / 331.0 * image.width);
    case Op::translate_y: return range(wide ? 32.0 : 150.0 / 331.0 * image.height);
    case Op::rotate: return range(wide ? 135.0 : 30.0);
    case Op::brightness:
    case Op::color:
    case Op::contrast:
    case Op::sharpness: return range(wide ? 0.99 : 0.9);
    case Op::posterize: return posterize_bits(bin, num_bins, wide ? 6.0 : 4.0);
    case Op::solarize: return linspace(255.0f, 0.0f, num_bins, bin);
    case Op::identity:
    case Op::autocontrast:
    case Op::equalize: break;
  }
  return 0.0;
}

std::optional<PixelOp> auto_augment_pixel_op(Op op, double m, std::array<std::uint8_t, 3> fill) {
  using K = PixelOp::Kind;
  const auto geometric = [&](K kind, double value) { return PixelOp{kind, value, 0, 0, fill}; };
  switch (op) {
    case Op::identity: return std::nullopt;
    case Op::shear_x: return geometric(K::shear_x, shear_degrees(m));
    case Op::shear_y: return geometric(K::shear_y, shear_degrees(m));
    case Op::translate_x: return geometric(K::translate_x, std::trunc(m));  // int(magnitude)
    case Op::translate_y: return geometric(K::translate_y, std::trunc(m));
    case Op::rotate: return geometric(K::rotate, m);
    case Op::brightness: return PixelOp{K::brightness, 1.0 + m};
    case Op::color: return PixelOp{K::saturation, 1.0 + m};
    case Op::contrast: return PixelOp{K::contrast, 1.0 + m};
    case Op::sharpness: return PixelOp{K::sharpness, 1.0 + m};
    case Op::posterize: return PixelOp{K::posterize, std::trunc(m)};
    case Op::solarize: return PixelOp{K::solarize, m};
    case Op::autocontrast: return PixelOp{K::autocontrast};
    case Op::equalize: return PixelOp{K::equalize};
  }
  return std::nullopt;
}

AutoAugmentDraw draw_trivial_augment(const TrivialAugmentWide& t, Rng& rng) {
  AutoAugmentDraw d;
  d.op = Op(rng.below(kAutoAugmentOps));
  if (has_magnitudes(d.op)) d.bin = int(rng.below(std::uint64_t(t.num_magnitude_bins)));
  if (is_signed(d.op)) d.negative = rng.below(2) == 1;
  return d;
}

AutoAugmentDraw draw_rand_augment(const RandAugment& t, Rng& rng) {
  AutoAugmentDraw d;
  d.op = Op(rng.below(kAutoAugmentOps));
  if (has_magnitudes(d.op)) d.bin = t.magnitude;
  if (is_signed(d.op)) d.negative = rng.below(2) == 1;
  return d;
}

namespace {
void append(AutoAugmentSpace space, const AutoAugmentDraw& d, int bins, Size image, const std::array<double, 3>& fill,
            std::vector<PixelOp>& ops) {
  double m = auto_augment_magnitude(space, d.op, d.bin, bins, image);
  if (d.negative) m = -m;
  if (const auto op = auto_augment_pixel_op(d.op, m, fill_bytes(fill))) ops.push_back(*op);
}
}  // namespace

void plan_trivial_augment(const TrivialAugmentWide& t, Size image, Rng& rng, std::vector<PixelOp>& ops) {
  append(AutoAugmentSpace::trivial_augment_wide, draw_trivial_augment(t, rng), t.num_magnitude_bins, image, t.fill, ops);
}

void plan_rand_augment(const RandAugment& t, Size image, Rng& rng, std::vector<PixelOp>& ops) {
  for (int i = 0; i < t.num_ops; ++i) {
    append(AutoAugmentSpace::rand_augment, draw_rand_augment(t, rng), t.num_magnitude_bins, image, t.fill, ops);
  }
}

std::array<std::uint8_t, 3> fill_bytes(const std::array<double, 3>& fill) {
  std::array<std::uint8_t, 3> out{};
  for (std::size_t c = 0; c < 3; ++c) {
    out[c] = std::uint8_t(std::nearbyint(std::fmin(std::fmax(float(fill[c]), 0.0f), 255.0f)));  // checked: 0 .. 255
  }
  return out;
}

}  // namespace conveyor
