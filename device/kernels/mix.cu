// The mix kernel's CUDA twin (mix.h): launched on the stream's cudaStream_t
// under a ScopedDevice, through CONVEYOR_CUDA_LAUNCH, which checks
// cudaGetLastError (docs/cuda.md, protocol points 3 and 9). Each element is
// mix_element or soft_label, the functions the host twin calls.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

using namespace cuda_detail;

// One thread per position (c, y, x) of the box, grid-stride; it walks the
// batch in sample order carrying the previous sample's original value
// (starting from the last sample's), so each position is mixed in place by
// one thread. Consecutive threads take consecutive x: coalesced per sample.
template <DType T, typename Bits>
__global__ void mix_pixels_kernel(Bits* __restrict__ data, std::size_t samples, std::size_t channels,
                                  std::size_t height, std::size_t width, bool cut, float own, float other,
                                  std::uint32_t x1, std::uint32_t y1, std::uint32_t x2, std::uint32_t y2) {
  const std::size_t bw = x2 - x1, bh = y2 - y1, positions = channels * bh * bw;
  const std::size_t sample = channels * height * width;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < positions;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t c = i / (bh * bw), r = i - c * bh * bw;
    const std::size_t y = y1 + r / bw, x = x1 + r % bw;
    Bits* p = data + (c * height + y) * width + x;  // sample 0's element
    Bits prev = p[(samples - 1) * sample];
    for (std::size_t j = 0; j < samples; ++j) {
      const Bits cur = p[j * sample];
      p[j * sample] = cut ? prev : Bits(mix_element<T>(cur, prev, own, other));
      prev = cur;
    }
  }
}

__global__ void soft_labels_kernel(const std::int64_t* __restrict__ labels, float* __restrict__ soft,
                                   std::size_t samples, std::size_t classes, float own, float other) {
  const std::size_t total = samples * classes;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t j = i / classes, k = i - j * classes;
    soft[i] = soft_label(labels[j], labels[(j + samples - 1) % samples], std::int64_t(k), own, other);
  }
}

template <DType T, typename Bits>
void launch(const MixJob& job, Stream& s) {
  const std::size_t positions = job.channels * std::size_t(job.y2 - job.y1) * std::size_t(job.x2 - job.x1);
  CONVEYOR_CUDA_LAUNCH("mix_pixels_kernel",
                       (mix_pixels_kernel<T, Bits><<<grid_for(positions), kBlock, 0, native(s)>>>(
                           static_cast<Bits*>(job.data), job.samples, job.channels, job.height, job.width, job.cut,
                           job.own, job.other, job.x1, job.y1, job.x2, job.y2)));
}

}  // namespace

void mix_cuda(int ordinal, const MixJob& job, Stream& s) {
  if (job.samples == 0) return;
  const ScopedDevice on(ordinal);
  if (job.x2 > job.x1 && job.y2 > job.y1 && job.channels > 0) {
    switch (job.type) {
      case DType::float32: launch<DType::float32, std::uint32_t>(job, s); break;
      case DType::float16: launch<DType::float16, std::uint16_t>(job, s); break;
      case DType::bfloat16: launch<DType::bfloat16, std::uint16_t>(job, s); break;
      case DType::uint8: break;  // refused by the Mix step: MixUp follows Normalize
    }
  }
  if (job.soft && job.classes > 0) {
    const std::size_t total = job.samples * job.classes;
    CONVEYOR_CUDA_LAUNCH("soft_labels_kernel", soft_labels_kernel<<<grid_for(total), kBlock, 0, native(s)>>>(
                                                   job.labels, job.soft, job.samples, job.classes, job.own,
                                                   job.other));
  }
}

}  // namespace conveyor::kernels
