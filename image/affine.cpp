// Built with -ffp-contract=off (image/CMakeLists.txt): the grid's float32
// products and sums must round one by one, as torch's do, or a source
// coordinate near a half-pixel tie picks the other neighbour.
#include "image/affine.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor {
namespace {

// Python's math.radians, operand for operand.
double radians(double degrees) { return degrees * (std::numbers::pi / 180.0); }

void check_view(const RgbView& img, const char* op) {
  if (img.width < 0 || img.height < 0 ||
      (img.width > 0 && img.height > 0 && (!img.pixels || img.stride < std::ptrdiff_t(img.width) * 3))) {
    throw std::invalid_argument(std::string(op) + ": no pixels, or a row stride shorter than width * 3");
  }
}

// The source index grid_sample's nearest mode picks along one axis, or -1
// outside: its CPU kernel's unnormalize for align_corners=False, (g + 1) *
// size / 2 - 0.5 with one rounding (a fused multiply-add: exact here in
// double, as float * int fits 53 bits), then round half to even.
inline int source_index(float g, int size) {
  const float at = float(double(g + 1.0f) * size - 1.0) / 2.0f;
  if (!(std::fabs(at) < 4194304.0f)) return -1;  // far outside (sizes are at most 16384), or NaN
  // Round half to even without a libm call: below 2^22, adding and taking away
  // 1.5 * 2^23 leaves the float rounded to an integer in the default mode.
  const float rounded = (at + 12582912.0f) - 12582912.0f;
  return rounded >= 0.0f && rounded < float(size) ? int(rounded) : -1;
}

// functional_tensor._gen_affine_grid and _apply_grid_transform (nearest, fill)
// for an output the size of the input: theta in float32, divided by half the
// size, applied to pixel centres x + 0.5 - w / 2 as (x * a + y * b) + c.
void warp(RgbView img, const std::array<double, 6>& m, Fill fill, PhotometricScratch& scratch) {
  const int w = img.width, h = img.height;
  const std::size_t row = std::size_t(w) * 3;
  scratch.copy.resize(row * std::size_t(h));
  for (int y = 0; y < h; ++y) {
    std::memcpy(scratch.copy.data() + row * std::size_t(y), img.pixels + std::ptrdiff_t(y) * img.stride, row);
  }
  const float half_w = float(0.5 * w), half_h = float(0.5 * h);
  const float a = float(m[0]) / half_w, b = float(m[1]) / half_w, c = float(m[2]) / half_w;
  const float d = float(m[3]) / half_h, e = float(m[4]) / half_h, f = float(m[5]) / half_h;
  // x * a and x * d for each column, computed once (each product rounds alone either way).
  std::vector<float>& cols = scratch.rows;
  cols.resize(std::size_t(w) * 2);
  for (int x = 0; x < w; ++x) {
    const float base = float(x - w * 0.5 + 0.5);
    cols[std::size_t(x) * 2] = base * a;
    cols[std::size_t(x) * 2 + 1] = base * d;
  }
  for (int y = 0; y < h; ++y) {
    const float base = float(y - h * 0.5 + 0.5);
    const float yb = base * b, ye = base * e;
    std::uint8_t* out = img.pixels + std::ptrdiff_t(y) * img.stride;
    for (int x = 0; x < w; ++x, out += 3) {
      const float gx = (cols[std::size_t(x) * 2] + yb) + c;
      const float gy = (cols[std::size_t(x) * 2 + 1] + ye) + f;
      const int sx = source_index(gx, w), sy = source_index(gy, h);
      const std::uint8_t* from =
          sx >= 0 && sy >= 0 ? scratch.copy.data() + row * std::size_t(sy) + std::size_t(sx) * 3 : fill.data();
      out[0] = from[0];
      out[1] = from[1];
      out[2] = from[2];
    }
  }
}

}  // namespace

std::array<double, 6> inverse_affine_matrix(std::array<double, 2> center, const AffineParams& p) {
  const double rot = radians(p.angle), sx = radians(p.shear_x), sy = radians(p.shear_y);
  const double cx = center[0], cy = center[1], tx = p.translate_x, ty = p.translate_y;
  // Rotation, then shear, without the scale: det([[a, b], [c, d]]) == 1.
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m{d, -b, 0.0, -c, a, 0.0};
  for (double& v : m) v = v / p.scale;
  // RSS^-1 * C^-1 * T^-1, then C.
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

void affine(RgbView img, const AffineParams& p, Fill fill, PhotometricScratch& scratch) {
  check_view(img, "affine");
  const bool finite = std::isfinite(p.angle) && std::isfinite(p.translate_x) && std::isfinite(p.translate_y) &&
                      std::isfinite(p.shear_x) && std::isfinite(p.shear_y) &&
                      (!p.center || (std::isfinite((*p.center)[0]) && std::isfinite((*p.center)[1])));
  if (!finite) throw std::invalid_argument("affine: angle, translate, shear and center must be finite");
  if (!(std::isfinite(p.scale) && p.scale > 0)) throw std::invalid_argument("affine: scale must be finite and > 0");
  if (img.width == 0 || img.height == 0) return;
  std::array<double, 2> center{0.0, 0.0};  // F.affine: relative to the image's centre
  if (p.center) center = {(*p.center)[0] - img.width * 0.5, (*p.center)[1] - img.height * 0.5};
  warp(img, inverse_affine_matrix(center, p), fill, scratch);
}

void rotate(RgbView img, double angle, Fill fill, PhotometricScratch& scratch) {
  check_view(img, "rotate");
  if (!std::isfinite(angle)) throw std::invalid_argument("rotate: angle must be finite");
  if (img.width == 0 || img.height == 0) return;
  AffineParams p;
  p.angle = -angle;  // F.rotate turns the other way from F.affine
  warp(img, inverse_affine_matrix({0.0, 0.0}, p), fill, scratch);
}

}  // namespace conveyor
