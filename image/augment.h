// Augment: torchvision-style geometric transforms, composed into one crop box.
//
// A chain such as Resize(256) + CenterCrop(224), or RandomResizedCrop(224) +
// RandomHorizontalFlip(), is never run step by step on pixels. plan() folds the
// chain into a Geometry: one box in source-pixel coordinates, the output size
// and two flip flags. The decoder then decodes only the rows and columns the box
// needs (at a reduced JPEG scale when it pays) and one resize writes the result
// straight into the batch slot. Names and parameters follow torchvision, so a
// user can switch: RandomResizedCrop(size, scale, ratio), Resize(shorter side or
// h x w), CenterCrop (pads with ImageConfig::pad_value when larger than the image),
// RandomCrop(size, padding, pad_if_needed), RandomHorizontalFlip(p),
// RandomVerticalFlip(p). Colour transforms (ColorJitter, RandomGrayscale,
// GaussianBlur, ...) and the policies (TrivialAugmentWide, RandAugment) follow
// the geometric ones: plan_pixels() draws their parameters, apply_pixel_ops()
// runs them on the output. RandomErasing may end the chain: it follows
// Normalize, so it is not run here but on the device after normalize
// (erasing(); device/erase_step.h). MixUp and CutMix, batch ops, come after
// everything else and run on the device too (mixing(); device/mix_step.h).
//
// Random parameters come from the sample's Rng, so results do not depend on the
// worker count. Thread safety: an Augment is immutable; plan() is const and
// thread-safe. Stateless: no allocation in plan().
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <optional>

#include "pipeline/rng.h"
#include "image/mixing.h"
#include "image/random_erasing.h"
#include "image/resize_math.h"  // ResizeWindow

namespace conveyor {

struct Size {
  int height = 0, width = 0;
  bool operator==(const Size&) const = default;
};

struct RandomResizedCrop {
  Size size;
  double scale_min = 0.08, scale_max = 1.0;          // of the image's area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};
// Shorter side to `shorter` (aspect kept, longer side truncated as torchvision
// does), or exactly `size` when shorter == 0.
struct Resize {
  int shorter = 0;
  Size size;
};
struct CenterCrop {
  Size size;
};
struct RandomCrop {
  Size size;
  int pad_left = 0, pad_top = 0, pad_right = 0, pad_bottom = 0;
  bool pad_if_needed = false;  // pad an image smaller than size instead of failing
};
struct RandomHorizontalFlip {
  double p = 0.5;
};
// torchvision's RandomVerticalFlip: the image upside down with probability p.
struct RandomVerticalFlip {
  double p = 0.5;
};

// Colour and tone transforms (image/photometric.h's ops, torchvision's
// names, parameters and draws). They act on the output after the geometric
// transforms, so in a chain they come after every crop and flip. `p` is
// RandomApply's for the two transforms torchvision wraps in it (ColorJitter,
// GaussianBlur); the Random* ones have torchvision's own p.
//
// ColorJitter: each factor drawn uniformly from its [min, max], the four in a
// random order, as ColorJitter.get_params. A range equal to its identity
// ([1, 1], hue [0, 0]) is off, and draws nothing. color_jitter() makes the
// ranges from torchvision's scalar arguments.
struct ColorJitter {
  double brightness_min = 1, brightness_max = 1;
  double contrast_min = 1, contrast_max = 1;
  double saturation_min = 1, saturation_max = 1;
  double hue_min = 0, hue_max = 0;  // within [-0.5, 0.5]
  double p = 1;
};
// ColorJitter(brightness, contrast, saturation, hue) as torchvision takes
// scalars: [max(0, 1 - v), 1 + v] for the first three, [-hue, hue]. Throws
// AugmentError for a negative value or a hue above 0.5.
ColorJitter color_jitter(double brightness, double contrast = 0, double saturation = 0, double hue = 0);
struct RandomGrayscale {
  double p = 0.1;
};
// sigma drawn uniformly from [sigma_min, sigma_max], the same for x and y.
struct GaussianBlur {
  int kernel_x = 3, kernel_y = 3;  // odd, 1 .. 255
  double sigma_min = 0.1, sigma_max = 2.0;
  double p = 1;
};
struct RandomSolarize {
  double threshold = 128;  // 0 .. 255
  double p = 0.5;
};
struct RandomPosterize {
  int bits = 4;  // 0 .. 8
  double p = 0.5;
};
struct RandomAdjustSharpness {
  double sharpness_factor = 2;
  double p = 0.5;
};
struct RandomAutocontrast {
  double p = 0.5;
};
struct RandomEqualize {
  double p = 0.5;
};
struct RandomInvert {
  double p = 0.5;
};

// The automatic policies (image/auto_augment.h has their ops and magnitudes),
// drawn as torchvision draws them; interpolation is NEAREST, torchvision's
// default, the only one. `fill` is the RGB value rotate, shear and translate
// bring in from outside the image (0 .. 255 each, rounded half to even;
// torchvision's fill=None is 0).
//
// TrivialAugmentWide: per sample one of the 14 ops, uniformly, at a magnitude
// bin drawn uniformly from num_magnitude_bins (2 .. 1024), negated with
// probability 1/2 for the signed ops.
struct TrivialAugmentWide {
  int num_magnitude_bins = 31;
  std::array<double, 3> fill{0, 0, 0};
};
// RandAugment: num_ops (0 .. 64) ops drawn uniformly and independently, each at
// the fixed bin `magnitude` (0 .. num_magnitude_bins - 1), negated with
// probability 1/2 for the signed ops.
struct RandAugment {
  int num_ops = 2;
  int magnitude = 9;
  int num_magnitude_bins = 31;
  std::array<double, 3> fill{0, 0, 0};
};

using Transform = std::variant<RandomResizedCrop, Resize, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomVerticalFlip,
                               ColorJitter, RandomGrayscale, GaussianBlur, RandomSolarize, RandomPosterize,
                               RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomInvert,
                               TrivialAugmentWide, RandAugment, RandomErasing, MixUp, CutMix>;

// Views of a sample (ImageConfig::views, image/image_source.h): `count`
// renders with `transforms`, each with its own draws.
struct ViewSpec {
  std::size_t count = 1;             // 1 or more
  std::vector<Transform> transforms;  // a chain (no RandomErasing, MixUp or CutMix)
};

// One colour op with its parameters drawn (Augment::plan_pixels), applied by
// apply_pixel_ops() in the order drawn.
struct PixelOp {
  enum class Kind { brightness, contrast, saturation, hue, grayscale, blur, solarize, posterize, sharpness,
                    autocontrast, equalize, invert, rotate, shear_x, shear_y, translate_x, translate_y };
  Kind kind = Kind::invert;
  double value = 0;     // the factor, threshold, bits, sigma, angle or shear (degrees) or shift (pixels)
  int kernel_x = 0, kernel_y = 0;  // blur
  std::array<std::uint8_t, 3> fill{};  // rotate, shear and translate: the RGB brought in from outside
};

// The named training recipes (`conveyor --augment`, Python's augment=), each a
// transform chain ending at crop x crop.
enum class AugmentPreset {
  rrc,     // RandomResizedCrop + flip
  crop,    // Resize + RandomCrop (padding 4) + flip
  center,  // Resize to 8/7 of the crop + CenterCrop (deterministic: validation)
};
struct AugmentPresetName {
  std::string_view name;
  AugmentPreset preset;
};
inline constexpr std::array<AugmentPresetName, 3> kAugmentPresets{
    {{"rrc", AugmentPreset::rrc}, {"crop", AugmentPreset::crop}, {"center", AugmentPreset::center}}};
// ImageConfig's default recipe: RandomResizedCrop(224) + flip.
inline constexpr AugmentPreset kDefaultAugmentPreset = AugmentPreset::rrc;
inline constexpr int kDefaultCrop = 224;
// The largest output side the command's --crop and Python's crop= take.
inline constexpr int kMaxCrop = 16384;
// The preset's transforms at output size crop x crop. Throws nothing.
std::vector<Transform> preset_transforms(AugmentPreset preset, int crop);

// Bad transform parameters (construction) or an image a transform cannot take
// (plan(): e.g. smaller than a RandomCrop without padding).
class AugmentError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where the output's pixels come from. Output column c (0 .. width-1, before the
// flip) samples source x in [x0 + c * (x1 - x0) / width, ...). The box may reach
// outside the image: those output pixels take ImageConfig::pad_value (padding).
// The window is the source box the chain's last resize saw: torchvision crops
// and then resizes what is left, so the resize reads no pixel outside it, and
// a part of the box outside it is padding too (a RandomCrop with padding after
// the resize). plan() sets it; the default is the whole image.
struct Geometry {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // source-pixel box, x1 > x0, y1 > y0
  Size out;
  bool flip = false;  // mirror the output horizontally
  ResizeWindow window;  // in source pixels: u is x, v is y
  // Turn the output upside down (a RandomVerticalFlip drawn). The CPU render
  // reverses the rows; the GPU decode path takes no such box (gpu_decodable).
  bool vflip = false;
};

// Checks one transform's fields as Augment's constructor does (the list
// there); throws AugmentError naming the transform and field. What depends on
// the chain (order, output size) is the constructor's alone. Thread-safe.
void check_transform(const Transform& t);

class Augment {
 public:
  // Validates the chain: sizes (and a Resize's shorter side) 1 .. kMaxCrop,
  // 0 < scale_min <= scale_max <= 1, 0 < ratio_min <= ratio_max (finite),
  // 0 <= p <= 1, padding 0 .. kMaxCrop a side, and a fixed output size (a
  // shorter-side Resize must be followed by a crop). Throws
  // AugmentError naming the transform and field. An empty chain is invalid.
  explicit Augment(std::vector<Transform> chain);

  // The fixed output size (every sample has it).
  Size output() const { return out_; }
  const std::vector<Transform>& chain() const { return chain_; }

  // Folds the chain for an image of width x height (both >= 1), drawing random
  // parameters from rng. Throws AugmentError for an image a transform cannot take.
  Geometry plan(int width, int height, Rng& rng) const;

  // Draws the colour transforms' parameters for one sample into `ops` (cleared
  // first; no allocation once it has grown), from the same rng, after plan():
  // the ops to apply to the output, in order. Empty when the chain has none.
  void plan_pixels(Rng& rng, std::vector<PixelOp>& ops) const;
  // Whether the chain has colour transforms (the GPU decode path renders
  // geometry only, so such samples stay on the CPU).
  bool has_pixel_ops() const { return pixel_ops_; }

  // The chain's RandomErasing (its last transform), which the workers do not
  // run: the device does, after normalize (device/erase_step.h). None without.
  std::optional<RandomErasing> erasing() const { return erasing_; }
  // The chain's MixUp and CutMix (last, after RandomErasing if any, each at
  // most once), which the device runs on each batch after normalize
  // (device/mix_step.h); num_classes is the ops' own or 0. None without.
  std::optional<BatchMixing> mixing() const { return mixing_; }
  // The name of the chain's first transform that runs on the device after
  // normalize (RandomErasing, MixUp, CutMix), for a front end's "needs
  // normalize" message; null when none does.
  const char* device_transform() const { return erasing_ ? "RandomErasing" : mixing_ ? mixing_->name() : nullptr; }

  // A one-line description, e.g. "RandomResizedCrop(224, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5)".
  std::string describe() const;

 private:
  std::vector<Transform> chain_;
  Size out_;
  bool pixel_ops_ = false;
  std::optional<RandomErasing> erasing_;
  std::optional<BatchMixing> mixing_;
};

struct RgbView;
struct PhotometricScratch;
// Applies ops (plan_pixels') to the interleaved RGB8 output in place.
void apply_pixel_ops(const std::vector<PixelOp>& ops, RgbView img, PhotometricScratch& scratch);

}  // namespace conveyor
