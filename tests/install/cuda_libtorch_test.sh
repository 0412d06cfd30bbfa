#!/usr/bin/env bash
# Conveyor configured beside a CUDA LibTorch (issue 18): a stand-in for pip torch 2.11's
# TorchConfig.cmake with the three things it did on the H100 machine (2026-11-24), checked
# without a GPU or a CUDA LibTorch:
#   - whenever CMAKE_CUDA_ARCHITECTURES is defined, it warns that it "is not compatible" with
#     it and sets it to OFF (our .cu files would then build for nvcc's default architecture);
#   - it appends -gencode flags of its own to CMAKE_CUDA_FLAGS;
#   - it runs find_package(Python COMPONENTS Interpreter), which pybind11 then preferred to our
#     Python3 ("Unknown CMake command python_add_library").
# Passes when the configure succeeds without that warning, and cuda_device.cu compiles for
# sm_90 alone. Usage: cuda_libtorch_test.sh SOURCE [cmake arguments...]; exit 77 (skip) without nvcc.
set -euo pipefail
src=$1
shift
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "skip: no nvcc (the stand-in needs CUDA on)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/torch"
cat >"$work/torch/TorchConfig.cmake" <<'CFG'
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  message(WARNING "pytorch is not compatible with `CMAKE_CUDA_ARCHITECTURES` and will ignore its value.")
  set(CMAKE_CUDA_ARCHITECTURES OFF)
endif()
set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -gencode arch=compute_80,code=sm_80")
find_package(Python COMPONENTS Interpreter)
if(NOT TARGET torch)
  add_library(torch INTERFACE IMPORTED)
endif()
set(TORCH_LIBRARIES torch)
set(Torch_FOUND TRUE)
CFG
cat >"$work/torch/TorchConfigVersion.cmake" <<'CFG'
set(PACKAGE_VERSION 2.11.0)
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CFG
if ! cmake -S "$src" -B "$work/build" -G Ninja -DCONVEYOR_CUDA=ON -DCONVEYOR_TORCH=ON -DTorch_DIR="$work/torch" \
     -DCONVEYOR_TESTS=OFF "$@" >"$work/log" 2>&1; then
  cat "$work/log"; echo "FAIL: the configure beside the CUDA LibTorch stand-in failed"; exit 1
fi
fail=0
if grep -q "not compatible with" "$work/log"; then
  echo "FAIL: LibTorch's CMAKE_CUDA_ARCHITECTURES warning reached the configure output"; fail=1
fi
line=$(grep -A3 "cuda_device.cu" "$work/build/build.ninja" | grep -m1 "FLAGS = " || true)
case "$line" in
  *sm_80*) echo "FAIL: LibTorch's -gencode reached cuda_device.cu: $line"; fail=1 ;;
esac
case "$line" in
  *compute_90*) ;;
  *) echo "FAIL: cuda_device.cu does not build for architecture 90: $line"; fail=1 ;;
esac
grep "Conveyor:" "$work/log"
[ $fail -eq 0 ] && echo "ok: configured beside the stand-in, cuda_device.cu for sm_90 alone, no architecture warning"
exit $fail
