#include "gpu_decode/jpeg_batch_decoder.h"

#include "gpu_decode/decoders.h"

namespace conveyor {

std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(Device& device, const DecodeLimits& limits, std::string& why) {
  if (device.backend() == Backend::host) return make_host_jpeg_decoder(limits);
#if defined(CONVEYOR_WITH_CUDA)
  return make_cuda_jpeg_decoder(device.ordinal(), why);  // nvJPEG checks no limits: the workers parsed the headers
#else
  why = "this build has no CUDA backend";  // unreachable: such a build opens no CUDA device
  return nullptr;
#endif
}

}  // namespace conveyor
