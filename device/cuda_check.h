// The one checking function every CUDA runtime call goes through (CUDA sources
// only). A failure throws DeviceError whose what() names the call, its
// file:line, the error's name and cudaGetErrorString:
//   "cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) at device/cuda_device.cu:181:
//    cudaErrorIllegalAddress: an illegal memory access was encountered"
// The transfer stage turns it into the pipeline's sticky error, so it reaches
// the consumer. Destructors use CONVEYOR_CUDA_CHECK_NOTHROW, which cannot throw
// and stays quiet when the runtime is already unloading at process exit.
//
// The thread's last error: a failed runtime call also leaves its error there,
// and cudaGetLastError() after a launch would report it again, as the launch's.
// So a failure is cleared (cudaGetLastError) before it is thrown or printed,
// and kernels launch through CONVEYOR_CUDA_LAUNCH, which clears whatever an
// earlier call of ours left (one that bypassed this check) before launching.
// Conveyor links cudart statically, so the last error is this runtime's own:
// LibTorch's or a caller's failures (their shared libcudart) never show here,
// while contexts, streams and events, the driver's, are shared. A sticky
// error (the context is lost) cannot be cleared; it fails every later call,
// and so is still reported.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "device/device.h"

namespace conveyor::cuda {

// "device/cuda_device.cu" rather than the build machine's absolute path.
inline const char* short_path(const char* file) {
  const char* p = std::strstr(file, "device/");
  return p ? p : file;
}

[[noreturn]] inline void throw_error(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // reported here: not again by the next launch check
  throw DeviceError(std::string(call) + " at " + short_path(file) + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_error(e, call, file, line);
}

// True when the call succeeded.
inline bool check_nothrow(cudaError_t e, const char* call, const char* file, int line) noexcept {
  if (e == cudaSuccess) return true;
  if (e == cudaErrorCudartUnloading) return false;
  (void)cudaGetLastError();
  std::fprintf(stderr, "conveyor: %s at %s:%d: %s (in a destructor; ignored)\n", call, short_path(file), line,
               cudaGetErrorString(e));
  return false;
}

}  // namespace conveyor::cuda

#define CONVEYOR_CUDA_CHECK(call) ::conveyor::cuda::check((call), #call, __FILE__, __LINE__)
#define CONVEYOR_CUDA_CHECK_NOTHROW(call) ::conveyor::cuda::check_nothrow((call), #call, __FILE__, __LINE__)
// Every kernel launch: CONVEYOR_CUDA_LAUNCH("busy_kernel", busy_kernel<<<1, 1, 0, s>>>(ns));
// A stale last error is dropped first, so the check after the launch reports
// this launch's error only, here rather than at some later call.
#define CONVEYOR_CUDA_LAUNCH(name, ...)                                                \
  do {                                                                               \
    (void)cudaGetLastError();                                                        \
    __VA_ARGS__;                                                                     \
    ::conveyor::cuda::check(cudaGetLastError(), name " launch", __FILE__, __LINE__); \
  } while (0)
