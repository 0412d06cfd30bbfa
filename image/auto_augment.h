// The augmentation spaces of torchvision's TrivialAugmentWide and RandAugment
// (transforms/autoaugment.py): their 14 ops in torchvision's order, each op's
// magnitude per bin as torch computes it (float32 torch.linspace, posterize's
// rounded bits), and the draws. Augment::plan_pixels calls the draws; an op
// becomes a PixelOp as torchvision's _apply_op calls the functional ops
// (shear through degrees(atan(m)) about the top-left corner, translate by
// int(m) pixels, rotate about the centre, colour factors 1 + m).
//
// Stateless and thread-safe; the draws take the sample's Rng and append to the
// caller's op list (no allocation once it has grown).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "image/augment.h"

namespace conveyor {

// torchvision's op names, in its order (an op index is a position here).
enum class AutoAugmentOp {
  identity, shear_x, shear_y, translate_x, translate_y, rotate, brightness, color, contrast, sharpness,
  posterize, solarize, autocontrast, equalize
};
inline constexpr int kAutoAugmentOps = 14;
// Which policy's magnitude ranges: TrivialAugmentWide's are wider.
enum class AutoAugmentSpace { trivial_augment_wide, rand_augment };

// Whether the op has magnitudes (and a bin is drawn for it) and whether its sign is drawn.
bool has_magnitudes(AutoAugmentOp op);
bool is_signed(AutoAugmentOp op);

// The op's magnitude at `bin` (0 .. num_bins - 1, num_bins >= 2) before any
// sign, for an image of `image` size (RandAugment's translate scales with it);
// 0 for the ops without magnitudes.
double auto_augment_magnitude(AutoAugmentSpace space, AutoAugmentOp op, int bin, int num_bins, Size image);

// What _apply_op runs for op at `magnitude` (its sign applied), or none for identity.
std::optional<PixelOp> auto_augment_pixel_op(AutoAugmentOp op, double magnitude, std::array<std::uint8_t, 3> fill);

// One op as drawn: the op, its bin (0 when it has no magnitudes) and its sign.
struct AutoAugmentDraw {
  AutoAugmentOp op = AutoAugmentOp::identity;
  int bin = 0;
  bool negative = false;
};
// TrivialAugmentWide.forward's draws: op, then bin (ops with magnitudes), then sign (signed ops).
AutoAugmentDraw draw_trivial_augment(const TrivialAugmentWide& t, Rng& rng);
// One of RandAugment.forward's num_ops draws: op, then sign (signed ops); the bin is t.magnitude.
AutoAugmentDraw draw_rand_augment(const RandAugment& t, Rng& rng);

// The policy's ops for one sample of output size `image`, appended to `ops`.
void plan_trivial_augment(const TrivialAugmentWide& t, Size image, Rng& rng, std::vector<PixelOp>& ops);
void plan_rand_augment(const RandAugment& t, Size image, Rng& rng, std::vector<PixelOp>& ops);

// A fill value as torchvision's uint8 output holds it: float32, rounded half to even.
std::array<std::uint8_t, 3> fill_bytes(const std::array<double, 3>& fill);

}  // namespace conveyor
