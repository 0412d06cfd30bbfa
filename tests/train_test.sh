#!/usr/bin/env bash
# conveyor train end to end on the embedded default dataset (2 workers, as on a
# 2-core machine): validation accuracy rises well above chance within a few
# epochs; a run stopped mid-epoch and resumed from its checkpoint ends exactly
# where an uninterrupted run ends; SIGTERM saves and exits 143; --plot draws the
# figures; bad input is one line on stderr with status 2. Usage: train_test.sh CONVEYOR_BINARY
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CONVEYOR_CACHE=$work/cache
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
final() { grep '^final:' "$1"; }
# Bad input: status 2 and one line on stderr.
expect_usage_error() {
  local what=$1; shift
  "$bin" train "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: status $rc, not 2"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$what: stderr is not one line: $(cat "$work/err")"
}

# 1. Learning, bounded in time: 5 epochs of LeNet-5 take ~5 s here; 120 s is the limit.
start=$SECONDS
# On a bigger machine, hold it to 2 cores as the claim says.
pin=()
if command -v taskset >/dev/null && [ "$(nproc)" -gt 2 ]; then pin=(taskset -c 0,1); fi
mkdir -p "$work/it's out"
plot="$work/it's out/curve.svg"
if timeout 120 "${pin[@]}" "$bin" train --workers 2 --epochs 5 --checkpoint "$work/full.pt" --plot "$plot" >"$work/full" 2>"$work/full.err"; then
  cat "$work/full"
  acc=$(final "$work/full" | sed -E 's/.*val accuracy ([0-9.]+).*/\1/')
  echo "5 epochs: validation accuracy $acc (chance 0.1) in $((SECONDS - start)) s"
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.5) }' || fail "validation accuracy $acc after 5 epochs is not well above chance (>= 0.5)"
  [ "$(grep -c '^epoch [0-9]/5: train loss' "$work/full")" -eq 5 ] || fail "not one line per epoch"
  grep -q '^bottleneck:' "$work/full" || fail "no pipeline stats per epoch"
  [ -s "$work/full.pt" ] || fail "no checkpoint written"
  if command -v gnuplot >/dev/null; then
    grep -q '<svg' "$plot" 2>/dev/null || fail "--plot: no SVG drawn"
  else
    grep -q 'gnuplot is not installed' "$work/full" || fail "--plot without gnuplot: no note"
  fi
  [ "$(wc -l <"$plot.csv")" -eq 6 ] || fail "--plot: the CSV does not hold 5 epochs"
else
  fail "train exited with status $? (or ran past 120 s): $(tail -3 "$work/full.err")"
fi

# 2. Interrupted mid-epoch (batch 50 of 43 per epoch: in epoch 2), resumed: the same end as uninterrupted.
# On a GPU LibTorch's kernels are not deterministic by default: the bitwise
# comparison runs with --deterministic there, and without it the batches
# alone must be the same (the per-epoch digest of every batch received).
det=()
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then det=(--deterministic); fi
digests() { grep -E '^epoch [23]/3' "$1" | grep -oE 'batches [0-9a-f]{16}$'; }
resume_pair() {  # resume_pair TAG FLAGS...: straight, stopped at batch 50, resumed
  local tag=$1; shift
  "$bin" train --workers 2 --epochs 3 "$@" >"$work/straight$tag" 2>&1 || fail "3-epoch run failed ($tag)"
  "$bin" train --workers 2 --epochs 3 "$@" --stop-after 50 --checkpoint "$work/r$tag.pt" >"$work/part1$tag" 2>&1 || fail "--stop-after run failed ($tag)"
  grep -q 'stopped after 50 batch' "$work/part1$tag" || fail "--stop-after did not stop: $(tail -2 "$work/part1$tag")"
  "$bin" train --workers 2 --epochs 3 "$@" --resume "$work/r$tag.pt" --checkpoint "$work/r$tag.pt" >"$work/part2$tag" 2>&1 ||
    fail "--resume run failed: $(tail -2 "$work/part2$tag")"
  grep -q 'resumed from .*: epoch 2, 7 batch' "$work/part2$tag" || fail "resume did not continue mid-epoch: $(head -3 "$work/part2$tag")"
  [ "$(digests "$work/straight$tag" | wc -l)" -eq 2 ] && [ "$(digests "$work/straight$tag")" = "$(digests "$work/part2$tag")" ] ||
    fail "the resumed run received other batches ($tag): '$(digests "$work/part2$tag" | tr '\n' ' ')' vs '$(digests "$work/straight$tag" | tr '\n' ' ')'"
}
resume_pair "" "${det[@]}"
[ -n "$(final "$work/straight")" ] && [ "$(final "$work/straight")" = "$(final "$work/part2")" ] ||
  fail "resumed run ends at '$(final "$work/part2")', uninterrupted at '$(final "$work/straight")'"
[ "$(grep '^epoch 3/3' "$work/straight" | cut -d'|' -f1-2)" = "$(grep '^epoch 3/3' "$work/part2" | cut -d'|' -f1-2)" ] ||
  fail "epoch 3 differs after resume"
if [ ${#det[@]} -gt 0 ]; then
  grep -q '^deterministic: ' "$work/straight" || fail "--deterministic did not say what it set"
  resume_pair "-nondet"  # without --deterministic on the GPU: the same batches, if not the same bits
fi

# 2b. A run on a folder resumes on the shards `conveyor pack` made of it: the
# checkpoint names the dataset by each sample's name below the folder, which
# the shards carry (KEY.path). The same batches, the same end.
"$bin" make-dataset --out "$work/ds" --images-per-class 30 >/dev/null
"$bin" pack --folder "$work/ds" --out "$work/ds-shards" >/dev/null
"$bin" train --workers 2 --epochs 2 --folder "$work/ds" "${det[@]}" >"$work/folder" 2>&1 || fail "2 epochs on a folder failed"
"$bin" train --workers 2 --epochs 2 --folder "$work/ds" "${det[@]}" --stop-after 3 --checkpoint "$work/folder.pt" >/dev/null 2>&1 ||
  fail "--stop-after on a folder failed"
"$bin" train --workers 2 --epochs 2 --shards "$work/ds-shards" "${det[@]}" --resume "$work/folder.pt" >"$work/onshards" 2>&1 ||
  fail "a folder's checkpoint did not resume on its shards: $(tail -1 "$work/onshards")"
grep -q 'resumed from .*: epoch 1, 3 batch' "$work/onshards" || fail "not resumed mid-epoch on the shards: $(head -2 "$work/onshards")"
[ -n "$(final "$work/folder")" ] && [ "$(final "$work/folder")" = "$(final "$work/onshards")" ] &&
  [ "$(grep '^epoch 2/2' "$work/folder" | grep -oE 'batches [0-9a-f]{16}$')" = "$(grep '^epoch 2/2' "$work/onshards" | grep -oE 'batches [0-9a-f]{16}$')" ] ||
  fail "resumed on the shards: '$(final "$work/onshards")', on the folder: '$(final "$work/folder")'"

# 2c. --rank-by-shard: the shards hold the classes in order, so rank 0's hold
# fewer of them; still every rank sizes its model by every class and holds out
# the same validation split (before: 7 and 10 classes, two model shapes).
"$bin" pack --folder "$work/ds" --out "$work/ds-ranked" --shard-mb 1 >/dev/null
for r in 0 1; do
  "$bin" train --workers 2 --epochs 1 --shards "$work/ds-ranked" --rank-by-shard --rank $r --world-size 2 --stop-after 1 \
    >"$work/rank$r" 2>&1 || fail "--rank-by-shard rank $r failed: $(tail -1 "$work/rank$r")"
done
header() { grep -E '^dataset: |^model ' "$1" | sed -E 's/; rank [0-9]+ of 2//; s/[0-9]+ training and //'; }
[ -n "$(header "$work/rank0")" ] && [ "$(header "$work/rank0")" = "$(header "$work/rank1")" ] ||
  fail "ranks differ in classes, validation split or model: '$(header "$work/rank0" | tr '\n' ' ')' vs '$(header "$work/rank1" | tr '\n' ' ')'"
grep -q ' 10 classes' "$work/rank0" || fail "rank 0 does not count every class: $(grep '^dataset' "$work/rank0")"

# 3. SIGTERM mid-run (SIGINT is ignored by a script's background jobs, and the
# program keeps an inherited ignore): the step finishes, the checkpoint is
# saved, status 143, and the run resumes from it.
"$bin" train --workers 2 --epochs 100 --checkpoint "$work/int.pt" >"$work/int" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s "$work/int.pt" ] && break; sleep 0.1; done  # after epoch 1
sleep 0.2
kill -TERM "$pid"
wait "$pid"
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: status $rc, not 143: $(tail -2 "$work/int")"
grep -q '^interrupted by SIGTERM .*saved; resume with --resume' "$work/int" || fail "SIGTERM: no interrupted line: $(tail -2 "$work/int")"
"$bin" train --workers 2 --epochs 100 --resume "$work/int.pt" --stop-after 1 >"$work/int2" 2>&1 &&
  grep -q '^resumed from ' "$work/int2" || fail "resume after SIGTERM: $(tail -2 "$work/int2")"

# 4. A list file whose paths hold spaces and apostrophes trains too.
"$bin" make-dataset --out "$work/shapes" --images-per-class 5 >/dev/null || fail "make-dataset"
mkdir -p "$work/list dir/it's here"
label=0
for class in $(ls "$work/shapes"); do
  for f in "$work/shapes/$class"/*.jpg; do
    cp "$f" "$work/list dir/it's here/$class $(basename "$f")"
    echo "it's here/$class $(basename "$f") $label" >>"$work/list dir/train.txt"
  done
  label=$((label + 1))
done
"$bin" train --workers 2 --epochs 2 --val-fraction 0.2 --list "$work/list dir/train.txt" >"$work/list" 2>&1 ||
  fail "train --list: $(tail -2 "$work/list")"
grep -q "train.txt; 40 training and 10 validation images, 10 classes" "$work/list" || fail "train --list: $(head -2 "$work/list")"
grep -q '^final: ' "$work/list" || fail "train --list did not finish"

# 5. A diverged run (loss nan or inf) stops with one line and status 1, without
# saving its weights over the checkpoint; a checkpoint whose weights hold NaN
# (a flipped float: 0xffffffff) is refused at --resume, naming what holds it;
# no validation split prints no fake figures.
"$bin" train --workers 2 --epochs 2 --lr 90 --checkpoint "$work/nan.pt" >"$work/nan1" 2>"$work/nan1.err"
rc=$?
[ $rc -eq 1 ] && grep -Eq 'the loss is -?(nan|inf)' "$work/nan1.err" && [ "$(wc -l <"$work/nan1.err")" -eq 1 ] ||
  fail "lr 90: status $rc, not 1 with the loss named: $(tail -2 "$work/nan1.err")"
[ ! -e "$work/nan.pt" ] || fail "lr 90: a checkpoint was written ($(ls -l "$work/nan.pt"))"
size=$(stat -c %s "$work/full.pt")
for tenths in 3 8; do  # inside fc1's weights, then inside their momentum (LeNet's largest tensors)
  cp "$work/full.pt" "$work/flip.pt"
  # on a 4-byte boundary: the archive's records start 64-byte aligned, so this is one whole float
  printf '\xff\xff\xff\xff' | dd of="$work/flip.pt" bs=1 seek=$((size * tenths / 10 / 4 * 4)) conv=notrunc 2>/dev/null
  expect_usage_error "checkpoint with NaN at $tenths/10" --workers 2 --epochs 5 --resume "$work/flip.pt"
  grep -q 'holds NaN or infinity' "$work/err" || fail "NaN checkpoint ($tenths/10): $(cat "$work/err")"
done
"$bin" train --workers 2 --epochs 1 --val-fraction 0 >"$work/noval" 2>&1 || fail "--val-fraction 0: $(tail -2 "$work/noval")"
grep -q '| no validation split |' "$work/noval" && grep -q '^final: train loss' "$work/noval" || fail "--val-fraction 0: $(grep -E '^(epoch|final)' "$work/noval")"

# 6. Bad input: status 2 and one line.
expect_usage_error "unknown model" --model vgg
expect_usage_error "lenet at 64 px" --model lenet --crop 64
expect_usage_error "missing checkpoint" --resume "$work/nope.pt"
echo "not a checkpoint" >"$work/junk.pt"
expect_usage_error "junk checkpoint" --resume "$work/junk.pt"
expect_usage_error "checkpoint of another run" --resume "$work/r.pt" --batch 32 --epochs 3
grep -q 'another run' "$work/err" || fail "mismatched resume does not say why: $(cat "$work/err")"
expect_usage_error "train not first" --workers 2 train
expect_usage_error "unwritable checkpoint" --checkpoint "$work/no such dir/x.pt"
# a label far past the others would size the model's last layer: refused naming the sample
"$bin" make-dataset --out "$work/mk" --images-per-class 1 >/dev/null 2>&1 || fail "make-dataset"
printf '%s 9223372036854775806\n%s 0\n' "$work/mk/0-disk/00000.jpg" "$work/mk/1-square/00000.jpg" >"$work/big.txt"
expect_usage_error "a label of 2^63-2" --list "$work/big.txt" --epochs 1
grep -q "00000.jpg has label 9223372036854775806, which makes a 9223372036854775807-class model" "$work/err" \
  || fail "a huge label: $(cat "$work/err")"
# the dataset is one setting: --list on the command line replaces the --config file's folder
printf '%s 0\n%s 1\n' "$work/mk/0-disk/00000.jpg" "$work/mk/1-square/00000.jpg" >"$work/two.txt"
printf 'folder = "%s"\nepochs = 1\nbatch = 2\n' "$work/mk" >"$work/ds.toml"
timeout 120 "$bin" train --config "$work/ds.toml" --list "$work/two.txt" --workers 1 >"$work/out" 2>"$work/err" \
  || fail "config folder + --list: $(cat "$work/err")"
grep -q "2 images" "$work/out" || fail "config folder + --list did not train on the list: $(head -5 "$work/out")"

# outputs and flags that were taken and then ignored, or destroyed what was there
mkfifo "$work/fifo"
expect_usage_error "--checkpoint on a FIFO" --checkpoint "$work/fifo" --epochs 1
grep -q "not a regular file" "$work/err" || fail "--checkpoint FIFO: $(cat "$work/err")"
[ -p "$work/fifo" ] || fail "--checkpoint FIFO: the FIFO was replaced"
expect_usage_error "--resume ''" --resume "" --epochs 1
grep -q "an empty value" "$work/err" || fail "--resume '': $(cat "$work/err")"
expect_usage_error "--plot p.txt" --plot "$work/p.txt" --epochs 1
expect_usage_error "--link-gbps" --link-gbps 1 --epochs 1
# --transforms: the list's output side is the model's input; bad lists, a list with
# --crop, and one lenet cannot take are refused in one line.
timeout 120 "$bin" train --workers 2 --epochs 1 \
  --transforms "RandomResizedCrop(32, scale=(0.5, 1)), RandomHorizontalFlip(), RandomVerticalFlip(0.1), ColorJitter(0.2)" \
  >"$work/out" 2>"$work/err" || fail "train --transforms: $(cat "$work/err")"
grep -q "32x32 inputs" "$work/out" || fail "train --transforms: not 32x32 inputs: $(head -3 "$work/out")"
# MixUp and CutMix: train takes the cross-entropy against the soft labels.
timeout 120 "$bin" train --workers 2 --epochs 1 \
  --transforms "RandomResizedCrop(32), RandomHorizontalFlip(), TrivialAugmentWide(), MixUp(alpha=0.2), CutMix(alpha=1.0)" \
  >"$work/out" 2>"$work/err" || fail "train with MixUp and CutMix: $(cat "$work/err")"
grep -q "^epoch 1/1: train loss [0-9.]* .*val loss [0-9.]*" "$work/out" ||
  fail "train with MixUp and CutMix: no epoch line: $(head -5 "$work/out")"
expect_usage_error "--transforms unknown" --transforms "rrc(32), Flipp" --epochs 1
grep -q "unknown transform 'Flipp'" "$work/err" || fail "train --transforms Flipp: $(cat "$work/err")"
expect_usage_error "--transforms with --crop" --transforms "rrc(32)" --crop 32 --epochs 1
expect_usage_error "--transforms lenet at 48" --transforms "rrc(48)" --epochs 1
grep -q "^conveyor train: --transforms: .*lenet takes 32 x 32" "$work/err" || fail "train --transforms rrc(48): $(cat "$work/err")"
printf '[[transforms]]\nop = "RandomResizedCrop"\nsizes = 32\n' >"$work/tt.toml"
expect_usage_error "[[transforms]] in train's config" --config "$work/tt.toml" --epochs 1
grep -q "table 1 .*unknown parameter 'sizes'" "$work/err" || fail "train [[transforms]]: $(cat "$work/err")"
ln -s "$work/target.pt" "$work/latest.pt"
timeout 120 "$bin" train --list "$work/two.txt" --workers 1 --batch 2 --epochs 1 --checkpoint "$work/latest.pt" >"$work/out" 2>"$work/err" \
  || fail "--checkpoint through a link: $(cat "$work/err")"
[ -L "$work/latest.pt" ] && [ -s "$work/target.pt" ] || fail "--checkpoint through a link: the link was replaced or its target not written"

# --on-error skip: every skipped sample named, training's and validation's, with its epoch or pass
mkdir -p "$work/sk"
cp -r "$work/mk/0-disk" "$work/mk/1-square" "$work/sk/"
for c in 0-disk 1-square; do for i in 1 2 3; do cp "$work/mk/$c/00000.jpg" "$work/sk/$c/0000$i.jpg"; done; done
: >"$work/sk/0-disk/zz-empty.jpg"
echo hi >"$work/sk/1-square/zz-text.jpg"
timeout 120 "$bin" train --folder "$work/sk" --batch 2 --epochs 2 --workers 1 --on-error skip --val-fraction 0.3 >"$work/out" 2>"$work/err" \
  || fail "train --on-error skip: $(cat "$work/err")"
for f in zz-empty.jpg zz-text.jpg; do
  [ "$(grep -c "^skipped (\(training, epochs\|validation, passes\) 1-2, 2 times): .*/$f: " "$work/out")" -eq 1 ] \
    || fail "train --on-error skip does not name $f once, with both epochs: $(grep '^skipped' "$work/out")"
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
