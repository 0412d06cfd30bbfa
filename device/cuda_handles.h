// The CUDA backend's RAII handles and helpers: the Device's own
// (device/cuda_device.cu), and the raw handles code above the Device needs to
// run CUDA work of its own on the device's streams (device/kernels/*.cu,
// gpu_decode/cuda_jpeg_decoder.cu: native(stream), ScopedDevice, CudaBuffer). Not installed: includes CUDA's
// headers, so no public header includes it, and only .cu files built with the
// CUDA backend do. Every handle frees its object in its destructor
// under a ScopedDevice (protocol point 3, docs/cuda.md).
#pragma once

#include <cuda.h>  // the driver's types only: its functions are reached through the runtime
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>

#include "device/cuda_check.h"
#include "device/device.h"

namespace conveyor::cuda_detail {

constexpr unsigned kBlock = 256;
// Grid-stride loops cover any size; this caps the grid, not the work.
inline unsigned grid_for(std::size_t items) {
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>((items + kBlock - 1) / kBlock, 65535u * 4)));
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
const DriverCalls& driver_calls();

// Device `ordinal`'s primary context (the runtime's), retained once for the
// process and kept; null when the driver calls are unavailable or fail.
CUcontext primary_context(int ordinal);

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

inline cudaStream_t native(Stream& s) { return static_cast<CudaStream&>(s).get(); }
inline cudaEvent_t native(Event& e) { return static_cast<CudaEvent&>(e).get(); }

// The size to allocate when a reused block of `had` bytes must hold `need`:
// half as much again, or twice the old size, whichever is larger. cudaMalloc,
// cudaFree and cudaHostAlloc synchronize the whole device, so a block that
// grows by exactly what each batch needs stalls every stream many times over a
// run's first epochs (measured on an H100: the GPU decode feed's 8 decoders
// took 5 epochs to warm up); grown this way, a few times per block.
inline std::size_t grown_size(std::size_t had, std::size_t need) {
  const std::size_t half_again = need > SIZE_MAX / 3 * 2 ? SIZE_MAX : need + need / 2;
  const std::size_t twice = had > SIZE_MAX / 2 ? SIZE_MAX : had * 2;
  return std::max({need, half_again, twice});
}

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
  std::byte* data() const { return data_; }  // the last reserve()'s block

 private:
  int ordinal_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace conveyor::cuda_detail
