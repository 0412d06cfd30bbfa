// Photometric image ops: the colour and tone adjustments of torchvision's
// functional API (transforms.functional on uint8 tensors), on an interleaved
// RGB8 image in place. Each op takes its parameters already drawn: the random
// transforms that use them (ColorJitter, TrivialAugmentWide, ...) draw from
// the sample's Rng and call these, so an op's output depends on its image and
// parameters alone.
//
// Semantics are torchvision's, arithmetic included: blends in float32,
// truncated to uint8 after clamping to [0, 255]; convolutions rounded half to
// even; the hue shift through HSV in float32. tests/photometric_test.py holds
// every op to torchvision's on the same image within 1 grey level.
//
// Stateless and thread-safe: ops that need scratch memory take a
// PhotometricScratch the caller keeps per thread (reused, so a worker's ops
// allocate only while images grow). Parameters outside torchvision's domain
// throw std::invalid_argument naming the op and the parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace conveyor {

// An interleaved RGB8 image: height rows of width * 3 bytes, `stride` bytes apart.
struct RgbView {
  std::uint8_t* pixels = nullptr;
  int width = 0, height = 0;
  std::ptrdiff_t stride = 0;
};

// Reused buffers for the ops that read neighbours (sharpness, blur).
struct PhotometricScratch {
  std::vector<float> rows;
  std::vector<std::uint8_t> copy;
};

// brightness_factor >= 0: img * f (0 black, 1 unchanged).
void adjust_brightness(RgbView img, double factor);
// contrast_factor >= 0: a blend with the mean of the image's grayscale.
void adjust_contrast(RgbView img, double factor);
// saturation_factor >= 0: a blend with the pixel's grayscale (0 grey).
void adjust_saturation(RgbView img, double factor);
// hue_factor in [-0.5, 0.5]: the hue turned by that fraction of the circle.
void adjust_hue(RgbView img, double factor);
// ITU-R 601-2 luma (0.2989 R + 0.587 G + 0.114 B, truncated) into all three channels.
void to_grayscale(RgbView img);
// Every value >= threshold inverted (255 - v); threshold in [0, 255].
void solarize(RgbView img, double threshold);
// Each value keeps its top `bits` bits; bits in [0, 8].
void posterize(RgbView img, int bits);
// Each channel stretched so its minimum is 0 and its maximum 255 (a flat channel unchanged).
void autocontrast(RgbView img);
// Each channel's histogram equalized (PIL's ImageOps.equalize, as torchvision does it).
void equalize(RgbView img);
// 255 - v.
void invert(RgbView img);
// sharpness_factor >= 0: a blend with a 3x3 smoothed copy (0 smooth, 1 unchanged,
// 2 sharper); the border rows and columns keep their pixels in the smoothed copy.
void adjust_sharpness(RgbView img, double factor, PhotometricScratch& scratch);
// A Gaussian blur: odd kernel sizes >= 1 (x then y, at most 255), sigmas > 0,
// reflect padding; each kernel size below the image's side it pads.
void gaussian_blur(RgbView img, int kernel_x, int kernel_y, double sigma_x, double sigma_y, PhotometricScratch& scratch);

}  // namespace conveyor
