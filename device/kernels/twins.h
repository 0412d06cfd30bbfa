// Private to device/kernels/: the CUDA twins each kernel's dispatcher (its
// *_host.cpp, always built) calls on the cuda backend. Defined in the .cu
// files, built only with CONVEYOR_WITH_CUDA. `ordinal` is the device's;
// `stream` one of the cuda backend's. Not installed.
#pragma once

#include "device/kernels/busy.h"
#include "device/kernels/erase.h"
#include "device/kernels/gather.h"
#include "device/kernels/mix.h"
#include "device/kernels/normalize.h"

namespace conveyor::kernels {

#if defined(CONVEYOR_WITH_CUDA)
void normalize_cuda(int ordinal, const NormalizeJob& job, Stream& stream);
void gather_cuda(int ordinal, const GatherJob& job, Stream& stream);
void busy_cuda(int ordinal, double microseconds, Stream& stream);
void erase_cuda(int ordinal, const EraseJob& job, Stream& stream);
void mix_cuda(int ordinal, const MixJob& job, Stream& stream);
#endif

// The cuda backend in a build without CUDA: cannot happen through open_device;
// a DeviceError naming the kernel rather than undefined behaviour.
[[noreturn]] void no_cuda_build(const char* kernel);

}  // namespace conveyor::kernels
