#!/usr/bin/env bash
# Conveyor's two set-up commands, for a fresh Debian 12 machine (as root or with sudo):
#
#   ./go demo [flags]   install what is missing, build, run `conveyor run` on the
#                       embedded default dataset (flags go to conveyor run)
#   ./go test           install what is missing (libtorch-dev too), build and run
#                       every test three times: plain (with the LibTorch parts
#                       and the conveyor train test, and the CUDA sources
#                       compiled when nvcc is present), ASan+UBSan, TSan
#
# Both are idempotent: packages already installed and builds already up to date
# are left alone.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(cmake ninja-build g++ pkg-config
          libconcurrentqueue-dev libturbojpeg0-dev libjpeg62-turbo-dev libstb-dev catch2 libcli11-dev)
# The test command also builds and tests the LibTorch parts (conveyor train),
# and launches ranks with Open MPI's mpirun for the sharding check.
TEST_PACKAGES=(libtorch-dev openmpi-bin)
JOBS=$(nproc)

say() { printf '[go] %s\n' "$*"; }

# install_missing [extra packages...]
install_missing() {
  local missing=() p
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    say "packages: all $((${#PACKAGES[@]} + $#)) present"
    return
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  say "packages: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# nvcc lives outside PATH in the toolkit's default install.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

# build NAME [cmake args...]: configure (once) and build build/NAME.
build() {
  local name=$1; shift
  say "build/$name: configure and build ($*)"
  cmake -S . -B "build/$name" -G Ninja -DCONVEYOR_WERROR=ON "$@" >"build/$name.configure.log" 2>&1 \
    || { cat "build/$name.configure.log"; exit 1; }
  cmake --build "build/$name" -j "$JOBS"
}

run_tests() {
  local name=$1
  say "build/$name: running the tests"
  ctest --test-dir "build/$name" --output-on-failure -j "$JOBS"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    install_missing
    mkdir -p build
    build release -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_TESTS=OFF
    say "running: build/release/apps/conveyor run $*"
    exec build/release/apps/conveyor run "$@"
    ;;
  test)
    install_missing "${TEST_PACKAGES[@]}"
    mkdir -p build
    start=$SECONDS
    # LibTorch is not built with sanitizers: its parts are tested in the first build only.
    build debug -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVEYOR_CUDA="${CONVEYOR_CUDA:-AUTO}" -DCONVEYOR_TORCH=ON
    run_tests debug
    build asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVEYOR_SANITIZE=address,undefined -DCONVEYOR_CUDA=OFF -DCONVEYOR_TORCH=OFF
    run_tests asan
    build tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONVEYOR_SANITIZE=thread -DCONVEYOR_CUDA=OFF -DCONVEYOR_TORCH=OFF
    run_tests tsan
    if grep -q "CONVEYOR_HAVE_CUDA:INTERNAL=ON" build/debug/CMakeCache.txt 2>/dev/null; then
      say "CUDA: nvcc found; every .cu file ($(git ls-files '*.cu' 2>/dev/null | wc -l) tracked) was compiled in build/debug"
    else
      say "CUDA: no nvcc found; the CUDA sources were not compiled"
    fi
    say "all tests passed in 3 builds ($((SECONDS - start)) s)"
    ;;
  *)
    echo "usage: ./go demo [flags] | ./go test" >&2
    exit 2
    ;;
esac
