// NvJpegLibrary's run-time loading: the absence path every CI run
// takes, and, through a stub library with the same C API, the symbol check,
// the version, and the fall-back from the hardware backend.
#include <dlfcn.h>

#include <string>

#include "catch_compat.h"

#include "gpu_decode/nvjpeg_library.h"

using namespace conveyor;

TEST_CASE("nvjpeg: an absent library gives null and one line naming what was tried", "[nvjpeg]") {
  std::string why;
  REQUIRE(NvJpegLibrary::load({"/nonexistent/libnvjpeg.so.12", "libnvjpeg-not-here.so"}, why) == nullptr);
  REQUIRE(why.find("nvJPEG not found (tried /nonexistent/libnvjpeg.so.12, libnvjpeg-not-here.so; last: ") == 0);
  REQUIRE(why.find("CONVEYOR_NVJPEG") != std::string::npos);
  REQUIRE(why.find('\n') == std::string::npos);
  why.clear();
  REQUIRE(NvJpegLibrary::load({}, why) == nullptr);
  REQUIRE(why == "nvJPEG not found (no candidates)");
}

TEST_CASE("nvjpeg: the search order, and CONVEYOR_NVJPEG in front of it", "[nvjpeg]") {
  ::unsetenv("CONVEYOR_NVJPEG");
  REQUIRE(nvjpeg_candidates() == std::vector<std::string>{"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"});
  ::setenv("CONVEYOR_NVJPEG", "/opt/x/libnvjpeg.so.12", 1);
  REQUIRE(nvjpeg_candidates() == std::vector<std::string>{"/opt/x/libnvjpeg.so.12"});
  ::unsetenv("CONVEYOR_NVJPEG");
}

TEST_CASE("nvjpeg: a library without the whole C API is refused by symbol, and the next one tried", "[nvjpeg]") {
  std::string why;
  REQUIRE(NvJpegLibrary::load({"/nonexistent.so", NVJPEG_STUB_INCOMPLETE_PATH}, why) == nullptr);
  REQUIRE(why == std::string("nvJPEG not found (tried /nonexistent.so, ") + NVJPEG_STUB_INCOMPLETE_PATH + "; last: " +
                     NVJPEG_STUB_INCOMPLETE_PATH + " has no symbol nvjpegDecodeBatched); set CONVEYOR_NVJPEG to its path");
  const auto lib = NvJpegLibrary::load({NVJPEG_STUB_INCOMPLETE_PATH, NVJPEG_STUB_PATH}, why);
  REQUIRE(lib != nullptr);
  REQUIRE(lib->name() == NVJPEG_STUB_PATH);
}

TEST_CASE("nvjpeg: loaded from a stub: version, status names, hardware backend refused then default", "[nvjpeg]") {
  std::string why;
  const auto lib = NvJpegLibrary::load({"/nonexistent.so", NVJPEG_STUB_PATH}, why);
  REQUIRE(lib != nullptr);
  REQUIRE(lib->name() == NVJPEG_STUB_PATH);
  REQUIRE(lib->version() == "12.3.4");
  REQUIRE(nvjpeg_status_name(3) == "NVJPEG_STATUS_BAD_JPEG");
  REQUIRE(nvjpeg_status_name(10) == "NVJPEG_STATUS_INCOMPLETE_BITSTREAM");
  REQUIRE(nvjpeg_status_name(42) == "nvJPEG status 42");
  // The stub's own switch, reached through the same (reference-counted) dlopen.
  void* stub = ::dlopen(NVJPEG_STUB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(stub != nullptr);
  auto set_mode = reinterpret_cast<void (*)(int)>(::dlsym(stub, "nvjpeg_stub_set_mode"));
  REQUIRE(set_mode != nullptr);
  set_mode(0);
  {
    NvJpegHandle handle(lib);
    REQUIRE(handle.get() != nullptr);
    REQUIRE_FALSE(handle.hardware());  // ARCH_MISMATCH from the hardware backend: the default one instead
  }
  set_mode(1);
  REQUIRE_THROWS_WITH(NvJpegHandle(lib), Catch::Contains("nvjpegCreateEx: NVJPEG_STATUS_EXECUTION_FAILED (hardware backend: "
                                                         "NVJPEG_STATUS_ARCH_MISMATCH)"));
  set_mode(0);
  ::dlclose(stub);
}
