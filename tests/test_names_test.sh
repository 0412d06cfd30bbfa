#!/usr/bin/env bash
# CTest runs each TEST_CASE by its name, and CMake splits a discovered name at
# ';' (a list separator), and Catch2 reads a '\' in the name it is given as an
# escape: a TEST_CASE named with either would run as a name that matches
# nothing. tests/CMakeLists.txt passes --warn NoTests, so such a test fails
# rather than passing unrun; this check names the culprit beforehand.
# Usage: test_names_test.sh SOURCE_DIR
set -euo pipefail
root=${1:-$(dirname "$0")/..}
# The name as written in C++: escapes other than \\ (an escaped quote) are
# stepped over; a ';' or a \\ (a backslash in the name) is the culprit.
bad=$(find "$root/tests" -name '*.cpp' -exec grep -HnE 'TEST_CASE\("([^"\\]|\\[^\\])*(;|\\\\)' {} + || true)
if [ -n "$bad" ]; then
  echo "FAIL: a TEST_CASE name holds ';' or '\\', which CTest cannot run by name:"
  echo "$bad"
  exit 1
fi
echo "test names: none holds ';' or '\\'"
