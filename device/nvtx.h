// NvtxRange: a scoped NVTX range ("conveyor.fill", "conveyor.transfer", ...) so
// Nsight Systems shows each stage's work on its thread's timeline. NVTX3 is
// header-only in the CUDA toolkit and costs a predicted branch when no tool is
// attached; without CUDA the range compiles to nothing.
#pragma once

#if defined(CONVEYOR_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace conveyor {

class NvtxRange {
 public:
#if defined(CONVEYOR_WITH_NVTX)
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace conveyor
