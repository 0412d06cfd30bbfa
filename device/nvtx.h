// NVTX ranges ("conveyor.fill", "conveyor.transfer", ...) so Nsight Systems
// shows each stage's work on its thread's timeline: nvtx_observer() is the
// pipeline observer (pipeline/observer.h) that pushes a range at each unit of
// work's entry and pops it at its exit; NvtxRange is one scoped range. NVTX3
// is header-only in the CUDA toolkit and costs a predicted branch when no tool
// is attached; without CUDA, nvtx_observer() is null and a range compiles to
// nothing.
#pragma once

#include <memory>

#include "pipeline/observer.h"

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

#if defined(CONVEYOR_WITH_NVTX)
class NvtxObserver final : public Observer {
 public:
  void on_entry(const WorkItem& item) noexcept override { nvtxRangePushA(range_name(item.what)); }
  void on_exit(const WorkItem&) noexcept override { nvtxRangePop(); }

 private:
  static const char* range_name(Work w) noexcept {
    switch (w) {
      case Work::fill: return "conveyor.fill";
      case Work::transfer: return "conveyor.transfer";
      case Work::finish: return "conveyor.finish";
      case Work::next: return "conveyor.next";
    }
    return "conveyor";
  }
};
#endif

// The NVTX observer where NVTX is built in; null otherwise.
inline std::shared_ptr<Observer> nvtx_observer() {
#if defined(CONVEYOR_WITH_NVTX)
  return std::make_shared<NvtxObserver>();
#else
  return nullptr;
#endif
}

}  // namespace conveyor
