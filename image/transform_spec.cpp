// A small recursive-descent reader, written here: the grammar is a Python
// call list of numbers and tuples, which no Debian-packaged parser covers
// without a Python interpreter; toml++ and CLI11 read the value this text is
// given as.
#include "image/transform_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace conveyor {
namespace {

[[noreturn]] void fail(const std::string& what) { throw AugmentError("transforms: " + what); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits at the commas outside parentheses; refuses unbalanced parentheses.
std::vector<std::string_view> split_top(std::string_view s, const std::string& where) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth < 0) fail(where + ": a ')' without its '('");
    if (s[i] == ',' && depth == 0) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (depth != 0) fail(where + ": a '(' without its ')'");
  parts.push_back(trim(s.substr(start)));
  return parts;
}

bool is_identifier(std::string_view s) {
  return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Value {
  enum class Kind { number, tuple, boolean, none } kind = Kind::none;
  std::vector<double> numbers;  // one for a number, each element for a tuple
  bool flag = false;
};

std::optional<double> number(std::string_view s) {
  const std::string text(trim(s));
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

Value parse_value(std::string_view s, const std::string& where) {
  s = trim(s);
  Value v;
  if (s == "None") return v;
  if (s == "True" || s == "False") {
    v.kind = Value::Kind::boolean;
    v.flag = s == "True";
    return v;
  }
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') {
    v.kind = Value::Kind::tuple;
    std::string_view inner = trim(s.substr(1, s.size() - 2));
    if (!inner.empty() && inner.back() == ',') inner = trim(inner.substr(0, inner.size() - 1));  // (4,)
    if (inner.empty()) fail(where + ": an empty tuple");
    for (const std::string_view e : split_top(inner, where)) {
      const auto n = number(e);
      if (!n) fail(where + ": '" + std::string(e).append("' in a tuple is not a finite number"));
      v.numbers.push_back(*n);
    }
    return v;
  }
  const auto n = number(s);
  if (!n) fail(where + ": '" + std::string(s).append("' is not a number, a tuple of numbers, True, False or None"));
  v.kind = Value::Kind::number;
  v.numbers = {*n};
  return v;
}

// One transform's arguments, bound to its parameter names.
class Args {
 public:
  Args(std::string op, std::vector<const char*> names, std::string_view inner) : op_(std::move(op)), names_(std::move(names)) {
    if (trim(inner).empty()) return;
    bool keywords = false;
    std::size_t position = 0;
    for (const std::string_view a : split_top(inner, op_)) {
      if (a.empty()) fail(op_ + ": an empty argument");
      const auto eq = a.find('=');
      const bool keyword = eq != std::string_view::npos && is_identifier(trim(a.substr(0, eq)));
      std::string name;
      std::string_view text = a;
      if (keyword) {
        name = std::string(trim(a.substr(0, eq)));
        text = a.substr(eq + 1);
        if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return name == n; }) == names_.end()) {
          fail(op_ + ": unknown parameter '" + name + "' (it takes " + list() + ")");
        }
        keywords = true;
      } else {
        if (keywords) fail(op_ + ": a positional argument after a keyword one");
        if (position >= names_.size()) fail(op_ + ": more than " + std::to_string(names_.size()) + " arguments (" + list() + ")");
        name = names_[position++];
      }
      if (!values_.emplace(name, parse_value(text, op_ + ": " + name)).second) fail(op_ + ": " + name + " given twice");
    }
  }

  bool has(const char* name) const {
    const auto it = values_.find(name);
    return it != values_.end() && it->second.kind != Value::Kind::none;
  }
  double number(const char* name, double fallback) const {
    if (!has(name)) return fallback;
    const Value& v = values_.at(name);
    if (v.kind != Value::Kind::number) fail(op_ + ": " + name + " must be a number");
    return v.numbers[0];
  }
  int integer(const char* name, std::optional<int> fallback) const {
    if (!has(name)) {
      if (!fallback) fail(op_ + ": " + name + " is required");
      return *fallback;
    }
    const double v = number(name, 0);
    if (v != std::floor(v) || std::abs(v) > 1e9) fail(op_ + ": " + name + " must be an integer");
    return int(v);
  }
  double probability(double fallback) const { return number("p", fallback); }
  bool flag(const char* name, bool fallback) const {
    if (!has(name)) return fallback;
    const Value& v = values_.at(name);
    if (v.kind != Value::Kind::boolean) fail(op_ + ": " + name + " must be True or False");
    return v.flag;
  }
  // A number or a tuple of `counts` numbers (e.g. {1, 2}), as a list.
  std::vector<double> numbers(const char* name, std::initializer_list<std::size_t> counts) const {
    const Value& v = values_.at(name);
    const std::size_t n = v.numbers.size();
    if (v.kind == Value::Kind::boolean || std::find(counts.begin(), counts.end(), n) == counts.end() ||
        (v.kind == Value::Kind::number && std::find(counts.begin(), counts.end(), 1) == counts.end())) {
      std::string want;
      for (const std::size_t c : counts) {
        if (!want.empty()) want += " or ";
        want += std::to_string(c);
      }
      fail(op_ + ": " + name + " must be " + want + " number(s)");
    }
    return v.numbers;
  }
  // A size: an int (square, or a Resize's shorter side) or (h, w).
  std::vector<int> size(const char* name) const {
    if (!has(name)) fail(op_ + ": " + name + " is required");
    std::vector<int> out;
    for (const double d : numbers(name, {1, 2})) {
      if (d != std::floor(d) || d < 1 || d > kMaxCrop) fail(op_ + ": " + name + " must be whole numbers 1 .. 16384");
      out.push_back(int(d));
    }
    return out;
  }

 private:
  std::string list() const {
    std::string s;
    for (const char* n : names_) {
      if (!s.empty()) s += ", ";
      s += n;
    }
    return s.empty() ? "no parameters" : s;
  }
  std::string op_;
  std::vector<const char*> names_;
  std::map<std::string, Value> values_;
};

Size square_or_hw(const std::vector<int>& v) { return v.size() == 1 ? Size{v[0], v[0]} : Size{v[0], v[1]}; }

// A ColorJitter factor as torchvision's _check_input takes it: v -> [max(0, 1 - v), 1 + v], or (min, max).
std::pair<double, double> jitter_range(const Args& a, const char* name, double centre) {
  if (!a.has(name)) return {centre, centre};
  const std::vector<double> v = a.numbers(name, {1, 2});
  if (v.size() == 2) return {v[0], v[1]};
  if (v[0] < 0) fail(std::string("ColorJitter: ") + name + " must be >= 0");
  if (centre == 0 && v[0] > 0.5) fail("ColorJitter: hue must be in [0, 0.5]");
  return centre == 0 ? std::pair{-v[0], v[0]} : std::pair{std::max(0.0, centre - v[0]), centre + v[0]};
}

// The transforms whose arguments take more than a line to read, one function each.
RandomResizedCrop make_random_resized_crop(const Args& a) {
  RandomResizedCrop t{square_or_hw(a.size("size"))};
  if (a.has("scale")) {
    const auto s = a.numbers("scale", {2});
    t.scale_min = s[0];
    t.scale_max = s[1];
  }
  if (a.has("ratio")) {
    const auto r = a.numbers("ratio", {2});
    t.ratio_min = r[0];
    t.ratio_max = r[1];
  }
  return t;
}

RandomCrop make_random_crop(const Args& a, const std::string& shown) {
  RandomCrop t{square_or_hw(a.size("size"))};
  if (a.has("padding")) {
    std::vector<int> p;
    for (const double d : a.numbers("padding", {1, 2, 4})) {
      if (d != std::floor(d)) fail(shown + ": padding must be whole numbers");
      p.push_back(int(std::clamp(d, -1.0, 1e6)));
    }
    if (p.size() == 1) p = {p[0], p[0], p[0], p[0]};
    if (p.size() == 2) p = {p[0], p[1], p[0], p[1]};  // torchvision: (left/right, top/bottom)
    t.pad_left = p[0];
    t.pad_top = p[1];
    t.pad_right = p[2];
    t.pad_bottom = p[3];
  }
  t.pad_if_needed = a.flag("pad_if_needed", false);
  return t;
}

ColorJitter make_color_jitter(const Args& a) {
  ColorJitter t;
  std::tie(t.brightness_min, t.brightness_max) = jitter_range(a, "brightness", 1);
  std::tie(t.contrast_min, t.contrast_max) = jitter_range(a, "contrast", 1);
  std::tie(t.saturation_min, t.saturation_max) = jitter_range(a, "saturation", 1);
  std::tie(t.hue_min, t.hue_max) = jitter_range(a, "hue", 0);
  t.p = a.probability(1);
  return t;
}

GaussianBlur make_gaussian_blur(const Args& a, const std::string& shown) {
  if (!a.has("kernel_size")) fail(shown + ": kernel_size is required");
  GaussianBlur t;
  const auto k = a.numbers("kernel_size", {1, 2});
  for (const double d : k) {
    if (d != std::floor(d) || d < 1 || d > 255) fail(shown + ": kernel_size must be odd whole numbers 1 .. 255");
  }
  t.kernel_x = int(k[0]);
  t.kernel_y = int(k.size() == 2 ? k[1] : k[0]);
  if (a.has("sigma")) {
    const auto s = a.numbers("sigma", {1, 2});
    t.sigma_min = s[0];
    t.sigma_max = s.size() == 2 ? s[1] : s[0];
  }
  t.p = a.probability(1);
  return t;
}

// fill: None (0), a number for every channel, or (r, g, b); interpolation: NEAREST only.
std::array<double, 3> make_fill(const Args& a, const std::string& shown) {
  if (a.has("interpolation")) fail(shown + ": interpolation: only NEAREST, the default, is supported");
  if (!a.has("fill")) return {0, 0, 0};
  const auto f = a.numbers("fill", {1, 3});
  return f.size() == 1 ? std::array<double, 3>{f[0], f[0], f[0]} : std::array<double, 3>{f[0], f[1], f[2]};
}

TrivialAugmentWide make_trivial_augment(const Args& a, const std::string& shown) {
  TrivialAugmentWide t;
  t.num_magnitude_bins = a.integer("num_magnitude_bins", 31);
  t.fill = make_fill(a, shown);
  return t;
}

RandAugment make_rand_augment(const Args& a, const std::string& shown) {
  RandAugment t;
  t.num_ops = a.integer("num_ops", 2);
  t.magnitude = a.integer("magnitude", 9);
  t.num_magnitude_bins = a.integer("num_magnitude_bins", 31);
  t.fill = make_fill(a, shown);
  return t;
}

// inplace is accepted and has no effect: it says whether torchvision writes
// into its input, and the output is the same either way.
RandomErasing make_random_erasing(const Args& a) {
  RandomErasing t;
  t.p = a.probability(0.5);
  if (a.has("scale")) {
    const auto s = a.numbers("scale", {2});
    t.scale = {s[0], s[1]};
  }
  if (a.has("ratio")) {
    const auto r = a.numbers("ratio", {2});
    t.ratio = {r[0], r[1]};
  }
  if (a.has("value")) {
    const auto v = a.numbers("value", {1, 3});
    t.value = v.size() == 1 ? std::array<float, 3>{float(v[0]), float(v[0]), float(v[0])}
                            : std::array<float, 3>{float(v[0]), float(v[1]), float(v[2])};
  }
  (void)a.flag("inplace", false);
  return t;
}

// One transform from its name (lower case, `key`; as written, `shown`) and the text between its parentheses.
Transform make(const std::string& key, const std::string& shown, std::string_view inner) {
  const auto args = [&](std::vector<const char*> names) { return Args(shown, std::move(names), inner); };
  if (key == "randomresizedcrop" || key == "rrc") return make_random_resized_crop(args({"size", "scale", "ratio"}));
  if (key == "resize") {
    const auto s = args({"size"}).size("size");
    return s.size() == 1 ? Resize{s[0], {}} : Resize{0, {s[0], s[1]}};
  }
  if (key == "centercrop" || key == "center") return CenterCrop{square_or_hw(args({"size"}).size("size"))};
  if (key == "randomcrop" || key == "crop") return make_random_crop(args({"size", "padding", "pad_if_needed"}), shown);
  if (key == "randomhorizontalflip" || key == "flip") return RandomHorizontalFlip{args({"p"}).probability(0.5)};
  if (key == "randomverticalflip" || key == "vflip") return RandomVerticalFlip{args({"p"}).probability(0.5)};
  if (key == "colorjitter" || key == "jitter") return make_color_jitter(args({"brightness", "contrast", "saturation", "hue", "p"}));
  if (key == "randomgrayscale" || key == "grayscale") return RandomGrayscale{args({"p"}).probability(0.1)};
  if (key == "gaussianblur" || key == "blur") return make_gaussian_blur(args({"kernel_size", "sigma", "p"}), shown);
  if (key == "randomsolarize" || key == "solarize") {
    const Args a = args({"threshold", "p"});
    if (!a.has("threshold")) fail(shown + ": threshold is required");
    return RandomSolarize{a.number("threshold", 0), a.probability(0.5)};
  }
  if (key == "randomposterize" || key == "posterize") {
    const Args a = args({"bits", "p"});
    return RandomPosterize{a.integer("bits", std::nullopt), a.probability(0.5)};
  }
  if (key == "randomadjustsharpness" || key == "sharpness") {
    const Args a = args({"sharpness_factor", "p"});
    if (!a.has("sharpness_factor")) fail(shown + ": sharpness_factor is required");
    return RandomAdjustSharpness{a.number("sharpness_factor", 0), a.probability(0.5)};
  }
  if (key == "randomautocontrast" || key == "autocontrast") return RandomAutocontrast{args({"p"}).probability(0.5)};
  if (key == "randomequalize" || key == "equalize") return RandomEqualize{args({"p"}).probability(0.5)};
  if (key == "randominvert" || key == "invert") return RandomInvert{args({"p"}).probability(0.5)};
  if (key == "trivialaugmentwide" || key == "trivialaugment") {
    return make_trivial_augment(args({"num_magnitude_bins", "interpolation", "fill"}), shown);
  }
  if (key == "randaugment") {
    return make_rand_augment(args({"num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill"}), shown);
  }
  if (key == "randomerasing" || key == "erase") return make_random_erasing(args({"p", "scale", "ratio", "value", "inplace"}));
  // torchvision.transforms.v2's MixUp and CutMix: alpha=1.0, num_classes=None (the dataset's here).
  if (key == "mixup") {
    const Args a = args({"alpha", "num_classes"});
    return MixUp{a.number("alpha", 1.0), a.integer("num_classes", 0)};
  }
  if (key == "cutmix") {
    const Args a = args({"alpha", "num_classes"});
    return CutMix{a.number("alpha", 1.0), a.integer("num_classes", 0)};
  }
  fail("unknown transform '" + shown +
       "' (RandomResizedCrop, Resize, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, "
       "RandomGrayscale, GaussianBlur, RandomSolarize, RandomPosterize, RandomAdjustSharpness, RandomAutocontrast, "
       "RandomEqualize, RandomInvert, TrivialAugmentWide, RandAugment, RandomErasing, MixUp, CutMix, or their short "
       "names)");
}

}  // namespace

std::vector<Transform> parse_transforms(std::string_view text) {
  std::vector<Transform> chain;
  if (trim(text).empty()) fail("the list is empty");
  for (const std::string_view item : split_top(trim(text), "the list")) {
    if (item.empty()) fail("an empty entry in the list (two commas, or one at an end)");
    const auto open = item.find('(');
    const std::string_view name = trim(item.substr(0, open));
    if (!is_identifier(name)) fail(std::string("'").append(item).append("' is not a transform name with (arguments)"));
    std::string_view inner;
    if (open != std::string_view::npos) {
      if (item.back() != ')') fail(std::string(name) + ": text after its ')'");
      inner = item.substr(open + 1, item.size() - open - 2);
    }
    chain.push_back(make(lower(name), std::string(name), inner));
  }
  return chain;
}

std::vector<ViewSpec> parse_views(std::string_view text) {
  std::vector<ViewSpec> views;
  if (trim(text).empty()) throw AugmentError("views: the list is empty");
  std::size_t total = 0;
  while (true) {
    const std::size_t end = text.find(';');
    const std::string_view entry = trim(text.substr(0, end));
    const std::string which = "views: entry " + std::to_string(views.size() + 1) + ": ";
    if (entry.empty()) throw AugmentError(which + "empty (two ';', or one at an end)");
    ViewSpec v;
    std::string_view list = entry;
    // A count in front: the digits before a ':' (the transform grammar has no ':').
    if (const std::size_t colon = entry.find(':'); colon != std::string_view::npos) {
      const std::string_view count = trim(entry.substr(0, colon));
      const bool digits = !count.empty() && count.size() <= 3 &&
                          std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
      const std::size_t n = digits ? std::size_t(std::stoul(std::string(count))) : 0;
      if (n < 1 || n > kMaxViews) {
        throw AugmentError(which + "count '" + std::string(count) + "' is not a whole number from 1 to " +
                           std::to_string(kMaxViews));
      }
      v.count = n;
      list = entry.substr(colon + 1);
    }
    try {
      v.transforms = parse_transforms(list);
      (void)Augment(v.transforms);  // the chain (order, sizes), named by its entry
    } catch (const AugmentError& e) {
      throw AugmentError(which + e.what());
    }
    total += v.count;
    if (total > kMaxViews) throw AugmentError("views: more than " + std::to_string(kMaxViews) + " views in all");
    views.push_back(std::move(v));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return views;
}

}  // namespace conveyor
