#!/usr/bin/env bash
# Conveyor configured beside a CUDA LibTorch: a stand-in for pip torch 2.11's
# TorchConfig.cmake with the three things it did on the H100 machine (2026-11-24), checked
# without a GPU or a CUDA LibTorch:
#   - whenever CMAKE_CUDA_ARCHITECTURES is defined, it warns that it "is not compatible" with
#     it and sets it to OFF (our .cu files would then build for nvcc's default architecture);
#   - it appends -gencode flags of its own to CMAKE_CUDA_FLAGS;
#   - it runs find_package(Python COMPONENTS Interpreter), which pybind11 then preferred to our
#     Python3 ("Unknown CMake command python_add_library").
# Passes when the configure succeeds without that warning, and cuda_device.cu compiles for the
# architecture asked for (90 by default, 89 given with -D) alone.
# Usage: cuda_libtorch_test.sh SOURCE [cmake arguments...]; exit 77 (skip) without nvcc.
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
fail=0
# configure NAME ARCH [cmake arguments...]: configures into $work/NAME and checks that
# cuda_device.cu builds for ARCH alone, with no warning from the stand-in.
configure() {
  local name=$1 arch=$2
  shift 2
  if ! cmake -S "$src" -B "$work/$name" -G Ninja -DCONVEYOR_CUDA=ON -DCONVEYOR_TORCH=ON -DTorch_DIR="$work/torch" \
       -DCONVEYOR_TESTS=OFF "$@" >"$work/$name.log" 2>&1; then
    cat "$work/$name.log"; echo "FAIL ($name): the configure beside the CUDA LibTorch stand-in failed"; fail=1; return
  fi
  if grep -q "not compatible with" "$work/$name.log"; then
    echo "FAIL ($name): LibTorch's CMAKE_CUDA_ARCHITECTURES warning reached the configure output"; fail=1
  fi
  local line
  line=$(grep -A3 "cuda_device.cu" "$work/$name/build.ninja" | grep -m1 "FLAGS = " || true)
  case "$line" in
    *sm_80*) echo "FAIL ($name): LibTorch's -gencode reached cuda_device.cu: $line"; fail=1 ;;
  esac
  case "$line" in
    *compute_$arch*) ;;
    *) echo "FAIL ($name): cuda_device.cu does not build for architecture $arch: $line"; fail=1 ;;
  esac
  grep "Conveyor:" "$work/$name.log"
}
configure default 90 "$@"
configure given-89 89 -DCMAKE_CUDA_ARCHITECTURES=89 "$@"  # a cache entry, which LibTorch sees too
[ $fail -eq 0 ] && echo "ok: configured beside the stand-in, cuda_device.cu for sm_90 (default) and sm_89 (-D) alone, no architecture warning"
exit $fail
