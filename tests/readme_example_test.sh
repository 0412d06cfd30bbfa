#!/usr/bin/env bash
# The README's complete C++ example is apps/example.cpp, word for word, and it
# builds (CMake built it before this runs) and runs.
# Usage: readme_example_test.sh README EXAMPLE_SOURCE EXAMPLE_BINARY
set -euo pipefail
readme=$1 source=$2 binary=$3
block=$(awk '/<!-- example: apps\/example.cpp -->/{found=1; next} found && /^```cpp/{inblock=1; next} inblock && /^```/{exit} inblock{print}' "$readme")
if [ -z "$block" ]; then echo "FAIL: README has no block after <!-- example: apps/example.cpp -->"; exit 1; fi
if ! diff <(printf '%s\n' "$block") "$source" >/dev/null; then
  echo "FAIL: the README's example differs from $source:"
  diff <(printf '%s\n' "$block") "$source" || true
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CONVEYOR_CACHE=$work "$binary" >"$work/out"
grep -q "^epoch 1: 3000 images" "$work/out" || { echo "FAIL: unexpected output:"; cat "$work/out"; exit 1; }
echo "readme example: identical to $source, built and ran"
