// image/transform_spec.h: torchvision's Compose list as text, read into the
// chain Augment takes, and every mistake named in one line.
#include <string>

#include "catch_compat.h"

#include "image/augment.h"
#include "image/transform_spec.h"

using namespace conveyor;

namespace {
std::string described(const std::string& text) { return Augment(parse_transforms(text)).describe(); }
std::string error(const std::string& text) {
  try {
    Augment a(parse_transforms(text));
  } catch (const AugmentError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("transform lists: torchvision's names, short names and defaults give the same chains", "[transforms]") {
  const std::string rrc = Augment(preset_transforms(AugmentPreset::rrc, 224)).describe();
  REQUIRE(described("RandomResizedCrop(224), RandomHorizontalFlip()") == rrc);
  REQUIRE(described("rrc(224),flip") == rrc);
  REQUIRE(described("  randomresizedcrop( 224 , scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333) ) , flip(p=0.5) ") == rrc);
  REQUIRE(described("Resize(256), CenterCrop(224)") == Augment({Resize{256, {}}, CenterCrop{{224, 224}}}).describe());
  REQUIRE(described("Resize((64, 32)), RandomCrop(32, padding=4, pad_if_needed=True)") ==
          "Resize((64, 32)) + RandomCrop(32, padding=(4, 4, 4, 4), pad_if_needed=True)");
  REQUIRE(described("RandomCrop((24, 32), padding=(1, 2))") == "RandomCrop((24, 32), padding=(1, 2, 1, 2))");
  // SimCLR's recipe, as its authors write it in torchvision.
  REQUIRE(described("RandomResizedCrop(96), RandomHorizontalFlip(), ColorJitter(0.8, 0.8, 0.8, 0.2, p=0.8), "
                    "RandomGrayscale(p=0.2), GaussianBlur(kernel_size=9, sigma=(0.1, 2.0), p=0.5)") ==
          "RandomResizedCrop(96, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5) + "
          "ColorJitter(brightness=(0.2, 1.8), contrast=(0.2, 1.8), saturation=(0.2, 1.8), hue=(-0.2, 0.2), p=0.8) + "
          "RandomGrayscale(p=0.2) + GaussianBlur(kernel_size=(9, 9), sigma=(0.1, 2), p=0.5)");
  REQUIRE(described("center(32), jitter(brightness=(0.5, 0.9)), solarize(128), posterize(bits=4, p=1), "
                    "sharpness(2), autocontrast, equalize(0.3), invert") ==
          "CenterCrop(32) + ColorJitter(brightness=(0.5, 0.9), contrast=(1, 1), saturation=(1, 1), hue=(0, 0)) + "
          "RandomSolarize(threshold=128, p=0.5) + RandomPosterize(bits=4, p=1) + "
          "RandomAdjustSharpness(sharpness_factor=2, p=0.5) + RandomAutocontrast(p=0.5) + RandomEqualize(p=0.3) + "
          "RandomInvert(p=0.5)");
}

TEST_CASE("transform lists: each mistake is one line naming the transform and parameter", "[transforms]") {
  REQUIRE(error("") == "transforms: the list is empty");
  REQUIRE(error("rrc(224),,flip") == "transforms: an empty entry in the list (two commas, or one at an end)");
  REQUIRE(error("rrc(224), Flipp") ==
          "transforms: unknown transform 'Flipp' (RandomResizedCrop, Resize, CenterCrop, RandomCrop, "
          "RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, RandomGrayscale, GaussianBlur, RandomSolarize, "
          "RandomPosterize, RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomInvert, "
          "TrivialAugmentWide, RandAugment, RandomErasing, MixUp, CutMix, or their short names)");
  REQUIRE(error("RandomResizedCrop(224, scal=(0.1, 1))") ==
          "transforms: RandomResizedCrop: unknown parameter 'scal' (it takes size, scale, ratio)");
  REQUIRE(error("RandomResizedCrop(224, scale=0.5)") == "transforms: RandomResizedCrop: scale must be 2 number(s)");
  REQUIRE(error("RandomResizedCrop(224.5)") == "transforms: RandomResizedCrop: size must be whole numbers 1 .. 16384");
  REQUIRE(error("RandomResizedCrop()") == "transforms: RandomResizedCrop: size is required");
  REQUIRE(error("RandomResizedCrop(224, 224)") == "transforms: RandomResizedCrop: scale must be 2 number(s)");
  REQUIRE(error("rrc(224, scale=(0.1, 1), scale=(0.2, 1))") == "transforms: rrc: scale given twice");
  REQUIRE(error("rrc(size=224, (0.1, 1))") == "transforms: rrc: a positional argument after a keyword one");
  REQUIRE(error("flip(0.5, 0.5)") == "transforms: flip: more than 1 arguments (p)");
  REQUIRE(error("rrc(224), flip(p=high)") ==
          "transforms: flip: p: 'high' is not a number, a tuple of numbers, True, False or None");
  REQUIRE(error("rrc(224, scale=(0.1, x))") == "transforms: rrc: scale: 'x' in a tuple is not a finite number");
  REQUIRE(error("rrc(224") == "transforms: the list: a '(' without its ')'");
  REQUIRE(error("rrc(224)) ") == "transforms: the list: a ')' without its '('");
  REQUIRE(error("rrc(224) x") == "transforms: rrc: text after its ')'");
  REQUIRE(error("crop(32, pad_if_needed=1)") == "transforms: crop: pad_if_needed must be True or False");
  REQUIRE(error("rrc(32), blur") == "transforms: blur: kernel_size is required");
  REQUIRE(error("rrc(32), blur(4)") == "GaussianBlur: kernel_size must be odd, 1 .. 255");  // Augment's own check
  REQUIRE(error("rrc(32), posterize(4.5)") == "transforms: posterize: bits must be an integer");
  REQUIRE(error("rrc(32), jitter(-0.1)") == "transforms: ColorJitter: brightness must be >= 0");
  REQUIRE(error("rrc(32), jitter(hue=0.6)") == "transforms: ColorJitter: hue must be in [0, 0.5]");
  REQUIRE(error("rrc(32), jitter(hue=(-0.2, 0.6))") == "ColorJitter: hue must be a range -0.5 <= min <= max <= 0.5");
  REQUIRE(error("jitter(0.4), rrc(32)") ==
          "RandomResizedCrop: geometric transforms must come before the colour transforms (Conveyor applies those to "
          "the cropped output)");
}

TEST_CASE("transform lists: the policies take torchvision's names, defaults and fill", "[transforms]") {
  REQUIRE(described("RandomResizedCrop(176), RandomHorizontalFlip(), TrivialAugmentWide()") ==
          "RandomResizedCrop(176, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5) + "
          "TrivialAugmentWide(num_magnitude_bins=31)");
  REQUIRE(described("rrc(176), trivialaugment(num_magnitude_bins=11, fill=128)") ==
          "RandomResizedCrop(176, scale=(0.08, 1), ratio=(0.75, 1.33)) + "
          "TrivialAugmentWide(num_magnitude_bins=11, fill=(128, 128, 128))");
  REQUIRE(described("center(32), RandAugment()") ==
          "CenterCrop(32) + RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31)");
  REQUIRE(described("center(32), randaugment(3, 5, fill=(1, 2, 3))") ==
          "CenterCrop(32) + RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=31, fill=(1, 2, 3))");
  REQUIRE(described("center(32), RandAugment(num_ops=0, magnitude=0, num_magnitude_bins=2, fill=None)") ==
          "CenterCrop(32) + RandAugment(num_ops=0, magnitude=0, num_magnitude_bins=2)");
}

TEST_CASE("transform lists: a policy's mistake names the policy and the parameter", "[transforms]") {
  REQUIRE(error("rrc(32), TrivialAugmentWide(num_magnitude_bins=1)") ==
          "TrivialAugmentWide: num_magnitude_bins must be in [2, 1024]");
  REQUIRE(error("rrc(32), trivialaugment(31.5)") == "transforms: trivialaugment: num_magnitude_bins must be an integer");
  REQUIRE(error("rrc(32), trivialaugment(fill=(1, 2))") == "transforms: trivialaugment: fill must be 1 or 3 number(s)");
  REQUIRE(error("rrc(32), trivialaugment(fill=256)") == "TrivialAugmentWide: fill must be in [0, 255]");
  REQUIRE(error("rrc(32), trivialaugment(interpolation=2)") ==
          "transforms: trivialaugment: interpolation: only NEAREST, the default, is supported");
  REQUIRE(error("rrc(32), trivialaugment(magnitude=9)") ==
          "transforms: trivialaugment: unknown parameter 'magnitude' (it takes num_magnitude_bins, interpolation, fill)");
  REQUIRE(error("rrc(32), RandAugment(magnitude=31)") == "RandAugment: magnitude must be in [0, num_magnitude_bins - 1]");
  REQUIRE(error("rrc(32), RandAugment(magnitude=4, num_magnitude_bins=4)") ==
          "RandAugment: magnitude must be in [0, num_magnitude_bins - 1]");
  REQUIRE(error("rrc(32), RandAugment(num_ops=-1)") == "RandAugment: num_ops must be in [0, 64]");
  REQUIRE(error("rrc(32), RandAugment(num_ops=2.5)") == "transforms: RandAugment: num_ops must be an integer");
  REQUIRE(error("rrc(32), RandAugment(num_ops=True)") == "transforms: RandAugment: num_ops must be a number");
  REQUIRE(error("TrivialAugmentWide(), rrc(32)") ==
          "RandomResizedCrop: geometric transforms must come before the colour transforms (Conveyor applies those to "
          "the cropped output)");
}

TEST_CASE("transform lists: RandomErasing ends the list, with torchvision's parameters, and the workers leave it out",
          "[transforms][erase]") {
  // torchvision's ResNet-50 recipe's tail, and timm's.
  const Augment a(parse_transforms("RandomResizedCrop(176), RandomHorizontalFlip(), TrivialAugmentWide(), "
                                   "RandomErasing(0.1)"));
  REQUIRE(a.erasing());
  REQUIRE(a.erasing()->p == 0.1);
  REQUIRE(a.erasing()->scale == std::array<double, 2>{0.02, 0.33});
  REQUIRE(a.erasing()->ratio == std::array<double, 2>{0.3, 3.3});
  REQUIRE(a.erasing()->value == std::array<float, 3>{0, 0, 0});
  REQUIRE(a.output().width == 176);
  REQUIRE(a.describe().find("RandomErasing(p=0.1, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0; after normalize") !=
          std::string::npos);
  const Augment b(parse_transforms("rrc(224), erase(p=0.25, scale=(0.05, 0.5), ratio=(0.5, 2), value=(1, -1, 0.5), "
                                   "inplace=True)"));
  REQUIRE(b.erasing()->value == std::array<float, 3>{1, -1, 0.5});
  REQUIRE(b.erasing()->scale == std::array<double, 2>{0.05, 0.5});
  REQUIRE(!b.has_pixel_ops());  // not one of the workers' colour ops
  REQUIRE(!Augment(parse_transforms("rrc(224)")).erasing());
  // Each mistake in one line naming it.
  REQUIRE(error("rrc(224), erase(p=2)") == "RandomErasing: p must be in [0, 1]");
  REQUIRE(error("rrc(224), erase(scale=(0.5, 0.1))") == "RandomErasing: scale must be (min, max) with min <= max");
  REQUIRE(error("rrc(224), erase(ratio=(0, 1))") == "RandomErasing: ratio must be above 0 and finite");
  REQUIRE(error("rrc(224), erase(value=(1, 2))").find("value must be 1 or 3 number(s)") != std::string::npos);
  REQUIRE(error("rrc(224), erase, flip") ==
          "RandomHorizontalFlip: after RandomErasing, which follows Normalize on the device: RandomErasing comes last, "
          "once (before MixUp and CutMix)");
  REQUIRE(error("rrc(224), erase, erase").find("RandomErasing: after RandomErasing") == 0);
}

TEST_CASE("views as text: counts in front, lists split at semicolons, each entry's error named", "[transform-spec][views]") {
  const std::vector<ViewSpec> v = parse_views("2: RandomResizedCrop(224, scale=(0.4, 1)), flip; 6 : rrc(96); center(32)");
  REQUIRE(v.size() == 3);
  REQUIRE(v[0].count == 2);
  REQUIRE(v[0].transforms.size() == 2);
  REQUIRE(std::get<RandomResizedCrop>(v[0].transforms[0]).scale_min == 0.4);
  REQUIRE(v[1].count == 6);
  REQUIRE(std::get<RandomResizedCrop>(v[1].transforms[0]).size == Size{96, 96});
  REQUIRE(v[2].count == 1);
  REQUIRE(std::holds_alternative<CenterCrop>(v[2].transforms[0]));
  REQUIRE_THROWS_WITH(parse_views(""), "views: the list is empty");
  REQUIRE_THROWS_WITH(parse_views("rrc(32);"), "views: entry 2: empty (two ';', or one at an end)");
  REQUIRE_THROWS_WITH(parse_views("rrc(32); ; rrc(16)"), "views: entry 2: empty (two ';', or one at an end)");
  REQUIRE_THROWS_WITH(parse_views("x: rrc(32)"), "views: entry 1: count 'x' is not a whole number from 1 to 64");
  REQUIRE_THROWS_WITH(parse_views("65: rrc(32)"), "views: entry 1: count '65' is not a whole number from 1 to 64");
  REQUIRE_THROWS_WITH(parse_views("-1: rrc(32)"), Catch::Contains("count '-1'"));
  REQUIRE_THROWS_WITH(parse_views("2: rrc(32); 3:"), "views: entry 2: transforms: the list is empty");
  REQUIRE_THROWS_WITH(parse_views("2: rrc(32); Flipp"), Catch::Contains("views: entry 2: transforms: unknown transform 'Flipp'"));
  REQUIRE_THROWS_WITH(parse_views("40: rrc(32); 25: rrc(16)"), "views: more than 64 views in all");
}
