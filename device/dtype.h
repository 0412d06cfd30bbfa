// Element types a batch can have on the device, and the float -> float16 /
// bfloat16 conversions written once for the host and the CUDA kernels
// (CONVEYOR_HD is __host__ __device__ under nvcc), so CPU tests exercise the
// exact arithmetic the GPU runs.
//
// Both conversions round to nearest, ties to even, as __float2half_rn and
// __float2bfloat16_rn do; NaN stays NaN (quiet), overflow goes to infinity.
// Pure functions: thread-safe, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "image/normalize.h"  // CONVEYOR_HD, ChannelAffine, normalize_value

namespace conveyor {

enum class DType : std::uint8_t { uint8, float32, float16, bfloat16 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::uint8: return 1;
    case DType::float32: return 4;
    case DType::float16:
    case DType::bfloat16: return 2;
  }
  return 0;
}
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::uint8: return "uint8";
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
  }
  return "?";
}
// "uint8", "float32", "float16" or "bfloat16"; empty for anything else.
inline std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::uint8, DType::float32, DType::float16, DType::bfloat16}) {
    if (s == dtype_name(t)) return t;
  }
  return std::nullopt;
}

CONVEYOR_HD inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
CONVEYOR_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE binary16 bits. Fabian Giesen's float_to_half_fast3_rtne: exact for every
// float, including subnormal halves (the float add of a magic number does the
// rounding there, which is round-to-nearest-even on CPU and GPU alike).
CONVEYOR_HD inline std::uint16_t float_to_half_bits(float f) {
  constexpr std::uint32_t kF32Infinity = 255u << 23;
  constexpr std::uint32_t kF16Overflow = (127u + 16u) << 23;               // 65536.0f
  constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;  // 0.5f
  std::uint32_t u = float_bits(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint32_t out;
  if (u >= kF16Overflow) {
    out = u > kF32Infinity ? 0x7e00u : 0x7c00u;  // NaN -> quiet NaN, else infinity
  } else if (u < (113u << 23)) {  // below 2^-14: the half is subnormal or zero
    out = float_bits(bits_float(u) + bits_float(kDenormMagic)) - kDenormMagic;
  } else {
    const std::uint32_t mantissa_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu;  // rebias the exponent, round half down...
    u += mantissa_odd;                   // ...or up when that makes the result even
    out = u >> 13;
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

// bfloat16 bits: the top half of the float, rounded to nearest even.
CONVEYOR_HD inline std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// float of IEEE binary16 bits, exact for every half (subnormals, infinities
// and NaN included): Fabian Giesen's half_to_float, the reverse of the above.
CONVEYOR_HD inline float half_bits_to_float(std::uint16_t h) {
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;  // the exponent mask after the shift
  std::uint32_t u = (std::uint32_t(h) & 0x7fffu) << 13;
  const std::uint32_t exp = kShiftedExp & u;
  u += (127u - 15u) << 23;  // rebias the exponent
  if (exp == kShiftedExp) {
    u += (128u - 16u) << 23;  // infinity or NaN: the extra rebias
  } else if (exp == 0) {
    u += 1u << 23;  // zero or subnormal: renormalize through a float subtraction
    u = float_bits(bits_float(u) - bits_float(113u << 23));
  }
  return bits_float(u | ((std::uint32_t(h) & 0x8000u) << 16));
}
// float of bfloat16 bits: exact (the float's top half).
CONVEYOR_HD inline float bfloat16_bits_to_float(std::uint16_t b) { return bits_float(std::uint32_t(b) << 16); }

// One normalized element in the output type: (v/255 - mean)/std, converted.
// The normalize kernel and its host twin (device/kernels/) both store through this.
template <DType T>
CONVEYOR_HD inline void store_normalized(void* out, std::size_t i, unsigned char v, ChannelAffine a) {
  const float x = normalize_value(v, a);
  if constexpr (T == DType::float32) {
    static_cast<float*>(out)[i] = x;
  } else if constexpr (T == DType::float16) {
    static_cast<std::uint16_t*>(out)[i] = float_to_half_bits(x);
  } else if constexpr (T == DType::bfloat16) {
    static_cast<std::uint16_t*>(out)[i] = float_to_bfloat16_bits(x);
  } else {
    static_cast<unsigned char*>(out)[i] = v;  // uint8: no normalization
  }
}

}  // namespace conveyor
