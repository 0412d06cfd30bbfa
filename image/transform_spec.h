// The transform list as text: torchvision's Compose list written out, for the
// command line, TOML and Python, so a recipe can be pasted across.
//
//   RandomResizedCrop(224, scale=(0.08, 1)), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1)
//   rrc(176), flip, jitter(brightness=0.4), grayscale(p=0.2), blur(23, sigma=(0.1, 2), p=0.5)
//
// A list of transforms separated by commas, each torchvision's class name (or
// the short alias listed below, case-insensitive) with its arguments in
// parentheses, positional in torchvision's order and then name=value; a
// transform without arguments may leave out the parentheses. Values are
// numbers, True/False, None, or tuples of numbers in parentheses. Parameters
// take torchvision's names and defaults:
//
//   RandomResizedCrop rrc      size, scale=(0.08, 1), ratio=(0.75, 1.3333)
//   Resize            resize   size (an int: the shorter side; (h, w): exactly)
//   CenterCrop        center   size
//   RandomCrop        crop     size, padding=None (int, (lr, tb) or (l, t, r, b)), pad_if_needed=False
//   RandomHorizontalFlip flip  p=0.5
//   RandomVerticalFlip vflip   p=0.5
//   ColorJitter       jitter   brightness=0, contrast=0, saturation=0, hue=0 (each v or (min, max)), p=1
//   RandomGrayscale   grayscale p=0.1
//   GaussianBlur      blur     kernel_size (k or (kx, ky)), sigma=(0.1, 2) (s or (min, max)), p=1
//   RandomSolarize    solarize threshold, p=0.5
//   RandomPosterize   posterize bits, p=0.5
//   RandomAdjustSharpness sharpness sharpness_factor, p=0.5
//   RandomAutocontrast autocontrast p=0.5
//   RandomEqualize    equalize p=0.5
//   RandomInvert      invert   p=0.5
//   TrivialAugmentWide trivialaugment num_magnitude_bins=31, fill=None (v or (r, g, b))
//   RandAugment       randaugment num_ops=2, magnitude=9, num_magnitude_bins=31, fill=None
//   RandomErasing     erase    p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0 (v or (r, g, b)),
//                              inplace=False (no effect); last in the list: it runs on the device
//                              after normalize, so it needs normalize there (value in normalized units)
//   MixUp             mixup    alpha=1, num_classes=None (the dataset's number of classes)
//   CutMix            cutmix   alpha=1, num_classes=None; MixUp and CutMix come after everything else
//                              and mix each batch on the device after normalize (the labels become
//                              soft); with both, each batch takes one of them, with equal chance
//
// ColorJitter's and GaussianBlur's p is RandomApply's (torchvision wraps them
// in it). The policies take torchvision's interpolation only as its default,
// NEAREST (an interpolation argument is refused). Stateless; thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "image/augment.h"

namespace conveyor {

// Parses `text` into a chain Augment accepts. Throws AugmentError with one
// line naming the transform and the parameter, or the place in the text, that
// is wrong. The chain itself (order, sizes, ranges) is Augment's to check.
std::vector<Transform> parse_transforms(std::string_view text);

// Several views of each sample (ImageConfig::views) as text: transform lists
// separated by ';', each with its count in front and a ':' (1 without), e.g.
//   2: RandomResizedCrop(224, scale=(0.4, 1)), RandomHorizontalFlip(); 6: RandomResizedCrop(96, scale=(0.05, 0.4))
// Throws AugmentError with one line naming the entry (counted from 1) and what
// is wrong in it: a count that is not a whole number from 1 to kMaxViews,
// parse_transforms' reason, or Augment's for the chain.
inline constexpr std::size_t kMaxViews = 64;
std::vector<ViewSpec> parse_views(std::string_view text);

}  // namespace conveyor
