// The two backends' factories, for open_device (device/device.cpp) only. Users
// call open_device; tests may open the host backend directly.
#pragma once

#include <memory>
#include <string>

#include "device/device.h"

namespace conveyor {

// The host backend. `why` says in describe() why it was chosen.
std::shared_ptr<Device> open_host_device(const DeviceConfig& config, std::string why);

#if defined(CONVEYOR_WITH_CUDA)
// Defined in device/cuda_device.cu.
CudaProbe probe_cuda_runtime();
std::shared_ptr<Device> open_cuda_device(const DeviceConfig& config);
#endif

}  // namespace conveyor
