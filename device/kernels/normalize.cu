// The normalize kernel's CUDA twin (normalize.h): launched on the stream's
// cudaStream_t under a ScopedDevice, through CONVEYOR_CUDA_LAUNCH, which checks
// cudaGetLastError (docs/cuda.md, protocol points 3 and 9). The element math
// is store_normalized (device/dtype.h), the host twin's.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "device/dtype.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

using namespace cuda_detail;

// By value as a kernel argument: an array member would decay to a pointer.
struct Affines {
  ChannelAffine a[4];
};

// One thread per output pixel (n, p): reads its channels' bytes (HWC, samples
// `stride` bytes apart), writes one element per channel plane (NCHW). Writes
// are coalesced along p.
template <DType T>
__global__ void normalize_kernel(const std::uint8_t* __restrict__ src, void* __restrict__ dst,
                                 const std::uint64_t* __restrict__ indices, std::size_t samples, std::size_t hw,
                                 std::size_t stride, unsigned channels, Affines affines) {
  const std::size_t total = samples * hw;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t n = i / hw, p = i - n * hw;
    const std::size_t in_n = indices ? indices[n] : n;
    const std::uint8_t* px = src + in_n * stride + p * channels;
    for (unsigned c = 0; c < channels; ++c) store_normalized<T>(dst, (n * channels + c) * hw + p, px[c], affines.a[c]);
  }
}

template <DType T>
void launch(const NormalizeJob& job, std::size_t hw, const Affines& affines, Stream& s) {
  const unsigned channels = static_cast<unsigned>(job.channels);
  CONVEYOR_CUDA_LAUNCH("normalize_kernel", normalize_kernel<T><<<grid_for(job.samples * hw), kBlock, 0, native(s)>>>(
                                               job.src, job.dst, job.indices, job.samples, hw, job.input_stride(),
                                               channels, affines));
}

}  // namespace

void normalize_cuda(int ordinal, const NormalizeJob& job, Stream& s) {
  const std::size_t hw = job.height * job.width;
  if (job.samples * hw == 0) return;
  Affines affines{};
  for (int c = 0; c < 4; ++c) affines.a[c] = job.affine[c];
  const ScopedDevice on(ordinal);
  switch (job.out_type) {
    case DType::float32: return launch<DType::float32>(job, hw, affines, s);
    case DType::float16: return launch<DType::float16>(job, hw, affines, s);
    case DType::bfloat16: return launch<DType::bfloat16>(job, hw, affines, s);
    case DType::uint8: return launch<DType::uint8>(job, hw, affines, s);
  }
}

}  // namespace conveyor::kernels
