// Backend choice: probe once, decide once, say why.
#include <sstream>
#include <stdexcept>
#include <string>

#include "device/backends.h"
#include "device/device.h"

namespace conveyor {

std::optional<BackendChoice> parse_backend(std::string_view s) {
  if (s == "auto") return BackendChoice::automatic;
  if (s == "cuda") return BackendChoice::cuda;
  if (s == "host") return BackendChoice::host;
  return std::nullopt;
}


void* Device::allocate_host_interruptibly(std::size_t bytes, const Interrupt& interrupted) {
  if (interrupted && interrupted()) throw Interrupted();
  return allocate_host(bytes);
}

std::unique_ptr<Buffer> Device::allocate_interruptibly(std::size_t bytes, const Interrupt& interrupted) {
  if (interrupted && interrupted()) throw Interrupted();
  return allocate(bytes);
}

std::string CudaProbe::explain() const {
  if (!built_with_cuda) return "built without CUDA (CONVEYOR_CUDA=OFF or no nvcc at build time)";
  if (error != 0) {
    return "no CUDA device: cudaGetDeviceCount returned " + std::to_string(error) + " (" + error_name + ")";
  }
  if (devices == 0) return "no CUDA device: cudaGetDeviceCount found 0";
  return std::to_string(devices) + " CUDA device(s) found";
}

CudaProbe probe_cuda() {
#if defined(CONVEYOR_WITH_CUDA)
  return probe_cuda_runtime();
#else
  return CudaProbe{};
#endif
}

namespace {
std::shared_ptr<Device> open_host(DeviceConfig config, std::string why) {
  if (config.handover_if_host) config.host_transfer = HostTransfer::handover;
  return open_host_device(config, std::move(why));
}
}  // namespace

std::shared_ptr<Device> open_device(const DeviceConfig& config) {
  const double gbps = config.link_gbps;
  if (gbps != 0 && !(gbps >= DeviceConfig::kMinLinkGbps && gbps <= DeviceConfig::kMaxLinkGbps)) {
    std::ostringstream got;
    got << gbps;  // std::to_string(1e-6) reads 0.000000
    throw std::invalid_argument("device: link_gbps must be 0 (no simulated link) or 0.01 to 1e6, got " + got.str());
  }
  if (config.max_delay_us > DeviceConfig::kMaxDelayUs) {
    throw std::invalid_argument("device: max_delay_us must be <= " + std::to_string(DeviceConfig::kMaxDelayUs) +
                                ", got " + std::to_string(config.max_delay_us));
  }
  if (config.backend != BackendChoice::automatic && config.backend != BackendChoice::cuda &&
      config.backend != BackendChoice::host) {
    throw std::invalid_argument("device: backend must be automatic, cuda or host, got " +
                                std::to_string(int(config.backend)));
  }
  if (config.host_transfer != HostTransfer::copy && config.host_transfer != HostTransfer::handover) {
    throw std::invalid_argument("device: host_transfer must be copy or handover, got " +
                                std::to_string(int(config.host_transfer)));
  }
  if (config.backend == BackendChoice::host) return open_host(config, "asked for");

  // Options that only the host backend has decide for it under auto, and are an error under cuda.
  std::string host_only;
  if (config.host_transfer == HostTransfer::handover) host_only = "host_transfer handover";
  else if (config.link_gbps > 0) host_only = "link_gbps";
  else if (config.max_delay_us > 0) host_only = "max_delay_us";
  // A GPU other than the first is named on purpose: auto does not fall back
  // to the host over it (the run would not be where its caller put it).
  const std::string named_gpu =
      config.cuda_device != 0 ? "cuda_device " + std::to_string(config.cuda_device) + " names a GPU, but " : "";
  if (!host_only.empty()) {
    if (config.backend == BackendChoice::automatic && !named_gpu.empty()) {
      throw std::invalid_argument("device auto: " + named_gpu + host_only + " is a host-backend option");
    }
    if (config.backend == BackendChoice::cuda) {
      throw std::invalid_argument("device: " + host_only + " is a host-backend option; the cuda backend has a real device");
    }
    return open_host(config, "auto: " + host_only + " asks for the host backend");
  }

  // One probe; on the host backend nothing else touches CUDA.
  const CudaProbe probe = probe_cuda();
  const bool have_device = probe.built_with_cuda && probe.error == 0 && probe.devices > 0;
  if (config.backend == BackendChoice::automatic && !have_device) {
    if (!named_gpu.empty()) throw DeviceError("device auto: " + named_gpu + probe.explain());
    return open_host(config, "auto: " + probe.explain());
  }
  if (!have_device) throw DeviceError("device cuda: " + probe.explain());
  if (config.cuda_device < 0 || config.cuda_device >= probe.devices) {
    throw DeviceError("device cuda: cuda_device " + std::to_string(config.cuda_device) + " out of range (" +
                      std::to_string(probe.devices) + " device(s))");
  }
#if defined(CONVEYOR_WITH_CUDA)
  return open_cuda_device(config);
#else
  throw DeviceError("device cuda: built without CUDA");
#endif
}

}  // namespace conveyor
