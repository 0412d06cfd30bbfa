// The CUDA backend of Device: thin wrappers, one RAII handle per CUDA object,
// every call through CONVEYOR_CUDA_CHECK, and the kernels (normalize, gather,
// busy). The ordering logic lives above, in cuda/device_pipeline.cpp, shared
// with the host backend. The numbers below are the protocol points of
// docs/cuda.md ("One slot's life"); its last section is the review.
//
// Protocol points this file holds: streams are created cudaStreamNonBlocking
// and nothing is issued on stream 0 by us (2); every call and every handle's
// destructor runs under a ScopedDevice, so it reaches the configured GPU from
// any thread and leaves the thread's current device as it found it (3); sync events are cudaEventDisableTiming | cudaEventBlockingSync, so a
// waiting host thread sleeps instead of spinning (8); every call is checked and
// every launch goes through CONVEYOR_CUDA_LAUNCH, which checks cudaGetLastError (9).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "cuda/backends.h"
#include "cuda/cuda_check.h"
#include "cuda/dtype.h"

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

// Keeps one SM busy for `ns` nanoseconds of the GPU's global timer: a stand-in
// for a training step of known length in the benchmarks.
__global__ void busy_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Makes `ordinal` the calling thread's current device for one scope and then
// restores the thread's previous device (taskflow's cudaScopedDevice). The
// current device is per host thread and belongs to the caller (its LibTorch
// work runs on it): a bare cudaSetDevice in next() or a release would change it
// under them, and a call made without one would go to whatever device the
// thread happens to be on. On a thread already on `ordinal` it costs one
// cudaGetDevice.
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal) {
    CONVEYOR_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != ordinal) {
      CONVEYOR_CUDA_CHECK(cudaSetDevice(ordinal));
      switched_ = true;
    }
  }
  // For destructors: a failure is printed (see check_nothrow), not thrown.
  ScopedDevice(int ordinal, std::nothrow_t) noexcept {
    const cudaError_t e = cudaGetDevice(&previous_);
    CONVEYOR_CUDA_CHECK_NOTHROW(e);
    if (e == cudaSuccess && previous_ != ordinal) {
      const cudaError_t set = cudaSetDevice(ordinal);
      CONVEYOR_CUDA_CHECK_NOTHROW(set);
      switched_ = set == cudaSuccess;
    }
  }
  ~ScopedDevice() {
    if (switched_) CONVEYOR_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
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
cudaEvent_t native(Event& e) { return static_cast<CudaEvent&>(e).get(); }

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
  // transfer thread) binds once, so each guard finds it on this device and
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
  std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(std::string& why) override {
    why = "no GPU decoder on CUDA yet: the nvJPEG decode stage of issue 22 is not written";
    return nullptr;
  }
  std::unique_ptr<Stream> wrap_stream(void* s) override {
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
