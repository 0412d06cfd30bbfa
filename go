#!/usr/bin/env bash
# Conveyor's two set-up commands, for a fresh Debian 12 machine (as root or with sudo):
#
#   ./go demo [flags]   install what is missing, build, run `conveyor run` on the
#                       embedded default dataset (flags go to conveyor run)
#   ./go test           install what is missing (libtorch-dev, openmpi-bin, clang,
#                       pybind11 and pytest too), build and run every test three
#                       times: plain (with the LibTorch parts, the conveyor train
#                       test and the Python module's pytest suite, and the CUDA
#                       sources compiled when nvcc is present; then the wheel,
#                       installed into a venv and tested there),
#                       ASan+UBSan (clang's, which holds the fuzz targets too),
#                       TSan; then 30 s of each fuzz target, two at a time
#   ./go fuzz [SECONDS] the fuzz targets alone, SECONDS each (default 600)
#   ./go gpu-bundle     here: .gpu/ for a GPU machine without a registry (../shared's
#                       gpu-bundle.sh plus toml++, dlpack and pybind11), then there: bash .gpu/build.sh && ./go gpu
#   ./go gpu [PART...]  on a machine with an NVIDIA GPU: test_cuda, compute-sanitizer
#                       memcheck and synccheck, the H2D and pipeline benchmarks,
#                       conveyor train --device cuda --deterministic resumed, and what that switch
#                       costs on the small ResNet; a 5 ms step-bound run; a summary.
#                       PARTs, for a per-call time limit (default all, in this order):
#                       tests (test_cuda, the whole CTest, the Python module required and its pytest),
#                       wheel (built there with nvcc, pip-installed beside torch: a cuda epoch, pytest), sanitize (memcheck,
#                       synccheck), bench (h2d, pipeline), train (resume check),
#                       train-cost (--deterministic's cost), decode (GPU decode against the CPU)
#   ./go peers ARGS     Conveyor against PyTorch's DataLoader and the Python
#                       two-queue pipeline (apps/peers/compare.py ARGS)
#
# Both are idempotent: packages already installed and builds already up to date
# are left alone.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(cmake ninja-build g++ pkg-config
          libconcurrentqueue-dev libturbojpeg0-dev libjpeg62-turbo-dev libstb-dev catch2 libcli11-dev
          libtomlplusplus-dev libcurl4-openssl-dev)
# The test command also builds and tests the LibTorch parts (conveyor train),
# launches ranks with Open MPI's mpirun for the sharding check, and builds the
# libFuzzer targets with clang (libclang-rt-14-dev holds libFuzzer).
# The Python module (pybind11, DLPack) and its pytest suite, with NumPy and
# PyTorch (CPU), torchvision and Pillow (docs/python.md's DataLoader example)
# from Debian for /usr/bin/python3.
# The wheel (pyproject.toml, setup.py) is built offline with Debian's pip tools,
# installed into a venv, and its stubs checked with mypy.
# lighttpd serves packed shards on a loopback port for the http test, and
# botocore's signer checks each request of the s3 test (tests/s3_server.py).
TEST_PACKAGES=(libtorch-dev openmpi-bin clang libclang-rt-14-dev lighttpd python3-botocore
               python3-dev pybind11-dev libdlpack-dev python3-pytest python3-numpy python3-torch
               python3-torchvision python3-pil
               python3-setuptools python3-wheel python3-build python3-venv python3-mypy)
FUZZ_TARGETS=(decode list npy config tar)
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

# Warnings are errors in the test command and in CI (CONVEYOR_WERROR=ON, which
# .ci/run sets for the demo too, so a warning only a Release build shows fails
# CI); the demo on a user's machine warns but builds, since a newer compiler
# may warn where Debian 12's GCC does not.
# fresh_if_compiler_changed DIR [cmake args...]: CMake cannot reconfigure a
# tree for another compiler in place, so a tree made with another C++
# compiler than the arguments name (default c++) is removed, to be made afresh.
fresh_if_compiler_changed() {
  local dir=$1 want=c++ a have; shift
  for a in "$@"; do case $a in -DCMAKE_CXX_COMPILER=*) want=${a#*=} ;; esac; done
  have=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)
  if [ -n "$have" ] && [ "$(basename "$have")" != "$(basename "$want")" ]; then
    say "$dir: made with $have, not $want: removed, to be made afresh"
    rm -rf "$dir"
  fi
}

# build NAME [cmake args...]: configure (once) and build build/NAME.
build() {
  local name=$1; shift
  fresh_if_compiler_changed "build/$name" "$@"
  say "build/$name: configure and build ($*)"
  cmake -S . -B "build/$name" -G Ninja "$@" >"build/$name.configure.log" 2>&1 \
    || { cat "build/$name.configure.log"; exit 1; }
  local t0=$SECONDS
  cmake --build "build/$name" -j "$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
  say "build/$name: built in $((SECONDS - t0)) s"
}

# The sanitizer builds compile at -O1 with line tables only (-g1): what the
# sanitizers' own documentation recommends, enough for file:line in every
# report, and about half the compile time of -O2 -g on 2 cores (the ASan+UBSan
# build was the slowest step of the test command).
SANITIZER_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo
                 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

# The ASan+UBSan build is clang's, with libFuzzer's coverage hooks on every
# target (fuzzer-no-link): one tree runs the tests under ASan+UBSan and holds
# the fuzz targets, so the test command makes one build less than with a tree
# for each. GCC builds the other two trees.
ASAN_ARGS=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${SANITIZER_FLAGS[@]}" -DCONVEYOR_WERROR=ON
           -DCONVEYOR_SANITIZE=address,undefined,fuzzer-no-link -DCONVEYOR_FUZZ=ON -DCONVEYOR_CUDA=OFF -DCONVEYOR_TORCH=OFF)

# fuzz SECONDS: builds the libFuzzer targets in build/asan (configured as the
# test command's ASan+UBSan tree, its other targets left as they are), writes
# the seed corpora, replays fuzz/regressions/TARGET/* (inputs that once
# failed), then runs each target SECONDS. Exits non-zero on any finding;
# libFuzzer writes the input to build/asan/fuzz-artifacts/.
fuzz() {
  local seconds=$1 dir=build/asan
  fresh_if_compiler_changed "$dir" "${ASAN_ARGS[@]}"
  say "$dir: configure (clang, ASan+UBSan, libFuzzer's hooks) and build the fuzz targets"
  cmake -S . -B "$dir" -G Ninja "${ASAN_ARGS[@]}" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j "$JOBS" --target fuzz_make_seeds "${FUZZ_TARGETS[@]/#/fuzz_}"
  "$dir/fuzz/fuzz_make_seeds" "$dir/fuzz-corpus" configs
  mkdir -p "$dir/fuzz-artifacts" "$dir/fuzz-logs"
  for t in "${FUZZ_TARGETS[@]}"; do
    local regressions=(fuzz/regressions/"$t"/*)
    if [ -e "${regressions[0]}" ]; then
      say "fuzz_$t: replaying ${#regressions[@]} regression input(s)"
      "$dir/fuzz/fuzz_$t" "${regressions[@]}" >"$dir/fuzz-logs/$t.regressions.log" 2>&1 \
        || { tail -30 "$dir/fuzz-logs/$t.regressions.log"; exit 1; }
    fi
  done
  # Each target is one process on one core: JOBS of them run at once, each for
  # its full SECONDS, and the results are reported in the list's order.
  say "fuzz: ${#FUZZ_TARGETS[@]} targets, ${seconds} s each, $JOBS at a time"
  for t in "${FUZZ_TARGETS[@]}"; do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
    rm -f "$dir/fuzz-logs/$t.rc"
    ("$dir/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
       -print_final_stats=1 -artifact_prefix="$dir/fuzz-artifacts/$t-" "$dir/fuzz-corpus/$t" \
       >"$dir/fuzz-logs/$t.log" 2>&1; echo $? >"$dir/fuzz-logs/$t.rc") &
  done
  wait
  local failed=0
  for t in "${FUZZ_TARGETS[@]}"; do
    if [ "$(cat "$dir/fuzz-logs/$t.rc" 2>/dev/null)" != 0 ]; then
      say "fuzz_$t: FAILED ($dir/fuzz-logs/$t.log's end below; the input is in $dir/fuzz-artifacts/)"
      tail -40 "$dir/fuzz-logs/$t.log"
      failed=1
    fi
    grep -E "^#[0-9]+[[:space:]]+DONE" "$dir/fuzz-logs/$t.log" | sed "s/^/[go]   fuzz_$t /" || true
  done
  ((failed == 0)) || exit 1
}

# check_cu_compiled BUILD: every tracked .cu file has a compile command in
# BUILD/compile_commands.json for sm_90, and the object it names was built. A
# .cu file that no target lists would otherwise pass unnoticed.
check_cu_compiled() {
  local dir=$1 f cmd obj n=0 root
  root=$(pwd -P)  # the physical path, as CMake writes it
  local files=()
  mapfile -t files < <(git ls-files '*.cu' 2>/dev/null || find . -name '*.cu' -not -path './build/*' | sed 's|^\./||')
  for f in "${files[@]}"; do
    cmd=$(grep -F -- "-c $root/$f -o " "$dir/compile_commands.json" || true)
    if [ -z "$cmd" ]; then say "CUDA: $f is not compiled by any target (no command in $dir/compile_commands.json)"; exit 1; fi
    if ! grep -q "sm_90" <<<"$cmd"; then say "CUDA: $f is not compiled for sm_90: $cmd"; exit 1; fi
    obj=$(sed -E 's/.* -o ([^ "]+).*/\1/' <<<"$cmd")
    if [ ! -s "$dir/$obj" ]; then say "CUDA: $f: its object $dir/$obj was not built"; exit 1; fi
    n=$((n + 1))
  done
  say "CUDA: nvcc found; all $n tracked .cu files compiled for sm_90 in $dir (checked against compile_commands.json)"
}

run_tests() {
  local name=$1
  say "build/$name: running the tests"
  local t0=$SECONDS
  ctest --test-dir "build/$name" --output-on-failure -j "$JOBS"
  say "build/$name: tests passed in $((SECONDS - t0)) s"
}

# gpu_checks [PART...]: test_cuda plain and under compute-sanitizer (memcheck,
# synccheck), the whole CTest, the H2D and transfer-bound pipeline benchmarks,
# and conveyor train --device cuda --deterministic interrupted and resumed
# against an uninterrupted run; only the PARTs named (default all; see the
# header). Each result line is appended to the summary file as its step ends,
# so a run cut off by a time limit keeps the lines so far; at the end the
# summary (with the benchmarks' figures) is printed and replaces that file.
# Logs and summary in $OUT (else build/gpu-report): gpu-summary.txt, or
# gpu-summary-PART.txt when parts are named.
GPU_PARTS=(tests wheel sanitize bench train train-cost decode)
gpu_checks() {
  local b=${CONVEYOR_GPU_BUILD:-/tmp/b} out=${OUT:-build/gpu-report} rows=() rc=0 parts=("$@") p
  if ((${#parts[@]} == 0)) || [[ " ${parts[*]} " == *" all "* ]]; then parts=("${GPU_PARTS[@]}"); fi
  for p in "${parts[@]}"; do
    if [[ " ${GPU_PARTS[*]} " != *" $p "* ]]; then say "gpu: unknown part '$p' (parts: ${GPU_PARTS[*]} all)"; exit 2; fi
  done
  want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
  if ! nvidia-smi -L >/dev/null 2>&1; then say "gpu: no NVIDIA GPU here (nvidia-smi -L failed)"; exit 1; fi
  if [ ! -x "$b/apps/conveyor" ]; then
    install_missing "${TEST_PACKAGES[@]}"
    mkdir -p build
    build gpu -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_WERROR=ON -DCONVEYOR_CUDA=ON -DCONVEYOR_TORCH=AUTO
    b=build/gpu
  fi
  mkdir -p "$out"
  local summary=$out/gpu-summary.txt
  if [ "${parts[*]}" != "${GPU_PARTS[*]}" ]; then summary=$out/gpu-summary-$(IFS=-; echo "${parts[*]}").txt; fi
  local gpu; gpu=$(nvidia-smi -L | head -1)
  say "gpu: $gpu; build $b; parts: ${parts[*]}; logs in $out"
  echo "./go gpu ${parts[*]} on $gpu, $(date -u +%F), in progress" >"$summary"
  row() {  # row LINE: a result, kept for the summary and appended to its file now
    rows+=("$1")
    echo "$1" >>"$summary"
  }
  step() {  # step NAME COMMAND...: runs it, logs it, records pass/fail
    local name=$1; shift
    if "$@" >"$out/$name.log" 2>&1; then row "pass  $name"; else row "FAIL  $name (see $out/$name.log)"; rc=1; fi
  }
  local w; w=$(nproc)
  if want tests; then
    # --order decl: the cases that may leave a sticky error are declared last (Catch2 >= 3.9 shuffles).
    step test_cuda "$b/tests/test_cuda" --order decl
    # Everything else of this build too (test_cuda again among them), as ./go test runs it,
    # but the install tests: their consumer builds do not get .gpu/build.sh's sysroot include
    # flags, so they would fail there for the machine's sake, not the code's.
    step ctest ctest --test-dir "$b" -j "$JOBS" --output-on-failure --no-tests=error -LE install
    # The Python module must be built there (the bundle carries pybind11): its pytest suite is
    # in the CTest above; here it is required, and run once more on its own for the summary.
    if compgen -G "$b/python/conveyor/_conveyor*.so" >/dev/null; then
      step pytest env PYTHONPATH="$b/python" python3 -m pytest -q -p no:cacheprovider python/tests
    else
      row "FAIL  pytest: the Python module was not built in $b (its configure log says why: pybind11, dlpack.h, Python.h)"
      rc=1
    fi
  fi
  if want wheel; then
    # The wheel built there with nvcc and pip-installed beside the machine's CUDA torch
    # (tests/install/gpu_wheel.sh): ldd, a device="cuda" epoch, the pytest suite.
    if [ -d "${CONVEYOR_PHOTOS:-.gpu/photos}" ]; then
      step wheel bash tests/install/gpu_wheel.sh "${CONVEYOR_PHOTOS:-.gpu/photos}" "$out/wheel"
      if [ -f "$out/wheel.log" ]; then grep "^gpu_wheel:" "$out/wheel.log" | while read -r l; do row "info  $l"; done; fi
    else
      row "skip  wheel (no photos: set CONVEYOR_PHOTOS, or ./go gpu-bundle carries ../shared/data/photos-200)"
    fi
  fi
  if want sanitize; then
    local cs; cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    # Under the sanitizers without the [errors] cases: they make CUDA calls fail on purpose, and
    # compute-sanitizer counts each failing API call as an error.
    step memcheck "$cs" --tool memcheck --error-exitcode 1 "$b/tests/test_cuda" --order decl "~[errors]"
    step synccheck "$cs" --tool synccheck --error-exitcode 1 "$b/tests/test_cuda" --order decl "~[errors]"
  fi
  if want bench; then
    step h2d "$b/apps/conveyor-bench-device" --device cuda h2d
    # Transfer-bound: each prints its link utilisation, target >= 95%.
    local batch norm util
    for batch in 128 256; do
      for norm in off float16; do
        step "pipeline-$batch-$norm" "$b/apps/conveyor-bench-device" --device cuda pipeline --workers "$w" --sample-us 0 \
          --step-us 1 --batch "$batch" --normalize "$norm"
        util=$(sed -n 's/^median.*link utilisation \([0-9]*\)%.*/\1/p' "$out/pipeline-$batch-$norm.log")
        if [ -n "$util" ] && [ "$util" -ge 95 ]; then
          row "pass  pipeline-$batch-$norm: ${util}% of pinned H2D (target >= 95%)"
        else
          row "MISS  pipeline-$batch-$norm: ${util:-?}% of pinned H2D (target >= 95%)"
        fi
      done
    done
    # Step-bound: a 5 ms step on the device; the consumer (the GPU) must never wait,
    # and the report must name the consumer, not the transfer that waits for its slots.
    step pipeline-step-5ms "$b/apps/conveyor-bench-device" --device cuda pipeline --workers "$w" --sample-us 0 \
      --step-us 5000 --batch 128
    local idle runs named
    idle=$(sed -n 's/^median.*consumer idle \([0-9.]*\)%.*/\1/p' "$out/pipeline-step-5ms.log")
    runs=$(grep -c "^run [0-9]*:" "$out/pipeline-step-5ms.log" || true)
    named=$(grep -c "^run [0-9]*:.*bottleneck: consumer" "$out/pipeline-step-5ms.log" || true)
    if [ -n "$idle" ] && awk -v i="$idle" 'BEGIN { exit !(i <= 1.0) }' && [ "$runs" -ge 1 ] && [ "$named" = "$runs" ]; then
      row "pass  pipeline-step-5ms: consumer idle ${idle}% (target <= 1%), the consumer named the bottleneck in all $runs runs"
    else
      row "MISS  pipeline-step-5ms: consumer idle ${idle:-?}% (target <= 1%), the consumer named in ${named:-0} of ${runs:-0} runs"
    fi
  fi
  if want train-cost || want train; then
    if [ ! -x "$b/apps/conveyor-train" ]; then
      row "skip  train (no LibTorch in this build)"
    fi
  fi
  if want train && [ -x "$b/apps/conveyor-train" ]; then
    local t=("$b/apps/conveyor" train --device cuda --deterministic --epochs 3 --seed 7 --workers "$w")
    step train-straight "${t[@]}"
    step train-part1 "${t[@]}" --stop-after 50 --checkpoint "$out/resume.pt"
    step train-part2 "${t[@]}" --resume "$out/resume.pt" --checkpoint "$out/resume.pt"
    local straight resumed
    straight=$(grep '^final:' "$out/train-straight.log" || true)
    resumed=$(grep '^final:' "$out/train-part2.log" || true)
    if [ -n "$straight" ] && [ "$straight" = "$resumed" ]; then
      row "pass  train resume equals the uninterrupted run: $straight"
    elif [ -z "$straight" ] || [ -z "$resumed" ]; then
      row "FAIL  train resume: no 'final:' line in train-straight.log or train-part2.log"; rc=1
    else
      row "FAIL  train resume differs from the uninterrupted run"; rc=1
    fi
  fi
  if want train-cost && [ -x "$b/apps/conveyor-train" ]; then
    # What --deterministic costs: the small ResNet at 128 px (LeNet's epochs are too short to
    # tell), with and without it, alternated, 3 rounds; images/s of epochs 2-3.
    local round mode det
    for round in 1 2 3; do
      for mode in default deterministic; do
        det=()
        if [ "$mode" = deterministic ]; then det=(--deterministic); fi
        step "train-cost-$mode-$round" "$b/apps/conveyor" train --device cuda --model resnet --crop 128 --epochs 3 \
          --seed 7 --workers "$w" "${det[@]}"
      done
    done
    row "$(python3 - "$out" <<'PY' || echo "MISS  --deterministic cost: reading train-cost-*.log failed"
import glob, re, statistics, sys
rate = {}
for mode in ("default", "deterministic"):
    runs = []
    for f in sorted(glob.glob(f"{sys.argv[1]}/train-cost-{mode}-*.log")):
        text = open(f, errors="replace").read()
        r = [float(v) for e, v in re.findall(r"^epoch (\d+)/\d+:.*?, (\d+) images/s", text, re.M) if int(e) >= 2]
        if r: runs.append(statistics.median(r))
    rate[mode] = statistics.median(runs) if runs else None
d, s = rate["default"], rate["deterministic"]
print(f"info  --deterministic cost, resnet 128 px: {s:.0f} images/s against {d:.0f} without, {s / d:.3f}x"
      if d and s else "MISS  --deterministic cost: no epoch figures in train-cost-*.log")
PY
)"
  fi
  # The GPU decode benchmark: the photos listed 10 times, RandomResizedCrop 224 + flip, float16
  # normalize on the GPU, batch 64: CPU workers alone, hybrid (auto share), and the plain
  # torchvision nvJPEG loop, side by side, two rounds.
  local photos=${CONVEYOR_PHOTOS:-.gpu/photos}
  if want decode && [ -d "$photos" ]; then
    local list=$out/photos-x10.txt
    : >"$list"
    photos=$(cd "$photos" && pwd)  # the list's relative paths would be read against $out
    for _ in $(seq 10); do for p in "$photos"/*; do echo "$p 0" >>"$list"; done; done
    # The decoder alone, the limit the feed can reach: T threads of two decoders each, with
    # nvidia-smi's utilisation samples beside it (its jpg column: are the JPEG engines full?).
    nvidia-smi dmon -s u -d 1 -c 12 >"$out/decode-limit-dmon.log" 2>&1 &
    local dmon=$!
    step decode-limit "$b/apps/conveyor-bench-images" gpu-decode "$list" --device cuda --threads 1,2,4 --seconds 2
    wait "$dmon" 2>/dev/null || true
    for round in 1 2; do
      step "decode-cpu-$round" "$b/apps/conveyor" bench --list "$list" --workers "$w" --normalize float16 --epochs 3 --gpu-decode off
      step "decode-hybrid-$round" "$b/apps/conveyor" bench --list "$list" --workers "$w" --normalize float16 --epochs 3 --gpu-decode auto
      # Two cores left to the delivery thread and nvJPEG's host side (docs/cuda.md).
      if [ "$w" -gt 4 ]; then
        step "decode-hybrid-w$((w - 2))-$round" "$b/apps/conveyor" bench --list "$list" --workers "$((w - 2))" \
          --normalize float16 --epochs 3 --gpu-decode auto
      fi
      step "decode-nvjpeg-loop-$round" python3 apps/peers/nvjpeg_loop.py --list "$list" --epochs 3
    done
    # The GPU row of docs/benchmarks.md: Conveyor (C++ and Python) against DataLoader(num_workers=nproc,
    # pin_memory=True) with the normalize on the GPU, side by side.
    step peers-cuda python3 apps/peers/compare.py --device cuda --folder "$photos" --repeat 10 --workers "$w" \
      --rounds 3 --only "conveyor,conveyor-python,dataloader-$w" --build "$b" --out "$out/peers-cuda.md"
  elif want decode; then
    row "skip  gpu decode benchmark (no photos: set CONVEYOR_PHOTOS, or ./go gpu-bundle carries ../shared/data/photos-200)"
  fi
  { echo "./go gpu ${parts[*]} on $gpu, $(date -u +%F)"; printf '%s\n' "${rows[@]}"
    # The figures of this call's parts only ($out may hold an earlier part's logs).
    if want bench; then
      if [ -f "$out/h2d.log" ]; then cat "$out/h2d.log"; fi
      for f in "$out"/pipeline-*.log; do if [ -f "$f" ]; then grep -H -E "^(pinned copy|median)" "$f" || true; fi; done
      if [ -f "$out/pipeline-step-5ms.log" ]; then grep -m1 -o "bottleneck: .*" "$out/pipeline-step-5ms.log" || true; fi
    fi
    if want decode; then
      for f in "$out"/decode-*.log; do if [ -f "$f" ]; then grep -H -E "^(bench|gpu decode|gpu-decode|nvjpeg_loop):" "$f" || true; fi; done
      if [ -f "$out/decode-limit-dmon.log" ]; then cat "$out/decode-limit-dmon.log"; fi
      if [ -f "$out/peers-cuda.md" ]; then cat "$out/peers-cuda.md"; fi
    fi; } >"$summary.tmp"
  mv "$summary.tmp" "$summary"
  cat "$summary"
  return $rc
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    install_missing
    mkdir -p build
    # Only the command the demo runs: the benchmarks, the trainer and the Python
    # module are built by ./go test (and by cmake --build build/release).
    BUILD_TARGETS=conveyor build release -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_TESTS=OFF -DCONVEYOR_WERROR="${CONVEYOR_WERROR:-OFF}"
    say "running: build/release/apps/conveyor run $*"
    exec build/release/apps/conveyor run "$@"
    ;;
  test)
    install_missing "${TEST_PACKAGES[@]}"
    mkdir -p build
    start=$SECONDS
    # LibTorch is not built with sanitizers: its parts are tested in the first build only.
    # That first build keeps -O2 but line tables only (-g1), as the sanitizer
    # builds do: file:line in every backtrace, and a third less compile time
    # than -g (test_images.cpp 18.4 s -> 12.2 s, a LibTorch file 31 s -> 22 s).
    # The Python module for Debian's interpreter (the first python3 on PATH may be another, without numpy).
    build debug -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DCONVEYOR_WERROR=ON -DCONVEYOR_CUDA="${CONVEYOR_CUDA:-AUTO}" -DCONVEYOR_TORCH=ON \
      -DCONVEYOR_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3
    run_tests debug
    # The wheel as pip builds it, installed into a fresh venv, the pytest suite run against it.
    say "wheel: build it from a clean copy, install it into a venv, test it, uninstall it"
    t0=$SECONDS
    CMAKE_ARGS="-DCONVEYOR_WERROR=ON -DCONVEYOR_CUDA=${CONVEYOR_CUDA:-AUTO}" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
      bash tests/install/wheel_test.sh . /usr/bin/python3
    say "wheel: passed in $((SECONDS - t0)) s"
    build asan "${ASAN_ARGS[@]}"
    run_tests asan
    build tsan "${SANITIZER_FLAGS[@]}" -DCONVEYOR_WERROR=ON -DCONVEYOR_SANITIZE=thread -DCONVEYOR_CUDA=OFF -DCONVEYOR_TORCH=OFF
    run_tests tsan
    if grep -q "CONVEYOR_HAVE_CUDA:INTERNAL=ON" build/debug/CMakeCache.txt 2>/dev/null; then
      check_cu_compiled build/debug
    else
      say "CUDA: no nvcc found; the CUDA sources were not compiled"
    fi
    fuzz 30
    say "all tests passed in 3 builds, and 30 s of each fuzz target ($((SECONDS - start)) s)"
    ;;
  gpu-bundle)
    # Here, before lending the checkout to a GPU machine without a package
    # registry: ../shared/tools/gpu-bundle.sh's .gpu/, plus what it does not
    # carry (toml++'s and dlpack's headers) unpacked into its sysroot.
    [ -x ../shared/tools/gpu-bundle.sh ] || { say "gpu-bundle: ../shared/tools/gpu-bundle.sh not found"; exit 1; }
    ../shared/tools/gpu-bundle.sh
    # pybind11 too, so the GPU machine builds the Python module and ./go gpu tests it.
    (cd .gpu && apt-get download -q libtomlplusplus-dev libdlpack-dev pybind11-dev >/dev/null 2>&1 && for d in ./*.deb; do dpkg -x "$d" sysroot; done && rm -f ./*.deb) \
      || { say "gpu-bundle: apt-get download libtomlplusplus-dev libdlpack-dev pybind11-dev failed"; exit 1; }
    for h in toml++/toml.h dlpack/dlpack.h pybind11/pybind11.h; do
      [ -f ".gpu/sysroot/usr/include/$h" ] || { say "gpu-bundle: .gpu/sysroot lacks $h"; exit 1; }
    done
    if [ -d ../shared/data/photos-200 ]; then cp -r ../shared/data/photos-200 .gpu/photos; fi  # the GPU decode benchmark's photos
    say "gpu-bundle: .gpu/ ready, toml++, dlpack and pybind11 added; on the GPU machine: bash .gpu/build.sh && ./go gpu"
    ;;
  gpu)
    # The GPU machine's checks, from a build with CUDA and LibTorch:
    # .gpu/build.sh's /tmp/b there (no package registry), else build/gpu here.
    # ./go gpu PART... runs those parts only (see the header), each within a
    # shorter time limit than the whole.
    gpu_checks "$@"
    ;;
  peers)
    # The side-by-side comparison of docs/benchmarks.md: PyTorch's
    # DataLoader and the Python two-queue pipeline from Debian's packages, and
    # Conveyor's own Python module (conveyor-python) built for that interpreter.
    install_missing python3-torch python3-torchvision python3-pil python3-dev pybind11-dev libdlpack-dev python3-numpy
    mkdir -p build
    build release -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_TESTS=OFF -DCONVEYOR_WERROR="${CONVEYOR_WERROR:-OFF}" \
      -DCONVEYOR_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3
    exec /usr/bin/python3 apps/peers/compare.py --build build/release "$@"
    ;;
  fuzz)
    install_missing "${TEST_PACKAGES[@]}"
    mkdir -p build
    fuzz "${1:-600}"
    ;;
  *)
    echo "usage: ./go demo [flags] | ./go test | ./go gpu [tests|wheel|sanitize|bench|train|train-cost|decode|all ...] | ./go fuzz [SECONDS per target, default 600] | ./go peers [compare.py flags]" >&2
    exit 2
    ;;
esac
