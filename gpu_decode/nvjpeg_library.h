// NvJpegLibrary: nvJPEG opened at run time, for the GPU decode path.
//
// nvJPEG ships with every full CUDA toolkit and with PyTorch's CUDA wheels,
// but not with the toolkit on our CI machines, so Conveyor never links it. As
// DALI does, it opens the shared library with dlopen and resolves only the C
// API subset below, declared here from NVIDIA's nvJPEG documentation (the
// "nvJPEG API Reference": nvjpegCreateEx, the batched decode, the image info
// and property calls), so building needs no nvjpeg.h. Where the library or a
// symbol is missing, load() returns null and a one-line reason; the caller
// says it once and decodes on the CPU alone.
//
//   std::string why;
//   auto nvjpeg = NvJpegLibrary::load(nvjpeg_candidates(), why);
//   if (!nvjpeg) std::cerr << "gpu decode: off, " << why << "\n";
//
// Search order (nvjpeg_candidates()): $CONVEYOR_NVJPEG when set (a path, e.g.
// a pip PyTorch's site-packages/nvidia/nvjpeg/lib/libnvjpeg.so.12), else
// libnvjpeg.so.13, .so.12, .so.11 and libnvjpeg.so through the dynamic
// loader's own search (LD_LIBRARY_PATH, ldconfig's cache).
//
// Thread safety: a loaded library is immutable and shared; the functions it
// resolves follow nvJPEG's own rules (a handle is thread-safe, a decode state
// belongs to one thread at a time).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace conveyor {

namespace nvjpeg {
// nvjpegStatus_t: 0 is NVJPEG_STATUS_SUCCESS.
using Status = int;
inline constexpr Status kSuccess = 0;
inline constexpr Status kArchMismatch = 7;  // NVJPEG_STATUS_ARCH_MISMATCH: no such backend on this GPU
// nvjpegBackend_t values used.
inline constexpr int kBackendDefault = 0;
inline constexpr int kBackendHardware = 3;  // A100/H100's JPEG engines
// nvjpegOutputFormat_t: NVJPEG_OUTPUT_RGBI, interleaved RGB in channel[0].
inline constexpr int kOutputRgbInterleaved = 5;
// libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL.
inline constexpr int kMajorVersion = 0, kMinorVersion = 1, kPatchLevel = 2;
// nvjpegImage_t (NVJPEG_MAX_COMPONENT = 4).
struct Image {
  unsigned char* channel[4];
  std::size_t pitch[4];
};
struct HandleSt;  // nvjpegHandle
struct StateSt;   // nvjpegJpegState
using Handle = HandleSt*;
using State = StateSt*;
using Stream = void*;  // cudaStream_t
}  // namespace nvjpeg

// The C API subset, as function pointers resolved from the library.
struct NvJpegApi {
  nvjpeg::Status (*create_ex)(int backend, void* dev_allocator, void* pinned_allocator, unsigned int flags,
                              nvjpeg::Handle* handle) = nullptr;                              // nvjpegCreateEx
  nvjpeg::Status (*destroy)(nvjpeg::Handle handle) = nullptr;                                 // nvjpegDestroy
  nvjpeg::Status (*state_create)(nvjpeg::Handle handle, nvjpeg::State* state) = nullptr;      // nvjpegJpegStateCreate
  nvjpeg::Status (*state_destroy)(nvjpeg::State state) = nullptr;                             // nvjpegJpegStateDestroy
  nvjpeg::Status (*get_image_info)(nvjpeg::Handle handle, const unsigned char* data, std::size_t length,
                                   int* components, int* subsampling, int* widths, int* heights) = nullptr;  // nvjpegGetImageInfo
  nvjpeg::Status (*decode_batched_initialize)(nvjpeg::Handle handle, nvjpeg::State state, int batch_size,
                                              int max_cpu_threads, int output_format) = nullptr;  // nvjpegDecodeBatchedInitialize
  nvjpeg::Status (*decode_batched)(nvjpeg::Handle handle, nvjpeg::State state, const unsigned char* const* data,
                                   const std::size_t* lengths, nvjpeg::Image* destinations,
                                   nvjpeg::Stream stream) = nullptr;                           // nvjpegDecodeBatched
  nvjpeg::Status (*get_property)(int type, int* value) = nullptr;                             // nvjpegGetProperty
};

// nvJPEG's status as its enum's name, e.g. "NVJPEG_STATUS_BAD_JPEG", or "nvJPEG status N".
std::string nvjpeg_status_name(nvjpeg::Status status);

// The libraries to try, in order (see the search order above).
std::vector<std::string> nvjpeg_candidates();

class NvJpegLibrary {
 public:
  // Opens the first candidate that dlopen accepts and that resolves every
  // function of NvJpegApi (one that lacks a symbol is closed and the next
  // tried). On failure returns null and sets `why` to one line naming what was
  // tried and the last failure: "nvJPEG not found (tried libnvjpeg.so.13, ...;
  // last: <dlerror, or '<name> has no symbol nvjpegDecodeBatched'>); set
  // CONVEYOR_NVJPEG to its path".
  static std::shared_ptr<const NvJpegLibrary> load(const std::vector<std::string>& candidates, std::string& why);

  ~NvJpegLibrary();
  NvJpegLibrary(const NvJpegLibrary&) = delete;
  NvJpegLibrary& operator=(const NvJpegLibrary&) = delete;

  const NvJpegApi& api() const { return api_; }
  const std::string& name() const { return name_; }  // the candidate that opened
  // "major.minor.patch" from nvjpegGetProperty, or "unknown" when it fails.
  std::string version() const;

 private:
  NvJpegLibrary(void* handle, std::string name, NvJpegApi api) : handle_(handle), name_(std::move(name)), api_(api) {}
  void* handle_;
  std::string name_;
  NvJpegApi api_;
};

// An nvJPEG handle (RAII): the hardware backend where the GPU has JPEG engines
// (A100, H100), else the default (hybrid/GPU) one. Needs a CUDA device.
class NvJpegHandle {
 public:
  // Throws std::runtime_error "nvjpegCreateEx: <status>" when neither backend opens.
  explicit NvJpegHandle(std::shared_ptr<const NvJpegLibrary> library);
  ~NvJpegHandle();
  NvJpegHandle(const NvJpegHandle&) = delete;
  NvJpegHandle& operator=(const NvJpegHandle&) = delete;

  nvjpeg::Handle get() const { return handle_; }
  bool hardware() const { return hardware_; }  // opened with the hardware backend
  const NvJpegLibrary& library() const { return *library_; }

 private:
  std::shared_ptr<const NvJpegLibrary> library_;
  nvjpeg::Handle handle_ = nullptr;
  bool hardware_ = false;
};

}  // namespace conveyor
