// The normalize kernel's host twin and its dispatcher. Runs on the host
// backend's stream thread, in order with the stream's other work
// (device/host_stream.h), as the CUDA kernel (normalize.cu) runs on its stream.
#include "device/kernels/normalize.h"

#include <type_traits>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

// Each channel has only 256 possible outputs, so they are computed once per
// job by the shared store_normalized (the GPU's math, fmaf included) and each
// element is a table lookup: the same bits, several times faster than an fmaf
// per element, which is a libm call where the compiler may not assume an FMA
// instruction. One pass over the pixels reads each sample once.
template <DType T>
void normalize_on_host(const NormalizeJob& job) {
  using Out = std::conditional_t<T == DType::float32, float, std::conditional_t<T == DType::uint8, std::uint8_t, std::uint16_t>>;
  const std::size_t hw = job.height * job.width, c_n = job.channels;
  Out lut[4][256];
  for (std::size_t c = 0; c < c_n; ++c) {
    for (unsigned v = 0; v < 256; ++v) store_normalized<T>(lut[c], v, static_cast<unsigned char>(v), job.affine[c]);
  }
  Out* dst = static_cast<Out*>(job.dst);
  const std::size_t stride = job.input_stride();
  for (std::size_t n = 0; n < job.samples; ++n) {
    const std::size_t in_n = job.indices ? job.indices[n] : n;
    const std::uint8_t* in = job.src + in_n * stride;
    Out* planes = dst + n * c_n * hw;
    if (c_n == 3) {
      Out *r = planes, *g = planes + hw, *b = planes + 2 * hw;
      for (std::size_t p = 0; p < hw; ++p, in += 3) {
        r[p] = lut[0][in[0]];
        g[p] = lut[1][in[1]];
        b[p] = lut[2][in[2]];
      }
    } else {
      for (std::size_t p = 0; p < hw; ++p) {
        for (std::size_t c = 0; c < c_n; ++c) planes[c * hw + p] = lut[c][in[p * c_n + c]];
      }
    }
  }
}

void normalize_host(const NormalizeJob& job, Stream& stream) {
  host_stream_enqueue(stream, [job] {
    switch (job.out_type) {
      case DType::float32: return normalize_on_host<DType::float32>(job);
      case DType::float16: return normalize_on_host<DType::float16>(job);
      case DType::bfloat16: return normalize_on_host<DType::bfloat16>(job);
      case DType::uint8: return normalize_on_host<DType::uint8>(job);
    }
  });
}

}  // namespace

void normalize(Device& device, const NormalizeJob& job, Stream& stream) {
  switch (device.backend()) {
    case Backend::host: return normalize_host(job, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return normalize_cuda(device.ordinal(), job, stream);
#else
      no_cuda_build("normalize");
#endif
  }
}

}  // namespace conveyor::kernels
