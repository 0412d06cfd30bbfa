#!/usr/bin/env bash
# The Python module as a user gets it: `cmake --install BUILD --component python`
# into a temporary prefix, then imported from there (not from the build tree)
# and run on an in-memory array.
# Usage: python_test.sh BUILD PYTHON SITE (SITE: the install dir relative to the prefix)
set -euo pipefail
build=$1 python=$2 site=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" --component python >"$prefix/install.log" 2>&1 \
  || { echo "FAIL: cmake --install --component python"; cat "$prefix/install.log"; exit 1; }
cd /
PYTHONPATH="$prefix/$site" "$python" - "$prefix" <<'PY'
import sys
import conveyor
assert conveyor.__file__.startswith(sys.argv[1]), conveyor.__file__
import numpy as np
x = np.arange(12, dtype=np.uint8).reshape(6, 2)
loader = conveyor.Loader(arrays=(x, np.arange(6)), batch_size=4, shuffle=False, device="cpu", epochs=1)
rows = [np.asarray(images).tolist() for images, _ in loader]
assert rows == [x[:4].tolist(), x[4:].tolist()], rows
print("installed conveyor", conveyor.__version__, "imports and loads from", conveyor.__file__)
PY
