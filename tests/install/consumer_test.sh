#!/usr/bin/env bash
# Conveyor as another project takes it (docs/install.md):
#   package       `cmake --install BUILD` into a temporary prefix; tests/install/CMakeLists.txt
#                 (docs/install.md's consumer, word for word) finds it with find_package and
#                 builds the README's example (apps/example.cpp as main.cpp), which then runs;
#                 checks/ tests the version rule, the torch component and both header spellings
#   subdirectory  the same consumer with add_subdirectory(SOURCE) in place of find_package
#   fetchcontent  the same with FetchContent from the local SOURCE
# The last two build the libraries afresh, without CUDA and LibTorch to keep it short.
# Usage: consumer_test.sh MODE SOURCE BUILD VERSION [cmake arguments for the consumer...]
set -euo pipefail
mode=$1 src=$2 build=$3 version=$4
shift 4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# docs/install.md shows tests/install/CMakeLists.txt word for word.
marker="<!-- consumer: tests/install/CMakeLists.txt -->"
block=$(awk -v m="$marker" '$0 == m {found=1; next} found && /^```cmake/{inblock=1; next} inblock && /^```/{exit} inblock{print}' "$src/docs/install.md")
if ! diff <(printf '%s\n' "$block") "$src/tests/install/CMakeLists.txt"; then
  echo "FAIL: the consumer in docs/install.md (after $marker) differs from tests/install/CMakeLists.txt"
  exit 1
fi

mkdir -p "$work/consumer"
cp "$src/tests/install/CMakeLists.txt" "$work/consumer/"
cp "$src/apps/example.cpp" "$work/consumer/main.cpp"
find_line='find_package(Conveyor 0.2 REQUIRED COMPONENTS device)'
grep -qxF "$find_line" "$work/consumer/CMakeLists.txt" || { echo "FAIL: no '$find_line' line to replace"; exit 1; }
args=("$@")
step() {  # step LOG COMMAND...: quiet unless it fails
  local log=$1; shift
  "$@" >"$work/$log.log" 2>&1 || { echo "FAIL: $*"; tail -40 "$work/$log.log"; exit 1; }
}
case "$mode" in
  package)
    step install cmake --install "$build" --prefix "$work/prefix"
    test -f "$work/prefix/include/conveyor/version.h" || { echo "FAIL: no include/conveyor/version.h"; exit 1; }
    prefix_path="$work/prefix"
    for a in "${args[@]}"; do
      case "$a" in -DCMAKE_PREFIX_PATH=?*) prefix_path="$work/prefix;${a#-DCMAKE_PREFIX_PATH=}" ;; esac
    done
    args+=("-DCMAKE_PREFIX_PATH=$prefix_path")
    step checks-configure cmake -S "$src/tests/install/checks" -B "$work/checks" "${args[@]}"
    step checks-build cmake --build "$work/checks"
    out=$("$work/checks/spelling")
    [ "$out" = "Conveyor $version" ] || { echo "FAIL: installed conveyor/version.h says '$out', not 'Conveyor $version'"; exit 1; }
    grep "checks:" "$work/checks-configure.log" || true
    ;;
  subdirectory | fetchcontent)
    if [ "$mode" = subdirectory ]; then
      repl="add_subdirectory(\"$src\" conveyor)"
    else
      repl="include(FetchContent)\nFetchContent_Declare(Conveyor SOURCE_DIR \"$src\")\nFetchContent_MakeAvailable(Conveyor)"
    fi
    sed -i "s|^find_package(Conveyor 0.2 REQUIRED COMPONENTS device)\$|$repl|" "$work/consumer/CMakeLists.txt"
    args+=(-DCONVEYOR_CUDA=OFF -DCONVEYOR_TORCH=OFF -DCMAKE_BUILD_TYPE=)  # unoptimised: compiles in half the time
    ;;
  *) echo "usage: consumer_test.sh package|subdirectory|fetchcontent SOURCE BUILD VERSION [cmake args...]" >&2; exit 2 ;;
esac

step configure cmake -S "$work/consumer" -B "$work/consumer/build" "${args[@]}"
if [ "$mode" != package ]; then
  # A subproject builds its libraries only: no tests, apps or fuzzers, nothing to install.
  for t in conveyor test_queue conveyor-example; do
    if grep -q "build $t:\|/$t:" "$work/consumer/build/build.ninja" 2>/dev/null; then
      echo "FAIL: as a subproject Conveyor still defines $t"; exit 1
    fi
  done
fi
step build cmake --build "$work/consumer/build" -j 2
CONVEYOR_CACHE=$work/cache "$work/consumer/build/my_training" >"$work/out"
grep -Eq "^epoch 1: 3000 images" "$work/out" || { echo "FAIL: no 'epoch 1: 3000 images':"; cat "$work/out"; exit 1; }
echo "$mode: docs/install.md's consumer built the README example against Conveyor $version ($mode) and ran it"
