// The GPU decode path's host twin: the decoder create_jpeg_decoder gives on
// the host backend, so the path's ordering and fall-backs run and are tested
// without a GPU. Its render runs on the host backend's stream as the CUDA
// decoder's kernel runs on a CUDA stream (device/host_stream.h).
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/host_stream.h"
#include "gpu_decode/decoders.h"
#include "image/decode.h"
#include "image/gpu_decode_plan.h"

namespace conveyor {
namespace {

// The GPU decode path's host twin: libjpeg-turbo decodes each file whole (as
// nvJPEG does), and render() runs the kernel's resize arithmetic on the stream
// (image/gpu_decode_plan.h, render_gpu_twin).
class HostJpegDecoder final : public JpegBatchDecoder {
 public:
  explicit HostJpegDecoder(const DecodeLimits& limits) : decoder_(limits, {8}) {}
  std::string describe() const override { return "host twin of the GPU decoder (libjpeg-turbo, full-size decode)"; }

  std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) override {
    host_stream_drain(stream);  // the previous render() may still read the images
    times_.call();
    if (images_.size() < items.size()) images_.resize(items.size());
    std::vector<std::string> refused(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      Clock::time_point t0 = Clock::now();
      try {
        const ImageInfo info = decoder_.open(items[i].file);
        t0 = times_.add(DecodeTimeCounters::parse, t0);
        if (info.width != items[i].width || info.height != items[i].height) {
          throw DecodeError("the header says " + std::to_string(info.width) + "x" + std::to_string(info.height) +
                            ", the item " + std::to_string(items[i].width) + "x" + std::to_string(items[i].height));
        }
        const DecodedView v = decoder_.decode({0, 0, info.width, info.height}, 1.0);
        Image& img = images_[i];
        img.width = v.width;
        img.height = v.height;
        img.pixels.resize(std::size_t(v.width) * std::size_t(v.height) * 3);
        for (int y = 0; y < v.height; ++y) {
          std::memcpy(img.pixels.data() + std::size_t(y) * std::size_t(v.width) * 3, v.pixels + y * v.stride,
                      std::size_t(v.width) * 3);
        }
        times_.add(DecodeTimeCounters::decode, t0);
      } catch (const std::exception& e) {
        refused[i] = e.what();
      }
    }
    return refused;
  }

  DecodeTimes times() const override { return times_.read(); }

  void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) override {
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!refused.at(i).empty()) continue;
      const Image* img = &images_.at(i);
      const JpegItem item = items[i];
      host_stream_enqueue(stream, [img, item] {
        const Size out = item.geometry.out;
        render_gpu_twin(img->pixels.data(), img->width, img->height, std::ptrdiff_t(img->width) * 3, item.geometry,
                        {item.dst, std::size_t(out.width) * std::size_t(out.height) * 3});
      });
    }
  }

 private:
  struct Image {
    std::vector<unsigned char> pixels;
    int width = 0, height = 0;
  };
  ImageDecoder decoder_;  // full size only, as nvJPEG
  std::vector<Image> images_;  // grows to the largest batch; reused
  DecodeTimeCounters times_;   // parse and decode only: the twin has no setup, and its taps are the render's
};

}  // namespace

std::unique_ptr<JpegBatchDecoder> make_host_jpeg_decoder(const DecodeLimits& limits) {
  return std::make_unique<HostJpegDecoder>(limits);
}

}  // namespace conveyor
