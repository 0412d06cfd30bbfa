// The CUDA backend of Device: thin wrappers over the RAII handles of
// device/cuda_handles.h, every call through CONVEYOR_CUDA_CHECK. The kernels
// (device/kernels/*.cu) and the GPU decode path's nvJPEG decoder
// (gpu_decode/cuda_jpeg_decoder.cu) build on these handles. The ordering logic
// lives above, in device/device_pipeline.cpp, shared with the host backend.
// The numbers below are the protocol points of docs/cuda.md ("One slot's
// life"); its last section is the review.
//
// Protocol points this file holds: streams are created cudaStreamNonBlocking
// and nothing is issued on stream 0 by us (2); every call and every handle's
// destructor runs under a ScopedDevice, so it reaches the configured GPU from
// any thread and leaves the thread's current device as it found it (3); sync
// events are cudaEventDisableTiming | cudaEventBlockingSync, so a waiting host
// thread sleeps instead of spinning (8); every call is checked (9). It
// launches no kernel: the kernels' launches go through CONVEYOR_CUDA_LAUNCH,
// which checks cudaGetLastError (device/kernels/*.cu).
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
#include "device/cuda_handles.h"

namespace conveyor {
namespace cuda_detail {

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

}  // namespace cuda_detail

namespace {

using namespace cuda_detail;

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
