// Normalize: the per-element arithmetic of "uint8 pixel -> normalized float",
// written once for the host and the CUDA kernel (CONVEYOR_HD marks it
// __host__ __device__ under nvcc), so host tests exercise the GPU's math.
//
// torchvision convention: mean and std are on the [0, 1] scale, as in
// Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)) after ToTensor.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>

#if defined(__CUDACC__)
#define CONVEYOR_HD __host__ __device__
#else
#define CONVEYOR_HD
#endif

namespace conveyor {

struct Normalize {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // Default: ImageNet
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};   // Default: ImageNet; each > 0
};

// (v / 255 - mean) / std, folded to one fused multiply-add: v * scale + bias
// with scale = 1 / (255 std) and bias = -mean / std. fmaf rounds once on both
// host and device, so the two give the same bits.
struct ChannelAffine {
  float scale = 1, bias = 0;
};
inline ChannelAffine channel_affine(float mean, float std) { return {1.0f / (255.0f * std), -mean / std}; }

CONVEYOR_HD inline float normalize_value(unsigned char v, ChannelAffine a) { return fmaf(float(v), a.scale, a.bias); }

// Why `n` cannot normalize its first `channels` channels into numbers, or
// nullopt: each std finite and > 0, each mean finite, and the folded scale
// and bias finite (a std of 1e-42 passes "> 0", but its scale is infinite,
// and every output NaN). The field ("std[1]") and the problem ("must be
// finite and > 0"), for messages that put their own prefix ("normalize.").
struct NormalizeProblem {
  std::string field, problem;
};
inline std::optional<NormalizeProblem> normalize_problem(const Normalize& n, std::size_t channels) {
  // "std[1]", appended piece by piece: GCC 12 at -O3 misreads `"[" + std::to_string(c)`
  // as an overlapping memcpy (-Werror=restrict, GCC bug 105329).
  const auto field = [](const char* name, std::size_t c) {
    std::string s(name);
    s += '[';
    s += std::to_string(c);
    s += ']';
    return s;
  };
  for (std::size_t c = 0; c < channels && c < 3; ++c) {
    if (!(n.std[c] > 0) || !std::isfinite(n.std[c])) return NormalizeProblem{field("std", c), "must be finite and > 0"};
    if (!std::isfinite(n.mean[c])) return NormalizeProblem{field("mean", c), "must be finite"};
    const ChannelAffine a = channel_affine(n.mean[c], n.std[c]);
    if (!std::isfinite(a.scale) || !std::isfinite(a.bias)) {
      return NormalizeProblem{field("std", c), "is too small: 1 / (255 std) or mean / std overflows a float"};
    }
  }
  return std::nullopt;
}

}  // namespace conveyor
