#!/usr/bin/env bash
# On a GPU machine prepared by ./go gpu-bundle (Ubuntu 24.04, nvcc, pip's CUDA torch, no package
# registry): the wheel as a pip user there gets it. Built from a copy of the checkout with nvcc
# (`python3 -m build --wheel --no-isolation`, CUDA on, warnings as errors, the bundle's Debian
# headers as system headers), installed with `pip install --no-deps` beside the machine's torch
# into a folder of its own, then, from outside the checkout:
#   - ldd of the module and the command: the C and C++ runtimes only;
#   - one device="cuda" epoch over the photos: every sample, as device tensors, the first
#     batch equal to the CPU path's; gpu_decode="auto" opens nvJPEG;
#   - the whole python/tests suite against the installed package.
# Usage (./go gpu wheel runs it): gpu_wheel.sh PHOTOS_FOLDER LOG_FOLDER
set -euo pipefail
repo=$(pwd) photos=$(cd "$1" && pwd) logs=$2
sys=$repo/.gpu/sysroot
[ -d "$sys/usr/include" ] || { echo "gpu_wheel: no .gpu/sysroot here (./go gpu-bundle, then bash .gpu/build.sh)"; exit 1; }
work=$(mktemp -d /tmp/conveyor-gpu-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$logs" "$work/src" "$work/photos/all"
t0=$SECONDS
export PKG_CONFIG_PATH=$sys/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$sys
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# -isystem: pybind11 2.10's headers trip -Werror=shadow when named with -I.
export CMAKE_ARGS="-DCONVEYOR_CUDA=ON -DCONVEYOR_WERROR=ON -DCMAKE_PREFIX_PATH=$sys/usr -DCLI11_DIR=$sys/usr/share/cmake/CLI11 '-DCMAKE_CXX_FLAGS=-isystem $sys/usr/include/x86_64-linux-gnu -isystem $sys/usr/include'"
tar --exclude=./.gpu --exclude=./build -cf - . | tar -C "$work/src" -xf -
(cd "$work/src" && python3 -m build --wheel --no-isolation --outdir "$work/dist") >"$logs/wheel-build.log" 2>&1 \
  || { grep -E -A5 "error|Error" "$logs/wheel-build.log" | head -40; echo "gpu_wheel: the wheel's build failed ($logs/wheel-build.log)"; exit 1; }
echo "gpu_wheel: built $(basename "$work"/dist/*.whl) in $((SECONDS - t0)) s"
python3 -m pip install -q --no-deps --no-index --target "$work/site" "$work"/dist/*.whl
for f in "$work"/site/conveyor/_conveyor*.so "$work/site/conveyor/bin/conveyor"; do
  others=$(ldd "$f" | awk '{print $1}' | grep -v -E '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so\.[0-9]+)$' || true)
  [ -z "$others" ] || { echo "gpu_wheel: $(basename "$f") needs more than the C/C++ runtimes: $others"; exit 1; }
  echo "gpu_wheel: ldd $(basename "$f"): $(ldd "$f" | awk '{print $1}' | tr '\n' ' ')"
done
cp "$photos"/* "$work/photos/all/"
cd "$work"
PYTHONPATH=$work/site python3 - "$work/site" "$work/photos" <<'PY'
import sys, time
import torch
import conveyor, conveyor.torch
site, photos = sys.argv[1], sys.argv[2]
assert conveyor.__file__.startswith(site + "/"), f"conveyor imported from {conveyor.__file__}"
kw = dict(folder=photos, batch_size=64, crop=224, epochs=1, normalize="float16", seed=0)
loader = conveyor.torch.Loader(device="cuda", **kw)
n, t = 0, time.perf_counter()
for images, labels in loader:
    assert images.device.type == "cuda", images.device
    n += images.shape[0]
torch.cuda.synchronize()
assert n == loader.dataset_size, (n, loader.dataset_size)
print(f"gpu_wheel: a device='cuda' epoch: {n} of {loader.dataset_size} samples, {images.dtype} on {images.device}, "
      f"{n / (time.perf_counter() - t):.0f} images/s (first epoch, default workers)")
a = next(iter(conveyor.torch.Loader(device="cuda", **kw)))[0]
b = next(iter(conveyor.torch.Loader(device="cpu", **kw)))[0]
diff = (b.float() - a.cpu().float()).abs().max().item()
assert diff == 0, f"the first batch on CUDA differs from the CPU path's by {diff}"
print("gpu_wheel: the first batch on CUDA equals the CPU path's")
g = conveyor.torch.Loader(device="cuda", gpu_decode="auto", **kw)
m = sum(x.shape[0] for x, _ in g)
assert m == g.dataset_size, (m, g.dataset_size)
print(f"gpu_wheel: gpu_decode='auto': {m} samples; {g.gpu_decode_note}")
PY
PYTHONPATH=$work/site python3 -m pytest -q -p no:cacheprovider --import-mode=importlib "$repo/python/tests" >"$logs/wheel-pytest.log" 2>&1 \
  || { tail -30 "$logs/wheel-pytest.log"; echo "gpu_wheel: pytest against the installed wheel failed"; exit 1; }
echo "gpu_wheel: pytest against the installed wheel: $(tail -1 "$logs/wheel-pytest.log")"
echo "gpu_wheel: passed in $((SECONDS - t0)) s"
