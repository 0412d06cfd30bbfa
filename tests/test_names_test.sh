#!/usr/bin/env bash
# CTest runs each TEST_CASE by its name, and CMake splits a discovered name at
# ';' (a list separator): a TEST_CASE named with one would run as a name that
# matches nothing. tests/CMakeLists.txt passes --warn NoTests, so such a test
# fails rather than passing unrun; this check names the culprit beforehand.
# Usage: test_names_test.sh SOURCE_DIR
set -euo pipefail
root=${1:-$(dirname "$0")/..}
bad=$(find "$root/tests" -name '*.cpp' -exec grep -Hn 'TEST_CASE("[^"]*;' {} + || true)
if [ -n "$bad" ]; then
  echo "FAIL: a TEST_CASE name holds ';', which CTest cannot run by name:"
  echo "$bad"
  exit 1
fi
echo "test names: none holds ';'"
