#include "libtorch/determinism.h"

#include <cstdlib>

#include <ATen/Context.h>

namespace conveyor {

std::string make_deterministic() {
  // Read by cuBLAS when its handle is created: before any CUDA work. overwrite = 0 keeps the user's choice.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  at::Context& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  return std::string("deterministic: LibTorch deterministic algorithms, cuDNN deterministic without benchmark, "
                     "CUBLAS_WORKSPACE_CONFIG=") + std::getenv("CUBLAS_WORKSPACE_CONFIG");
}

}  // namespace conveyor
