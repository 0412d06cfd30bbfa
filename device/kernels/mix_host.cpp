// The mix kernel's host twin and its dispatcher. Runs on the host backend's
// stream thread, in order with the stream's other work (device/host_stream.h),
// as the CUDA kernel (mix.cu) runs on its stream. Built with -ffp-contract=off
// (kernels/CMakeLists.txt): mix_element's products must not fuse.
#include "device/kernels/mix.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

// float16 -> float by table on the host: the same values half_bits_to_float
// gives (the table is made from it), a load instead of its branches, which
// made the float16 MixUp 15 times the float32 one.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1u << 16);
    for (std::uint32_t h = 0; h < t.size(); ++h) t[h] = half_bits_to_float(std::uint16_t(h));
    return t;
  }();
  return table.data();
}

// MixUp's float16 element as mix_element<DType::float16> computes it, with the
// conversions to float from the table.
inline std::uint16_t mix_half(const float* to_float, std::uint16_t cur, std::uint16_t prev, float own, float other) {
  const float a = to_float[float_to_half_bits(to_float[prev] * other)];
  const float b = to_float[float_to_half_bits(to_float[cur] * own)];
  return float_to_half_bits(a + b);
}

#if defined(__x86_64__)
// The same float16 row with F16C, 8 elements at a time: its conversions round
// to nearest even as float_to_half_bits does, so the bits are the same for
// every finite value (the normalized batches hold no NaN); about 5 times the
// table's speed (docs/benchmarks.md). Chosen at run time where the CPU has
// F16C and AVX. Mixes the row's whole groups of 8; returns how many elements that was.
__attribute__((target("avx,f16c"))) std::size_t mix_half_row_f16c(std::uint16_t* cur, const std::uint16_t* prev,
                                                                  std::size_t n, float own, float other) {
  const __m256 w_own = _mm256_set1_ps(own), w_other = _mm256_set1_ps(other);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prev + i)));
    const __m256 c = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cur + i)));
    const __m256 a = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(p, w_other), _MM_FROUND_TO_NEAREST_INT));
    const __m256 b = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(c, w_own), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(cur + i), _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
// CPUID's AVX and F16C bits, and the OS saving the YMM state (XGETBV), read
// directly: Clang's __builtin_cpu_supports knows no "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  if (!(ecx & bit_AVX) || !(ecx & bit_F16C) || !(ecx & bit_OSXSAVE)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}

bool has_f16c() {
  static const bool yes = [] {
    // CONVEYOR_MIX_ISA=scalar: the table's path, so that tests hold both (tests/CMakeLists.txt).
    const char* force = std::getenv("CONVEYOR_MIX_ISA");
    if (force && std::strcmp(force, "scalar") == 0) return false;
    return cpu_has_f16c();
  }();
  return yes;
}
#endif

// One row: F16C's groups of 8 where the CPU has it, the rest by table.
void mix_half_row(std::uint16_t* cur, const std::uint16_t* prev, std::size_t n, float own, float other) {
  std::size_t i = 0;
#if defined(__x86_64__)
  if (has_f16c()) i = mix_half_row_f16c(cur, prev, n, own, other);
#endif
  const float* to_float = half_table();
  for (; i < n; ++i) cur[i] = mix_half(to_float, cur[i], prev[i], own, other);
}

// Row by row inside the box: each row segment of every sample, in sample
// order, carrying the previous sample's original segment (starting from the
// last sample's), so the batch is mixed in place.
template <DType T, typename Bits>
void mix_pixels(const MixJob& job) {
  const std::size_t length = job.x2 - job.x1, n = job.samples;
  std::vector<Bits> prev(length), original(length);
  auto* data = static_cast<Bits*>(job.data);
  const auto segment = [&](std::size_t j, std::size_t c, std::size_t y) {
    return data + ((j * job.channels + c) * job.height + y) * job.width + job.x1;
  };
  for (std::size_t c = 0; c < job.channels; ++c) {
    for (std::size_t y = job.y1; y < job.y2; ++y) {
      std::memcpy(prev.data(), segment(n - 1, c, y), length * sizeof(Bits));
      for (std::size_t j = 0; j < n; ++j) {
        Bits* cur = segment(j, c, y);
        std::memcpy(original.data(), cur, length * sizeof(Bits));
        if (job.cut) {
          std::memcpy(cur, prev.data(), length * sizeof(Bits));
        } else if constexpr (T == DType::float16) {
          mix_half_row(cur, prev.data(), length, job.own, job.other);
        } else {
          for (std::size_t i = 0; i < length; ++i) cur[i] = Bits(mix_element<T>(cur[i], prev[i], job.own, job.other));
        }
        std::swap(prev, original);  // sample j's original is the next one's pair
      }
    }
  }
}

void mix_host(const MixJob& job, Stream& stream) {
  host_stream_enqueue(stream, [job] {
    if (job.samples == 0) return;
    if (job.x2 > job.x1 && job.y2 > job.y1) {
      switch (job.type) {
        case DType::float32: mix_pixels<DType::float32, std::uint32_t>(job); break;
        case DType::float16: mix_pixels<DType::float16, std::uint16_t>(job); break;
        case DType::bfloat16: mix_pixels<DType::bfloat16, std::uint16_t>(job); break;
        case DType::uint8: break;  // refused by the Mix step: MixUp follows Normalize
      }
    }
    if (!job.soft) return;
    for (std::size_t j = 0; j < job.samples; ++j) {
      const std::int64_t own = job.labels[j], other = job.labels[(j + job.samples - 1) % job.samples];
      for (std::size_t k = 0; k < job.classes; ++k) {
        job.soft[j * job.classes + k] = soft_label(own, other, std::int64_t(k), job.own, job.other);
      }
    }
  });
}

}  // namespace

void mix(Device& device, const MixJob& job, Stream& stream) {
  switch (device.backend()) {
    case Backend::host: return mix_host(job, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return mix_cuda(device.ordinal(), job, stream);
#else
      no_cuda_build("mix");
#endif
  }
}

}  // namespace conveyor::kernels
