// Affine warps of an interleaved RGB8 image in place, with torchvision's
// F.affine and F.rotate semantics on uint8 tensors, NEAREST interpolation
// (what TrivialAugmentWide and RandAugment call): the inverse matrix of
// _get_inverse_affine_matrix, then functional_tensor's sampling grid in
// float32 (pixel centres at +0.5, normalized by the image size, align_corners
// False) and grid_sample's round half to even. Output pixels whose source falls
// outside the image take `fill`. tests/photometric_test.py holds each to
// torchvision's on the same image: the same source pixel for every output one.
//
// Stateless and thread-safe: the source copy lives in the caller's
// PhotometricScratch (reused: no allocation once it has grown). Parameters
// that are not finite throw std::invalid_argument naming the op.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "image/photometric.h"

namespace conveyor {

// F.affine's parameters: angle and shear in degrees, translate in pixels.
struct AffineParams {
  double angle = 0;
  double translate_x = 0, translate_y = 0;
  double scale = 1;  // > 0
  double shear_x = 0, shear_y = 0;
  // The fixed point in pixel coordinates (torchvision's center=[x, y]); none: the image's centre.
  std::optional<std::array<double, 2>> center;
};

// One RGB value for the pixels a warp brings in from outside the image
// (torchvision's fill; fill=None is black).
using Fill = std::array<std::uint8_t, 3>;

// torchvision's _get_inverse_affine_matrix: output (x, y), relative to the
// centre, to input, as [a, b, c, d, e, f] (x' = a x + b y + c, y' = d x + e y + f).
// center is relative to the image's centre, as F.affine passes it to tensors.
std::array<double, 6> inverse_affine_matrix(std::array<double, 2> center, const AffineParams& p);

// F.affine(img, angle, translate, scale, shear, NEAREST, fill, center).
void affine(RgbView img, const AffineParams& params, Fill fill, PhotometricScratch& scratch);
// F.rotate(img, angle, NEAREST, expand=False, center=None, fill): counter-clockwise, in degrees.
void rotate(RgbView img, double angle, Fill fill, PhotometricScratch& scratch);

}  // namespace conveyor
