// The busy kernel's CUDA twin (busy.h): launched on the stream's cudaStream_t
// under a ScopedDevice, through CONVEYOR_CUDA_LAUNCH, which checks
// cudaGetLastError (docs/cuda.md, protocol points 3 and 9).
#include <cuda_runtime.h>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

using namespace cuda_detail;

// Keeps one SM busy for `ns` nanoseconds of the GPU's global timer.
__global__ void busy_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void busy_cuda(int ordinal, double microseconds, Stream& s) {
  const ScopedDevice on(ordinal);
  CONVEYOR_CUDA_LAUNCH("busy_kernel",
                       busy_kernel<<<1, 1, 0, native(s)>>>(static_cast<unsigned long long>(microseconds * 1000.0)));
}

}  // namespace conveyor::kernels
