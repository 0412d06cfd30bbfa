// The gather kernel's CUDA twin (gather.h): launched on the stream's
// cudaStream_t under a ScopedDevice, through CONVEYOR_CUDA_LAUNCH, which checks
// cudaGetLastError (docs/cuda.md, protocol points 3 and 9).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

using namespace cuda_detail;

// dst row n = src row indices[n], copied in Word units (16, 4 or 1 bytes, as alignment allows).
template <typename Word>
__global__ void gather_kernel(const Word* __restrict__ src, Word* __restrict__ dst,
                              const std::uint64_t* __restrict__ indices, std::size_t rows, std::size_t row_words) {
  const std::size_t total = rows * row_words;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t n = i / row_words, w = i - n * row_words;
    dst[i] = src[indices[n] * row_words + w];
  }
}

template <typename Word>
void launch(const GatherJob& job, Stream& s) {
  const std::size_t row_words = job.row_bytes / sizeof(Word);
  CONVEYOR_CUDA_LAUNCH("gather_kernel", gather_kernel<Word><<<grid_for(job.rows * row_words), kBlock, 0, native(s)>>>(
                                            reinterpret_cast<const Word*>(job.src), reinterpret_cast<Word*>(job.dst),
                                            job.indices, job.rows, row_words));
}

}  // namespace

void gather_cuda(int ordinal, const GatherJob& job, Stream& s) {
  if (job.rows == 0 || job.row_bytes == 0) return;
  const auto aligned = [&](std::size_t a) {
    return job.row_bytes % a == 0 && reinterpret_cast<std::uintptr_t>(job.src) % a == 0 &&
           reinterpret_cast<std::uintptr_t>(job.dst) % a == 0;
  };
  const ScopedDevice on(ordinal);
  if (aligned(16)) {
    launch<uint4>(job, s);
  } else if (aligned(4)) {
    launch<std::uint32_t>(job, s);
  } else {
    launch<std::uint8_t>(job, s);
  }
}

}  // namespace conveyor::kernels
