// The CUDA backend of Device: thin wrappers, one RAII handle per CUDA object,
// every call through CONVEYOR_CUDA_CHECK, and the kernels (normalize, gather,
// busy). The ordering logic lives above, in device/device_pipeline.cpp, shared
// with the host backend. The numbers below are the protocol points of
// docs/cuda.md ("One slot's life"); its last section is the review.
//
// Protocol points this file holds: streams are created cudaStreamNonBlocking
// and nothing is issued on stream 0 by us (2); every call and every handle's
// destructor runs under a ScopedDevice, so it reaches the configured GPU from
// any thread and leaves the thread's current device as it found it (3); sync events are cudaEventDisableTiming | cudaEventBlockingSync, so a
// waiting host thread sleeps instead of spinning (8); every call is checked and
// every launch goes through CONVEYOR_CUDA_LAUNCH, which checks cudaGetLastError (9).
#include <cuda.h>  // the driver's types only: its functions are reached through the runtime
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <cstring>
#include <new>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "device/backends.h"
#include "device/cuda_check.h"
#include "device/dtype.h"
#include "device/nvjpeg_library.h"
#include "device/taps_layout.h"
#include "image/resize_math.h"

namespace conveyor {
namespace {

constexpr unsigned kBlock = 256;
// Grid-stride loops cover any size; this caps the grid, not the work.
inline unsigned grid_for(std::size_t items) {
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>((items + kBlock - 1) / kBlock, 65535u * 4)));
}

struct Affines {
  ChannelAffine a[4];
};

// One thread per output pixel (n, p): reads its channels' bytes (NHWC), writes
// one element per channel plane (NCHW). Writes are coalesced along p.
template <DType T>
__global__ void normalize_kernel(const std::uint8_t* __restrict__ src, void* __restrict__ dst,
                                 const std::uint64_t* __restrict__ indices, std::size_t samples, std::size_t hw,
                                 unsigned channels, Affines affines) {
  const std::size_t total = samples * hw;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t n = i / hw, p = i - n * hw;
    const std::size_t in_n = indices ? indices[n] : n;
    const std::uint8_t* px = src + (in_n * hw + p) * channels;
    for (unsigned c = 0; c < channels; ++c) store_normalized<T>(dst, (n * channels + c) * hw + p, px[c], affines.a[c]);
  }
}

// dst row n = src row indices[n], copied in Word units (16, 4 or 1 bytes, as alignment allows).
template <typename Word>
__global__ void gather_kernel(const Word* __restrict__ src, Word* __restrict__ dst,
                              const std::uint64_t* __restrict__ indices, std::size_t rows, std::size_t row_words) {
  const std::size_t total = rows * row_words;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t n = i / row_words, w = i - n * row_words;
    dst[i] = src[indices[n] * row_words + w];
  }
}

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

// Keeps one SM busy for `ns` nanoseconds of the GPU's global timer: a stand-in
// for a training step of known length in the benchmarks.
__global__ void busy_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// The driver calls the device guard uses, resolved once through the runtime so
// nothing links libcuda (a binary must start where no driver is installed).
// All null where the runtime cannot give them (before CUDA 12): ScopedDevice
// then switches with cudaSetDevice, as the runtime alone can.
struct DriverCalls {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
};

const DriverCalls& driver_calls() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    int count = 0;
    (void)cudaGetDeviceCount(&count);  // initializes the driver, creates no context
#if CUDART_VERSION >= 12000
    void* fn[4] = {};
    const char* names[4] = {"cuCtxGetCurrent", "cuCtxSetCurrent", "cuDeviceGet", "cuDevicePrimaryCtxRetain"};
    for (int i = 0; i < 4; ++i) {
      cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
      const cudaError_t e = cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault, &found);
#else
      const cudaError_t e = cudaGetDriverEntryPoint(names[i], &fn[i], cudaEnableDefault, &found);
#endif
      (void)cudaGetLastError();  // a failure here only means the cudaSetDevice fallback
      if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) return c;
    }
#else
    void* fn[4] = {};
    return c;
#endif
    c.ctx_get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(fn[0]);
    c.ctx_set_current = reinterpret_cast<CUresult (*)(CUcontext)>(fn[1]);
    c.device_get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(fn[2]);
    c.primary_ctx_retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(fn[3]);
    return c;
  }();
  return calls;
}

// Device `ordinal`'s primary context (the runtime's), retained once for the
// process and kept; null when the driver calls are unavailable or fail.
CUcontext primary_context(int ordinal) {
  // Leaked, never destroyed: a handle's destructor may run during static
  // destruction at exit (a global Loader, a tensor's deleter) and guard itself.
  static std::mutex& mu = *new std::mutex;
  static std::map<int, CUcontext>& retained = *new std::map<int, CUcontext>;
  const DriverCalls& d = driver_calls();
  if (!d.primary_ctx_retain) return nullptr;
  std::lock_guard lk(mu);
  if (auto it = retained.find(ordinal); it != retained.end()) return it->second;
  CUdevice dev{};
  CUcontext ctx = nullptr;
  if (d.device_get(&dev, ordinal) != CUDA_SUCCESS || d.primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS) return nullptr;
  return retained[ordinal] = ctx;
}

// Makes device `ordinal` current on the calling thread for one scope, then
// gives the thread back exactly what it had (taskflow's cudaScopedDevice,
// done as DALI's DeviceGuard does it). The current device is per host thread and
// belongs to the caller (its LibTorch work runs on it): a bare cudaSetDevice
// in next() or a release would change it under them, and a call made without
// one would go to whatever device the thread happens to be on.
//
// The switch and the restore go through the driver's current context, not
// cudaSetDevice: the device's primary context (the one the runtime uses) is
// made current, and the context found on entry, null included, is put back.
// Since CUDA 12 cudaSetDevice creates the device's primary context, so
// restoring "device 0" on a thread that never used CUDA (it reports device 0
// without having a context) would leave a few hundred MB on GPU 0 in every
// process run with `--gpu 1` or a Loader on cuda:1; and the runtime's own
// per-thread choice of device is never touched. A thread already in that
// context pays one cuCtxGetCurrent and a lookup.
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal) {
    if (enter(ordinal)) return;
    CONVEYOR_CUDA_CHECK(cudaGetDevice(&previous_));  // the runtime alone
    if (previous_ == ordinal) return;
    CONVEYOR_CUDA_CHECK(cudaSetDevice(ordinal));
    switched_device_ = true;
  }
  // For destructors: a failure is printed (see check_nothrow), not thrown.
  ScopedDevice(int ordinal, std::nothrow_t) noexcept {
    if (enter(ordinal)) return;
    if (!CONVEYOR_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous_)) || previous_ == ordinal) return;
    switched_device_ = CONVEYOR_CUDA_CHECK_NOTHROW(cudaSetDevice(ordinal));
  }
  ~ScopedDevice() {
    if (switched_context_) {
      const CUresult r = driver_calls().ctx_set_current(previous_context_);
      if (r != CUDA_SUCCESS) std::fprintf(stderr, "conveyor: cuCtxSetCurrent failed (%d) restoring the caller's context\n", int(r));
    } else if (switched_device_) {
      CONVEYOR_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
    }
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  // The driver's way; false when it is unavailable (then the runtime's way).
  bool enter(int ordinal) noexcept {
    const DriverCalls& d = driver_calls();
    if (!d.ctx_get_current) return false;
    const CUcontext target = primary_context(ordinal);
    if (!target || d.ctx_get_current(&previous_context_) != CUDA_SUCCESS) return false;
    if (previous_context_ == target) return true;
    if (d.ctx_set_current(target) != CUDA_SUCCESS) return false;
    switched_context_ = true;
    return true;
  }

  CUcontext previous_context_ = nullptr;  // null: the thread had none, and gets none back
  bool switched_context_ = false;
  int previous_ = 0;
  bool switched_device_ = false;
};

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(std::size_t bytes, int ordinal) : bytes_(bytes), ordinal_(ordinal) {
    if (bytes) CONVEYOR_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  ~CudaBuffer() override {
    const ScopedDevice on(ordinal_, std::nothrow);
    if (data_) CONVEYOR_CUDA_CHECK_NOTHROW(cudaFree(data_));
  }
  void* data() const override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  std::size_t bytes_;
  int ordinal_;
  void* data_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  // Owning: a new non-blocking stream. Never the legacy default stream (protocol 2).
  explicit CudaStream(int ordinal) : ordinal_(ordinal) {
    CONVEYOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owned_ = true;
  }
  // Not owning: the caller's stream, e.g. the training step's.
  CudaStream(cudaStream_t s, int ordinal) : stream_(s), owned_(false), ordinal_(ordinal) {}
  ~CudaStream() override {
    if (!owned_) return;
    const ScopedDevice on(ordinal_, std::nothrow);
    CONVEYOR_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));  // as documented: its work finishes first
    CONVEYOR_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
  }
  void* native() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
  int ordinal_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(EventKind kind, int ordinal) : ordinal_(ordinal) {
    const unsigned flags = kind == EventKind::sync ? cudaEventDisableTiming | cudaEventBlockingSync
                                                   : cudaEventBlockingSync;
    CONVEYOR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  ~CudaEvent() override {
    const ScopedDevice on(ordinal_, std::nothrow);
    CONVEYOR_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
  }
  cudaEvent_t get() const { return event_; }

 private:
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

cudaStream_t native(Stream& s) { return static_cast<CudaStream&>(s).get(); }

// The size to allocate when a reused block of `had` bytes must hold `need`:
// half as much again, or twice the old size, whichever is larger. cudaMalloc,
// cudaFree and cudaHostAlloc synchronize the whole device, so a block that
// grows by exactly what each batch needs stalls every stream many times over a
// run's first epochs (measured on an H100: the GPU decode feed's 8 decoders
// took 5 epochs to warm up); grown this way, a few times per block.
std::size_t grown_size(std::size_t had, std::size_t need) {
  const std::size_t half_again = need > SIZE_MAX / 3 * 2 ? SIZE_MAX : need + need / 2;
  const std::size_t twice = had > SIZE_MAX / 2 ? SIZE_MAX : had * 2;
  return std::max({need, half_again, twice});
}
cudaEvent_t native(Event& e) { return static_cast<CudaEvent&>(e).get(); }

// Pinned host memory (RAII), grown on demand: the tap tables' staging.
class PinnedBytes {
 public:
  explicit PinnedBytes(int ordinal) : ordinal_(ordinal) {}
  ~PinnedBytes() {
    const ScopedDevice on(ordinal_, std::nothrow);
    if (data_) CONVEYOR_CUDA_CHECK_NOTHROW(cudaFreeHost(data_));
  }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  // At least `bytes`; a larger block when it grows (grown_size), so a run
  // pays the allocation's device-wide synchronization a few times only.
  std::byte* reserve(std::size_t bytes) {
    if (bytes > bytes_) {
      if (data_) CONVEYOR_CUDA_CHECK(cudaFreeHost(data_));
      data_ = nullptr;
      const std::size_t grown = grown_size(bytes_, bytes);
      bytes_ = 0;
      CONVEYOR_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&data_), grown, cudaHostAllocDefault));
      bytes_ = grown;
    }
    return data_;
  }

 private:
  int ordinal_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// The GPU decode path on CUDA: nvJPEG's batched decode of whole
// files into device images it keeps (grown to the largest batch and image
// seen), then resize_kernel into each sample's place in the slot. nvJPEG is
// opened at run time (device/nvjpeg_library.h). The decoders of one device
// share its nvJPEG handle, and each has its own decode state, as nvJPEG's
// thread-safety rules ask of decoders used by several threads at once (the
// GPU decode feed's).
class CudaJpegDecoder final : public JpegBatchDecoder {
 public:
  // Called under the caller's ScopedDevice on `ordinal` (create_jpeg_decoder).
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

  std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) override {
    const ScopedDevice on(ordinal_);
    const NvJpegApi& api = handle_->library().api();
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
    if (accepted_.empty()) return refused;
    if (int(accepted_.size()) != batch_size_) {
      check(api.decode_batched_initialize(handle_->get(), state_, int(accepted_.size()), 1, nvjpeg::kOutputRgbInterleaved),
            "nvjpegDecodeBatchedInitialize");
      batch_size_ = int(accepted_.size());
    }
    const nvjpeg::Status st = api.decode_batched(handle_->get(), state_, data.data(), lengths.data(), outputs.data(), native(stream));
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
        return refused;
      }
    }
    for (const std::size_t i : batch) refused[i] = "nvjpegDecodeBatched: " + nvjpeg_status_name(st);
    return refused;
  }

  void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) override {
    const ScopedDevice on(ordinal_);
    // Every accepted item's tap tables, built here (host doubles, as the CPU
    // path rounds them) and copied to the device in one transfer, laid out by
    // taps_item_layout: each axis block 16-aligned, so every int32 array is
    // aligned whatever the output size and tap count.
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
    if (layouts.empty()) return;
    // The last render's copy may still be reading the staging tables: today the
    // pipeline finishes each GPU-decoded batch before the next one starts
    // (transfer_would_wait), but this decoder does not lean on that.
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
    std::vector<std::pair<ResizeTapsView, ResizeTapsView>> views;
    for (const Layout& l : layouts) views.emplace_back(place(l.x, l.at.x), place(l.y, l.at.y));
    CONVEYOR_CUDA_CHECK(cudaMemcpyAsync(device, host, total, cudaMemcpyHostToDevice, native(stream)));
    CONVEYOR_CUDA_CHECK(cudaEventRecord(taps_copied_.get(), native(stream)));
    for (std::size_t k = 0; k < layouts.size(); ++k) {
      const JpegItem& item = items[layouts[k].item];
      const DeviceImage& img = images_.at(layouts[k].item);
      const Size out = item.geometry.out;
      CONVEYOR_CUDA_LAUNCH("resize_kernel",
                           resize_kernel<<<grid_for(std::size_t(out.width) * std::size_t(out.height) * 3), kBlock, 0,
                                           native(stream)>>>(image_data(img),
                                                             std::ptrdiff_t(img.width) * 3, views[k].first,
                                                             views[k].second, out.width, out.height,
                                                             item.geometry.flip, item.dst));
    }
  }

 private:
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
  PinnedBytes taps_staging_;
  CudaEvent taps_copied_;  // recorded after each copy out of taps_staging_
  std::unique_ptr<CudaBuffer> taps_device_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(const DeviceConfig& config) : ordinal_(config.cuda_device), poison_(config.poison_released) {
    const ScopedDevice on(ordinal_);  // the caller's thread: its device is left as it was
    cudaDeviceProp prop{};
    CONVEYOR_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = std::string("cuda backend: device ") + std::to_string(ordinal_) + " " + prop.name + ", sm_" +
            std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
            std::to_string(prop.totalGlobalMem >> 20) + " MiB";
  }

  Backend backend() const override { return Backend::cuda; }
  std::string describe() const override { return name_; }
  bool poisons_released() const override { return poison_; }
  int ordinal() const override { return ordinal_; }
  // Optional now that every call guards itself: a thread of our own (the
  // delivery thread) binds once, so each guard finds it on this device and
  // switches nothing. Not undone: never for a caller's thread.
  void bind_thread() override { CONVEYOR_CUDA_CHECK(cudaSetDevice(ordinal_)); }

  // Each call below opens with `on`: it runs on this device, whichever the
  // calling thread's current one is, and leaves that as it was.
  void* allocate_host(std::size_t bytes) override {
    const ScopedDevice on(ordinal_);
    void* p = nullptr;
    CONVEYOR_CUDA_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocDefault));
    return p;
  }
  void free_host(void* p) noexcept override {
    const ScopedDevice on(ordinal_, std::nothrow);
    CONVEYOR_CUDA_CHECK_NOTHROW(cudaFreeHost(p));
  }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override {
    const ScopedDevice on(ordinal_);
    return std::make_unique<CudaBuffer>(bytes, ordinal_);
  }
  std::unique_ptr<Stream> create_stream() override {
    const ScopedDevice on(ordinal_);
    return std::make_unique<CudaStream>(ordinal_);
  }
  std::unique_ptr<Event> create_event(EventKind kind) override {
    const ScopedDevice on(ordinal_);
    return std::make_unique<CudaEvent>(kind, ordinal_);
  }
  std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(const DecodeLimits&, std::string& why) override {
    const ScopedDevice on(ordinal_);
    try {
      std::shared_ptr<NvJpegHandle> handle;
      {
        // One handle per device while any decoder holds it: the decoders of a
        // GPU decode feed share it, each with its own state.
        std::lock_guard lk(jpeg_mu_);
        handle = jpeg_handle_.lock();
        if (!handle) {
          auto library = NvJpegLibrary::load(nvjpeg_candidates(), why);
          if (!library) return nullptr;
          handle = std::make_shared<NvJpegHandle>(std::move(library));
          jpeg_handle_ = handle;
        }
      }
      return std::make_unique<CudaJpegDecoder>(std::move(handle), ordinal_);
    } catch (const std::exception& e) {
      why = std::string("nvJPEG: ") + e.what();
      return nullptr;
    }
  }
  std::unique_ptr<Stream> wrap_stream(void* s) override {
    // cudaStreamPerThread names the calling thread's own stream, a different
    // one on each thread: a release (a deleter on another thread, a garbage
    // collector) would record "consumed" on the wrong stream, and the slot
    // would be refilled while this thread's kernels still read it.
    if (static_cast<cudaStream_t>(s) == cudaStreamPerThread) {
      throw DeviceError("the per-thread default stream (cudaStreamPerThread) cannot be waited on and released from "
                        "other threads: pass an explicit stream");
    }
    // A stream of another GPU: recording this device's events on it (a
    // release) fails, so it is refused here, where the caller can tell why.
    // The legacy default stream (null or cudaStreamLegacy) is the current
    // context's, which every call of ours makes this device's.
#if CUDART_VERSION >= 12080
    if (s && static_cast<cudaStream_t>(s) != cudaStreamLegacy) {
      const ScopedDevice on(ordinal_);
      int device = -1;
      const cudaError_t e = cudaStreamGetDevice(static_cast<cudaStream_t>(s), &device);
      if (e == cudaErrorCallRequiresNewerDriver || e == cudaErrorNotSupported) {
        // Built with 12.8+, run on an older driver (minor-version compatibility):
        // no check, as before 12.8; the error is not left for a later check.
        (void)cudaGetLastError();
        device = ordinal_;
      } else if (e != cudaSuccess) {
        cuda::check(e, "cudaStreamGetDevice(stream, &device)", __FILE__, __LINE__);
      }
      if (device != ordinal_) {
        throw DeviceError("a stream of CUDA device " + std::to_string(device) + " given to work on CUDA device " +
                          std::to_string(ordinal_) + ": pass a stream of device " + std::to_string(ordinal_));
      }
    }
#else
    // No check: cudaStreamGetDevice came with CUDA 12.8. Such a stream fails at
    // its first event record instead (cudaEventRecord, at the batch's release).
#endif
    return std::make_unique<CudaStream>(static_cast<cudaStream_t>(s), ordinal_);
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes, Stream& s) override {
    if (!bytes) return;
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(s)));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream& s) override {
    if (!bytes) return;
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(s)));
  }
  void set_bytes(void* dst, unsigned char value, std::size_t bytes, Stream& s) override {
    if (!bytes) return;
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, native(s)));
  }

  void normalize(const NormalizeJob& job, Stream& s) override {
    const std::size_t hw = job.height * job.width;
    if (job.samples * hw == 0) return;
    Affines affines{};
    for (int c = 0; c < 4; ++c) affines.a[c] = job.affine[c];
    const ScopedDevice on(ordinal_);
    switch (job.out_type) {
      case DType::float32: return launch_normalize<DType::float32>(job, hw, affines, s);
      case DType::float16: return launch_normalize<DType::float16>(job, hw, affines, s);
      case DType::bfloat16: return launch_normalize<DType::bfloat16>(job, hw, affines, s);
      case DType::uint8: return launch_normalize<DType::uint8>(job, hw, affines, s);
    }
  }

  void gather(const GatherJob& job, Stream& s) override {
    if (job.rows == 0 || job.row_bytes == 0) return;
    const auto aligned = [&](std::size_t a) {
      return job.row_bytes % a == 0 && reinterpret_cast<std::uintptr_t>(job.src) % a == 0 &&
             reinterpret_cast<std::uintptr_t>(job.dst) % a == 0;
    };
    const ScopedDevice on(ordinal_);
    if (aligned(16)) {
      launch_gather<uint4>(job, s);
    } else if (aligned(4)) {
      launch_gather<std::uint32_t>(job, s);
    } else {
      launch_gather<std::uint8_t>(job, s);
    }
  }

  void busy(double microseconds, Stream& s) override {
    if (!(microseconds > 0)) return;  // NaN and negatives included
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_LAUNCH("busy_kernel",
                         busy_kernel<<<1, 1, 0, native(s)>>>(static_cast<unsigned long long>(microseconds * 1000.0)));
  }

  void record(Event& e, Stream& s) override {
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaEventRecord(native(e), native(s)));
  }
  void wait(Stream& s, Event& e) override {
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaStreamWaitEvent(native(s), native(e), 0));
  }
  void synchronize(Event& e) override {
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaEventSynchronize(native(e)));
  }
  void synchronize(Stream& s) override {
    const ScopedDevice on(ordinal_);
    CONVEYOR_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  }
  double elapsed_ms(Event& start, Event& end) override {
    const ScopedDevice on(ordinal_);
    float ms = 0;
    CONVEYOR_CUDA_CHECK(cudaEventElapsedTime(&ms, native(start), native(end)));
    return ms;
  }

 private:
  template <DType T>
  void launch_normalize(const NormalizeJob& job, std::size_t hw, const Affines& affines, Stream& s) {
    CONVEYOR_CUDA_LAUNCH("normalize_kernel",
                         normalize_kernel<T><<<grid_for(job.samples * hw), kBlock, 0, native(s)>>>(
                             job.src, job.dst, job.indices, job.samples, hw, static_cast<unsigned>(job.channels), affines));
  }
  template <typename Word>
  void launch_gather(const GatherJob& job, Stream& s) {
    const std::size_t row_words = job.row_bytes / sizeof(Word);
    CONVEYOR_CUDA_LAUNCH("gather_kernel", gather_kernel<Word><<<grid_for(job.rows * row_words), kBlock, 0, native(s)>>>(
                                              reinterpret_cast<const Word*>(job.src), reinterpret_cast<Word*>(job.dst),
                                              job.indices, job.rows, row_words));
  }

  int ordinal_;
  bool poison_;
  std::string name_;
  std::mutex jpeg_mu_;
  std::weak_ptr<NvJpegHandle> jpeg_handle_;  // the decoders' shared handle, while one lives
};

}  // namespace

CudaProbe probe_cuda_runtime() {
  CudaProbe p;
  p.built_with_cuda = true;
  int count = 0;  // left unwritten when there is no driver (error 35)
  const cudaError_t e = cudaGetDeviceCount(&count);
  p.error = static_cast<int>(e);
  p.error_name = cudaGetErrorName(e);
  p.devices = e == cudaSuccess ? count : 0;
  return p;
}

std::shared_ptr<Device> open_cuda_device(const DeviceConfig& config) { return std::make_shared<CudaDevice>(config); }

}  // namespace conveyor
