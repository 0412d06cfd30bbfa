#!/usr/bin/env bash
# Layers only point downwards: a file in one layer includes headers of its own
# layer and of the layers below it, never above. From the bottom up:
#
#   pipeline/   the generic core: threads, queues, buffers, sampler, stats
#   data/       datasets, tar shards (data/shards/), .npy arrays, the file system,
#               shards over http(s) through a local cache (data/remote/):
#               where a sample's bytes come from, never what they decode to
#   image/      decode, augment, resize, normalize, the image filler (images enter here)
#   device/     three tiers, checked below as layers of their own:
#                 core     Device, the hardware alone (memory, streams, events,
#                          copies, record/wait/sync), with CUDA and host backends:
#                          every file of device/ but the stages' below
#                 kernels/ normalize, gather, erase, busy: each a header, a host twin
#                          and a .cu, run on the core's streams; a new batch op
#                          is new files here, never a change to Device
#                 stages   the copy stage (device_pipeline), with a generic
#                          per-batch step (BatchStep) for layers above, the
#                          erase step (RandomErasing after normalize), the
#                          resident dataset, the memory budget: they call the kernels
#               It knows nothing of images' decoders: only the kernels' math
#               and parameters come from image/ (normalize.h, random_erasing.h)
#   gpu_decode/ the GPU decode path: nvJPEG (opened at run time) and its host
#               twin behind one batch decoder, the feed threads, the copy
#               stage's decode step with its CPU fall-back, the measured share
#   source/     the one builder from a dataset spec to what a pipeline runs
#   libtorch/   tensors and models
#   python/     the Python module (pybind11): beside libtorch/, never over it:
#               tensors reach PyTorch through DLPack, so the module carries no LibTorch
#   apps/       the conveyor command, benchmarks, examples
#
# pipeline/ and data/ also name no image or CUDA library: they know nothing of either.
# libcurl is named in data/remote/ alone: the HTTP client is one home behind
# the cache, so a build without libcurl swaps one file (http_client_none.cpp).
# Prints every offending line and exits 1 if there is one.
# Usage: layering_test.sh SOURCE_ROOT
set -euo pipefail
cd "$1"
layers=(pipeline data image device gpu_decode source libtorch python apps)
bad=0
for ((i = 0; i < ${#layers[@]}; i++)); do
  layer=${layers[i]}
  above=("${layers[@]:i+1}")
  ((${#above[@]})) || continue
  pattern="^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($(IFS='|'; echo "${above[*]}"))/"
  if hits=$(grep -rnE "$pattern" "$layer" --include='*.h' --include='*.cpp' --include='*.cu'); then
    echo "$layer/ includes a layer above it:"
    echo "$hits"
    bad=1
  fi
done
# device/'s tiers: the core includes neither the kernels nor the stages; the
# kernels include the core, never the stages.
stages='device/(device_pipeline|erase_step|mix_step|resident|memory_budget)\.h'
core=$(find device -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \) |
       grep -vE '^device/(device_pipeline|erase_step|mix_step|resident|memory_budget)\.' | sort)
if hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<](device/kernels/|$stages)" $core /dev/null); then
  echo "device/'s core (Device and its backends) includes the kernels or the stages above it:"
  echo "$hits"
  bad=1
fi
if hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]$stages" device/kernels \
             --include='*.h' --include='*.cpp' --include='*.cu'); then
  echo "device/kernels/ includes device/'s stages above it:"
  echo "$hits"
  bad=1
fi
if hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](cuda|cuda_runtime|cuda_runtime_api|nvtx3/[^>"]*|turbojpeg|jpeglib|stb_image[^>"]*|stb/[^>"]*|torch/[^>"]*)(\.h)?[>"]' pipeline data); then
  echo "pipeline/ or data/ includes an image or CUDA library:"
  echo "$hits"
  bad=1
fi
if hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]curl/' --include='*.h' --include='*.cpp' --include='*.cu' \
             pipeline data image device gpu_decode source libtorch python apps | grep -v '^data/remote/'); then
  echo "libcurl is included outside data/remote/:"
  echo "$hits"
  bad=1
fi
if hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](libtorch|torch|ATen|c10)/' python); then
  echo "python/ includes LibTorch (it hands tensors over through DLPack instead):"
  echo "$hits"
  bad=1
fi
if ((bad)); then exit 1; fi
echo "layering: ${layers[*]} (device/: core, kernels/, stages): every include points down"
