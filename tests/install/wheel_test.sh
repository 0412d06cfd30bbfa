#!/usr/bin/env bash
# The wheel as a pip user gets it (pyproject.toml, setup.py): built offline from
# a clean copy of the checkout (`python3 -m build --wheel --no-isolation`, with
# Debian's setuptools, wheel and build), installed into a fresh venv
# (--system-site-packages: Debian's NumPy, pytest and torch), then, from a folder
# outside the checkout so nothing there shadows the installed package:
#   - the whole python/tests suite against the installed package;
#   - ldd of the extension and of the shipped command: only the C and C++
#     runtimes and the system's own libraries (no libjpeg, stb or CUDA);
#   - the `conveyor` script found on the venv's PATH: --version, make-dataset,
#     pack, bench, read back from Python; one clear line where the command is missing,
#     and where --shards or shards= names a URL (the wheel has no libcurl);
#   - device="auto" says why it took the CPU where there is no GPU;
#   - `pip uninstall -y conveyor` leaves nothing of it in the venv.
# Prints how long each part took. Removes everything it made, pass or fail.
# Usage: wheel_test.sh SOURCE [PYTHON]   (PYTHON: the interpreter the wheel is for,
# default /usr/bin/python3). CMAKE_ARGS is passed on to the wheel's CMake
# configure (./go test: -DCONVEYOR_WERROR=ON).
set -euo pipefail
src=$(cd "$1" && pwd) python=${2:-/usr/bin/python3}
start=$SECONDS
work=$(mktemp -d /tmp/conveyor-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
lap() { echo "wheel: $1 ($((SECONDS - t0)) s)"; t0=$SECONDS; }
t0=$SECONDS

# ---- the wheel, from a clean copy: the files git tracks and the untracked ones it does not ignore.
mkdir "$work/src" "$work/dist" "$work/run"
git -C "$src" ls-files -z --cached --others --exclude-standard \
  | tar -C "$src" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$work/src" -xf -
[ -f "$work/src/pyproject.toml" ] || fail "the copy of $src has no pyproject.toml"
(cd "$work/src" && "$python" -m build --wheel --no-isolation --outdir "$work/dist") >"$work/build.log" 2>&1 \
  || { grep -E -A12 "CMake Error|error:|FAILED:" "$work/build.log" | head -60; tail -5 "$work/build.log"
       fail "python3 -m build --wheel --no-isolation (the log's errors and end above)"; }
version=$(sed -n 's/^project(conveyor VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
wheels=("$work"/dist/*.whl)
[ ${#wheels[@]} = 1 ] && [[ $(basename "${wheels[0]}") == conveyor-"$version"-*-linux_*.whl ]] \
  || fail "expected one conveyor-$version-*-linux_*.whl, got: $(ls "$work/dist")"
wheel=${wheels[0]}
"$python" - "$wheel" <<'PY' || fail "the wheel lacks a file (above)"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = ["conveyor/__init__.py", "conveyor/torch.py", "conveyor/_command.py", "conveyor/_conveyor.pyi",
        "conveyor/torch.pyi", "conveyor/py.typed", "conveyor/bin/conveyor"]
missing = [n for n in want if n not in names]
missing += [] if any(n.startswith("conveyor/_conveyor.") and n.endswith(".so") for n in names) else ["conveyor/_conveyor*.so"]
entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
if "conveyor = conveyor._command:main" not in zipfile.ZipFile(sys.argv[1]).read(entry).decode():
    missing.append("the console script conveyor = conveyor._command:main")
if missing:
    sys.exit("missing from the wheel: " + ", ".join(missing))
PY
lap "built $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"

# ---- a fresh venv with the system's packages; what it holds before the install.
"$python" -m venv --system-site-packages "$work/venv"
venv=$work/venv
before=$(cd "$venv" && find . -path ./lib/python3*/site-packages/pip -prune -o -print | grep -v __pycache__ | sort)
"$venv/bin/python" -m pip install --no-index --no-cache-dir --disable-pip-version-check -q "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; fail "pip install $(basename "$wheel")"; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
lap "installed into a venv"

# ---- the pytest suite against the installed package, from outside the checkout. conveyor is
# imported (and checked to be the venv's) before pytest starts, so every test gets that one;
# --import-mode=importlib puts no test folder on sys.path.
cd "$work/run"
"$venv/bin/python" - "$site" "$src/python/tests" <<'PY' || fail "pytest against the installed package"
import sys
import conveyor
assert conveyor.__file__.startswith(sys.argv[1] + "/"), f"conveyor imported from {conveyor.__file__}, not {sys.argv[1]}"
print("wheel: testing conveyor", conveyor.__version__, "from", conveyor.__file__)
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--import-mode=importlib", sys.argv[2]]))
PY
lap "pytest of python/tests against the installed package"

# ---- ldd: the C and C++ runtimes and the system's own libraries, nothing else.
only_system_libraries() {
  local file=$1 others
  others=$(ldd "$file" | awk '{print $1}' | grep -v -E '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so\.[0-9]+)$' || true)
  [ -z "$others" ] || fail "$(basename "$file") needs more than the C/C++ runtimes: $(echo $others) (ldd: $(ldd "$file" | tr -s '\t\n' ' '))"
  echo "wheel: ldd $(basename "$file"): $(ldd "$file" | awk '{print $1}' | tr '\n' ' ')"
}
so=$(echo "$site"/conveyor/_conveyor*.so)
only_system_libraries "$so"
only_system_libraries "$site/conveyor/bin/conveyor"

# ---- the conveyor command from the venv's PATH, as an activated venv has it.
export PATH="$venv/bin:$PATH"
[ "$(command -v conveyor)" = "$venv/bin/conveyor" ] || fail "conveyor on PATH is $(command -v conveyor), not the venv's"
[ "$(conveyor --version)" = "conveyor $version" ] || fail "conveyor --version says '$(conveyor --version)', not 'conveyor $version'"
conveyor make-dataset --out "$work/run/data" >/dev/null
conveyor pack --folder "$work/run/data" --out "$work/run/shards" >"$work/pack.log" || fail "conveyor pack: $(cat "$work/pack.log")"
conveyor bench --shards "$work/run/shards" --epochs 1 --device host >"$work/bench.log" 2>&1 \
  || fail "conveyor bench: $(cat "$work/bench.log")"
"$venv/bin/python" - "$work/run/shards" <<'PY' || fail "the command's shards, read back by the installed module"
import sys
import numpy as np
import conveyor
loader = conveyor.Loader(shards=sys.argv[1], batch_size=256, crop=32, epochs=1, device="cpu", shuffle=False)
n = sum(len(labels) for _, labels in loader)
assert n == loader.dataset_size > 0, (n, loader.dataset_size)
print(f"wheel: conveyor make-dataset, pack and bench ran; the module read the {n} packed samples back")
PY
# Built without libcurl (setup.py): a URL is refused in one line saying so, by the command and the module.
if conveyor inspect --shards http://127.0.0.1:9/shards/ >/dev/null 2>"$work/url.err"; then fail "--shards URL: exit 0 without libcurl"; fi
[ "$(grep -c . "$work/url.err")" = 1 ] && grep -q "built without libcurl" "$work/url.err" || fail "--shards URL: $(cat "$work/url.err")"
"$venv/bin/python" - <<'PY' || fail "shards= a URL without libcurl"
import conveyor
try:
    conveyor.Loader(shards="http://127.0.0.1:9/shards/", device="cpu")
    raise SystemExit("no error")
except ValueError as e:
    assert "built without libcurl" in str(e) and "\n" not in str(e), e
PY
mv "$site/conveyor/bin/conveyor" "$work/conveyor.moved"
set +e
missing=$(conveyor --version 2>&1)
status=$?
set -e
mv "$work/conveyor.moved" "$site/conveyor/bin/conveyor"
[ "$status" = 127 ] && [ "$(wc -l <<<"$missing")" = 1 ] && [[ $missing == *"C++ command is not in this installation"* ]] \
  || fail "with the command missing, the conveyor script gave status $status and: $missing"

# ---- device="auto": the GPU where there is one, else the CPU with the reason.
"$venv/bin/python" - <<'PY' || fail 'device="auto"'
import subprocess
import numpy as np
import conveyor
loader = conveyor.Loader(arrays=(np.zeros((4, 2), np.uint8), np.arange(4)), batch_size=2, epochs=1)
try:
    gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
except OSError:
    gpu = False
if gpu:
    assert loader.device.startswith("cuda"), loader.device_description
else:
    assert loader.device == "cpu" and "auto:" in loader.device_description, loader.device_description
print(f'wheel: device="auto" -> {loader.device}: {loader.device_description}')
PY
lap "ldd, the conveyor command, device=auto"

# ---- pip uninstall: every file it installed gone, nothing named conveyor left, bin/ as before.
installed=$("$venv/bin/python" -m pip show -f conveyor | sed -n 's/^  //p')
[ -n "$installed" ] || fail "pip show -f conveyor lists no files"
"$venv/bin/python" -m pip uninstall -y -q conveyor >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log"; fail "pip uninstall"; }
while read -r f; do
  [ ! -e "$site/$f" ] || fail "pip uninstall left $site/$f"
done <<<"$installed"
left=$(find "$venv" -iname '*conveyor*')
[ -z "$left" ] || fail "pip uninstall left: $left"
after=$(cd "$venv" && find . -path ./lib/python3*/site-packages/pip -prune -o -print | grep -v __pycache__ | sort)
[ "$before" = "$after" ] || fail "the venv differs from before the install: $(diff <(echo "$before") <(echo "$after") | tr '\n' ' ')"
lap "pip uninstall left nothing ($(wc -l <<<"$installed") files removed)"

# ---- `pip install --no-build-isolation .` from the copy, into a second venv: pip builds in
# the tree, so the wheel's CMake build above is reused rather than repeated.
"$python" -m venv --system-site-packages "$work/venv2"
"$work/venv2/bin/python" -m pip install --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check -q \
  "$work/src" >"$work/pip2.log" 2>&1 || { tail -30 "$work/pip2.log"; fail "pip install --no-build-isolation ."; }
got=$("$work/venv2/bin/python" -c 'import conveyor; print(conveyor.__version__, conveyor.__file__)')
[[ $got == "$version $work/venv2/"* ]] || fail "pip install --no-build-isolation .: import conveyor gave $got"
[ "$("$work/venv2/bin/conveyor" --version)" = "conveyor $version" ] || fail "pip install --no-build-isolation .: no conveyor command"
lap "pip install --no-build-isolation . works too"
echo "wheel: passed in $((SECONDS - start)) s"
