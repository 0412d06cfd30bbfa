#!/usr/bin/env bash
# A document's complete C++ example is the program in apps/, word for word (the
# block follows a `<!-- example: apps/NAME.cpp -->` line), and the program, which
# CMake built before this runs, runs and prints a line matching PATTERN.
# Usage: doc_example_test.sh DOCUMENT EXAMPLE_SOURCE EXAMPLE_BINARY PATTERN
set -euo pipefail
doc=$1 source=$2 binary=$3 pattern=$4
marker="<!-- example: apps/$(basename "$source") -->"
block=$(awk -v m="$marker" '$0 == m {found=1; next} found && /^```cpp/{inblock=1; next} inblock && /^```/{exit} inblock{print}' "$doc")
if [ -z "$block" ]; then echo "FAIL: $doc has no block after $marker"; exit 1; fi
if ! diff <(printf '%s\n' "$block") "$source" >/dev/null; then
  echo "FAIL: the example in $doc differs from $source:"
  diff <(printf '%s\n' "$block") "$source" || true
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CONVEYOR_CACHE=$work "$binary" >"$work/out"
grep -Eq "$pattern" "$work/out" || { echo "FAIL: no line matches '$pattern':"; cat "$work/out"; exit 1; }
cat "$work/out"
echo "example: $doc holds $source word for word; built and ran"
