// The two backends' JPEG batch decoders, for create_jpeg_decoder
// (gpu_decode/jpeg_batch_decoder.cpp) only: callers use that factory, which
// picks one by the device's backend.
#pragma once

#include <memory>
#include <string>

#include "gpu_decode/jpeg_batch_decoder.h"

namespace conveyor {

// The host twin (gpu_decode/host_jpeg_decoder.cpp): runs on host backend streams only.
std::unique_ptr<JpegBatchDecoder> make_host_jpeg_decoder(const DecodeLimits& limits);

#if defined(CONVEYOR_WITH_CUDA)
// nvJPEG on CUDA device `ordinal` (gpu_decode/cuda_jpeg_decoder.cu), or null
// with `why` set when nvJPEG cannot be opened there.
std::unique_ptr<JpegBatchDecoder> make_cuda_jpeg_decoder(int ordinal, std::string& why);
#endif

}  // namespace conveyor
