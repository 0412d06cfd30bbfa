#include "gpu_decode/nvjpeg_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace conveyor {

std::string nvjpeg_status_name(nvjpeg::Status status) {
  static constexpr const char* kNames[] = {
      "NVJPEG_STATUS_SUCCESS",           "NVJPEG_STATUS_NOT_INITIALIZED",
      "NVJPEG_STATUS_INVALID_PARAMETER", "NVJPEG_STATUS_BAD_JPEG",
      "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", "NVJPEG_STATUS_ALLOCATOR_FAILURE",
      "NVJPEG_STATUS_EXECUTION_FAILED",  "NVJPEG_STATUS_ARCH_MISMATCH",
      "NVJPEG_STATUS_INTERNAL_ERROR",    "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
      "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};
  if (status >= 0 && status < int(std::size(kNames))) return kNames[status];
  return "nvJPEG status " + std::to_string(status);
}

std::vector<std::string> nvjpeg_candidates() {
  if (const char* path = std::getenv("CONVEYOR_NVJPEG"); path && *path) return {path};
  return {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"};
}

std::shared_ptr<const NvJpegLibrary> NvJpegLibrary::load(const std::vector<std::string>& candidates, std::string& why) {
  std::string tried, last_error = "no candidates";
  for (const std::string& name : candidates) {
    tried += (tried.empty() ? "" : ", ") + name;
    // RTLD_LOCAL: its symbols stay out of the global namespace (a PyTorch in the
    // same process may have loaded another nvJPEG).
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = ::dlerror();
      last_error = e ? e : "dlopen failed";
      continue;
    }
    NvJpegApi api;
    const auto resolve = [&](auto& fn, const char* symbol) {
      ::dlerror();
      void* p = ::dlsym(handle, symbol);
      if (!p) throw std::runtime_error(symbol);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    try {
      resolve(api.create_ex, "nvjpegCreateEx");
      resolve(api.destroy, "nvjpegDestroy");
      resolve(api.state_create, "nvjpegJpegStateCreate");
      resolve(api.state_destroy, "nvjpegJpegStateDestroy");
      resolve(api.get_image_info, "nvjpegGetImageInfo");
      resolve(api.decode_batched_initialize, "nvjpegDecodeBatchedInitialize");
      resolve(api.decode_batched, "nvjpegDecodeBatched");
      resolve(api.get_property, "nvjpegGetProperty");
    } catch (const std::runtime_error& missing) {  // not the nvJPEG C API (or another version of it): try the next
      ::dlclose(handle);
      last_error = name + " has no symbol " + missing.what();
      continue;
    }
    return std::shared_ptr<const NvJpegLibrary>(new NvJpegLibrary(handle, name, api));
  }
  why = "nvJPEG not found (tried " + tried + "; last: " + last_error + "); set CONVEYOR_NVJPEG to its path";
  if (candidates.empty()) why = "nvJPEG not found (no candidates)";
  return nullptr;
}

NvJpegLibrary::~NvJpegLibrary() { ::dlclose(handle_); }

std::string NvJpegLibrary::version() const {
  int major = 0, minor = 0, patch = 0;
  if (api_.get_property(nvjpeg::kMajorVersion, &major) != nvjpeg::kSuccess ||
      api_.get_property(nvjpeg::kMinorVersion, &minor) != nvjpeg::kSuccess ||
      api_.get_property(nvjpeg::kPatchLevel, &patch) != nvjpeg::kSuccess) {
    return "unknown";
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

NvJpegHandle::NvJpegHandle(std::shared_ptr<const NvJpegLibrary> library) : library_(std::move(library)) {
  const NvJpegApi& api = library_->api();
  // The hardware backend exists only on GPUs with JPEG engines; any refusal
  // (ARCH_MISMATCH, IMPLEMENTATION_NOT_SUPPORTED) falls back to the default one.
  const nvjpeg::Status hw = api.create_ex(nvjpeg::kBackendHardware, nullptr, nullptr, 0, &handle_);
  if (hw == nvjpeg::kSuccess) {
    hardware_ = true;
    return;
  }
  handle_ = nullptr;
  const nvjpeg::Status def = api.create_ex(nvjpeg::kBackendDefault, nullptr, nullptr, 0, &handle_);
  if (def != nvjpeg::kSuccess) {
    handle_ = nullptr;
    throw std::runtime_error("nvjpegCreateEx: " + nvjpeg_status_name(def) + " (hardware backend: " +
                             nvjpeg_status_name(hw) + ")");
  }
}

NvJpegHandle::~NvJpegHandle() {
  if (handle_) (void)library_->api().destroy(handle_);  // nothing to do about a failure here
}

}  // namespace conveyor
