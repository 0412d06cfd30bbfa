#include "image/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>

#include "image/affine.h"
#include "image/auto_augment.h"
#include "image/photometric.h"

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
// A negative bx means the canvas is mirrored, a negative by upside down.
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
    window = {std::min(ax, ax + bx * width), std::min(ay, ay + by * height), std::max(ax, ax + bx * width),
              std::max(ay, ay + by * height)};
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

template <typename T>
constexpr bool kPixelTransform =
    std::is_same_v<T, ColorJitter> || std::is_same_v<T, RandomGrayscale> || std::is_same_v<T, GaussianBlur> ||
    std::is_same_v<T, RandomSolarize> || std::is_same_v<T, RandomPosterize> || std::is_same_v<T, RandomAdjustSharpness> ||
    std::is_same_v<T, RandomAutocontrast> || std::is_same_v<T, RandomEqualize> || std::is_same_v<T, RandomInvert> ||
    std::is_same_v<T, TrivialAugmentWide> || std::is_same_v<T, RandAugment>;

bool is_pixel_transform(const Transform& t) {
  return std::visit([](const auto& r) { return kPixelTransform<std::decay_t<decltype(r)>>; }, t);
}

template <typename T>
constexpr const char* kName = "";
template <> constexpr const char* kName<RandomResizedCrop> = "RandomResizedCrop";
template <> constexpr const char* kName<Resize> = "Resize";
template <> constexpr const char* kName<CenterCrop> = "CenterCrop";
template <> constexpr const char* kName<RandomCrop> = "RandomCrop";
template <> constexpr const char* kName<RandomHorizontalFlip> = "RandomHorizontalFlip";
template <> constexpr const char* kName<RandomVerticalFlip> = "RandomVerticalFlip";
template <> constexpr const char* kName<ColorJitter> = "ColorJitter";
template <> constexpr const char* kName<RandomGrayscale> = "RandomGrayscale";
template <> constexpr const char* kName<GaussianBlur> = "GaussianBlur";
template <> constexpr const char* kName<RandomSolarize> = "RandomSolarize";
template <> constexpr const char* kName<RandomPosterize> = "RandomPosterize";
template <> constexpr const char* kName<RandomAdjustSharpness> = "RandomAdjustSharpness";
template <> constexpr const char* kName<RandomAutocontrast> = "RandomAutocontrast";
template <> constexpr const char* kName<RandomEqualize> = "RandomEqualize";
template <> constexpr const char* kName<RandomInvert> = "RandomInvert";
template <> constexpr const char* kName<TrivialAugmentWide> = "TrivialAugmentWide";
template <> constexpr const char* kName<RandAugment> = "RandAugment";
template <> constexpr const char* kName<RandomErasing> = "RandomErasing";
template <> constexpr const char* kName<MixUp> = "MixUp";
template <> constexpr const char* kName<CutMix> = "CutMix";

std::string transform_name(const Transform& t) {
  return std::visit([](const auto& r) { return std::string(kName<std::decay_t<decltype(r)>>); }, t);
}

void check_mixing(const BatchMixing& m) {
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    throw AugmentError(e.what());
  }
}

// Appended piece by piece: GCC 12 at -O3 flags "lit" + std::string&& as a false -Wrestrict.
std::string describe_mixing(const char* name, double alpha, std::int64_t num_classes) {
  std::string s = name;
  s.append("(alpha=").append(num(alpha));
  if (num_classes) s.append(", num_classes=").append(std::to_string(num_classes));
  return s.append("; per batch, after normalize, on the device)");
}

void check_p(double p, const char* transform) { check(p >= 0 && p <= 1, transform, "p must be in [0, 1]"); }

void check_range(double lo, double hi, double min_allowed, double max_allowed, const char* transform, const char* what) {
  check(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && lo >= min_allowed && hi <= max_allowed, transform, what);
}

void check_fill(const std::array<double, 3>& fill, const char* transform) {
  for (const double v : fill) check(v >= 0 && v <= 255, transform, "fill must be in [0, 255]");
}

void check_magnitude_bins(int bins, const char* transform) {
  check(bins >= 2 && bins <= 1024, transform, "num_magnitude_bins must be in [2, 1024]");
}

template <typename T>
void check_pixel_transform(const T& r) {
  if constexpr (std::is_same_v<T, ColorJitter>) {
    const double inf = std::numeric_limits<double>::max();
    check_range(r.brightness_min, r.brightness_max, 0, inf, "ColorJitter", "brightness must be a range 0 <= min <= max");
    check_range(r.contrast_min, r.contrast_max, 0, inf, "ColorJitter", "contrast must be a range 0 <= min <= max");
    check_range(r.saturation_min, r.saturation_max, 0, inf, "ColorJitter", "saturation must be a range 0 <= min <= max");
    check_range(r.hue_min, r.hue_max, -0.5, 0.5, "ColorJitter", "hue must be a range -0.5 <= min <= max <= 0.5");
    check_p(r.p, "ColorJitter");
  } else if constexpr (std::is_same_v<T, GaussianBlur>) {
    check(r.kernel_x >= 1 && r.kernel_x % 2 == 1 && r.kernel_x <= 255 && r.kernel_y >= 1 && r.kernel_y % 2 == 1 &&
              r.kernel_y <= 255,
          "GaussianBlur", "kernel_size must be odd, 1 .. 255");
    check(std::isfinite(r.sigma_max) && r.sigma_min > 0 && r.sigma_min <= r.sigma_max, "GaussianBlur",
          "sigma must be a range 0 < min <= max");
    check_p(r.p, "GaussianBlur");
  } else if constexpr (std::is_same_v<T, RandomSolarize>) {
    check(r.threshold >= 0 && r.threshold <= 255, "RandomSolarize", "threshold must be in [0, 255]");
    check_p(r.p, "RandomSolarize");
  } else if constexpr (std::is_same_v<T, RandomPosterize>) {
    check(r.bits >= 0 && r.bits <= 8, "RandomPosterize", "bits must be in [0, 8]");
    check_p(r.p, "RandomPosterize");
  } else if constexpr (std::is_same_v<T, RandomAdjustSharpness>) {
    check(std::isfinite(r.sharpness_factor) && r.sharpness_factor >= 0, "RandomAdjustSharpness",
          "sharpness_factor must be finite and >= 0");
    check_p(r.p, "RandomAdjustSharpness");
  } else if constexpr (std::is_same_v<T, TrivialAugmentWide>) {
    check_magnitude_bins(r.num_magnitude_bins, "TrivialAugmentWide");
    check_fill(r.fill, "TrivialAugmentWide");
  } else if constexpr (std::is_same_v<T, RandAugment>) {
    check(r.num_ops >= 0 && r.num_ops <= 64, "RandAugment", "num_ops must be in [0, 64]");
    check_magnitude_bins(r.num_magnitude_bins, "RandAugment");
    check(r.magnitude >= 0 && r.magnitude < r.num_magnitude_bins, "RandAugment",
          "magnitude must be in [0, num_magnitude_bins - 1]");
    check_fill(r.fill, "RandAugment");
  } else {
    check_p(r.p, kName<T>);
  }
}

// Appended piece by piece: GCC 12 at -O3 misreads `"literal" + std::string`
// as an overlapping memcpy (-Werror=restrict), as size_text() notes.
void append_range(std::string& s, const char* name, double lo, double hi) {
  s += name;
  s += "=(";
  s += num(lo);
  s += ", ";
  s += num(hi);
  s += ')';
}
void append_value(std::string& s, const char* name, const std::string& value) {
  s += name;
  s += '=';
  s += value;
}

void append_fill(std::string& s, const std::array<double, 3>& fill) {
  if (fill == std::array<double, 3>{0, 0, 0}) return;
  s += ", fill=(";
  s += num(fill[0]);
  s += ", ";
  s += num(fill[1]);
  s += ", ";
  s += num(fill[2]);
  s += ')';
}

template <typename T>
std::string describe_pixel_transform(const T& r) {
  std::string s = kName<T>;
  s += '(';
  if constexpr (std::is_same_v<T, ColorJitter>) {
    append_range(s, "brightness", r.brightness_min, r.brightness_max);
    append_range(s, ", contrast", r.contrast_min, r.contrast_max);
    append_range(s, ", saturation", r.saturation_min, r.saturation_max);
    append_range(s, ", hue", r.hue_min, r.hue_max);
    if (r.p < 1) append_value(s, ", p", num(r.p));
  } else if constexpr (std::is_same_v<T, GaussianBlur>) {
    s += "kernel_size=(";
    s += std::to_string(r.kernel_x);
    s += ", ";
    s += std::to_string(r.kernel_y);
    s += ')';
    append_range(s, ", sigma", r.sigma_min, r.sigma_max);
    if (r.p < 1) append_value(s, ", p", num(r.p));
  } else if constexpr (std::is_same_v<T, RandomSolarize>) {
    append_value(s, "threshold", num(r.threshold));
    append_value(s, ", p", num(r.p));
  } else if constexpr (std::is_same_v<T, RandomPosterize>) {
    append_value(s, "bits", std::to_string(r.bits));
    append_value(s, ", p", num(r.p));
  } else if constexpr (std::is_same_v<T, RandomAdjustSharpness>) {
    append_value(s, "sharpness_factor", num(r.sharpness_factor));
    append_value(s, ", p", num(r.p));
  } else if constexpr (std::is_same_v<T, TrivialAugmentWide>) {
    append_value(s, "num_magnitude_bins", std::to_string(r.num_magnitude_bins));
    append_fill(s, r.fill);
  } else if constexpr (std::is_same_v<T, RandAugment>) {
    append_value(s, "num_ops", std::to_string(r.num_ops));
    append_value(s, ", magnitude", std::to_string(r.magnitude));
    append_value(s, ", num_magnitude_bins", std::to_string(r.num_magnitude_bins));
    append_fill(s, r.fill);
  } else {
    append_value(s, "p", num(r.p));
  }
  s += ')';
  return s;
}

}  // namespace

ColorJitter color_jitter(double brightness, double contrast, double saturation, double hue) {
  const auto factor = [](double v, const char* name) {
    check(std::isfinite(v) && v >= 0, "ColorJitter", (std::string(name) + " must be finite and >= 0").c_str());
    return std::pair{std::max(0.0, 1 - v), 1 + v};
  };
  check(hue >= 0 && hue <= 0.5, "ColorJitter", "hue must be in [0, 0.5]");
  ColorJitter j;
  std::tie(j.brightness_min, j.brightness_max) = factor(brightness, "brightness");
  std::tie(j.contrast_min, j.contrast_max) = factor(contrast, "contrast");
  std::tie(j.saturation_min, j.saturation_max) = factor(saturation, "saturation");
  j.hue_min = -hue;
  j.hue_max = hue;
  return j;
}

void check_transform(const Transform& t) {
  std::visit(Overload{
                 [](const RandomResizedCrop& r) {
                   check_size(r.size, "RandomResizedCrop");
                   check(r.scale_min > 0 && r.scale_min <= r.scale_max && r.scale_max <= 1, "RandomResizedCrop",
                         "scale must satisfy 0 < min <= max <= 1");
                   check(r.ratio_min > 0 && r.ratio_min <= r.ratio_max && std::isfinite(r.ratio_max),
                         "RandomResizedCrop", "ratio must satisfy 0 < min <= max, finite");
                 },
                 [](const Resize& r) {
                   check(r.shorter >= 0, "Resize", "shorter side must be positive");
                   check(r.shorter <= kMaxCrop, "Resize", "shorter side must be at most 16384");
                   if (r.shorter == 0) check_size(r.size, "Resize");
                 },
                 [](const CenterCrop& r) { check_size(r.size, "CenterCrop"); },
                 [](const RandomCrop& r) {
                   check_size(r.size, "RandomCrop");
                   check(r.pad_left >= 0 && r.pad_top >= 0 && r.pad_right >= 0 && r.pad_bottom >= 0, "RandomCrop",
                         "padding must be non-negative");
                   check(r.pad_left <= kMaxCrop && r.pad_top <= kMaxCrop && r.pad_right <= kMaxCrop &&
                             r.pad_bottom <= kMaxCrop,
                         "RandomCrop", "padding must be at most 16384 a side");
                 },
                 [](const RandomHorizontalFlip& r) { check_p(r.p, "RandomHorizontalFlip"); },
                 [](const RandomVerticalFlip& r) { check_p(r.p, "RandomVerticalFlip"); },
                 [](const RandomErasing& r) {
                   try {
                     r.validate();
                   } catch (const std::invalid_argument& e) {
                     throw AugmentError(e.what());
                   }
                 },
                 [](const MixUp& r) { check_mixing(BatchMixing{r, std::nullopt}); },
                 [](const CutMix& r) { check_mixing(BatchMixing{std::nullopt, r}); },
                 [](const auto& r) { check_pixel_transform(r); },
             },
             t);
}

Augment::Augment(std::vector<Transform> chain) : chain_(std::move(chain)) {
  if (chain_.empty()) throw AugmentError("augment: the transform chain is empty: it needs a crop or a sized resize");
  std::optional<Size> size;  // the canvas size once it no longer depends on the image
  for (const Transform& t : chain_) {
    check_transform(t);
    const auto* mixup = std::get_if<MixUp>(&t);
    const auto* cutmix = std::get_if<CutMix>(&t);
    if (mixup || cutmix) {  // batch ops: last, once each
      if (!mixing_) mixing_.emplace();
      if ((mixup && mixing_->mixup) || (cutmix && mixing_->cutmix)) {
        throw AugmentError(transform_name(t) + ": given twice (MixUp and CutMix come once each, last)");
      }
      if (mixup) mixing_->mixup = *mixup;
      if (cutmix) mixing_->cutmix = *cutmix;
      check_mixing(*mixing_);
      continue;
    }
    if (mixing_) {
      throw AugmentError(transform_name(t) + ": after MixUp or CutMix, which mix whole batches on the device: "
                         "they come last");
    }
    if (erasing_) {
      throw AugmentError(transform_name(t) + ": after RandomErasing, which follows Normalize on the device: "
                         "RandomErasing comes last, once (before MixUp and CutMix)");
    }
    if (const auto* e = std::get_if<RandomErasing>(&t)) {
      erasing_ = *e;
      continue;
    }
    std::visit(Overload{
                   [&](const RandomResizedCrop& r) { size = r.size; },
                   [&](const Resize& r) {
                     if (r.shorter > 0) {
                       size.reset();
                     } else {
                       size = r.size;
                     }
                   },
                   [&](const CenterCrop& r) { size = r.size; },
                   [&](const RandomCrop& r) { size = r.size; },
                   [](const auto&) {},  // flips and colour transforms keep the size
               },
               t);
    // Colour transforms act on the output: a geometric one after them would
    // have to see their pixels, which plan()'s single box cannot give.
    const bool pixel = is_pixel_transform(t);
    if (!pixel && pixel_ops_) {
      throw AugmentError(transform_name(t) + ": geometric transforms must come before the colour transforms (" +
                         "Conveyor applies those to the cropped output)");
    }
    pixel_ops_ = pixel_ops_ || pixel;
  }
  if (!size) throw AugmentError("augment: the output size depends on the image: end the chain with a crop or a sized Resize");
  out_ = *size;
  for (const Transform& t : chain_) {
    if (const auto* b = std::get_if<GaussianBlur>(&t)) {  // reflect padding needs kernel // 2 < the side
      check(b->kernel_x / 2 < out_.width && b->kernel_y / 2 < out_.height, "GaussianBlur",
            "kernel_size // 2 must be below the output's width and height (reflect padding)");
    }
  }
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
                   [&](const RandomVerticalFlip& r) {
                     if (rng.bernoulli(r.p)) {  // y' = height - y
                       c.ay += c.by * c.height;
                       c.by = -c.by;
                     }
                   },
                   [](const auto&) {},  // colour transforms: plan_pixels(); RandomErasing, MixUp, CutMix: the device
               },
               t);
  }
  Geometry g;
  g.out = {c.height, c.width};
  g.flip = c.bx < 0;
  const double xa = c.ax, xb = c.ax + c.bx * c.width;
  g.x0 = std::min(xa, xb);
  g.x1 = std::max(xa, xb);
  g.vflip = c.by < 0;
  const double ya = c.ay, yb = c.ay + c.by * c.height;
  g.y0 = std::min(ya, yb);
  g.y1 = std::max(ya, yb);
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
            [](const RandomVerticalFlip& r) { return "RandomVerticalFlip(" + num(r.p) + ")"; },
            [](const RandomErasing& r) {
              // Appended piece by piece: GCC 12 at -O3 flags "lit" + std::string&& as a false -Wrestrict.
              std::string s = "RandomErasing(p=";
              s.append(num(r.p)).append(", scale=(").append(num(r.scale[0])).append(", ").append(num(r.scale[1]));
              s.append("), ratio=(").append(num(r.ratio[0])).append(", ").append(num(r.ratio[1])).append("), value=");
              if (r.value[1] != r.value[0] || r.value[2] != r.value[0]) {
                s.append("(").append(num(r.value[0])).append(", ").append(num(r.value[1]));
                s.append(", ").append(num(r.value[2])).append(")");
              } else {
                s.append(num(r.value[0]));
              }
              return s.append("; after normalize, on the device)");
            },
            [](const MixUp& r) { return describe_mixing("MixUp", r.alpha, r.num_classes); },
            [](const CutMix& r) { return describe_mixing("CutMix", r.alpha, r.num_classes); },
            [](const auto& r) { return describe_pixel_transform(r); },
        },
        t);
  }
  return out;
}

void Augment::plan_pixels(Rng& rng, std::vector<PixelOp>& ops) const {
  ops.clear();
  if (!pixel_ops_) return;
  using K = PixelOp::Kind;
  for (const Transform& t : chain_) {
    std::visit(
        Overload{
            [&](const ColorJitter& r) {
              if (r.p < 1 && !rng.bernoulli(r.p)) return;  // RandomApply
              // ColorJitter.get_params: a random order of the four, then each enabled factor.
              std::array<int, 4> order{0, 1, 2, 3};
              for (int i = 3; i > 0; --i) std::swap(order[std::size_t(i)], order[rng.below(std::uint64_t(i) + 1)]);
              const auto on = [](double lo, double hi, double identity) { return !(lo == identity && hi == identity); };
              const bool b_on = on(r.brightness_min, r.brightness_max, 1), c_on = on(r.contrast_min, r.contrast_max, 1),
                         s_on = on(r.saturation_min, r.saturation_max, 1), h_on = on(r.hue_min, r.hue_max, 0);
              const double b = b_on ? rng.uniform(r.brightness_min, r.brightness_max) : 1;
              const double c = c_on ? rng.uniform(r.contrast_min, r.contrast_max) : 1;
              const double s = s_on ? rng.uniform(r.saturation_min, r.saturation_max) : 1;
              const double h = h_on ? rng.uniform(r.hue_min, r.hue_max) : 0;
              for (const int k : order) {
                if (k == 0 && b_on) ops.push_back({K::brightness, b});
                if (k == 1 && c_on) ops.push_back({K::contrast, c});
                if (k == 2 && s_on) ops.push_back({K::saturation, s});
                if (k == 3 && h_on) ops.push_back({K::hue, h});
              }
            },
            [&](const RandomGrayscale& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::grayscale});
            },
            [&](const GaussianBlur& r) {
              if (r.p < 1 && !rng.bernoulli(r.p)) return;  // RandomApply
              ops.push_back({K::blur, rng.uniform(r.sigma_min, r.sigma_max), r.kernel_x, r.kernel_y});
            },
            [&](const RandomSolarize& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::solarize, r.threshold});
            },
            [&](const RandomPosterize& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::posterize, double(r.bits)});
            },
            [&](const RandomAdjustSharpness& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::sharpness, r.sharpness_factor});
            },
            [&](const RandomAutocontrast& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::autocontrast});
            },
            [&](const RandomEqualize& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::equalize});
            },
            [&](const RandomInvert& r) {
              if (rng.bernoulli(r.p)) ops.push_back({K::invert});
            },
            [&](const TrivialAugmentWide& r) { plan_trivial_augment(r, out_, rng, ops); },
            [&](const RandAugment& r) { plan_rand_augment(r, out_, rng, ops); },
            [](const auto&) {},  // geometric: plan(); RandomErasing, MixUp, CutMix: the device
        },
        t);
  }
}

namespace {
// _apply_op's F.affine calls: shear about the top-left corner, translate about the centre.
AffineParams shear(double x_degrees, double y_degrees) {
  AffineParams p;
  p.shear_x = x_degrees;
  p.shear_y = y_degrees;
  p.center = std::array<double, 2>{0, 0};
  return p;
}
AffineParams translate(double x, double y) {
  AffineParams p;
  p.translate_x = x;
  p.translate_y = y;
  return p;
}
}  // namespace

void apply_pixel_ops(const std::vector<PixelOp>& ops, RgbView img, PhotometricScratch& scratch) {
  using K = PixelOp::Kind;
  for (const PixelOp& op : ops) {
    switch (op.kind) {
      case K::brightness: adjust_brightness(img, op.value); break;
      case K::contrast: adjust_contrast(img, op.value); break;
      case K::saturation: adjust_saturation(img, op.value); break;
      case K::hue: adjust_hue(img, op.value); break;
      case K::grayscale: to_grayscale(img); break;
      case K::blur: gaussian_blur(img, op.kernel_x, op.kernel_y, op.value, op.value, scratch); break;
      case K::solarize: solarize(img, op.value); break;
      case K::posterize: posterize(img, int(op.value)); break;
      case K::sharpness: adjust_sharpness(img, op.value, scratch); break;
      case K::autocontrast: autocontrast(img); break;
      case K::equalize: equalize(img); break;
      case K::invert: invert(img); break;
      case K::rotate: rotate(img, op.value, op.fill, scratch); break;
      case K::shear_x: affine(img, shear(op.value, 0), op.fill, scratch); break;
      case K::shear_y: affine(img, shear(0, op.value), op.fill, scratch); break;
      case K::translate_x: affine(img, translate(op.value, 0), op.fill, scratch); break;
      case K::translate_y: affine(img, translate(0, op.value), op.fill, scratch); break;
    }
  }
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
