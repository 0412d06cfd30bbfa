// The mix kernel's host twin and its dispatcher. Runs on the host backend's
// stream thread, in order with the stream's other work (device/host_stream.h),
// as the CUDA kernel (mix.cu) runs on its stream. Built with -ffp-contract=off
// (kernels/CMakeLists.txt): mix_element's products must not fuse.
#include "device/kernels/mix.h"

#include <cstring>
#include <utility>
#include <vector>

#include "device/host_stream.h"
#include "device/kernels/twins.h"

namespace conveyor::kernels {
namespace {

// Row by row inside the box: each row segment of every sample, in sample
// order, carrying the previous sample's original segment (starting from the
// last sample's), so the batch is mixed in place.
template <DType T, typename Bits>
void mix_pixels(const MixJob& job) {
  const std::size_t length = job.x2 - job.x1, n = job.samples;
  std::vector<Bits> prev(length), original(length);
  auto* data = static_cast<Bits*>(job.data);
  const auto segment = [&](std::size_t j, std::size_t c, std::size_t y) {
    return data + ((j * job.channels + c) * job.height + y) * job.width + job.x1;
  };
  for (std::size_t c = 0; c < job.channels; ++c) {
    for (std::size_t y = job.y1; y < job.y2; ++y) {
      std::memcpy(prev.data(), segment(n - 1, c, y), length * sizeof(Bits));
      for (std::size_t j = 0; j < n; ++j) {
        Bits* cur = segment(j, c, y);
        std::memcpy(original.data(), cur, length * sizeof(Bits));
        if (job.cut) {
          std::memcpy(cur, prev.data(), length * sizeof(Bits));
        } else {
          for (std::size_t i = 0; i < length; ++i) cur[i] = Bits(mix_element<T>(cur[i], prev[i], job.own, job.other));
        }
        std::swap(prev, original);  // sample j's original is the next one's pair
      }
    }
  }
}

void mix_host(const MixJob& job, Stream& stream) {
  host_stream_enqueue(stream, [job] {
    if (job.samples == 0) return;
    if (job.x2 > job.x1 && job.y2 > job.y1) {
      switch (job.type) {
        case DType::float32: mix_pixels<DType::float32, std::uint32_t>(job); break;
        case DType::float16: mix_pixels<DType::float16, std::uint16_t>(job); break;
        case DType::bfloat16: mix_pixels<DType::bfloat16, std::uint16_t>(job); break;
        case DType::uint8: break;  // refused by the Mix step: MixUp follows Normalize
      }
    }
    if (!job.soft) return;
    for (std::size_t j = 0; j < job.samples; ++j) {
      const std::int64_t own = job.labels[j], other = job.labels[(j + job.samples - 1) % job.samples];
      for (std::size_t k = 0; k < job.classes; ++k) {
        job.soft[j * job.classes + k] = soft_label(own, other, std::int64_t(k), job.label_own, job.label_other);
      }
    }
  });
}

}  // namespace

void mix(Device& device, const MixJob& job, Stream& stream) {
  switch (device.backend()) {
    case Backend::host: return mix_host(job, stream);
    case Backend::cuda:
#if defined(CONVEYOR_WITH_CUDA)
      return mix_cuda(device.ordinal(), job, stream);
#else
      no_cuda_build("mix");
#endif
  }
}

}  // namespace conveyor::kernels
