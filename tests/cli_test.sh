#!/usr/bin/env bash
# The conveyor command end to end: every shipped config runs, bad input gives one
# line on stderr and exit status 2, inspect lists unreadable files with status 1,
# and bench --json writes the figures. Usage: cli_test.sh CONVEYOR_BINARY CONFIG_DIR
set -uo pipefail
bin=$1 configs=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CONVEYOR_CACHE=$work/cache
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$bin" make-dataset --out "$work/ds" --images-per-class 3 >/dev/null || fail "make-dataset"
[ "$(find "$work/ds" -name '*.jpg' | wc -l)" -eq 30 ] || fail "make-dataset wrote $(find "$work/ds" -name '*.jpg' | wc -l) images, not 30"

# Every shipped config, with the subcommand its first line names, on the small dataset.
# `train` needs conveyor-train (built with LibTorch); without it, train must say so in one line.
for cfg in "$configs"/*.toml; do
  sub=$(grep -o 'conveyor [a-z-]*' "$cfg" | head -1 | cut -d' ' -f2)
  if [ "$sub" = train ] && [ ! -x "$(dirname "$bin")/conveyor-train" ]; then
    "$bin" train --config "$cfg" >"$work/out" 2>"$work/err"
    [ $? -eq 2 ] && grep -q 'no LibTorch' "$work/err" || fail "train without LibTorch: $(cat "$work/err")"
    echo "note: $(basename "$cfg"): conveyor-train is not built here (no LibTorch); checked the one-line refusal"
    continue
  fi
  if ! "$bin" "$sub" --config "$cfg" --folder "$work/ds" --epochs 1 >"$work/out" 2>&1; then
    fail "config $(basename "$cfg") ($sub): $(tail -3 "$work/out")"
  fi
done

# Bad input: status 2, exactly one line on stderr, no stack trace.
printf 'a.jpg 1\nb.jpg x\n' >"$work/bad.txt"
printf 'workers = 2\nbogus-key = 3\n' >"$work/bad.toml"
expect_usage_error() {
  local what=$1; shift
  "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: status $rc, not 2"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$what: stderr is not one line: $(cat "$work/err")"
}
expect_usage_error "unknown flag" run --bogus
expect_usage_error "zero workers" run --workers 0
expect_usage_error "negative batch" run --batch -3
expect_usage_error "missing list" run --list "$work/nope.txt"
expect_usage_error "malformed list line" run --list "$work/bad.txt"
grep -q "bad.txt:2:" "$work/err" || fail "malformed list line: the error does not name file:line: $(cat "$work/err")"
expect_usage_error "unknown config key" run --config "$work/bad.toml"
grep -q "bogus-key" "$work/err" || fail "unknown config key: not named: $(cat "$work/err")"
expect_usage_error "unknown device" run --device gpu
expect_usage_error "unknown host transfer" run --host-transfer dma
expect_usage_error "workers normalize without float32" run --normalize-in workers
expect_usage_error "workers normalize with --resident" run --normalize-in workers --normalize float32 --resident
expect_usage_error "two datasets" run --list "$work/bad.txt" --folder "$work/ds"
expect_usage_error "no subcommand"
expect_usage_error "rank beyond world" run --folder "$work/ds" --rank 2 --world-size 2
# A flag's value from a config file or as --flag=V: on/off words only (CLI11 read 2 as on, -1 and 0.5 as off).
for v in 2 -1 0.5 '"maybe"'; do
  printf 'resident = %s\n' "$v" >"$work/flag.toml"
  expect_usage_error "resident = $v" run --config "$work/flag.toml" --folder "$work/ds"
  grep -q -- "--resident: .*expected on or off" "$work/err" || fail "resident = $v: $(cat "$work/err")"
done
expect_usage_error "--serial=2" run --serial=2 --folder "$work/ds"
# An empty element in a sweep list (CLI11 drops it while splitting): refused, by flag and value.
for bad in "--workers 1,,2" "--workers=1,2," "--batch ,8" "--host-queue 1,,2 --workers 1"; do
  # shellcheck disable=SC2086  # the words of $bad are the flags
  expect_usage_error "sweep $bad" sweep $bad
  grep -q "^conveyor: --[a-z-]* [0-9,]*: an empty element in the list$" "$work/err" || fail "sweep $bad: $(cat "$work/err")"
done

# inspect: one corrupt file among good ones -> status 1, the file named with its reason.
cp -r "$work/ds" "$work/ds2"
printf 'not an image' >"$work/ds2/0-disk/zz-broken.jpg"
"$bin" inspect --folder "$work/ds2" >"$work/out" 2>&1
[ $? -eq 1 ] || fail "inspect with a broken file: status not 1"
grep -q "unreadable: .*zz-broken.jpg: " "$work/out" || fail "inspect does not name the broken file: $(cat "$work/out")"
grep -q "^30 samples decoded, 1 unreadable" "$work/out" || fail "inspect counts: $(head -1 "$work/out")"
"$bin" inspect --folder "$work/ds" >/dev/null 2>&1 || fail "inspect of a good dataset failed"

# bench --json: the figures are there and the file is JSON.
"$bin" bench --folder "$work/ds" --batch 4 --json "$work/b.json" >/dev/null 2>&1 || fail "bench --json"
for key in images_per_s batches_per_s consumer_idle peak_rss_mib stages; do
  grep -q "\"$key\"" "$work/b.json" || fail "bench json lacks $key"
done
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["images_per_s"] > 0' "$work/b.json" \
    || fail "bench json does not parse or has no throughput"
fi

# An epoch served from the pool's prefetch says so: with a slow
# step, epoch 1's samples of this 30-sample dataset were nearly all decoded
# during epoch 0, which never has any (its batches are filled after it began).
# The step is slow enough that the workers outrun it under TSan on a busy
# machine too (at 100 ms they did not: 16 images/s against 40).
"$bin" bench --folder "$work/ds" --batch 4 --epochs 2 --compute-ms 300 --json "$work/pf.json" >"$work/out" 2>&1 || fail "bench, prefetch"
grep '^epoch 0:' "$work/out" | grep -q 'decoded before' && fail "epoch 0 claims prefetched batches: $(grep '^epoch 0:' "$work/out")"
grep '^epoch 1:' "$work/out" | grep -qE '; at least ([89]|[12][0-9]|30) of its 30 samples were decoded before it began \(prefetch\), so its rate does not measure decoding$' ||
  fail "epoch 1 does not say it was served from prefetch: $(grep '^epoch 1:' "$work/out")"
grep -qE '"epoch_prefetched": \[0, ([89]|[12][0-9]|30)\]' "$work/pf.json" || fail "json epoch_prefetched: $(grep prefetched "$work/pf.json")"

# --gpu-decode on the host backend, whose GPU decoder is its CPU twin: a bad
# value is a usage error; auto says in one line why it is off; a share decodes that share
# of the JPEGs in the transfer stage: for 1 and 3 workers every sample once (the epoch
# digests sum the delivered indices) and the same number GPU-decoded. That the bytes
# are the same is test_gpu_decode's to show.
expect_usage_error "gpu decode share out of range" bench --gpu-decode 1.5
expect_usage_error "gpu decode with workers normalizing" bench --gpu-decode 0.5 --normalize-in workers --normalize float32

# --transforms: torchvision's Compose list, colour transforms included, in place of --augment and --crop.
"$bin" run --folder "$work/ds" --epochs 2 --workers 2 --batch 7 --transforms \
  "RandomResizedCrop(48), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(p=0.2), GaussianBlur(5)" \
  --json "$work/tf.json" >"$work/out" 2>&1 || fail "run --transforms: $(tail -3 "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 2 ] || fail "run --transforms: $(tail -3 "$work/out")"
expect_usage_error "--transforms: an unknown transform" run --folder "$work/ds" --transforms "rrc(48), Flipp"
grep -q "unknown transform 'Flipp'" "$work/err" || fail "--transforms Flipp: $(cat "$work/err")"
expect_usage_error "--transforms: a colour transform first" run --folder "$work/ds" --transforms "jitter(0.4), rrc(48)"
expect_usage_error "--transforms with --crop" run --folder "$work/ds" --transforms "rrc(48)" --crop 32
expect_usage_error "--transforms with --resident" run --folder "$work/ds" --transforms "rrc(48)" --resident
# RandomVerticalFlip by name and alias, beside the other flip.
"$bin" run --folder "$work/ds" --epochs 1 --workers 2 --batch 7 --transforms "rrc(40), flip, RandomVerticalFlip(p=0.3)" \
  >"$work/out" 2>&1 || fail "run --transforms with RandomVerticalFlip: $(tail -3 "$work/out")"
expect_usage_error "--transforms: vflip p" run --folder "$work/ds" --transforms "rrc(48), vflip(p=2)"
grep -q "RandomVerticalFlip: p must be in \[0, 1\]" "$work/err" || fail "vflip(p=2): $(cat "$work/err")"
# The policies by name and alias after the crop; a [[transforms]] table's fill array reads as the text's tuple.
"$bin" run --folder "$work/ds" --epochs 1 --workers 2 --batch 7 --transforms \
  "rrc(40), flip, TrivialAugmentWide(), randaugment(num_ops=2, magnitude=9)" >"$work/out" 2>&1 ||
  fail "run --transforms with the policies: $(tail -3 "$work/out")"
grep -qF "RandomHorizontalFlip(0.5) + TrivialAugmentWide(num_magnitude_bins=31) + RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31)" \
  "$work/out" || fail "run --transforms with the policies: $(grep "^transforms" "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 1 ] || fail "run with the policies: $(tail -3 "$work/out")"
printf '[[transforms]]\nop = "CenterCrop"\nsize = 32\n[[transforms]]\nop = "TrivialAugmentWide"\nfill = [128, 64, 0]\n' >"$work/ta.toml"
"$bin" run --config "$work/ta.toml" --folder "$work/ds" --epochs 1 --batch 7 >"$work/out" 2>&1 || fail "[[transforms]] TrivialAugmentWide: $(tail -3 "$work/out")"
grep -qF "transforms: CenterCrop(32) + TrivialAugmentWide(num_magnitude_bins=31, fill=(128, 64, 0))" "$work/out" ||
  fail "[[transforms]] TrivialAugmentWide read as: $(grep "^transforms" "$work/out")"
expect_usage_error "--transforms: RandAugment magnitude" run --folder "$work/ds" --transforms "rrc(48), RandAugment(magnitude=31)"
grep -qF "RandAugment: magnitude must be in [0, num_magnitude_bins - 1]" "$work/err" || fail "RandAugment(magnitude=31): $(cat "$work/err")"
# --views: several views of each sample (2 + 3 here), in place of --transforms;
# TOML's `views = "..."` too. (The bytes for any worker count: tests/test_views.cpp.)
"$bin" run --folder "$work/ds" --epochs 2 --workers 2 --batch 7 \
  --views "2: rrc(40, scale=(0.4, 1)), flip, jitter(0.4, 0.4); 3: rrc(16), grayscale(0.5)" >"$work/out" 2>&1 ||
  fail "run --views: $(tail -3 "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 2 ] || fail "run --views: $(tail -3 "$work/out")"
grep -qF "views: 3 x RandomResizedCrop(16, scale=(0.08, 1), ratio=(0.75, 1.33)) + RandomGrayscale(p=0.5)" "$work/out" ||
  fail "run --views read as: $(grep "^views" "$work/out")"
printf 'views = "2: rrc(32), flip; 3: rrc(16)"\n' >"$work/views.toml"
"$bin" run --config "$work/views.toml" --folder "$work/ds" --epochs 1 --batch 7 >"$work/out" 2>&1 ||
  fail "views in TOML: $(tail -3 "$work/out")"
grep -q "^views: 2 x RandomResizedCrop(32" "$work/out" || fail "views in TOML read as: $(grep "^views" "$work/out")"
expect_usage_error "--views: a count of 0" run --folder "$work/ds" --views "0: rrc(32)"
grep -qF "views: entry 1: count '0' is not a whole number from 1 to 64" "$work/err" || fail "--views 0: $(cat "$work/err")"
expect_usage_error "--views: a bad list in the second entry" run --folder "$work/ds" --views "rrc(32); Flipp"
grep -qF "views: entry 2: transforms: unknown transform 'Flipp'" "$work/err" || fail "--views Flipp: $(cat "$work/err")"
expect_usage_error "--views with --transforms" run --folder "$work/ds" --views "rrc(32)" --transforms "rrc(32)"
# Normalized on the device, each view a tensor of its own.
"$bin" run --folder "$work/ds" --epochs 1 --workers 2 --batch 7 --views "2: rrc(32), flip; 3: rrc(16)" --normalize float16 \
  >"$work/out" 2>&1 || fail "run --views --normalize float16: $(tail -3 "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 1 ] || fail "run --views --normalize: $(tail -3 "$work/out")"
expect_usage_error "--views with --gpu-decode" run --folder "$work/ds" --views "rrc(32)" --gpu-decode 0.5
expect_usage_error "--views with RandomErasing" run --folder "$work/ds" --views "rrc(32), erase" --normalize float32 \
  --normalize-in workers
expect_usage_error "--views: a list without a crop" run --folder "$work/ds" --views "2: flip; 3: rrc(16)"
grep -qF "views: entry 1: augment: the output size depends on the image" "$work/err" || fail "--views flip: $(cat "$work/err")"
if [ -x "$(dirname "$bin")/conveyor-train" ]; then
  expect_usage_error "--views with train" train --folder "$work/ds" --views "rrc(32)"
  grep -qF "not with train" "$work/err" || fail "train --views: $(cat "$work/err")"
fi
# RandomErasing ends the list and runs on the device after normalize: it needs
# --normalize there, and not --serial (which has no device stage).
"$bin" run --folder "$work/ds" --epochs 1 --workers 2 --batch 7 --normalize float16 \
  --transforms "rrc(40), flip, RandomErasing(0.5)" >"$work/out" 2>&1 || fail "run --transforms with RandomErasing: $(tail -3 "$work/out")"
grep -qF "RandomHorizontalFlip(0.5) + RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0; after normalize, on the device)" \
  "$work/out" || fail "run --transforms with RandomErasing: $(grep "^transforms" "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 1 ] || fail "run with RandomErasing: $(tail -3 "$work/out")"
expect_usage_error "--transforms: RandomErasing without --normalize" run --folder "$work/ds" --transforms "rrc(40), RandomErasing()"
grep -qF "RandomErasing follows Normalize, on the device: give --normalize" "$work/err" || fail "RandomErasing without --normalize: $(cat "$work/err")"
expect_usage_error "--transforms: RandomErasing with --serial" run --folder "$work/ds" --normalize float32 --serial \
  --transforms "rrc(40), RandomErasing()"
grep -qF "which --serial does not have" "$work/err" || fail "RandomErasing with --serial: $(cat "$work/err")"
# MixUp and CutMix come after it and mix whole batches on the device, with
# soft labels over the dataset's classes (or their num_classes, if not fewer).
"$bin" run --folder "$work/ds" --epochs 1 --workers 2 --batch 7 --normalize bfloat16 \
  --transforms "rrc(40), erase(0.25), mixup(0.2), cutmix" >"$work/out" 2>&1 || fail "run with MixUp and CutMix: $(tail -3 "$work/out")"
grep -qF "MixUp(alpha=0.2; per batch, after normalize, on the device) + CutMix(alpha=1; per batch, after normalize, on the device)" \
  "$work/out" || fail "run with MixUp and CutMix: $(grep "^transforms" "$work/out")"
[ "$(grep -c "^delivered: .* 30 samples, 0 skipped" "$work/out")" -eq 1 ] || fail "run with MixUp and CutMix: $(tail -3 "$work/out")"
expect_usage_error "--transforms: CutMix without --normalize" run --folder "$work/ds" --transforms "rrc(40), CutMix()"
grep -qF "CutMix follows Normalize, on the device: give --normalize" "$work/err" || fail "CutMix without --normalize: $(cat "$work/err")"
if "$bin" run --folder "$work/ds" --epochs 1 --normalize float32 --transforms "rrc(40), mixup(num_classes=1)" >"$work/out" 2>&1; then
  fail "MixUp with fewer classes than the dataset's ran"
fi
grep -qF "MixUp: num_classes=1, but the dataset's labels go up to" "$work/out" || fail "MixUp(num_classes=1): $(tail -3 "$work/out")"

# [[transforms]] tables: the same list as the text, key by key; each mistake one
# line naming the file, the table's index and the key.
cat >"$work/tables.toml" <<'TOML'
workers = 2
[[transforms]]
op = "RandomResizedCrop"
size = 40
scale = [0.25, 1.0]
[[transforms]]
op = "RandomHorizontalFlip"
[[transforms]]
op = "RandomVerticalFlip"
p = 0.25
[[transforms]]
op = "ColorJitter"
brightness = 0.4
hue = [-0.1, 0.1]
TOML
printf 'workers = 2\ntransforms = "RandomResizedCrop(40, scale=(0.25, 1)), RandomHorizontalFlip(), RandomVerticalFlip(0.25), ColorJitter(0.4, hue=(-0.1, 0.1))"\n' >"$work/text.toml"
for form in tables text; do
  "$bin" run --config "$work/$form.toml" --folder "$work/ds" --epochs 2 --batch 7 --json "$work/$form.json" \
    >"$work/out" 2>&1 || fail "[[transforms]] ($form): $(tail -3 "$work/out")"
  grep "^transforms: " "$work/out" >"$work/$form.line" || fail "[[transforms]] ($form): no transforms line"
done
want="transforms: RandomResizedCrop(40, scale=(0.25, 1), ratio=(0.75, 1.33)) + RandomHorizontalFlip(0.5) + RandomVerticalFlip(0.25) + ColorJitter(brightness=(0.6, 1.4), contrast=(1, 1), saturation=(1, 1), hue=(-0.1, 0.1))"
[ "$(cat "$work/tables.line")" = "$want" ] || fail "[[transforms]] read as: $(cat "$work/tables.line")"
cmp -s "$work/tables.line" "$work/text.line" || fail "[[transforms]] and transforms = \"...\" differ: $(cat "$work/text.line")"
if command -v python3 >/dev/null; then
  python3 - "$work/tables.json" "$work/text.json" <<'PY' || fail "[[transforms]] and transforms = \"...\" delivered other samples"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["epoch_digest"] == b["epoch_digest"] and a["epoch_images"] == [30, 30], (a, b)
PY
fi
toml_error() {  # what, expected text on stderr, then the file's lines
  local what=$1 want=$2; shift 2
  printf '%s\n' "$@" >"$work/tt.toml"
  expect_usage_error "$what" run --config "$work/tt.toml" --folder "$work/ds"
  grep -qF -- "$want" "$work/err" || fail "$what: wanted '$want', got: $(cat "$work/err")"
  grep -qF -- "$work/tt.toml" "$work/err" || fail "$what: the file is not named: $(cat "$work/err")"
}
toml_error "[[transforms]] unknown key" "[[transforms]] table 2 (line 3, column 1): RandomResizedCrop: unknown parameter 'sizes'" \
  '[[transforms]]' 'op = "RandomHorizontalFlip"' '[[transforms]]' 'op = "RandomResizedCrop"' 'sizes = 224'
toml_error "[[transforms]] no op" "[[transforms]] table 1 (line 1, column 1): 'op' is missing" '[[transforms]]' 'size = 224'
toml_error "[[transforms]] unknown op" "table 1 (line 1, column 1): unknown transform 'Rotate'" '[[transforms]]' 'op = "Rotate"'
toml_error "[[transforms]] a string value" "table 1 (line 1, column 1): 'size' must be a number, true/false or an array of numbers" \
  '[[transforms]]' 'op = "CenterCrop"' 'size = "224"'
toml_error "[[transforms]] a wrong value" "table 2 (line 4, column 1): RandomVerticalFlip: p must be in [0, 1]" \
  '[[transforms]]' 'op = "CenterCrop"' 'size = 32' '[[transforms]]' 'op = "RandomVerticalFlip"' 'p = 1.5'
toml_error "[[transforms]] and transforms = both" "transforms" 'transforms = "rrc(32)"' '[[transforms]]' 'op = "CenterCrop"' 'size = 32'
toml_error "[[transforms]] at the top and [run]" "'transforms' is set both at the top and in [run]" \
  'transforms = "rrc(32)"' '[[run.transforms]]' 'op = "CenterCrop"' 'size = 32'
"$bin" bench --folder "$work/ds" --device host --gpu-decode auto --epochs 1 >"$work/out" 2>&1 || fail "gpu decode auto"
grep -q "^gpu decode: off (auto: the host backend has no GPU" "$work/out" || fail "gpu decode auto: no reason line: $(cat "$work/out")"
for w in 1 3; do
  "$bin" bench --folder "$work/ds" --device host --gpu-decode 0.5 --workers $w --batch 4 --epochs 2 \
    --json "$work/gd$w.json" >"$work/out" 2>&1 || fail "gpu decode 0.5, $w workers: $(tail -3 "$work/out")"
  grep -q "^gpu decode: share 0.5 on host twin" "$work/out" || fail "gpu decode 0.5: no line saying so"
done
if command -v python3 >/dev/null; then
  python3 - "$work/gd1.json" "$work/gd3.json" <<'PY' || fail "gpu decode: other samples or GPU counts for 1 and 3 workers, or nothing went to the GPU path"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["epoch_digest"] == b["epoch_digest"], (a["epoch_digest"], b["epoch_digest"])
assert a["epoch_images"] == [30, 30] and b["epoch_images"] == [30, 30]
assert 0 < a["gpu_decoded"] < 60 and a["gpu_decoded"] == b["gpu_decoded"], (a["gpu_decoded"], b["gpu_decoded"])
PY
fi

# --workers auto: the same samples as a fixed count, its choice in --json; also from a TOML file.
printf 'workers = "auto"\nmax-workers = 3\n' >"$work/auto.toml"
"$bin" bench --folder "$work/ds" --device host --workers 2 --batch 4 --epochs 3 --json "$work/w2.json" >/dev/null 2>&1 \
  || fail "bench --workers 2"
"$bin" bench --folder "$work/ds" --device host --workers auto --batch 4 --epochs 3 --json "$work/wa.json" >"$work/out" 2>&1 \
  || fail "bench --workers auto: $(tail -3 "$work/out")"
grep -q "^workers tuned: [0-9]* working now" "$work/out" || fail "--workers auto: no 'workers tuned' line in the table"
"$bin" bench --folder "$work/ds" --device host --config "$work/auto.toml" --batch 4 --epochs 3 --json "$work/wt.json" \
  >/dev/null 2>&1 || fail "workers = \"auto\" in a TOML file"
if command -v python3 >/dev/null; then
  python3 - "$work/w2.json" "$work/wa.json" "$work/wt.json" <<'PY' || fail "--workers auto: other samples than --workers 2, or no tune_workers in --json"
import json, sys
fixed, auto, toml = (json.load(open(f)) for f in sys.argv[1:])
assert fixed["tune_workers"] is None
for r, ceiling in ((auto, None), (toml, 3)):
    assert r["epoch_digest"] == fixed["epoch_digest"], (r["epoch_digest"], fixed["epoch_digest"])
    t = r["tune_workers"]
    assert 1 <= t["working"] <= r["workers"] and t["changes"] >= len(t["decisions"]), t
    assert ceiling is None or r["workers"] == ceiling, r["workers"]
PY
fi
expect_usage_error "--max-workers without --workers auto" bench --folder "$work/ds" --workers 2 --max-workers 4
expect_usage_error "--workers many" bench --folder "$work/ds" --workers many
expect_usage_error "--gpu-decode auto with --workers auto" bench --folder "$work/ds" --workers auto --gpu-decode auto

# --host-queue auto and --device-queue auto: the same samples as the fixed
# depths, the depth in the table and --json; also from a TOML file. (That
# each deepens where it should: test_autotune; by how much it pays:
# docs/benchmarks.md.)
for q in host device; do
  printf '%s-queue = "auto"\nmax-%s-queue = 5\n' "$q" "$q" >"$work/q.toml"
  "$bin" bench --folder "$work/ds" --device host --workers 2 --batch 4 --epochs 3 --$q-queue auto \
    --json "$work/qa.json" >"$work/out" 2>&1 || fail "bench --$q-queue auto: $(tail -3 "$work/out")"
  grep -q "^$q queue tuned: depth [0-9]* of at most 8" "$work/out" || fail "--$q-queue auto: no '$q queue tuned' line"
  "$bin" bench --folder "$work/ds" --device host --workers 2 --config "$work/q.toml" --batch 4 --epochs 3 \
    --json "$work/qt.json" >/dev/null 2>&1 || fail "$q-queue = \"auto\" in a TOML file"
  if command -v python3 >/dev/null; then
    python3 - "$q" "$work/w2.json" "$work/qa.json" "$work/qt.json" <<'PY' || fail "--$q-queue auto: other samples than the fixed depth, or no tune_${q}_queue in --json"
import json, sys
key = "tune_%s_queue" % sys.argv[1]
fixed, auto, toml = (json.load(open(f)) for f in sys.argv[2:])
assert fixed[key] is None
for r, ceiling in ((auto, 8), (toml, 5)):
    assert r["epoch_digest"] == fixed["epoch_digest"], (r["epoch_digest"], fixed["epoch_digest"])
    t = r[key]
    assert 2 <= t["depth"] <= ceiling and t["ceiling"] == ceiling and t["changes"] >= len(t["decisions"]), t
PY
  fi
  expect_usage_error "--max-$q-queue without --$q-queue auto" bench --folder "$work/ds" --max-$q-queue 4
  expect_usage_error "--$q-queue deep" bench --folder "$work/ds" --$q-queue deep
done
expect_usage_error "--compute-stall-ms without --compute-stall-every" run --compute-stall-ms 40
expect_usage_error "--synthetic-stall-ms without --synthetic-ms" run --synthetic-stall-ms 5 --synthetic-stall-every 10

# sweep --csv: one row per point.
"$bin" sweep --folder "$work/ds" --batch 4 --workers 1,2 --host-queue 1,3 --csv "$work/s.csv" >/dev/null 2>&1 \
  || fail "sweep"
[ "$(wc -l <"$work/s.csv")" -eq 5 ] || fail "sweep csv has $(wc -l <"$work/s.csv") lines, not 1 + 4"
# sweep --trace: one trace per point (t-1.json, t-2.json), not each over the last
"$bin" sweep --folder "$work/ds" --batch 4 --workers 1,2 --trace "$work/t.json" >"$work/out" 2>&1 || fail "sweep --trace"
grep -q "^traces: $work/t-1.json to $work/t-2.json" "$work/out" || fail "sweep --trace: $(tail -1 "$work/out")"
for n in 1 2; do
  python3 -c 'import json, sys; assert any(e.get("name") == "decode" for e in json.load(open(sys.argv[1]))["traceEvents"])' \
    "$work/t-$n.json" || fail "sweep --trace: t-$n.json is not a trace of its point"
done
[ ! -e "$work/t.json" ] || fail "sweep --trace wrote t.json beside the per-point traces"
"$bin" sweep --folder "$work/ds" --batch 4 --workers 1,2 --trace /dev/null >/dev/null 2>&1 || fail "sweep --trace /dev/null"
[ ! -e /dev/null-1 ] || { rm -f /dev/null-1 /dev/null-2; fail "sweep --trace /dev/null wrote /dev/null-1"; }
if "$bin" sweep --folder "$work/ds" --batch 4 --workers 1,2 --trace "$work/u.json" --csv "$work/u-1.json" >/dev/null 2>"$work/err"; then
  fail "sweep: --csv named like point 1's trace was taken"
fi
grep -q "the same file as" "$work/err" || fail "sweep: a point trace clashing with --csv: $(cat "$work/err")"

# --trace: Chrome Trace Event JSON with decode, transfer and step spans and queue-depth counters.
"$bin" run --folder "$work/ds" --batch 4 --workers 2 --trace "$work/t.json" >/dev/null 2>&1 || fail "run --trace"
if command -v python3 >/dev/null; then
  python3 - "$work/t.json" <<'PY' || fail "trace structure"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
spans = [e for e in ev if e["ph"] == "X"]
names = {e["name"] for e in spans}
assert {"decode", "transfer", "step"} <= names, names
assert sum(1 for e in spans if e["name"] == "decode") == 30, "one decode span per sample"
assert all(e["tid"] >= 10 for e in spans if e["name"] == "decode")
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
counters = {e["name"] for e in ev if e["ph"] == "C"}
assert {"host queue", "device queue", "buffer pool"} <= counters, counters
threads = {e["args"]["name"] for e in ev if e["ph"] == "M"}
assert {"consumer", "transfer", "worker 0", "worker 1"} <= threads, threads
PY
else
  grep -q '"name":"decode"' "$work/t.json" || fail "trace has no decode spans"
fi

# --plot: a PNG through gnuplot when it is installed, else a one-line note and the CSV.
"$bin" sweep --folder "$work/ds" --batch 4 --workers 1,2 --csv "$work/p.csv" --plot "$work/p.png" >"$work/out" 2>&1 \
  || fail "sweep --plot"
if command -v gnuplot >/dev/null; then
  [ -s "$work/p.png" ] || fail "gnuplot is installed but no plot was written: $(cat "$work/out")"
else
  grep -q "note: gnuplot is not installed" "$work/out" || fail "no note about the missing gnuplot: $(cat "$work/out")"
fi

# Sharding from the launcher's environment (torchrun, then Open MPI); flags override it.
RANK=1 WORLD_SIZE=2 "$bin" run --folder "$work/ds" --batch 4 >"$work/out" 2>&1 || fail "run with RANK/WORLD_SIZE"
grep -q "rank 1 of 2" "$work/out" && grep -q "^epoch 0: 15 images" "$work/out" || fail "torchrun env: $(cat "$work/out")"
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3 "$bin" run --folder "$work/ds" --batch 4 --world-size 5 >"$work/out" 2>&1 \
  || fail "run with Open MPI env"
grep -q "rank 0 of 5" "$work/out" && grep -q "^epoch 0: 6 images" "$work/out" || fail "Open MPI env + flag: $(cat "$work/out")"
RANK=x "$bin" run --folder "$work/ds" >"$work/out" 2>"$work/err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] || fail "a bad RANK is not a one-line usage error"

# Multi-process sharding: the ranks run at once, as a launcher starts them, and
# their per-epoch counts and sample digests (--json) must show disjoint shards
# that cover the dataset with equal batch counts. torchrun-style RANK/WORLD_SIZE
# first, then Open MPI's mpirun, whose ranks read OMPI_COMM_WORLD_RANK/SIZE.
check_shards() {  # check_shards WORLD DATASET_SIZE JSON...
  python3 - "$@" <<'PY'
import json, sys
world, size, files = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
M = (1 << 64) - 1
def h(i):  # SplitMix64 of the index, as apps/conveyor.cpp index_hash()
    z = (i + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
ranks = [json.load(open(f)) for f in files]
assert sorted(r["rank"] for r in ranks) == list(range(world)), [r["rank"] for r in ranks]
assert all(r["world_size"] == world for r in ranks)
want = sum(h(i) for i in range(size)) & M
for e in range(len(ranks[0]["epoch_images"])):
    n = sum(r["epoch_images"][e] + r["epoch_skipped"][e] for r in ranks)
    assert n == size, f"epoch {e}: {n} samples over the ranks, not {size}"
    assert len({r["epoch_batches"][e] for r in ranks}) == 1, f"epoch {e}: unequal batch counts"
    got = sum(r["epoch_digest"][e] for r in ranks) & M
    assert got == want, f"epoch {e}: the shards overlap or miss samples (digest)"
PY
}
if command -v python3 >/dev/null; then
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 "$bin" bench --folder "$work/ds" --batch 4 --epochs 2 --json "$work/shard-$r.json" >/dev/null 2>&1 &
  done
  wait
  check_shards 3 30 "$work"/shard-[0-2].json || fail "torchrun-style shards"
  # The check can fail: two ranks claiming rank 0 overlap and leave rank 1's samples out.
  cp "$work/shard-0.json" "$work/dup-1.json"
  sed -i 's/"rank": 0/"rank": 1/' "$work/dup-1.json"
  ! check_shards 3 30 "$work/shard-0.json" "$work/dup-1.json" "$work/shard-2.json" 2>/dev/null \
    || fail "the shard check accepts overlapping shards"
  if command -v mpirun >/dev/null; then
    # 4 ranks over 40 images (no padding, so the digests must add up exactly).
    # As root mpirun wants both variables; --oversubscribe: 4 ranks on a 2-core machine.
    "$bin" make-dataset --out "$work/ds40" --images-per-class 4 >/dev/null || fail "make-dataset ds40"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 \
      sh -c '"$0" bench --folder "$1" --batch 3 --epochs 2 --json "$2-$OMPI_COMM_WORLD_RANK.json" >/dev/null 2>&1' \
      "$bin" "$work/ds40" "$work/mpi" >"$work/mpi.out" 2>&1 || fail "mpirun: $(tail -3 "$work/mpi.out")"
    check_shards 4 40 "$work"/mpi-[0-3].json || fail "Open MPI shards"
  else
    echo "note: mpirun not found (apt-get install openmpi-bin); the Open MPI shard check did not run"
  fi
fi

# Teaching mode: synthetic stage costs, serial against overlapped, both account for every sample.
"$bin" run --folder "$work/ds" --batch 4 --serial --synthetic-ms 0.1 --compute-ms 0.1 --trace "$work/serial.json" >"$work/out" 2>&1 || fail "run --serial"
grep -q "^epoch 0 (serial): 30 images in 8 batches" "$work/out" || fail "serial run: $(cat "$work/out")"
grep -q "^trace: $work/serial.json" "$work/out" || fail "serial run: no trace line: $(tail -2 "$work/out")"
"$bin" run --folder "$work/ds" --batch 4 --synthetic-ms 0.1 >"$work/out" 2>&1 || fail "run --synthetic-ms"
grep -q "^epoch 0: 30 images in 8 batches" "$work/out" || fail "synthetic run: $(cat "$work/out")"

# The host backend handing its buffers to the consumer (CPU training): every sample, normalized.
"$bin" run --folder "$work/ds" --batch 4 --device host --host-transfer handover --normalize float32 >"$work/out" 2>&1 \
  || fail "run --host-transfer handover"
grep -q "^host backend (handover, no copy)" "$work/out" && grep -q "^epoch 0: 30 images in 8 batches" "$work/out" \
  || fail "handover run: $(cat "$work/out")"
"$bin" run --folder "$work/ds" --batch 4 --device host --host-transfer handover --normalize float32 --normalize-in workers \
  >"$work/out" 2>&1 || fail "run --normalize-in workers"
grep -q "^normalize: float32 in the workers" "$work/out" && grep -q "^epoch 0: 30 images in 8 batches" "$work/out" \
  || fail "workers-normalize run: $(cat "$work/out")"

# SIGINT / SIGTERM during a run: the step in progress finishes, the figures so far
# are printed, the trace is complete JSON, status 128 + signal, within a second.
# (set -m: with job control the background job gets SIGINT's default action, not
# the ignore a script's background jobs inherit.)
interrupt_run() {
  local sig=$1 status=$2 out="$work/sig-$1" trace="$work/sig-$1.json"
  set -m
  "$bin" run --folder "$work/ds" --batch 4 --workers 2 --epochs 100000 --synthetic-ms 1 --compute-ms 1 \
    --trace "$trace" --json "$work/sig-$1.result.json" >"$out" 2>&1 &
  local pid=$!
  set +m
  for _ in $(seq 200); do grep -q "^epoch 1: " "$out" && break; sleep 0.05; done
  local t0; t0=$(date +%s%N)
  kill -"$sig" "$pid"
  wait "$pid"
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -eq "$status" ] || fail "$sig: status $rc, not $status: $(tail -3 "$out")"
  [ $ms -lt 1000 ] || fail "$sig: exit took $ms ms"
  grep -q "^interrupted by SIG$sig$" "$out" || fail "$sig: no 'interrupted by' line: $(tail -3 "$out")"
  grep -Eq "^epoch [0-9]+ \(interrupted\): [0-9]+ images" "$out" || fail "$sig: no partial epoch line: $(tail -5 "$out")"
  grep -q "^bottleneck: " "$out" || fail "$sig: no stats"
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(e["name"] == "step" for e in d["traceEvents"])' \
      "$trace" || fail "$sig: the trace is not complete JSON"
    # --json alone tells a cut-short run from a whole one.
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["interrupted"] == sys.argv[2] and 2 <= d["epochs_run"] < d["epochs"], d' \
      "$work/sig-$1.result.json" "SIG$sig" || fail "$sig: --json does not say it was interrupted"
  fi
}
interrupt_run INT 130
interrupt_run TERM 143

if [ $failures -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "cli: all checks passed"
