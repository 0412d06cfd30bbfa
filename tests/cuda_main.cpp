// test_cuda's main: without a CUDA device, one line saying why and exit 77
// (CTest: Skipped); with one, the Catch2 session.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.h"
#include <cstdio>

#include "device/device.h"

int main(int argc, char** argv) {
  const conveyor::CudaProbe probe = conveyor::probe_cuda();
  if (!probe.built_with_cuda || probe.error != 0 || probe.devices == 0) {
    std::printf("test_cuda skipped: %s\n", probe.explain().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
