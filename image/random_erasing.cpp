#include "image/random_erasing.h"

#include <cmath>

#include <stdexcept>

namespace conveyor {

void RandomErasing::validate() const {
  const auto check = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("RandomErasing: ") + what);
  };
  check(p >= 0 && p <= 1, "p must be in [0, 1]");
  check(scale[0] >= 0 && scale[1] <= 1, "scale must be between 0 and 1");
  check(scale[0] <= scale[1], "scale must be (min, max) with min <= max");
  check(ratio[0] > 0 && std::isfinite(ratio[1]), "ratio must be above 0 and finite");
  check(ratio[0] <= ratio[1], "ratio must be (min, max) with min <= max");
  check(std::isfinite(value[0]) && std::isfinite(value[1]) && std::isfinite(value[2]), "value must be finite");
}

std::optional<EraseBox> draw_erase_box(const RandomErasing& e, std::size_t height, std::size_t width, Rng& rng) {
  if (!(rng.uniform() < e.p)) return std::nullopt;  // torch.rand(1) < p
  const double area = double(height) * double(width);
  const double log_lo = std::log(e.ratio[0]), log_hi = std::log(e.ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform(e.scale[0], e.scale[1]);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    // Python's round(): half to even, which nearbyint does in the default rounding mode.
    const double h = std::nearbyint(std::sqrt(erase_area * aspect));
    const double w = std::nearbyint(std::sqrt(erase_area / aspect));
    if (!(h < double(height) && w < double(width))) continue;
    EraseBox box;
    box.height = std::uint32_t(h);
    box.width = std::uint32_t(w);
    box.top = std::uint32_t(rng.below(height - box.height + 1));  // torch.randint(0, H - h + 1)
    box.left = std::uint32_t(rng.below(width - box.width + 1));
    return box;
  }
  return std::nullopt;
}

}  // namespace conveyor
