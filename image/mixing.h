// MixUp and CutMix (torchvision.transforms.v2.MixUp, CutMix): batch ops that
// blend each sample with its neighbour in the batch and mix their labels.
// Sample j is paired with sample j - 1, sample 0 with the last: torchvision's
// batch.roll(1, 0). Per batch, lambda ~ Beta(alpha, alpha), and
//   MixUp:  out[j] = lambda * x[j] + (1 - lambda) * x[j - 1], every pixel;
//   CutMix: a box centred on a uniform (r_x, r_y), sides sqrt(1 - lambda)
//           of the image's, clipped to it, takes x[j - 1]'s pixels; lambda
//           becomes 1 - box area / image area;
//   labels: lambda * one_hot(y[j]) + (1 - lambda) * one_hot(y[j - 1]).
// With both in a list, each batch takes one of them with equal chance, as
// torchvision's reference recipe's RandomChoice([MixUp, CutMix]).
//
// They follow every per-sample op (RandomErasing included) and Normalize, so
// they run on the device after normalize (device/mix_step.h), by the mix
// kernel (device/kernels/mix.h). This header holds the parameters and the
// draw; the draw depends on its Rng alone, which the step keys by
// (seed, epoch, batch), so a batch's mixing is the same for any worker count
// and a resume repeats it. tests/test_mixing.cpp holds the draw and the
// kernel to torchvision's formulas (v2, which Debian's torchvision 0.14 lacks);
// tests/mixing_test.py holds lambda's distribution to torch's Beta and the
// boxes to the formula's, in distribution. Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "pipeline/rng.h"

namespace conveyor {

struct MixUp {
  double alpha = 1.0;        // Beta(alpha, alpha) for lambda; > 0 (torchvision's default 1)
  std::int64_t num_classes = 0;  // the labels' range; 0: the dataset's number of classes
};
struct CutMix {
  double alpha = 1.0;
  std::int64_t num_classes = 0;
};

// A transform list's batch ops: MixUp, CutMix or both (one per batch).
struct BatchMixing {
  std::optional<MixUp> mixup;
  std::optional<CutMix> cutmix;
  // The labels' range, [0, num_classes): the ops' own, else the dataset's. 0 until set.
  std::int64_t num_classes = 0;

  // "MixUp" when it has one, else "CutMix": the name its messages give.
  const char* name() const { return mixup ? "MixUp" : "CutMix"; }
  // The ops' num_classes (0 if neither says; both must agree).
  std::int64_t stated_classes() const;
  // Throws std::invalid_argument, "MixUp: alpha must ..." and so on: alpha not
  // finite and > 0, num_classes negative, two different num_classes.
  void validate() const;
};

// One batch's mixing, drawn.
struct MixDraw {
  bool cutmix = false;
  // The weight of each sample's own label: MixUp's lambda, or CutMix's
  // 1 - box area / image area.
  double lambda = 1.0;
  // MixUp: the whole image, each pixel weighting its own sample by lambda;
  // CutMix: the box [x1, x2) x [y1, y2), taken from the paired sample.
  std::uint32_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

// Beta(a, a) from rng: Gamma(a) / (Gamma(a) + Gamma(a)), Marsaglia and Tsang's
// Gamma with Box-Muller normals. Written by hand for the reason Rng is: the
// standard distributions are implementation-defined, and a batch's lambda
// must be the same under every standard library. a > 0.
double sample_beta(double a, Rng& rng);

// The batch's mixing for height x width images: which op (a coin when both,
// first), lambda, then CutMix's centre (x, then y, uniform integers) as
// torchvision's CutMix._get_params draws them.
MixDraw draw_mix(const BatchMixing& m, std::size_t height, std::size_t width, Rng& rng);

}  // namespace conveyor
