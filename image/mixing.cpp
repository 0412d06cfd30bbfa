#include "image/mixing.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace conveyor {
namespace {

// A standard normal by Box-Muller (one of the pair; the other is dropped so
// that each call uses a fixed two uniforms). 1 - uniform() is in (0, 1].
double normal(Rng& rng) {
  const double u = 1.0 - rng.uniform(), v = rng.uniform();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
}

// log of a Gamma(shape, 1) draw, shape >= 1: Marsaglia and Tsang (2000).
double log_gamma_draw(double shape, Rng& rng) {
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v);
  }
}

// log of a Gamma(a, 1) draw for any a > 0: below 1, Gamma(a + 1) * U^(1/a)
// (Marsaglia and Tsang's boost), kept in logs so that a small a (MixUp's 0.2)
// cannot underflow both draws of a Beta to 0.
double log_gamma(double a, Rng& rng) {
  if (a >= 1) return log_gamma_draw(a, rng);
  const double g = log_gamma_draw(a + 1.0, rng);
  return g + std::log(1.0 - rng.uniform()) / a;
}

void check_alpha(double alpha, const char* op) {
  if (!(std::isfinite(alpha) && alpha > 0)) {
    throw std::invalid_argument(std::string(op) + ": alpha must be a finite number above 0");
  }
}

}  // namespace

double sample_beta(double a, Rng& rng) {
  const double x = log_gamma(a, rng), y = log_gamma(a, rng);
  return 1.0 / (1.0 + std::exp(y - x));  // X / (X + Y)
}

std::int64_t BatchMixing::stated_classes() const {
  const std::int64_t a = mixup ? mixup->num_classes : 0, b = cutmix ? cutmix->num_classes : 0;
  return a ? a : b;
}

void BatchMixing::validate() const {
  if (mixup) {
    check_alpha(mixup->alpha, "MixUp");
    if (mixup->num_classes < 0) throw std::invalid_argument("MixUp: num_classes must be positive (or None: the dataset's)");
  }
  if (cutmix) {
    check_alpha(cutmix->alpha, "CutMix");
    if (cutmix->num_classes < 0) throw std::invalid_argument("CutMix: num_classes must be positive (or None: the dataset's)");
  }
  if (mixup && cutmix && mixup->num_classes && cutmix->num_classes && mixup->num_classes != cutmix->num_classes) {
    throw std::invalid_argument("CutMix: num_classes=" + std::to_string(cutmix->num_classes) + " differs from MixUp's " +
                                std::to_string(mixup->num_classes));
  }
}

MixDraw draw_mix(const BatchMixing& m, std::size_t height, std::size_t width, Rng& rng) {
  MixDraw d;
  d.cutmix = m.cutmix && (!m.mixup || rng.bernoulli(0.5));
  const double alpha = d.cutmix ? m.cutmix->alpha : m.mixup->alpha;
  const double lambda = sample_beta(alpha, rng);
  if (!d.cutmix) {
    d.lambda = lambda;
    d.x2 = std::uint32_t(width);
    d.y2 = std::uint32_t(height);
    return d;
  }
  // torchvision's CutMix._get_params: the centre, then half-sides truncated.
  const auto r_x = std::int64_t(rng.below(width)), r_y = std::int64_t(rng.below(height));
  const double r = 0.5 * std::sqrt(1.0 - lambda);
  const auto half_w = std::int64_t(r * double(width)), half_h = std::int64_t(r * double(height));
  d.x1 = std::uint32_t(std::max<std::int64_t>(r_x - half_w, 0));
  d.y1 = std::uint32_t(std::max<std::int64_t>(r_y - half_h, 0));
  d.x2 = std::uint32_t(std::min<std::int64_t>(r_x + half_w, std::int64_t(width)));
  d.y2 = std::uint32_t(std::min<std::int64_t>(r_y + half_h, std::int64_t(height)));
  d.lambda = 1.0 - double(d.x2 - d.x1) * double(d.y2 - d.y1) / (double(width) * double(height));
  return d;
}

}  // namespace conveyor
