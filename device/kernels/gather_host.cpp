// The gather kernel's host twin and its dispatcher. Runs on the host backend's
// stream thread, in order with the stream's other work (device/host_stream.h),
// as the CUDA kernel (gather.cu) runs on its stream.
#include "device/kernels/gather.h"

#include <cstring>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

void gather_host(const GatherJob& job, Stream& stream) {
  host_stream_enqueue(stream, [job] {
    for (std::size_t n = 0; n < job.rows; ++n) {
      std::memcpy(job.dst + n * job.row_bytes, job.src + job.indices[n] * job.row_bytes, job.row_bytes);
    }
  });
}

}  // namespace

void gather(Device& device, const GatherJob& job, Stream& stream) {
  switch (device.backend()) {
    case Backend::host: return gather_host(job, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return gather_cuda(device.ordinal(), job, stream);
#else
      no_cuda_build("gather");
#endif
  }
}

}  // namespace conveyor::kernels
