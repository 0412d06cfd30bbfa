// RandomErasing (torchvision.transforms.RandomErasing): with probability p,
// one rectangle of the image set to a value. Its area is a share of the
// image's drawn uniformly from `scale`, its aspect ratio log-uniformly from
// `ratio`; ten draws that do not fit leave the image as it is, as torchvision
// does. It runs after normalize, on the device (device/erase_step.h), so
// `value` is in normalized units: 0, the default, is the channel's mean.
//
// This header holds the parameters and the draw (torchvision's get_params);
// the rectangle is written by the erase kernel (device/kernels/erase.h).
// The draw depends on its Rng alone, so each sample's rectangle follows from
// (seed, epoch, index) whatever the worker count. tests/test_random_erasing.cpp
// holds the draw to torchvision's formula; tests/erasing_torchvision.py holds
// the distribution of the rectangles to torchvision's own get_params.
// Stateless and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "pipeline/rng.h"

namespace conveyor {

// One sample's rectangle, rows top .. top+height-1 and columns left ..
// left+width-1 of every channel; height or width 0 erases nothing.
struct EraseBox {
  std::uint32_t top = 0, left = 0, height = 0, width = 0;
};

struct RandomErasing {
  double p = 0.5;                            // probability that a sample is erased, 0 .. 1
  std::array<double, 2> scale{0.02, 0.33};   // the rectangle's share of the area, 0 <= min <= max <= 1
  std::array<double, 2> ratio{0.3, 3.3};     // its aspect ratio (height / width), 0 < min <= max
  std::array<float, 3> value{0.f, 0.f, 0.f};  // per channel, normalized units (one value: all three)

  // Throws std::invalid_argument, "RandomErasing: <parameter> must ...", for
  // parameters torchvision refuses, and for a min above its max (torchvision
  // only warns, then draws from an empty range).
  void validate() const;
};

// The rectangle for one height x width image, drawn from rng as torchvision's
// RandomErasing.forward and get_params draw theirs: the coin, then up to ten
// (area, log-ratio) draws, h and w rounded half to even, and the first pair
// with h < height and w < width placed uniformly. Nothing when the coin says
// no or no draw fits.
std::optional<EraseBox> draw_erase_box(const RandomErasing& e, std::size_t height, std::size_t width, Rng& rng);

}  // namespace conveyor
