// The erase kernel's host twin and its dispatcher. Runs on the host backend's
// stream thread, in order with the stream's other work (device/host_stream.h),
// as the CUDA kernel (erase.cu) runs on its stream.
#include "device/kernels/erase.h"

#include <cstring>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

void erase_host(const EraseJob& job, Stream& stream) {
  host_stream_enqueue(stream, [job] {
    const std::size_t size = dtype_size(job.type), plane = job.height * job.width;
    // Each channel's element once per job, as the CUDA twin passes them.
    unsigned char element[4][4] = {};
    for (std::size_t c = 0; c < job.channels && c < 4; ++c) {
      const std::uint32_t bits = erase_element_bits(job.type, job.value[c]);
      std::memcpy(element[c], &bits, sizeof bits);  // little-endian: the value's bytes first
    }
    auto* data = static_cast<unsigned char*>(job.data);
    for (std::size_t n = 0; n < job.samples; ++n) {
      const EraseBox b = job.boxes[n];
      if (b.height == 0 || b.width == 0) continue;
      for (std::size_t c = 0; c < job.channels; ++c) {
        for (std::size_t y = b.top; y < b.top + b.height; ++y) {
          unsigned char* row = data + ((n * job.channels + c) * plane + y * job.width + b.left) * size;
          for (std::size_t x = 0; x < b.width; ++x) std::memcpy(row + x * size, element[c], size);
        }
      }
    }
  });
}

}  // namespace

void erase(Device& device, const EraseJob& job, Stream& stream) {
  switch (device.backend()) {
    case Backend::host: return erase_host(job, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return erase_cuda(device.ordinal(), job, stream);
#else
      no_cuda_build("erase");
#endif
  }
}

}  // namespace conveyor::kernels
