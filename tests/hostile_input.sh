# Hostile input and bad settings: files that are not images (a FIFO, a huge PNG), an empty
# dataset, malformed TOML and configs, flags and environment variables out of range, memory
# budgets, settings a mode cannot honour, and what --on-error skip reports.
# Sourced by hostile_test.sh after hostile_lib.sh, for one $case of this file.

case $case in
fifo)  # a FIFO among the images is refused by name without blocking, in a folder and in a list
  mkfifo "$work/ds/0-disk/p.jpg"
  expect 1 "run over a folder with a FIFO" -- run --folder "$work/ds" --batch 4
  err_has "p.jpg: not a regular file (a FIFO)" "run, FIFO"
  timeout 30 "$bin" run --folder "$work/ds" --batch 4 --on-error skip >"$work/out" 2>&1 || fail "run --on-error skip with a FIFO: $(tail -2 "$work/out")"
  grep -q "p.jpg: not a regular file (a FIFO)" "$work/out" || fail "skip does not name the FIFO: $(tail -3 "$work/out")"
  timeout 30 "$bin" inspect --folder "$work/ds" >"$work/out" 2>&1
  [ $? -eq 1 ] || fail "inspect with a FIFO: status not 1"
  grep -q "unreadable: .*p.jpg: not a regular file (a FIFO)" "$work/out" || fail "inspect does not name the FIFO"
  printf '%s 0\n%s 1\n' "$first" "$work/ds/0-disk/p.jpg" >"$work/list.txt"
  expect 1 "run over a list naming a FIFO" -- run --list "$work/list.txt" --batch 2
  err_has "p.jpg: not a regular file (a FIFO)" "list, FIFO"
  mkfifo "$work/fifo-list.txt"
  expect 2 "a FIFO as the list file" -- run --list "$work/fifo-list.txt"
  err_has "not a regular file" "FIFO list"
  ;;
memory)  # the pools' bytes are checked against a budget before anything is allocated
  # The default budget is a quarter of physical memory: the pools of the first and last runs
  # (110 GiB, 28 TiB) exceed it below 440 GiB of memory; the other two (9.3 and 9.0 GiB) name a budget,
  # since a 128 GiB GPU machine's quarter would take them.
  for flags in "--host-queue 4096 --device-queue 4096 --crop 224" "--workers 1024 --crop 224 --max-memory-mb 4096" \
               "--crop 16384 --batch 1 --max-memory-mb 4096" "--batch 16777216"; do
    # shellcheck disable=SC2086
    expect 2 "run $flags" -- run --folder "$work/ds" $flags
    err_has "over --max-memory-mb" "run $flags"
  done
  expect 2 "a budget below a small run's pools" -- run --folder "$work/ds" --max-memory-mb 1
  err_has "the batch pools need" "--max-memory-mb 1"
  "$bin" run --folder "$work/ds" --batch 4 --max-memory-mb 64 >/dev/null 2>&1 || fail "a run within --max-memory-mb 64 failed"
  "$bin" run --help >"$work/help" 2>&1
  grep -q -- "--max-memory-mb" "$work/help" || fail "run --help does not list --max-memory-mb"
  ;;
empty)  # an empty dataset is a usage error for every subcommand
  : >"$work/empty.txt"
  printf '# only a comment\n\n' >"$work/comments.txt"
  subs="run bench sweep inspect"
  if train_built; then subs="$subs train"; fi
  for sub in $subs; do
    for list in "$work/empty.txt" "$work/comments.txt" /dev/null; do
      expect 2 "$sub --list $list" -- "$sub" --list "$list"
    done
  done
  ;;
skip-list)  # --on-error skip names what it skipped: the first few in the terminal, all in --json
  for i in 1 2 3 4 5 6 7; do printf 'not an image %d' $i >"$work/ds/1-square/zz-broken-$i.jpg"; done
  "$bin" run --folder "$work/ds" --batch 4 --on-error skip >"$work/out" 2>&1 || fail "run --on-error skip failed"
  grep -q "^skipped 7 sample(s)" "$work/out" || fail "no count of the skipped samples: $(tail -8 "$work/out")"
  [ "$(grep -c "zz-broken-[0-9].jpg: " "$work/out")" -eq 5 ] || fail "the terminal does not show the first 5: $(tail -8 "$work/out")"
  grep -q "and 2 more" "$work/out" || fail "the terminal does not count the rest"
  "$bin" bench --folder "$work/ds" --batch 4 --on-error skip --json "$work/b.json" >/dev/null 2>&1 || fail "bench --json"
  python3 - "$work/b.json" <<'PY' || fail "--json does not list every skipped sample with its path and reason"
import json, sys
d = json.load(open(sys.argv[1]))
names = sorted(s["reason"].split(": ")[0].rsplit("/", 1)[1] for s in d["skipped"])
assert names == [f"zz-broken-{i}.jpg" for i in range(1, 8)], names
assert all("not an image" in s["reason"] for s in d["skipped"]), d["skipped"]
PY
  # Over many epochs each broken file is listed once, with its count: the list is bounded by the dataset
  "$bin" run --folder "$work/ds" --batch 8 --epochs 30 --on-error skip --json "$work/many.json" >"$work/out" 2>&1 ||
    fail "run --epochs 30 --on-error skip"
  grep -q "^skipped 210 sample(s)" "$work/out" || fail "30 epochs: not 210 skips counted: $(grep -A2 '^skipped' "$work/out")"
  grep -q "^  epochs 0-29 (30 times): .*zz-broken-" "$work/out" || fail "30 epochs: no count per file: $(grep -A2 '^skipped' "$work/out")"
  python3 - "$work/many.json" <<'PY' || fail "30 epochs: --json does not list each file once with its count"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["skipped"]) == 7, len(d["skipped"])
assert all(s["times"] == 30 and s["epoch"] == 0 and s["last_epoch"] == 29 for s in d["skipped"]), d["skipped"][:2]
PY
  # A name with a line break, an escape sequence and a byte that is not UTF-8:
  # one line each in the terminal's list and inspect's, valid JSON in --json
  # (not raw: a raw name could span lines or clear the terminal).
  rm "$work"/ds/1-square/zz-broken-*.jpg
  odd=$'zz\nodd\e[2J\xe9.jpg'
  printf 'not an image' >"$work/ds/1-square/$odd"
  "$bin" run --folder "$work/ds" --batch 4 --on-error skip --json "$work/odd.json" >"$work/out" 2>&1 || fail "run with an odd name failed"
  grep -qF '  epoch 0: '"$work"'/ds/1-square/zz\nodd\x1b[2J' "$work/out" || fail "the skip list does not show the odd name on one line: $(tail -3 "$work/out")"
  if grep -q $'\e' "$work/out"; then fail "an escape character reached the terminal"; fi
  "$bin" inspect --folder "$work/ds" >"$work/out" 2>&1 && fail "inspect of a broken file succeeded"
  grep -qF 'unreadable: '"$work"'/ds/1-square/zz\nodd\x1b[2J' "$work/out" || fail "inspect does not show the odd name on one line: $(tail -2 "$work/out")"
  python3 - "$work/odd.json" <<'PY' || fail "--json with a name that is not UTF-8 is not valid JSON, or lost the name"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
(s,) = d["skipped"]
assert "zz\nodd\x1b[2J\\xe9.jpg: not an image" in s["reason"], s["reason"]
PY
  ;;
classes)  # a list dataset reports its distinct labels as classes
  for i in $(seq 0 999); do echo "$first $i"; done >"$work/labels.txt"
  "$bin" run --list "$work/labels.txt" --batch 50 >"$work/out" 2>&1 || fail "run over a 1000-label list"
  grep -q "^dataset: 1000 images, 1000 classes" "$work/out" || fail "classes: $(head -1 "$work/out")"
  printf '%s 3\n%s 3\n%s 7\n' "$first" "$first" "$first" >"$work/two.txt"
  "$bin" run --list "$work/two.txt" >"$work/out" 2>&1 || fail "run over a 2-label list"
  grep -q "^dataset: 3 images, 2 classes" "$work/out" || fail "classes: $(head -1 "$work/out")"
  ;;
big-png)  # a 20000 x 20000 PNG is over the pixel limit, and is called that
  python3 - "$work/big.png" <<'PY'
import struct, sys, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
PY
  printf '%s 0\n' "$work/big.png" >"$work/big.txt"
  "$bin" inspect --list "$work/big.txt" >"$work/out" 2>&1
  grep -q "PNG header claims 20000x20000 = 400000000 pixels, over the limit" "$work/out" || fail "inspect: $(cat "$work/out")"
  expect 1 "run over a pixel bomb" -- run --list "$work/big.txt"
  err_has "over the limit" "run, PNG bomb"
  ;;
workers)  # one worker limit, stated in every help and checked at parse time (exit 2) by every subcommand
  subs="run bench sweep inspect"
  if train_built; then subs="$subs train"; fi
  for sub in $subs; do
    expect 2 "$sub --workers 1025" -- "$sub" --folder "$work/ds" --workers 1025
    err_has "1024" "$sub --workers 1025"
    "$bin" "$sub" --help >"$work/out" 2>&1
    grep -q -- "--workers .*1 - 1024" "$work/out" || fail "$sub --help does not state the limit: $(grep -- --workers "$work/out")"
    ! grep -- "--workers" "$work/out" | grep -q 4096 || fail "$sub --help still says 4096"
  done
  expect 2 "sweep --workers 1,1025" -- sweep --folder "$work/ds" --workers 1,1025
  ;;
toml)  # malformed TOML is an error with the file and line; unknown keys and wrong types name the key
  printf '[[\n' >"$work/a.toml"
  expect 2 "a config of only [[" -- run --config "$work/a.toml"
  err_has "a.toml: line 1" "[["
  printf 'workers = 2\nbatch = [1,\n' >"$work/b.toml"
  expect 2 "an unclosed array" -- run --config "$work/b.toml"
  err_has "b.toml: line 2" "unclosed array"
  printf 'workers = 2\nbogus-key = 3\n' >"$work/c.toml"
  expect 2 "an unknown key" -- run --config "$work/c.toml"
  err_has "'bogus-key' is not a flag of run" "unknown key"
  printf 'workers = "many"\n' >"$work/d.toml"
  expect 2 "a string for an integer" -- run --config "$work/d.toml"
  err_has "--workers" "wrong type"
  printf 'batch = 1.5\n' >"$work/e.toml"
  expect 2 "a float for an integer" -- run --config "$work/e.toml"
  err_has "--batch" "wrong type"
  # a float that prints whole is still a float: 4.0 and 1e0 are refused by integer flags
  for v in 4.0 4e0 123456789012345678.0; do
    printf 'batch = %s\n' "$v" >"$work/e.toml"
    expect 2 "batch = $v" -- run --config "$work/e.toml" --folder "$work/ds"
    err_has "--batch: .*not a decimal integer" "batch = $v"
  done
  printf 'compute-ms = 2\nlink-gbps = 1e1\n' >"$work/e.toml"  # real-valued flags take either
  timeout 60 "$bin" run --config "$work/e.toml" --folder "$work/ds" --epochs 1 --batch 8 >"$work/out" 2>&1 || fail "real flags from TOML: $(tail -1 "$work/out")"
  printf '[[workers]]\nx = 1\n' >"$work/f.toml"
  expect 2 "an array of tables" -- run --config "$work/f.toml"
  # Non-ASCII: in a basic string it is kept (a folder named café), elsewhere refused by line; Debian's
  # toml++ 3.3.0 reaches undefined behaviour on some such characters, so it never sees one.
  cp -r "$work/ds" "$work/café"
  printf '# ünïcode in a comment\nfolder = "%s"\nbatch = 4\n' "$work/café" >"$work/u.toml"
  "$bin" run --config "$work/u.toml" >"$work/out" 2>&1 || fail "a basic string with non-ASCII: $(tail -2 "$work/out")"
  grep -q "^epoch 0: 30 images" "$work/out" || fail "the café folder was not read: $(head -2 "$work/out")"
  printf "folder = '%s'\n" "$work/café" >"$work/lit.toml"
  expect 2 "non-ASCII in a literal string" -- run --config "$work/lit.toml"
  err_has "lit.toml: line 1: a non-ASCII character in a 'literal' string" "literal string"
  printf 'batch = 4\nf\xc3\xb6lder = 1\n' >"$work/key.toml"
  expect 2 "a non-ASCII bare key" -- run --config "$work/key.toml"
  err_has "key.toml: line 2: a non-ASCII character outside a string" "bare key"
  printf 'folder = "\xef\xbb\x9f\xff"\n' >"$work/bad-utf8.toml"
  expect 2 "invalid UTF-8" -- run --config "$work/bad-utf8.toml"
  err_has "invalid UTF-8" "invalid UTF-8"
  printf 'workers = 2\nbatch = 4\nepochs = 1\n' >"$work/ok.toml"
  "$bin" run --config "$work/ok.toml" --folder "$work/ds" >"$work/out" 2>&1 || fail "a valid config: $(tail -2 "$work/out")"
  grep -q "^epoch 0: 30 images in 8 batches" "$work/out" || fail "a valid config's values were not used"
  # The dataset is one setting: a dataset flag on the command line replaces the file's, of either kind
  find "$work/ds" -name '*.jpg' | head -6 | awk '{ print $0, 1 }' >"$work/six.txt"
  printf 'batch = 4\nepochs = 1\nfolder = "%s"\n' "$work/ds" >"$work/ds.toml"
  for flag in "--list $work/six.txt" "--list=$work/six.txt"; do
    # shellcheck disable=SC2086
    timeout 60 "$bin" run --config "$work/ds.toml" $flag >"$work/out" 2>&1 || fail "config folder + $flag: $(tail -1 "$work/out")"
    grep -q "^epoch 0: 6 images in 2 batches" "$work/out" || fail "config folder + $flag: $(grep '^epoch' "$work/out")"
  done
  expect 2 "two dataset flags on the command line" -- run --config "$work/ds.toml" --list "$work/six.txt" --folder "$work/ds"
  err_has "give one dataset, not several" "two dataset flags"
  # A NUL in a string or a key (\u0000) is named, not cut short at the NUL
  printf 'folder = "%s\\u0000x"\n' "$work/ds" >"$work/nul.toml"
  expect 2 "a NUL in a string" -- run --config "$work/nul.toml"
  err_has "nul.toml: line 1, column 10: 'folder': a string holding a NUL byte" "a NUL in a string"
  printf '"a\\u0000b" = 1\n' >"$work/nulkey.toml"
  expect 2 "a NUL in a key" -- run --config "$work/nulkey.toml"
  err_has "nulkey.toml: line 1, column 1: a key holding a NUL byte" "a NUL in a key"
  ;;
subcommands)  # an unknown subcommand is named with the valid ones; each subcommand's help lists its flags with defaults
  expect 2 "conveyor frobnicate" -- frobnicate
  err_has "unknown subcommand 'frobnicate'" "frobnicate"
  err_has "run, bench, sweep, inspect, pack, make-dataset, train" "frobnicate"
  expect 2 "no subcommand" --
  "$bin" --version >"$work/out" 2>&1 || fail "--version: status $?"
  grep -Eq "^conveyor [0-9]+\.[0-9]+\.[0-9]+$" "$work/out" || fail "--version: $(cat "$work/out")"
  for sub in run bench sweep inspect; do
    "$bin" "$sub" --help >"$work/out" 2>&1 || fail "$sub --help: status $?"
    for flag in --folder --list --shards --batch --seed; do grep -q -- "$flag" "$work/out" || fail "$sub --help lacks $flag"; done
    # CLI11 2.1 writes a default as "=64", newer ones as "[64]" (a sweep axis: "=[]" or "[{}]").
    grep -Eq -- "--batch .*(=64|\[64\]|=\[\]|\[\{\}\])" "$work/out" || fail "$sub --help shows no default for --batch"
  done
  "$bin" run --help >"$work/out" 2>&1
  grep -Eq -- "--compute-ms .*(=0|\[0\])" "$work/out" || fail "run --help shows no default for --compute-ms"
  "$bin" make-dataset --help >"$work/out" 2>&1
  grep -q -- "--images-per-class" "$work/out" || fail "make-dataset --help lacks its flags"
  "$bin" pack --help >"$work/out" 2>&1
  for flag in --folder --list --shards --out --shard-mb; do grep -q -- "$flag" "$work/out" || fail "pack --help lacks $flag"; done
  ;;
nul)  # a NUL byte in a list path is refused at parse time with file:line
  printf '%s 0\n%s\0x.jpg 1\n' "$first" "$work/ds/0-disk/a" >"$work/nul.txt"
  expect 2 "a NUL in a list path" -- run --list "$work/nul.txt"
  err_has "nul.txt:2: the line holds a NUL byte" "NUL"
  # a line break in a path or a TOML key stays one line on stderr, written as \n
  expect 2 "a line break in --folder" -- run --folder "$work/a
b"
  err_has 'a\\nb' "a line break in --folder"
  printf '"a\\nb" = 1\n' >"$work/nl.toml"
  expect 2 "a line break in a TOML key" -- run --config "$work/nl.toml" --folder "$work/ds"
  # an escape sequence in a path does not reach the terminal: written as \x1b
  expect 2 "an escape sequence in --folder" -- run --folder "$work/a$(printf '\033')[2Jb"
  err_has 'a\\x1b\[2Jb' "an escape sequence in --folder"
  ! grep -q "$(printf '\033')" "$work/err" || fail "an escape character reached stderr"
  ;;
env)  # RANK / WORLD_SIZE must be decimal integers in range; anything else names the variable
  for v in -1 +1 " 1" 1x 18446744073709551617 99999999999999999999999 1048576; do
    RANK=$v expect 2 "RANK='$v'" -- run --folder "$work/ds"
    err_has "RANK='$v'" "RANK='$v'"
  done
  for v in -1 0 1048577; do
    WORLD_SIZE=$v expect 2 "WORLD_SIZE='$v'" -- run --folder "$work/ds"
    err_has "WORLD_SIZE" "WORLD_SIZE='$v'"
  done
  OMPI_COMM_WORLD_SIZE=-3 expect 2 "OMPI_COMM_WORLD_SIZE=-3" -- inspect --folder "$work/ds"
  err_has "OMPI_COMM_WORLD_SIZE='-3'" "OMPI"
  RANK=1 WORLD_SIZE=2 "$bin" run --folder "$work/ds" --batch 4 >"$work/out" 2>&1 || fail "RANK=1 WORLD_SIZE=2 refused"
  # RANK alone: the message names the variables as well as the flags (it named --rank, never given)
  RANK=1 expect 2 "RANK=1 alone" -- run --folder "$work/ds"
  err_has "rank 1 (--rank, or RANK / OMPI_COMM_WORLD_RANK) must be below world size 1 (--world-size, or WORLD_SIZE" "RANK alone"
  ;;
skip-modes)  # --on-error skip counts and lists the skipped samples in every run mode, streaming, --serial and --resident
  printf 'junk' >"$work/ds/1-square/zz-bad-1.jpg"
  head -c 5000 /dev/urandom >"$work/ds/1-square/zz-bad-2.jpg"
  for mode in "" --serial --resident; do
    timeout 60 "$bin" run --folder "$work/ds" --batch 4 --on-error skip $mode --json "$work/m$mode.json" >"$work/out" 2>&1 ||
      fail "run $mode --on-error skip: $(tail -2 "$work/out")"
    grep -q "^skipped 2 sample(s)" "$work/out" || fail "run $mode: the terminal does not list the 2 skipped: $(tail -4 "$work/out")"
    python3 - "$work/m$mode.json" "$work/m.json" <<'PY' || fail "run $mode: --json does not account for every sample"
import json, sys
d, streaming = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert sum(d["epoch_images"]) == 30, d["epoch_images"]
names = sorted(s["reason"].split(": ")[0].rsplit("/", 1)[1] for s in d["skipped"])
assert names == ["zz-bad-1.jpg", "zz-bad-2.jpg"], d["skipped"]
# Every mode accounts for each sample in each epoch, and names the same ones (the resident set
# was once [0] and digest 0: it leaves the two out while decoding, and counts them each epoch).
assert d["epoch_skipped"] == [2], d["epoch_skipped"]
assert d["epoch_digest"] == streaming["epoch_digest"] and d["epoch_digest"] != [0], (d["epoch_digest"], streaming["epoch_digest"])
PY
  done
  ;;
contradictions)  # settings a mode cannot honour are refused up front, not ignored or found after the run
  expect 2 "--resident --serial" -- run --folder "$work/ds" --resident --serial
  expect 2 "--resident --synthetic-ms" -- run --folder "$work/ds" --resident --synthetic-ms 1
  expect 2 "--resident --augment rrc" -- run --folder "$work/ds" --resident --augment rrc
  err_has "Resize + CenterCrop" "--resident --augment"
  printf '[run]\nresident = true\naugment = "crop"\n' >"$work/c.toml"
  expect 2 "--resident with augment from a config" -- run --config "$work/c.toml" --folder "$work/ds"
  timeout 60 "$bin" run --folder "$work/ds" --resident --augment center --batch 4 >"$work/out" 2>&1 || fail "--resident --augment center refused"
  expect 2 "--gpu 1 with --link-gbps" -- run --folder "$work/ds" --gpu 1 --link-gbps 5
  err_has "not with --link-gbps" "--gpu 1 --link-gbps"
  t0=$(date +%s%N)
  expect 2 "sweep --plot without --csv" -- sweep --folder "$work/ds" --workers 1,2 --epochs 3 --compute-ms 50 --plot "$work/p.png"
  [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 5000 ] || fail "sweep --plot without --csv: refused after the grid ran"
  expect 2 "--plot with another extension" -- sweep --folder "$work/ds" --workers 1 --csv "$work/s.csv" --plot "$work/p.txt"
  err_has ".png or .svg" "--plot p.txt"
  printf 'batch = 16\n[run]\nbatch = 32\n' >"$work/twice.toml"
  expect 2 "a key at the top and in [run]" -- run --config "$work/twice.toml" --folder "$work/ds"
  err_has "'batch' is set both at the top and in \[run\]" "batch twice"
  # --config before the subcommand, as `conveyor --help` shows it, sets that subcommand's flags
  printf 'batch = 7\nepochs = 1\n' >"$work/seven.toml"
  timeout 60 "$bin" --config "$work/seven.toml" run --folder "$work/ds" >"$work/out" 2>&1 || fail "conveyor --config F run: $(tail -1 "$work/out")"
  grep -q "^epoch 0: 30 images in 5 batches" "$work/out" || fail "conveyor --config F run: $(grep '^epoch' "$work/out")"
  # --gpu N picks a CUDA device; with the host backend asked for it means nothing
  expect 2 "--gpu 1 --device host" -- run --folder "$work/ds" --gpu 1 --device host
  err_has "--gpu 1: not with --device host" "--gpu with host"
  expect 2 "--gpu -1" -- run --folder "$work/ds" --gpu -1
  timeout 60 "$bin" run --folder "$work/ds" --gpu 0 --device host --epochs 1 >"$work/out" 2>&1 || fail "--gpu 0 --device host refused"
  ;;
integers)  # integer flags are decimal: "010" is 10 (not octal 8), hex is refused, and a sign or overflow is not saturated
  timeout 60 "$bin" run --folder "$work/ds" --batch 010 --epochs 1 >"$work/out" 2>&1 || fail "--batch 010: $(tail -2 "$work/out")"
  grep -q "^epoch 0: 30 images in 3 batches" "$work/out" || fail "--batch 010 is not 10: $(grep '^epoch' "$work/out")"
  expect 2 "--batch 0x10" -- run --folder "$work/ds" --batch 0x10
  err_has "not a decimal integer" "--batch 0x10"
  expect 2 "--seed -1" -- run --folder "$work/ds" --seed -1
  expect 2 "--seed 2^64" -- run --folder "$work/ds" --seed 18446744073709551616
  err_has "out of range" "--seed 2^64"
  expect 2 "sweep --workers 1,0x2" -- sweep --folder "$work/ds" --workers 1,0x2
  timeout 60 "$bin" run --folder "$work/ds" --rank 010 --world-size 11 --batch 4 >"$work/out" 2>&1 || fail "--rank 010: $(tail -2 "$work/out")"
  grep -q "rank 10 of 11" "$work/out" || fail "--rank 010 is not rank 10: $(head -2 "$work/out")"
  # and a real-valued flag is a finite number: a range check alone lets NaN through
  expect 2 "--max-memory-mb nan" -- run --folder "$work/ds" --max-memory-mb nan
  err_has "nan: not a finite number" "--max-memory-mb nan"
  expect 2 "sweep --compute-ms 1,inf" -- sweep --folder "$work/ds" --compute-ms 1,inf
  # and an on/off flag's value is one of its words (CLI11 took -1 as off)
  expect 2 "--read-ahead -1" -- run --folder "$work/ds" --read-ahead -1
  err_has "expected on or off" "--read-ahead -1"
  ;;
config-size)  # --config is checked before it is read: a non-regular file or one over 1 MiB is refused at once, by name
  head -c $((2 << 20)) /dev/zero >"$work/big.toml"
  t0=$(date +%s%N)
  expect 2 "a 2 MiB config" -- run --config "$work/big.toml" --folder "$work/ds"
  err_has "big.toml: 2097152 bytes, over the 1 MiB a config file may hold" "a 2 MiB config"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $ms -lt 5000 ] || fail "a 2 MiB config took $ms ms"
  expect 2 "--config /dev/zero" -- run --config /dev/zero --folder "$work/ds"
  err_has "/dev/zero: not a regular file (a character device)" "--config /dev/zero"
  mkfifo "$work/fifo.toml"
  expect 2 "a FIFO as --config" -- run --config "$work/fifo.toml" --folder "$work/ds"
  err_has "fifo.toml: not a regular file (a FIFO)" "a FIFO as --config"
  expect 2 "a directory as --config" -- run --config "$work" --folder "$work/ds"
  err_has "a directory, not a config file" "a directory as --config"
  printf 'epochs = 1\nbatch = 8\n#' >"$work/spaces.toml"  # exactly 1 MiB, a long comment: read
  head -c $(( (1 << 20) - $(stat -c %s "$work/spaces.toml") )) /dev/zero | tr '\0' ' ' >>"$work/spaces.toml"
  timeout 60 "$bin" run --config "$work/spaces.toml" --folder "$work/ds" >"$work/out" 2>&1 || fail "a 1 MiB config: $(tail -2 "$work/out")"
  if train_built; then
    timeout 30 "$(dirname "$bin")/conveyor-train" --config /dev/zero >"$work/out" 2>"$work/err"
    [ $? -eq 2 ] && err_has "not a regular file" "conveyor-train --config /dev/zero" || fail "conveyor-train --config /dev/zero: $(head -c 300 "$work/err")"
  fi
  ;;
*)
  echo "unknown case $case in hostile_input.sh"; exit 2 ;;
esac
