// A stand-in for libnvjpeg.so with the C API subset NvJpegLibrary resolves, so
// the loader's paths run where no nvJPEG exists: the hardware backend refused
// (as on a GPU without JPEG engines), both refused, and, built with
// NVJPEG_STUB_INCOMPLETE, a library missing a symbol. Decoding is not stubbed:
// every decode call fails.
#include <cstddef>

namespace {
int g_mode = 0;  // 0: hardware refused, default opens; 1: both refused
int g_handle = 0, g_state = 0;
}  // namespace

extern "C" {
__attribute__((visibility("default"))) void nvjpeg_stub_set_mode(int mode) { g_mode = mode; }

__attribute__((visibility("default"))) int nvjpegCreateEx(int backend, void*, void*, unsigned int, void** handle) {
  if (backend == 3) return 7;  // NVJPEG_STATUS_ARCH_MISMATCH
  if (g_mode == 1) return 6;   // NVJPEG_STATUS_EXECUTION_FAILED
  *handle = &g_handle;
  return 0;
}
__attribute__((visibility("default"))) int nvjpegDestroy(void*) { return 0; }
__attribute__((visibility("default"))) int nvjpegJpegStateCreate(void*, void** state) {
  *state = &g_state;
  return 0;
}
__attribute__((visibility("default"))) int nvjpegJpegStateDestroy(void*) { return 0; }
__attribute__((visibility("default"))) int nvjpegGetImageInfo(void*, const unsigned char*, std::size_t, int*, int*, int*, int*) {
  return 3;  // NVJPEG_STATUS_BAD_JPEG
}
__attribute__((visibility("default"))) int nvjpegDecodeBatchedInitialize(void*, void*, int, int, int) { return 6; }
#if !defined(NVJPEG_STUB_INCOMPLETE)
__attribute__((visibility("default"))) int nvjpegDecodeBatched(void*, void*, const unsigned char* const*, const std::size_t*,
                                                               void*, void*) {
  return 6;
}
#endif
__attribute__((visibility("default"))) int nvjpegGetProperty(int type, int* value) {
  *value = type == 0 ? 12 : type == 1 ? 3 : 4;
  return 0;
}
}
