#!/usr/bin/env bash
# conveyor pack: a dataset written as WebDataset tar shards and read
# back. With --original-bytes the members are the files' bytes (cmp after
# `tar -x`); by default a JPEG's are re-encoded with restart markers (a DRI
# segment; the pixels are tests/test_jpeg_restart.cpp's to check), other
# formats' kept as they are; labels in .cls,
# each file's name below the dataset's folder in .conveyor-source, a folder's
# class names in .conveyor-class,
# shards split at --shard-mb, readable by GNU tar and Python's tarfile, and by
# `conveyor inspect --shards`; a failed pack leaves nothing behind.
# Usage: pack_test.sh CONVEYOR
set -euo pipefail
conveyor=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$conveyor" make-dataset --out "$work/data" --images-per-class 4 >/dev/null
# 40 images listed 30 times: 1200 samples, several shards at --shard-mb 1.
for _ in $(seq 30); do
  find "$work/data" -name '*.png' -o -name '*.jpg' | sort | awk '{ print $0, NR % 10 }'
done >"$work/list.txt"
samples=$(wc -l <"$work/list.txt")
"$conveyor" pack --list "$work/list.txt" --out "$work/shards" --shard-mb 1 --original-bytes >"$work/pack.log"
grep -q "^packed $samples samples into" "$work/pack.log" || fail "pack said: $(cat "$work/pack.log")"
grep -q "restart markers" "$work/pack.log" && fail "pack --original-bytes re-encoded: $(cat "$work/pack.log")"
shards=$(ls "$work/shards"/*.tar | wc -l)
[ "$shards" -ge 2 ] || fail "expected several shards at --shard-mb 1, got $shards"
for s in "$work/shards"/*.tar; do
  [ "$(stat -c %s "$s")" -le $((1 << 20)) ] || fail "$s is over 1 MiB"
done
ls "$work/shards" | grep -v '\.tar$' && fail "something besides .tar files was left in --out"

mkdir "$work/x"
for s in "$work/shards"/*.tar; do tar -xf "$s" -C "$work/x"; done
i=0
while read -r path label; do
  key=$(printf '%09d' "$i")
  ext=${path##*.}
  cmp -s "$path" "$work/x/$key.$ext" || fail "member $key.$ext differs from $path"
  [ "$(cat "$work/x/$key.cls")" = "$label" ] || fail "$key.cls is '$(cat "$work/x/$key.cls")', not $label"
  [ "$(cat "$work/x/$key.conveyor-source")" = "${path#"$work/data/"}" ] || fail "$key.conveyor-source is '$(cat "$work/x/$key.conveyor-source")', not ${path#"$work/data/"}"
  [ ! -e "$work/x/$key.conveyor-class" ] || fail "$key.conveyor-class written for a list, which names no class"
  i=$((i + 1))
done <"$work/list.txt"

if command -v python3 >/dev/null; then
  python3 - "$work/shards" "$samples" <<'PY'
import glob, sys, tarfile
names = []
for s in sorted(glob.glob(sys.argv[1] + "/*.tar")):
    with tarfile.open(s) as t:
        names += t.getnames()
assert len(names) == 3 * int(sys.argv[2]), len(names)
assert names[1:3] == ["000000000.cls", "000000000.conveyor-source"] and names[0] in ("000000000.png", "000000000.jpg"), names[:3]
PY
fi
"$conveyor" inspect --shards "$work/shards" --workers 2 >"$work/inspect.log"
grep -q "^$samples samples decoded, 0 unreadable" "$work/inspect.log" || fail "inspect --shards: $(head -3 "$work/inspect.log")"

# By default: every JPEG re-encoded with restart markers (said, and a DRI
# segment, FF DD, in each), every PNG kept byte for byte; all of them readable.
"$conveyor" pack --list "$work/list.txt" --out "$work/marked" >"$work/marked.log"
jpegs=$(grep -c '\.jpg ' "$work/list.txt")
[ "$jpegs" -gt 0 ] || fail "the generated dataset has no JPEG"
grep -q "^added restart markers to $jpegs JPEG(s), losslessly" "$work/marked.log" \
  || fail "pack (restart markers) said: $(cat "$work/marked.log")"
mkdir "$work/m"
for s in "$work/marked"/*.tar; do tar -xf "$s" -C "$work/m"; done
i=0
while read -r path label; do
  key=$(printf '%09d' "$i")
  case $path in
    *.jpg) od -An -tx1 -v "$work/m/$key.jpg" | tr -d ' \n' | grep -q 'ffdd0004' || fail "$key.jpg has no DRI segment"
           cmp -s "$path" "$work/m/$key.jpg" && fail "$key.jpg was not re-encoded" ;;
    *) cmp -s "$path" "$work/m/$key.${path##*.}" || fail "member $key.${path##*.} differs from $path" ;;
  esac
  i=$((i + 1))
done < <(head -40 "$work/list.txt")
"$conveyor" inspect --shards "$work/marked" --workers 2 >"$work/inspect.log"
grep -q "^$samples samples decoded, 0 unreadable" "$work/inspect.log" || fail "inspect (restart markers): $(head -3 "$work/inspect.log")"
out=$("$conveyor" pack --list "$work/list.txt" --out "$work/rawo" --raw 8 --original-bytes 2>&1) && status=0 || status=$?
[ "$status" = 2 ] && [[ $out == *"--raw, --original-bytes: give one"* ]] || fail "--raw with --original-bytes gave status $status and: $out"

# A folder's class names travel in .conveyor-class, and a skip names the file the
# sample came from as well as its member.
"$conveyor" pack --folder "$work/data" --out "$work/classes" >/dev/null
tar -xOf "$work/classes/shard-000000.tar" 000000005.conveyor-class >"$work/class5"
tar -xOf "$work/classes/shard-000000.tar" 000000005.conveyor-source >"$work/path5"
[ "$(cat "$work/class5")" = "$(dirname "$(cat "$work/path5")")" ] || fail "000000005.conveyor-class is '$(cat "$work/class5")', its path $(cat "$work/path5")"
[ -d "$work/data/$(cat "$work/class5")" ] || fail "000000005.conveyor-class names no class folder: $(cat "$work/class5")"
printf 'not an image' >"$work/junk.jpg"
cp -r "$work/data" "$work/broken" && cp "$work/junk.jpg" "$work/broken/$(cat "$work/class5")/zz.jpg"
"$conveyor" pack --folder "$work/broken" --out "$work/broken-shards" >/dev/null
"$conveyor" inspect --shards "$work/broken-shards" --workers 2 >"$work/broken.log" 2>&1 || true
grep -q "shard-000000.tar:0000000[0-9][0-9].jpg ($(cat "$work/class5")/zz.jpg): not an image" "$work/broken.log" ||
  fail "the unreadable sample is not named by its source: $(grep -i zz "$work/broken.log" | head -2)"

# A copy that lost a shard is refused by name, not read as a smaller dataset:
# pack's manifest lists every shard and its sample count.
[ -f "$work/shards/.conveyor-manifest" ] || fail "pack wrote no .conveyor-manifest"
cp -a "$work/shards" "$work/lost"
rm "$work/lost/shard-000001.tar"
if "$conveyor" inspect --shards "$work/lost" --workers 2 >"$work/lost.log" 2>&1; then fail "a folder missing a shard was read"; fi
grep -q "shard-000001.tar: missing" "$work/lost.log" || fail "missing shard not named: $(tail -2 "$work/lost.log")"

# A sample that cannot be read: exit 1 naming it, no --out left behind.
{ head -5 "$work/list.txt"; echo "$work/missing.png 1"; } >"$work/bad.txt"
if "$conveyor" pack --list "$work/bad.txt" --out "$work/bad" 2>"$work/bad.log"; then fail "pack of a missing file succeeded"; fi
grep -q "missing.png" "$work/bad.log" || fail "the error does not name the file: $(cat "$work/bad.log")"
[ ! -e "$work/bad" ] || fail "a failed pack left $work/bad behind"
# A non-empty --out: a usage error (2), nothing touched.
set +e
"$conveyor" pack --list "$work/list.txt" --out "$work/shards" 2>"$work/busy.log"
status=$?
set -e
[ "$status" = 2 ] || fail "pack into a non-empty folder: exit $status, not 2"
echo "pack: $samples samples in $shards shards, members identical to the files, read back by tar, tarfile and inspect"

# --max-side N --quality Q: every image larger than N re-encoded as a JPEG of at
# most N px (lossy, opt-in), readable by inspect; --quality alone is refused.
mkdir "$work/folder" && cp -r "$work/data/." "$work/folder/"
images=$(find "$work/folder" -name '*.png' -o -name '*.jpg' | wc -l)
"$conveyor" pack --folder "$work/folder" --out "$work/small" --max-side 24 --quality 80 >"$work/small.log"
grep -q "^re-encoded $images of $images samples to at most 24 px on the longest side, JPEG quality 80$" "$work/small.log" \
  || fail "pack --max-side said: $(cat "$work/small.log")"
"$conveyor" inspect --shards "$work/small" >"$work/small-inspect.log" 2>&1 || fail "inspect of the re-encoded shards: $(cat "$work/small-inspect.log")"
grep -q "^formats: JPEG $images;" "$work/small-inspect.log" || fail "inspect of the re-encoded shards: $(cat "$work/small-inspect.log")"
mkdir "$work/xs" && for s in "$work/small"/*.tar; do tar -xf "$s" -C "$work/xs"; done
python3 - "$work/xs" <<'PY' || fail "a re-encoded member is larger than 24 px"
import glob, struct, sys
for f in glob.glob(sys.argv[1] + "/*.jpg"):
    b = open(f, "rb").read()
    i = 2
    while i < len(b):  # the SOF0 marker's height and width
        marker, size = b[i + 1], struct.unpack(">H", b[i + 2:i + 4])[0]
        if marker == 0xC0:
            h, w = struct.unpack(">HH", b[i + 5:i + 9])
            assert max(h, w) <= 24 and max(h, w) >= 23, (f, w, h)
            break
        i += 2 + size
    else:
        sys.exit(f + ": no baseline SOF0")
PY
# --raw N: every image stored as its RGB pixels (a binary PPM) at most N px,
# read back by inspect and by a run; with --max-side, refused.
"$conveyor" pack --folder "$work/folder" --out "$work/raw" --raw 24 >"$work/raw.log"
grep -q "^stored $images samples as RGB pixels (PPM) at most 24 px on the longest side$" "$work/raw.log" \
  || fail "pack --raw said: $(cat "$work/raw.log")"
"$conveyor" inspect --shards "$work/raw" >"$work/raw-inspect.log" 2>&1 || fail "inspect of the raw shards: $(cat "$work/raw-inspect.log")"
grep -q "^formats: PNM $images;" "$work/raw-inspect.log" || fail "inspect of the raw shards: $(cat "$work/raw-inspect.log")"
mkdir "$work/xr" && for s in "$work/raw"/*.tar; do tar -xf "$s" -C "$work/xr"; done
[ "$(find "$work/xr" -name '*.ppm' | wc -l)" -eq "$images" ] || fail "pack --raw: not every member is a .ppm"
python3 - "$work/xr" <<'PY' || fail "a raw member is not a P6 PPM of at most 24 px"
import glob, sys
for f in glob.glob(sys.argv[1] + "/*.ppm"):
    b = open(f, "rb").read()
    magic, w, h, maxval = b.split(b"\n", 3)[0], *map(int, b.split(b"\n", 3)[1].split()), int(b.split(b"\n", 3)[2])
    assert magic == b"P6" and maxval == 255 and max(w, h) <= 24, (f, w, h)
    assert len(b) == len(b"P6\n%d %d\n255\n" % (w, h)) + w * h * 3, f
PY
"$conveyor" run --shards "$work/raw" --epochs 1 --workers 2 --batch 5 --crop 16 >"$work/raw-run.log" 2>&1 \
  || fail "a run over the raw shards: $(tail -3 "$work/raw-run.log")"
set +e
out=$("$conveyor" pack --folder "$work/folder" --out "$work/rq" --raw 24 --max-side 24 2>&1)
status=$?
set -e
[ "$status" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && [[ $out == *"--raw, --max-side: give one"* ]] \
  || fail "--raw with --max-side gave status $status and: $out"
set +e
out=$("$conveyor" pack --folder "$work/folder" --out "$work/q" --quality 80 2>&1)
status=$?
set -e
[ "$status" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && [[ $out == *"--quality: only with --max-side"* ]] \
  || fail "--quality without --max-side gave status $status and: $out"
[ ! -e "$work/q" ] || fail "--quality without --max-side left $work/q behind"
echo "pack: OK"
