// The GPU decode path on CUDA: nvJPEG's batched decode and resize_kernel,
// the render into each sample's place in its slot (gpu_decode/jpeg_batch_decoder.h,
// JpegBatchDecoder), on the CUDA device's raw handles (device/cuda_handles.h).
// The ordering around them is gpu_decode/feed.cpp's and gpu_decode/step.cpp's
// (protocol point 13, docs/cuda.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda_check.h"
#include "device/cuda_handles.h"
#include "gpu_decode/decoders.h"
#include "gpu_decode/nvjpeg_library.h"
#include "gpu_decode/taps_layout.h"
#include "image/resize_math.h"

namespace conveyor::cuda_detail {
namespace {

// The GPU decode path's render: one thread per output byte of one
// sample, each resize_value() -- the arithmetic the CPU's SIMD resize and the
// host twin share (image/resize_math.h) -- over the full decoded image.
__global__ void resize_kernel(const std::uint8_t* __restrict__ src, std::ptrdiff_t stride, ResizeTapsView x,
                              ResizeTapsView y, int out_width, int out_height, bool mirror, std::uint8_t* __restrict__ dst) {
  const std::size_t total = std::size_t(out_width) * std::size_t(out_height) * 3;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int c = int(i % 3);
    const std::size_t p = i / 3;
    const int q = int(p % std::size_t(out_width)), oy = int(p / std::size_t(out_width));
    const int ox = mirror ? out_width - 1 - q : q;
    dst[i] = resize_value(src, stride, x, y, ox, oy, c);
  }
}

// The GPU decode path on CUDA: nvJPEG's batched decode of whole
// files into device images it keeps (grown to the largest batch and image
// seen), then resize_kernel into each sample's place in the slot. nvJPEG is
// opened at run time (gpu_decode/nvjpeg_library.h). The decoders of one device
// share its nvJPEG handle, and each has its own decode state, as nvJPEG's
// thread-safety rules ask of decoders used by several threads at once (the
// GPU decode feed's).
class CudaJpegDecoder final : public JpegBatchDecoder {
 public:
  // Called under the caller's ScopedDevice on `ordinal` (make_cuda_jpeg_decoder).
  CudaJpegDecoder(std::shared_ptr<NvJpegHandle> handle, int ordinal)
      : ordinal_(ordinal), handle_(std::move(handle)), taps_staging_(ordinal),
        taps_copied_(EventKind::sync, ordinal) {
    const NvJpegApi& api = handle_->library().api();
    check(api.state_create(handle_->get(), &state_), "nvjpegJpegStateCreate");
  }
  ~CudaJpegDecoder() override {
    const ScopedDevice on(ordinal_, std::nothrow);
    if (state_) (void)handle_->library().api().state_destroy(state_);
    // Here, not as a member after this body: the handle's streams and buffers
    // are the device's, and `on` is released when the body ends (the last
    // decoder of the device ends the handle).
    handle_.reset();
  }

  std::string describe() const override {
    return "nvJPEG " + handle_->library().version() + " (" + handle_->library().name() + ", " +
           (handle_->hardware() ? "hardware backend)" : "default backend)");
  }

  // Builds the tap tables here, on the decoding thread (the GPU decode feed's),
  // so that render() on the delivery thread only copies and launches.
  std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) override {
    times_.call();
    std::vector<std::string> refused = decode_files(items, stream);
    const Clock::time_point t0 = Clock::now();
    stage_taps(items, refused);
    times_.add(DecodeTimeCounters::taps, t0);
    return refused;
  }

  DecodeTimes times() const override { return times_.read(); }

  void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) override {
    const ScopedDevice on(ordinal_);
    if (!staged_for(refused)) stage_taps(items, refused);  // a caller's own refusals: staged again
    if (staged_.empty()) return;
    CONVEYOR_CUDA_CHECK(cudaMemcpyAsync(taps_device_->data(), taps_staging_.data(), staged_bytes_,
                                        cudaMemcpyHostToDevice, native(stream)));
    CONVEYOR_CUDA_CHECK(cudaEventRecord(taps_copied_.get(), native(stream)));
    for (const Staged& st : staged_) {
      const JpegItem& item = items[st.item];
      const DeviceImage& img = images_.at(st.item);
      const Size out = item.geometry.out;
      CONVEYOR_CUDA_LAUNCH("resize_kernel",
                           resize_kernel<<<grid_for(std::size_t(out.width) * std::size_t(out.height) * 3), kBlock, 0,
                                           native(stream)>>>(image_data(img), std::ptrdiff_t(img.width) * 3, st.x, st.y,
                                                             out.width, out.height, item.geometry.flip, item.dst));
    }
  }

 private:
  // Decodes every item's file whole into arena_ (decode()'s first half): one
  // entry per item, empty or the reason nvJPEG refused it.
  std::vector<std::string> decode_files(std::span<const JpegItem> items, Stream& stream) {
    const ScopedDevice on(ordinal_);
    const NvJpegApi& api = handle_->library().api();
    Clock::time_point t0 = Clock::now();
    std::vector<std::string> refused(items.size());
    // The files nvJPEG's header parse accepts, with the size the worker's parse
    // found, each at its 256-aligned place in the one arena.
    accepted_.clear();
    if (images_.size() < items.size()) images_.resize(items.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      int components = 0, subsampling = 0, widths[4] = {}, heights[4] = {};
      const nvjpeg::Status st = api.get_image_info(handle_->get(), items[i].file.data(), items[i].file.size(), &components,
                                                   &subsampling, widths, heights);
      if (st != nvjpeg::kSuccess) {
        refused[i] = "nvjpegGetImageInfo: " + nvjpeg_status_name(st);
        continue;
      }
      if (widths[0] != items[i].width || heights[0] != items[i].height) {
        refused[i] = "nvJPEG reads " + std::to_string(widths[0]) + "x" + std::to_string(heights[0]) + ", the header " +
                     std::to_string(items[i].width) + "x" + std::to_string(items[i].height);
        continue;
      }
      DeviceImage& img = images_[i];
      img.width = items[i].width;
      img.height = items[i].height;
      img.offset = (total + 255) / 256 * 256;
      total = img.offset + std::size_t(img.width) * std::size_t(img.height) * 3;
      accepted_.push_back(i);
    }
    // The previous render from the arena is done (the caller's contract), so it may move.
    if (total > 0 && (!arena_ || arena_->bytes() < total)) {
      const std::size_t grown = grown_size(arena_ ? arena_->bytes() : 0, total);
      arena_.reset();  // freed before the larger one is taken
      arena_ = std::make_unique<CudaBuffer>(grown, ordinal_);
    }
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> lengths;
    std::vector<nvjpeg::Image> outputs;
    for (const std::size_t i : accepted_) {
      nvjpeg::Image out{};
      out.channel[0] = image_data(images_[i]);
      out.pitch[0] = std::size_t(images_[i].width) * 3;
      data.push_back(items[i].file.data());
      lengths.push_back(items[i].file.size());
      outputs.push_back(out);
    }
    t0 = times_.add(DecodeTimeCounters::parse, t0);
    if (accepted_.empty()) return refused;
    if (int(accepted_.size()) != batch_size_) {
      check(api.decode_batched_initialize(handle_->get(), state_, int(accepted_.size()), 1, nvjpeg::kOutputRgbInterleaved),
            "nvjpegDecodeBatchedInitialize");
      batch_size_ = int(accepted_.size());
      t0 = times_.add(DecodeTimeCounters::setup, t0);
    }
    const nvjpeg::Status st = api.decode_batched(handle_->get(), state_, data.data(), lengths.data(), outputs.data(), native(stream));
    t0 = times_.add(DecodeTimeCounters::decode, t0);
    if (st == nvjpeg::kSuccess) return refused;
    // The batch failed as a whole, as it does for one bad file among good ones:
    // each file goes again on its own (a batch of 1), so only those nvJPEG
    // refuses alone fall back to the CPU. Each one's output is its own image.
    std::vector<std::size_t> batch;
    batch.swap(accepted_);
    if (batch.size() > 1) {
      batch_size_ = 0;  // unknown until the initialize below succeeds: the next decode() initializes again
      if (api.decode_batched_initialize(handle_->get(), state_, 1, 1, nvjpeg::kOutputRgbInterleaved) == nvjpeg::kSuccess) {
        batch_size_ = 1;
        for (std::size_t k = 0; k < batch.size(); ++k) {
          const nvjpeg::Status one =
              api.decode_batched(handle_->get(), state_, &data[k], &lengths[k], &outputs[k], native(stream));
          if (one == nvjpeg::kSuccess) {
            accepted_.push_back(batch[k]);
          } else {
            refused[batch[k]] = "nvjpegDecodeBatched (alone, after its batch failed): " + nvjpeg_status_name(one);
          }
        }
        times_.add(DecodeTimeCounters::decode, t0);
        return refused;
      }
    }
    for (const std::size_t i : batch) refused[i] = "nvjpegDecodeBatched: " + nvjpeg_status_name(st);
    return refused;
  }

  // Every item's tap tables whose `refused` entry is empty, built on the host
  // (doubles, as the CPU path rounds them) into the pinned staging buffer for
  // render()'s one copy, laid out by taps_item_layout: each axis block
  // 16-aligned, so every int32 array is aligned whatever the output size and
  // tap count. staged_ then holds each item's views over the device copy.
  void stage_taps(std::span<const JpegItem> items, const std::vector<std::string>& refused) {
    const ScopedDevice on(ordinal_);
    struct Layout {
      std::size_t item;
      ResizeTaps x, y;
      TapsItemLayout at;
    };
    std::vector<Layout> layouts;
    std::size_t total = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!refused.at(i).empty()) continue;
      const Geometry& g = items[i].geometry;
      const ResizeBox box = clamp_resize_box(g.x0, g.y0, g.x1, g.y1, items[i].width, items[i].height, g.out.width,
                                             g.out.height);
      Layout l{i, {}, {}, {}};
      make_resize_taps(box.u0, box.u1, items[i].width, g.out.width, l.x, g.window.u0, g.window.u1);
      make_resize_taps(box.v0, box.v1, items[i].height, g.out.height, l.y, g.window.v0, g.window.v1);
      l.at = taps_item_layout(total, l.x.first.size(), std::size_t(l.x.max_taps), l.y.first.size(),
                              std::size_t(l.y.max_taps));
      total = l.at.end;
      layouts.push_back(std::move(l));
    }
    staged_.clear();
    staged_bytes_ = total;
    staged_items_ = items.size();
    if (layouts.empty()) return;
    // The last render's copy out of the staging buffer is done by decode()'s
    // contract; this decoder checks rather than leans on it.
    CONVEYOR_CUDA_CHECK(cudaEventSynchronize(taps_copied_.get()));
    std::byte* host = taps_staging_.reserve(total);
    if (!taps_device_ || taps_device_->bytes() < total) {
      const std::size_t grown = grown_size(taps_device_ ? taps_device_->bytes() : 0, total);
      taps_device_.reset();
      taps_device_ = std::make_unique<CudaBuffer>(grown, ordinal_);
    }
    auto* device = static_cast<std::byte*>(taps_device_->data());
    // Copies one axis's tables to their place; returns its view over the device copy.
    const auto place = [&](const ResizeTaps& t, const TapsAxisLayout& a) {
      std::memcpy(host + a.first, t.first.data(), t.first.size() * sizeof(std::int32_t));
      std::memcpy(host + a.count, t.count.data(), t.count.size() * sizeof(std::int32_t));
      std::memcpy(host + a.weights, t.weights.data(), t.weights.size() * sizeof(std::int16_t));
      return ResizeTapsView{reinterpret_cast<const std::int32_t*>(device + a.first),
                            reinterpret_cast<const std::int32_t*>(device + a.count),
                            reinterpret_cast<const std::int16_t*>(device + a.weights), t.max_taps};
    };
    for (const Layout& l : layouts) staged_.push_back({l.item, place(l.x, l.at.x), place(l.y, l.at.y)});
  }

  // Whether staged_ was built for exactly the items `refused` leaves.
  bool staged_for(const std::vector<std::string>& refused) const {
    if (refused.size() != staged_items_) return false;
    std::size_t k = 0;
    for (std::size_t i = 0; i < refused.size(); ++i) {
      if (!refused[i].empty()) continue;
      if (k == staged_.size() || staged_[k].item != i) return false;
      ++k;
    }
    return k == staged_.size();
  }

  static void check(nvjpeg::Status st, const char* call) {
    if (st != nvjpeg::kSuccess) throw DeviceError(std::string(call) + ": " + nvjpeg_status_name(st));
  }
  struct DeviceImage {
    std::size_t offset = 0;  // in arena_
    int width = 0, height = 0;
  };
  unsigned char* image_data(const DeviceImage& img) const { return static_cast<unsigned char*>(arena_->data()) + img.offset; }
  int ordinal_;
  std::shared_ptr<NvJpegHandle> handle_;  // the device's, shared; reset by the destructor under its guard
  nvjpeg::State state_ = nullptr;
  int batch_size_ = 0;                 // what nvjpegDecodeBatchedInitialize was last told
  std::vector<DeviceImage> images_;    // per item position: where decode() put it in arena_
  std::unique_ptr<CudaBuffer> arena_;  // the last decode()'s images; grown (grown_size), reused
  std::vector<std::size_t> accepted_;  // the items the last decode() passed to nvJPEG
  struct Staged {
    std::size_t item;  // its position in the batch
    ResizeTapsView x, y;
  };
  std::vector<Staged> staged_;     // stage_taps()'s items, in order, with their views in taps_device_
  std::size_t staged_bytes_ = 0;   // of taps_staging_ that render() copies
  std::size_t staged_items_ = 0;   // the batch's size when staged
  PinnedBytes taps_staging_;
  CudaEvent taps_copied_;  // recorded after each copy out of taps_staging_
  std::unique_ptr<CudaBuffer> taps_device_;
  DecodeTimeCounters times_;
};

// The nvJPEG handle of device `ordinal`, shared by its decoders while any
// lives (the feed's decoders share it, each with its own state); a new one when
// none does. Keyed by ordinal: a handle belongs to the device's primary
// context, which every Device opened on that ordinal uses. Null with `why` set
// when the library cannot be loaded. Call it under a ScopedDevice on `ordinal`.
std::shared_ptr<NvJpegHandle> shared_handle(int ordinal, std::string& why) {
  static std::mutex& mu = *new std::mutex;  // leaked: a decoder may die during static destruction
  static auto& handles = *new std::map<int, std::weak_ptr<NvJpegHandle>>;
  std::lock_guard lk(mu);
  std::shared_ptr<NvJpegHandle> handle = handles[ordinal].lock();
  if (handle) return handle;
  auto library = NvJpegLibrary::load(nvjpeg_candidates(), why);
  if (!library) return nullptr;
  handle = std::make_shared<NvJpegHandle>(std::move(library));
  handles[ordinal] = handle;
  return handle;
}

}  // namespace
}  // namespace conveyor::cuda_detail

namespace conveyor {

std::unique_ptr<JpegBatchDecoder> make_cuda_jpeg_decoder(int ordinal, std::string& why) {
  using namespace cuda_detail;
  const ScopedDevice on(ordinal);
  try {
    std::shared_ptr<NvJpegHandle> handle = shared_handle(ordinal, why);
    if (!handle) return nullptr;
    return std::make_unique<CudaJpegDecoder>(std::move(handle), ordinal);
  } catch (const std::exception& e) {
    why = std::string("nvJPEG: ") + e.what();
    return nullptr;
  }
}

}  // namespace conveyor
