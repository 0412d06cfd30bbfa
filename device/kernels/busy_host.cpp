// The busy kernel's host twin and its dispatcher, and the kernels' one
// no-CUDA error. Runs on the host backend's stream thread, in order with the
// stream's other work (device/host_stream.h), as the CUDA kernel (busy.cu)
// runs on its stream.
#include "device/kernels/busy.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

// A GPU kernel occupies the GPU, not a CPU core: sleep, leaving the cores to the workers.
void busy_host(double microseconds, Stream& stream) {
  host_stream_enqueue(stream, [microseconds] {
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::int64_t(microseconds * 1000)));
  });
}

}  // namespace

void busy(Device& device, double microseconds, Stream& stream) {
  if (!(microseconds > 0)) return;  // NaN and negatives included
  switch (device.backend()) {
    case Backend::host: return busy_host(microseconds, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return busy_cuda(device.ordinal(), microseconds, stream);
#else
      no_cuda_build("busy");
#endif
  }
}

void no_cuda_build(const char* kernel) {
  throw DeviceError(std::string("kernels::") + kernel + ": the cuda backend in a build without CUDA");
}

}  // namespace conveyor::kernels
