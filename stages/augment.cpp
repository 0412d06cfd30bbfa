#include "stages/augment.h"

#include <cmath>
#include <cstdio>
#include <optional>

namespace conveyor {
namespace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
// C++20 deduces this itself; clang before 17 (the fuzz build's clang 14) needs the guide.
template <class... F>
Overload(F...) -> Overload<F...>;

// Python's round(): half to even (the default floating-point rounding mode).
int py_round(double v) { return int(std::nearbyint(v)); }

void check(bool ok, const char* transform, const char* what) {
  if (!ok) throw AugmentError(std::string(transform) + ": " + what);
}

// Sizes, a Resize's shorter side and padding up to kMaxCrop: past it the
// canvas arithmetic (ints) could overflow, and no output that large fits a batch.
static_assert(kMaxCrop == 16384, "the messages below say 16384");
void check_size(Size s, const char* transform) {
  check(s.height > 0 && s.width > 0, transform, "size must be positive");
  check(s.height <= kMaxCrop && s.width <= kMaxCrop, transform, "size must be at most 16384");
}

// snprintf rather than string operator+: GCC 12 at -O3 warns falsely (-Wrestrict) on the latter.
std::string size_text(Size s) {
  char b[48];
  if (s.height == s.width) {
    std::snprintf(b, sizeof b, "%d", s.height);
  } else {
    std::snprintf(b, sizeof b, "(%d, %d)", s.height, s.width);
  }
  return b;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// The virtual image the chain has produced so far, as a map to the source:
// source_x = ax + bx * x and source_y = ay + by * y over a width x height canvas.
// A negative bx means the canvas is mirrored.
struct Canvas {
  double ax = 0, bx = 1, ay = 0, by = 1;
  int width = 0, height = 0;
  // The source box the last resize saw (Geometry's window): torchvision
  // resizes what earlier crops left, so the resize reads nothing outside it.
  ResizeWindow window;

  // Keep the part [left, left + w) x [top, top + h) of the canvas (may reach outside: padding).
  void crop(int left, int top, Size s) {
    ax += bx * left;
    ay += by * top;
    width = s.width;
    height = s.height;
  }
  void resize(Size s) {
    window = {std::min(ax, ax + bx * width), ay, std::max(ax, ax + bx * width), ay + by * height};
    bx *= double(width) / s.width;
    by *= double(height) / s.height;
    width = s.width;
    height = s.height;
  }
};

// torchvision.transforms.RandomResizedCrop.get_params, on the canvas.
void random_resized_crop(Canvas& c, const RandomResizedCrop& t, Rng& rng) {
  const double area = double(c.width) * c.height;
  const double log_lo = std::log(t.ratio_min), log_hi = std::log(t.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(t.scale_min, t.scale_max);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = py_round(std::sqrt(target * aspect));
    const int h = py_round(std::sqrt(target / aspect));
    if (0 < w && w <= c.width && 0 < h && h <= c.height) {
      const int top = int(rng.below(std::uint64_t(c.height - h + 1)));
      const int left = int(rng.below(std::uint64_t(c.width - w + 1)));
      c.crop(left, top, {h, w});
      c.resize(t.size);
      return;
    }
  }
  // Fallback: the central crop with the ratio clamped into range.
  const double in_ratio = double(c.width) / c.height;
  int w = c.width, h = c.height;
  if (in_ratio < t.ratio_min) {
    h = std::max(1, py_round(w / t.ratio_min));
  } else if (in_ratio > t.ratio_max) {
    w = std::max(1, py_round(h * t.ratio_max));
  }
  c.crop((c.width - w) / 2, (c.height - h) / 2, {h, w});
  c.resize(t.size);
}

}  // namespace

Augment::Augment(std::vector<Transform> chain) : chain_(std::move(chain)) {
  if (chain_.empty()) throw AugmentError("augment: the transform chain is empty: it needs a crop or a sized resize");
  std::optional<Size> size;  // the canvas size once it no longer depends on the image
  for (const Transform& t : chain_) {
    std::visit(Overload{
                   [&](const RandomResizedCrop& r) {
                     check_size(r.size, "RandomResizedCrop");
                     check(r.scale_min > 0 && r.scale_min <= r.scale_max && r.scale_max <= 1, "RandomResizedCrop",
                           "scale must satisfy 0 < min <= max <= 1");
                     check(r.ratio_min > 0 && r.ratio_min <= r.ratio_max && std::isfinite(r.ratio_max),
                           "RandomResizedCrop", "ratio must satisfy 0 < min <= max, finite");
                     size = r.size;
                   },
                   [&](const Resize& r) {
                     check(r.shorter >= 0, "Resize", "shorter side must be positive");
                     check(r.shorter <= kMaxCrop, "Resize", "shorter side must be at most 16384");
                     if (r.shorter > 0) {
                       size.reset();
                     } else {
                       check_size(r.size, "Resize");
                       size = r.size;
                     }
                   },
                   [&](const CenterCrop& r) {
                     check_size(r.size, "CenterCrop");
                     size = r.size;
                   },
                   [&](const RandomCrop& r) {
                     check_size(r.size, "RandomCrop");
                     check(r.pad_left >= 0 && r.pad_top >= 0 && r.pad_right >= 0 && r.pad_bottom >= 0, "RandomCrop",
                           "padding must be non-negative");
                     check(r.pad_left <= kMaxCrop && r.pad_top <= kMaxCrop && r.pad_right <= kMaxCrop &&
                               r.pad_bottom <= kMaxCrop,
                           "RandomCrop", "padding must be at most 16384 a side");
                     size = r.size;
                   },
                   [&](const RandomHorizontalFlip& r) {
                     check(r.p >= 0 && r.p <= 1, "RandomHorizontalFlip", "p must be in [0, 1]");
                   },
               },
               t);
  }
  if (!size) throw AugmentError("augment: the output size depends on the image: end the chain with a crop or a sized Resize");
  out_ = *size;
}

Geometry Augment::plan(int width, int height, Rng& rng) const {
  if (width < 1 || height < 1) throw AugmentError("augment: image has no pixels");
  Canvas c;
  c.width = width;
  c.height = height;
  c.window = {0, 0, double(width), double(height)};  // no resize yet: the whole image
  for (const Transform& t : chain_) {
    std::visit(Overload{
                   [&](const RandomResizedCrop& r) { random_resized_crop(c, r, rng); },
                   [&](const Resize& r) {
                     if (r.shorter == 0) return c.resize(r.size);
                     // torchvision: the shorter side becomes `shorter`, the longer one int(shorter * long / short).
                     if (c.width <= c.height) {
                       c.resize({int(std::int64_t(r.shorter) * c.height / c.width), r.shorter});
                     } else {
                       c.resize({r.shorter, int(std::int64_t(r.shorter) * c.width / c.height)});
                     }
                   },
                   [&](const CenterCrop& r) {
                     // torchvision: larger than the image, it pads (crop - size) // 2 before and the rest
                     // after; else it starts at round((size - crop) / 2). round(-1.5) is -2, one off.
                     const auto start = [](int size, int crop) {
                       return crop > size ? -((crop - size) / 2) : py_round((size - crop) / 2.0);
                     };
                     c.crop(start(c.width, r.size.width), start(c.height, r.size.height), r.size);
                   },
                   [&](const RandomCrop& r) {
                     int left = r.pad_left, right = r.pad_right, top = r.pad_top, bottom = r.pad_bottom;
                     // pad_if_needed pads both sides by the shortfall, as torchvision does.
                     if (r.pad_if_needed && c.width + left + right < r.size.width) {
                       const int more = r.size.width - (c.width + left + right);
                       left += more;
                       right += more;
                     }
                     if (r.pad_if_needed && c.height + top + bottom < r.size.height) {
                       const int more = r.size.height - (c.height + top + bottom);
                       top += more;
                       bottom += more;
                     }
                     const int pw = c.width + left + right, ph = c.height + top + bottom;
                     if (pw < r.size.width || ph < r.size.height) {
                       throw AugmentError("RandomCrop: the image (" + std::to_string(c.width) + "x" +
                                          std::to_string(c.height) + " after earlier transforms) is smaller than " +
                                          size_text(r.size) + "; add padding or pad_if_needed");
                     }
                     const int i = int(rng.below(std::uint64_t(ph - r.size.height + 1)));
                     const int j = int(rng.below(std::uint64_t(pw - r.size.width + 1)));
                     c.crop(j - left, i - top, r.size);
                   },
                   [&](const RandomHorizontalFlip& r) {
                     if (rng.bernoulli(r.p)) {  // x' = width - x
                       c.ax += c.bx * c.width;
                       c.bx = -c.bx;
                     }
                   },
               },
               t);
  }
  Geometry g;
  g.out = {c.height, c.width};
  g.flip = c.bx < 0;
  const double xa = c.ax, xb = c.ax + c.bx * c.width;
  g.x0 = std::min(xa, xb);
  g.x1 = std::max(xa, xb);
  g.y0 = c.ay;
  g.y1 = c.ay + c.by * c.height;
  g.window = c.window;
  return g;
}

std::string Augment::describe() const {
  std::string out;
  for (const Transform& t : chain_) {
    if (!out.empty()) out += " + ";
    out += std::visit(
        Overload{
            [](const RandomResizedCrop& r) {
              return "RandomResizedCrop(" + size_text(r.size) + ", scale=(" + num(r.scale_min) + ", " +
                     num(r.scale_max) + "), ratio=(" + num(r.ratio_min) + ", " + num(r.ratio_max) + "))";
            },
            [](const Resize& r) {
              return "Resize(" + (r.shorter > 0 ? std::to_string(r.shorter) : size_text(r.size)) + ")";
            },
            [](const CenterCrop& r) { return "CenterCrop(" + size_text(r.size) + ")"; },
            [](const RandomCrop& r) {
              std::string s = "RandomCrop(" + size_text(r.size);
              if (r.pad_left || r.pad_top || r.pad_right || r.pad_bottom) {
                s += ", padding=(" + std::to_string(r.pad_left) + ", " + std::to_string(r.pad_top) + ", " +
                     std::to_string(r.pad_right) + ", " + std::to_string(r.pad_bottom) + ")";
              }
              if (r.pad_if_needed) s += ", pad_if_needed=True";
              return s + ")";
            },
            [](const RandomHorizontalFlip& r) { return "RandomHorizontalFlip(" + num(r.p) + ")"; },
        },
        t);
  }
  return out;
}

std::vector<Transform> preset_transforms(AugmentPreset preset, int crop) {
  switch (preset) {
    case AugmentPreset::crop:
      return {Resize{crop, {}}, RandomCrop{{crop, crop}, 4, 4, 4, 4, false}, RandomHorizontalFlip{}};
    case AugmentPreset::center:
      return {Resize{crop * 8 / 7, {}}, CenterCrop{{crop, crop}}};
    case AugmentPreset::rrc:
      break;
  }
  return {RandomResizedCrop{{crop, crop}}, RandomHorizontalFlip{}};
}

}  // namespace conveyor
