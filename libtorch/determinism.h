// Deterministic LibTorch: what `conveyor train --deterministic` switches on so
// that a run, and a run stopped and resumed, gives the same bits every time on
// CUDA too. Conveyor's batches are deterministic by construction (they depend
// on (seed, epoch, sample) alone); LibTorch's CUDA kernels are not by default
// (atomics in backward passes, cuDNN's algorithm search, cuBLAS's workspaces).
//
// make_deterministic() sets, before any CUDA work:
// - at::globalContext().setDeterministicAlgorithms(true): every op takes its
//   deterministic implementation, and one without throws instead of running;
// - cuDNN deterministic, cuDNN benchmark off (its search picks algorithms by
//   timing, which differs run to run);
// - CUBLAS_WORKSPACE_CONFIG=:4096:8 unless already set (cuBLAS's documented
//   condition for reproducible results with streams).
// On the CPU it changes little (the CPU kernels here are deterministic); the
// cost on a GPU is docs/benchmarks.md's to measure.
#pragma once

#include <string>

namespace conveyor {

// Call once, before the first CUDA call. Returns a one-line description of what was set.
std::string make_deterministic();

}  // namespace conveyor
