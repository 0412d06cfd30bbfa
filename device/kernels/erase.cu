// The erase kernel's CUDA twin (erase.h): launched on the stream's
// cudaStream_t under a ScopedDevice, through CONVEYOR_CUDA_LAUNCH, which checks
// cudaGetLastError (docs/cuda.md, protocol points 3 and 9). The element bits
// are erase_element_bits, computed on the host as the host twin computes them.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

using namespace cuda_detail;

// By value as a kernel argument: an array member would decay to a pointer.
struct Fills {
  std::uint32_t bits[4];
};

// One thread per element of the batch (n, c, y, x), grid-stride: the element
// takes its channel's value when (y, x) is inside sample n's box. Reads one box
// per element (cached); writes only inside the boxes.
template <typename Element>
__global__ void erase_kernel(Element* __restrict__ data, const EraseBox* __restrict__ boxes, std::size_t samples,
                             std::size_t channels, std::size_t height, std::size_t width, Fills fills) {
  const std::size_t plane = height * width, total = samples * channels * plane;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t nc = i / plane, p = i - nc * plane;
    const std::size_t n = nc / channels, c = nc - n * channels;
    const std::size_t y = p / width, x = p - y * width;
    const EraseBox b = boxes[n];
    if (y >= b.top && y < b.top + b.height && x >= b.left && x < b.left + b.width) {
      data[i] = static_cast<Element>(fills.bits[c]);
    }
  }
}

template <typename Element>
void launch(const EraseJob& job, const Fills& fills, Stream& s) {
  const std::size_t total = job.samples * job.channels * job.height * job.width;
  CONVEYOR_CUDA_LAUNCH("erase_kernel", erase_kernel<Element><<<grid_for(total), kBlock, 0, native(s)>>>(
                                           static_cast<Element*>(job.data), job.boxes, job.samples, job.channels,
                                           job.height, job.width, fills));
}

}  // namespace

void erase_cuda(int ordinal, const EraseJob& job, Stream& s) {
  if (job.samples * job.channels * job.height * job.width == 0) return;
  Fills fills{};
  for (std::size_t c = 0; c < job.channels && c < 4; ++c) fills.bits[c] = erase_element_bits(job.type, job.value[c]);
  const ScopedDevice on(ordinal);
  switch (dtype_size(job.type)) {
    case 4: return launch<std::uint32_t>(job, fills, s);
    case 2: return launch<std::uint16_t>(job, fills, s);
    default: return launch<std::uint8_t>(job, fills, s);
  }
}

}  // namespace conveyor::kernels
