#!/usr/bin/env bash
# Hostile input and careless operation, one case per CTest test: each case
# reproduces the input or the careless operation and checks the behaviour
# docs/reliability.md promises for it. Usage: hostile_test.sh CONVEYOR_BINARY CASE
# Cases: fifo memory trace resident write-errors outputs empty skip-list classes
#        big-png workers toml subcommands nul env skip-modes clobber
#        contradictions pack-interrupt shard-ranks integers sigpipe slow-signal sweep-signal
#        config-size atomic-outputs extra-shards
set -uo pipefail
bin=$(realpath "$1") case=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CONVEYOR_CACHE=$work/cache
failures=0
fail() { echo "FAIL [$case]: $*"; failures=$((failures + 1)); }
train_built() { [ -x "$(dirname "$bin")/conveyor-train" ]; }

# expect STATUS WHAT -- ARGS: runs the command (30 s at most), checks the status,
# one line on stderr, and leaves it in $work/err (stdout in $work/out).
expect() {
  local want=$1 what=$2; shift 3
  timeout 30 "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq "$want" ] || fail "$what: status $rc, not $want: $(head -c 400 "$work/err")"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$what: stderr is not one line: $(head -c 400 "$work/err")"
}
# stop_job PID SIG: sends the signal and waits for the job; leaves its status
# in $rc and the milliseconds the wait took in $ms.
stop_job() {
  local t0
  t0=$(date +%s%N)
  kill -"$2" "$1"
  wait "$1" 2>/dev/null
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}
# wait_catching PID SIGNUM: until the process catches that signal (its
# /proc SigCgt mask has the bit), 8 s at most. A fixed sleep before a signal
# could end before the handler is in place on a loaded machine (a TSan build
# beside other jobs), and the default action then ends it without a word.
wait_catching() {
  local bit=$(( 1 << ($2 - 1) )) cgt
  for _ in $(seq 400); do
    cgt=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
    if [ -n "$cgt" ] && (( 0x$cgt & bit )); then return 0; fi
    sleep 0.02
  done
}
err_has() { grep -q -- "$1" "$work/err" || fail "$2: stderr lacks '$1': $(cat "$work/err")"; }

"$bin" make-dataset --out "$work/ds" --images-per-class 3 >/dev/null || { echo "make-dataset failed"; exit 1; }
first=$(find "$work/ds/0-disk" -name '*.jpg' | sort | head -1)

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
trace)  # the trace is streamed (memory flat while the file grows) and stays valid JSON after SIGTERM
  set -m
  # On the host backend: a CUDA context's own lazy allocations in the first seconds (40 MiB on an
  # H100) would read as trace events kept in memory.
  "$bin" run --folder "$work/ds" --batch 4 --workers 2 --epochs 1000000 --device host --trace "$work/t.json" >"$work/out" 2>&1 &
  pid=$!
  set +m
  sleep 1
  # Streamed into a temporary beside t.json (t.json.tmpPID-N), renamed to t.json when the run ends.
  rss0=$(awk '/VmRSS/ {print $2}' /proc/$pid/status); size0=$(cat "$work"/t.json.tmp* | wc -c)
  sleep 3
  rss1=$(awk '/VmRSS/ {print $2}' /proc/$pid/status); size1=$(cat "$work"/t.json.tmp* | wc -c)
  kill -TERM $pid
  wait $pid
  rc=$?
  [ $rc -eq 143 ] || fail "SIGTERM: status $rc, not 143"
  grown_kib=$(( (size1 - size0) / 1024 ))
  echo "trace grew by $grown_kib KiB in 3 s while RSS went from $rss0 to $rss1 KiB"
  [ $grown_kib -gt 256 ] || fail "the trace file grew by $grown_kib KiB only: not streamed as the run goes"
  # Kept in memory, the events would grow the RSS at least as much as the file.
  # Under ASan the quarantine holds freed memory, so the RSS tells nothing there.
  if [ -z "${CONVEYOR_SANITIZED:-}" ]; then
    [ $((rss1 - rss0)) -lt $((grown_kib / 2)) ] || fail "RSS grew by $((rss1 - rss0)) KiB with the trace's $grown_kib KiB: events kept in memory"
  fi
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(e["name"] == "decode" for e in d["traceEvents"])' \
    "$work/t.json" || fail "the trace is not valid JSON after SIGTERM"
  [ -z "$(ls "$work" | grep '^t.json.tmp')" ] || fail "the trace's temporary was left: $(ls "$work")"
  ;;
resident)  # --resident stops on SIGINT/SIGTERM, while decoding the set once and during its epochs
  # 100000 samples of one small image: the decode-once phase lasts long enough to be interrupted in.
  yes "$first 0" | head -100000 >"$work/big.txt"
  for phase in decode epochs; do
    set -m
    if [ $phase = decode ]; then
      "$bin" run --resident --list "$work/big.txt" --crop 32 --workers 1 --epochs 1000000 --compute-ms 1 >"$work/out" 2>&1 &
    else
      "$bin" run --resident --folder "$work/ds" --batch 4 --epochs 1000000 --compute-ms 1 >"$work/out" 2>&1 &
    fi
    pid=$!
    set +m
    if [ $phase = decode ]; then
      wait_catching $pid 2  # then a little into the decoding (it prints nothing before the set is decoded)
      sleep 0.1
    else
      for _ in $(seq 200); do grep -q "^epoch 1" "$work/out" && break; sleep 0.05; done
    fi
    t0=$(date +%s%N)
    kill -INT $pid
    wait $pid 2>/dev/null
    rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $rc -eq 130 ] || fail "$phase: SIGINT gave status $rc, not 130: $(tail -2 "$work/out")"
    limit=3000
    if [ -n "${CONVEYOR_SANITIZED:-}" ]; then limit=10000; fi  # TSan runs the decode 5-15x slower
    [ $ms -lt $limit ] || fail "$phase: exit took $ms ms"
    if [ $phase = decode ]; then
      grep -q "^interrupted while decoding the set once" "$work/out" || fail "decode: not stopped while decoding: $(tail -3 "$work/out")"
    else
      grep -Eq "^epoch [0-9]+ \(interrupted\)" "$work/out" || fail "epochs: no interrupted epoch line: $(tail -3 "$work/out")"
    fi
  done
  ;;
write-errors)  # a failed write of any output is a one-line error and a non-zero exit
  # standard output closed: the --trace file must not become descriptor 1 and take the printed lines
  "$bin" run --folder "$work/ds" --batch 4 --trace "$work/closed.json" >&- 2>"$work/err"
  rc=$?
  [ $rc -eq 1 ] || fail "run >&-: status $rc, not 1"
  err_has "cannot write standard output: it is closed" "run >&-"
  python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$work/closed.json" || fail "run >&-: the trace is not JSON"
  [ -w /dev/full ] || { echo "note: no /dev/full here"; exit 0; }
  expect 1 "run --trace /dev/full" -- run --folder "$work/ds" --batch 4 --trace /dev/full
  err_has "cannot write /dev/full" "--trace /dev/full"
  expect 1 "bench --json /dev/full" -- bench --folder "$work/ds" --batch 4 --json /dev/full
  err_has "cannot write /dev/full" "--json /dev/full"
  expect 1 "sweep --csv /dev/full" -- sweep --folder "$work/ds" --batch 4 --workers 1 --csv /dev/full
  err_has "cannot write /dev/full" "--csv /dev/full"
  "$bin" run --folder "$work/ds" --batch 4 >/dev/full 2>"$work/err"
  rc=$?
  [ $rc -ne 0 ] || fail "run > /dev/full exits 0"
  err_has "cannot write standard output" "run > /dev/full"
  if train_built && mkdir "$work/tiny" && mount -t tmpfs -o size=32k tmpfs "$work/tiny" 2>/dev/null; then
    # A checkpoint onto a full disk: LibTorch's own writer ended the process in std::terminate.
    expect 1 "train --checkpoint onto a full disk" -- train --folder "$work/ds" --epochs 1 --checkpoint "$work/tiny/c.pt"
    err_has "--checkpoint: cannot write $work/tiny/c.pt: No space left on device" "checkpoint on a full disk"
    [ -z "$(ls -A "$work/tiny")" ] || fail "the failed checkpoint left $(ls "$work/tiny") behind"
    umount "$work/tiny"
  elif train_built; then
    echo "note: no tmpfs could be mounted here (not root?); the full-disk checkpoint case did not run"
  fi
  if train_built; then
    "$bin" train --folder "$work/ds" --epochs 1 --batch 8 >/dev/full 2>"$work/err"
    [ $? -ne 0 ] || fail "train > /dev/full exits 0"
    err_has "cannot write standard output" "train > /dev/full"
  fi
  ;;
outputs)  # an output that cannot be written fails before the run, not after it
  mkdir "$work/adir"
  for flag in --trace --json; do
    for path in "$work/adir" "$work/missing/x.json"; do
      t0=$(date +%s%N)
      expect 2 "bench $flag $path" -- bench --folder "$work/ds" --batch 4 --epochs 1000000 --compute-ms 10 "$flag" "$path"
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      err_has "$flag $path: cannot write there" "$flag $path"
      [ $ms -lt 5000 ] || fail "$flag $path: refused after $ms ms, not before the run"
    done
  done
  expect 2 "sweep --csv into a missing folder" -- sweep --folder "$work/ds" --workers 1 --csv "$work/missing/s.csv"
  # The check leaves nothing behind, and an existing output keeps its bytes until the run writes it.
  expect 2 "a failing run with an output named" -- bench --folder "$work/ds" --json "$work/new.json" --workers 0
  [ ! -e "$work/new.json" ] || fail "the check left $work/new.json behind"
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
# ---- skip accounting, outputs that would destroy inputs, contradictory flags, interrupted writers, integers, signals
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
clobber)  # an output named like an input (the list, a file of the --folder dataset) or like another output is refused before anything is written
  find "$work/ds" -name '*.jpg' | sort | awk '{ print $0, 0 }' >"$work/list.txt"
  cp "$work/list.txt" "$work/list.orig"
  cp "$first" "$work/first.orig"
  expect 2 "--json = the --list file" -- run --list "$work/list.txt" --json "$work/list.txt"
  err_has "that is the --list file" "--json = --list"
  expect 2 "--trace = a dataset file" -- run --folder "$work/ds" --trace "$first"
  err_has "inside the --folder dataset" "--trace in the dataset"
  expect 2 "--trace = a dataset file, by another path" -- run --folder "$work/ds/" --trace "$work/ds/../ds/0-disk/$(basename "$first")"
  expect 2 "--json = --trace" -- run --folder "$work/ds" --json "$work/o.json" --trace "$work/./o.json"
  err_has "the same file as --trace" "--json = --trace"
  # a link followed by .. is resolved as the kernel resolves it
  ln -s "$work/ds/0-disk" "$work/lk"
  expect 2 "--trace through lk/.." -- run --folder "$work/ds" --trace "$work/lk/../0-disk/$(basename "$first")"
  # devices are not files: /dev/null may take several outputs
  timeout 60 "$bin" run --folder "$work/ds" --batch 4 --json /dev/null --trace /dev/null >"$work/out" 2>&1 || fail "--json /dev/null --trace /dev/null: $(tail -1 "$work/out")"
  # a file the list names (found by its magic bytes), the --config file, train's and pack's outputs
  expect 2 "--json = an image the list names" -- run --list "$work/list.txt" --json "$first"
  err_has "an existing JPEG image" "--json on a listed image"
  printf 'json = "%s"\n' "$work/self.toml" >"$work/self.toml"
  cp "$work/self.toml" "$work/self.orig"
  expect 2 "--json = the --config file" -- run --config "$work/self.toml" --folder "$work/ds"
  err_has "that is the --config file" "--json = --config"
  cmp -s "$work/self.toml" "$work/self.orig" || fail "the config file was changed"
  expect 2 "pack --out inside the --folder dataset" -- pack --folder "$work/ds" --out "$work/ds/shards"
  err_has "inside the --folder dataset" "pack --out in the dataset"
  [ ! -e "$work/ds/shards" ] || fail "pack --out inside the dataset made a folder there"
  # --plot may overwrite an earlier plot, but not an image the list names
  cp "$first" "$work/pic.png" && cp "$work/pic.png" "$work/pic.orig"
  echo "$work/pic.png 0" >"$work/pics.txt"
  expect 2 "--plot = an image the list names" -- sweep --list "$work/pics.txt" --workers 1 --epochs 1 --csv "$work/p.csv" --plot "$work/pic.png"
  err_has "an image the --list names" "--plot on a listed image"
  cmp -s "$work/pic.png" "$work/pic.orig" || fail "--plot overwrote a listed image"
  ln -s "$work/pic.png" "$work/piclink.png" && echo "$work/piclink.png 0" >"$work/piclinks.txt"  # listed through a link
  expect 2 "--plot = an image the list names through a link" -- sweep --list "$work/piclinks.txt" --workers 1 --epochs 1 --csv "$work/p.csv" --plot "$work/pic.png"
  cp "$first" "$work/old-plot.png"
  timeout 60 "$bin" sweep --list "$work/pics.txt" --workers 1 --epochs 1 --batch 1 --csv "$work/p.csv" --plot "$work/old-plot.png" >"$work/out" 2>&1 \
    || fail "--plot over an earlier plot: $(tail -1 "$work/out")"
  if train_built; then
    expect 2 "train --checkpoint = the --list file" -- train --list "$work/list.txt" --epochs 1 --checkpoint "$work/list.txt"
    err_has "that is the --list file" "train --checkpoint = --list"
    expect 2 "train --checkpoint = an image the list names" -- train --list "$work/list.txt" --epochs 1 --checkpoint "$first"
    err_has "an existing JPEG image" "train --checkpoint on a listed image"
    expect 2 "train --plot inside the --folder dataset" -- train --folder "$work/ds" --epochs 1 --plot "$work/ds/0-disk/p.png"
  fi
  cmp -s "$work/list.txt" "$work/list.orig" || fail "the list file was changed"
  cmp -s "$first" "$work/first.orig" || fail "a dataset file was changed"
  ;;
pack-race)  # two packs started at once into one new --out: one packs the whole dataset and the other refuses, or both refuse
  find "$work/ds" -name '*.jpg' | sort | awk '{ print $0, 0 }' >"$work/a.txt"
  head -5 "$work/a.txt" >"$work/b.txt"
  whole=$(wc -l <"$work/a.txt")
  won=0
  for i in $(seq 10); do
    out="$work/race$i"
    "$bin" pack --list "$work/a.txt" --out "$out" >"$work/a.out" 2>&1 & pa=$!
    # rounds 1-5 start both at once; 6-10 start the second a little later, while the first writes
    [ "$i" -gt 5 ] && sleep 0.0$((i - 5))
    "$bin" pack --list "$work/b.txt" --out "$out" >"$work/b.out" 2>&1 & pb=$!
    wait $pa; ra=$?
    wait $pb; rb=$?
    if [ $ra -eq 0 ] && [ $rb -eq 0 ]; then fail "round $i: both packs into one --out succeeded"; fi
    if [ $ra -eq 0 ] || [ $rb -eq 0 ]; then
      won=$((won + 1))
      want=$([ $ra -eq 0 ] && echo "$whole" || echo 5)
      got=$("$bin" inspect --shards "$out" 2>/dev/null | sed -n 's/^\([0-9]*\) samples decoded.*/\1/p')
      [ "$got" = "$want" ] || fail "round $i: the pack that succeeded left $got samples, not $want"
    fi
    for f in "$work/a.out" "$work/b.out"; do
      if grep -q "^conveyor" "$f"; then
        grep -q "another pack (process [0-9]*) is writing into it\|exists and is not an empty folder" "$f" \
          || fail "round $i: a refusal that does not say why: $(cat "$f")"
      fi
    done
    ! compgen -G "$out/.partial-*" >/dev/null || fail "round $i: a partial folder was left in --out"
  done
  [ "$won" -ge 1 ] || fail "no pack succeeded in 10 rounds"
  # a partial folder left by a dead process whose PID this pack now has is not adopted
  "$bin" pack --list "$work/b.txt" --out "$work/old" >/dev/null 2>&1 || fail "pack into old"
  (mkdir -p "$work/own/.partial-$BASHPID" && cp "$work/old/shard-000000.tar" "$work/own/.partial-$BASHPID/shard-000009.tar" &&
    exec "$bin" pack --list "$work/a.txt" --out "$work/own" >"$work/out" 2>&1) || fail "pack over a partial folder with its own PID: $(cat "$work/out")"
  got=$("$bin" inspect --shards "$work/own" 2>/dev/null | sed -n 's/^\([0-9]*\) samples decoded.*/\1/p')
  [ "$got" = "$whole" ] || fail "pack over a partial folder with its own PID: $got samples, not $whole"
  # a pack's partial folder is live while locked, whatever its PID names: a
  # dead pack's folder whose PID is now another live process (a container's
  # PID 1, say) is cleared; one that a live process holds locked is refused
  mkdir -p "$work/pid/.partial-$$"
  "$bin" pack --list "$work/b.txt" --out "$work/pid" >"$work/out" 2>&1 || fail "pack over a stale partial folder of a live PID: $(cat "$work/out")"
  if command -v flock >/dev/null; then
    mkdir -p "$work/held/.partial-777777"
    flock -o "$work/held/.partial-777777" sleep 20 >/dev/null 2>&1 & holder=$!  # -o: only flock holds it
    for _ in $(seq 100); do flock -n "$work/held/.partial-777777" true || break; sleep 0.05; done
    expect 2 "pack into a folder another pack holds" -- pack --list "$work/b.txt" --out "$work/held"
    err_has "another pack (process 777777) is writing into it" "pack beside a held partial folder"
    pkill -P $holder sleep 2>/dev/null; kill $holder 2>/dev/null; wait $holder 2>/dev/null
    # `flock OUT conveyor pack --out OUT`: pack would wait for a lock its own parent holds; it gives up in 5 s
    mkdir -p "$work/self"
    t0=$(date +%s%N)
    flock "$work/self" "$bin" pack --list "$work/b.txt" --out "$work/self" >"$work/out" 2>"$work/err"; rc=$?
    [ $rc -eq 2 ] || fail "pack under flock of its --out: status $rc, not 2: $(cat "$work/err")"
    err_has "locked by another process for 5 s" "pack under flock of its --out"
    [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 20000 ] || fail "pack under flock of its --out: took over 20 s"
    "$bin" pack --list "$work/b.txt" --out "$work/held" >"$work/out" 2>&1 || fail "pack once the holder is gone: $(cat "$work/out")"
  fi
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
pack-interrupt)  # a pack stopped by a signal leaves no --out that --shards would read as a smaller dataset
  for _ in $(seq 400); do find "$work/ds" -name '*.jpg' | awk '{ print $0, 0 }'; done >"$work/big.txt"
  samples=$(wc -l <"$work/big.txt")
  start_pack() {  # start_pack OUT: in the background, until its second shard is written
    "$bin" pack --list "$work/big.txt" --out "$1" --shard-mb 1 >"$work/out" 2>&1 &
    pid=$!
    for _ in $(seq 400); do compgen -G "$1/.partial-*/shard-000001.tar" >/dev/null && break; sleep 0.02; done
  }
  rm -rf "$work/sh"
  start_pack "$work/sh"
  stop_job $pid TERM
  [ $rc -eq 143 ] || fail "pack on SIGTERM: status $rc, not 143: $(tail -2 "$work/out")"
  grep -q "interrupted by SIGTERM .*nothing written" "$work/out" || fail "pack on SIGTERM: $(tail -2 "$work/out")"
  [ ! -e "$work/sh" ] || fail "pack on SIGTERM left $work/sh: $(ls -A "$work/sh" | head -3)"
  start_pack "$work/sh"
  stop_job $pid KILL
  expect 2 "run on what a killed pack left" -- run --shards "$work/sh"
  err_has "left by a \`conveyor pack\` into it that did not finish" "run on a killed pack's folder"
  "$bin" pack --list "$work/big.txt" --out "$work/sh/" --shard-mb 1 >"$work/out" 2>&1 || fail "pack over a killed one: $(tail -2 "$work/out")"
  grep -q "^packed $samples samples" "$work/out" || fail "pack over a killed one: $(tail -1 "$work/out")"
  [ -z "$(ls -A "$work/sh" | grep -v -e '\.tar$' -e '^\.conveyor-index$' -e '^\.conveyor-manifest$')" ] || fail "pack left: $(ls -A "$work/sh")"
  # --out as ".", as a link to an empty folder, and as an existing empty folder
  mkdir -p "$work/dot" "$work/target" "$work/empty"
  ln -s "$work/target" "$work/link"
  (cd "$work/dot" && "$bin" pack --folder "$work/ds" --out . >"$work/out" 2>&1) || fail "pack --out .: $(tail -1 "$work/out")"
  for out in "$work/link" "$work/empty"; do
    "$bin" pack --folder "$work/ds" --out "$out" >"$work/out" 2>&1 || fail "pack --out $out: $(tail -1 "$work/out")"
  done
  for out in "$work/dot" "$work/target" "$work/empty"; do
    timeout 60 "$bin" run --shards "$out" --batch 4 >"$work/out" 2>&1 && grep -q "^epoch 0: 30 images" "$work/out" ||
      fail "run --shards $out: $(tail -2 "$work/out")"
  done
  [ -L "$work/link" ] || fail "pack --out LINK replaced the link"
  ;;
make-dataset-interrupt)  # make-dataset stopped by a signal leaves no --out that would read as a smaller dataset
  "$bin" make-dataset --out "$work/md" --images-per-class 20000 >"$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 400); do [ "$(find "$work" -maxdepth 3 -path "*/.md.partial-*/0-*" -name '*.jpg' 2>/dev/null | head -1)" ] && break; sleep 0.02; done
  stop_job $pid TERM
  [ $rc -eq 143 ] || fail "make-dataset on SIGTERM: status $rc, not 143: $(tail -2 "$work/out")"
  grep -q "^make-dataset: interrupted by SIGTERM after [0-9]* of 200000 images; nothing written" "$work/out" ||
    fail "make-dataset on SIGTERM: $(tail -2 "$work/out")"
  [ ! -e "$work/md" ] || fail "make-dataset on SIGTERM left --out: $(ls "$work/md" | head -3)"
  [ -z "$(ls -A "$work" | grep '^\.md\.partial-')" ] || fail "make-dataset on SIGTERM left $(ls -A "$work" | grep partial)"
  "$bin" make-dataset --out "$work/md/" --images-per-class 2 >"$work/out" 2>&1 || fail "make-dataset after: $(tail -1 "$work/out")"
  [ "$(find "$work/md" -name '*.jpg' | wc -l)" -eq 20 ] && [ -f "$work/md/.complete" ] || fail "make-dataset after: $(ls -A "$work/md")"
  expect 2 "make-dataset over an existing --out" -- make-dataset --out "$work/md" --images-per-class 2
  err_has "already exists" "make-dataset over an existing --out"
  ;;
shard-ranks)  # --rank-by-shard with a rank whose shards are empty: every rank refuses, naming it (none runs zero steps)
  "$bin" pack --folder "$work/ds" --out "$work/sh" >/dev/null 2>&1 || fail "pack"
  cp "$work/sh/shard-000000.tar" "$work/sh/shard-000001.tar"
  tar cf "$work/sh/shard-000002.tar" --files-from /dev/null
  for r in 0 1 2; do
    expect 2 "rank $r of 3 with an empty shard" -- run --shards "$work/sh" --extra-shards --rank-by-shard --world-size 3 --rank $r --batch 4
    err_has "rank 2 of 3 would get no samples: its shards (shard-000002.tar) hold none" "rank $r"
  done
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
sigpipe)  # a run piped to `head` stops when the reader leaves: status 141, nothing on stderr, the trace and --json whole
  timeout 60 "$bin" run --folder "$work/ds" --batch 4 --epochs 100000 --compute-ms 1 --trace "$work/t.json" --json "$work/j.json" 2>"$work/err" | head -1 >/dev/null
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 141 ] || fail "run | head: status $rc, not 141"
  [ ! -s "$work/err" ] || fail "run | head: stderr says $(head -c 300 "$work/err")"
  python3 -c 'import json, sys; json.load(open(sys.argv[1])); assert sum(json.load(open(sys.argv[2]))["epoch_images"]) > 0' \
    "$work/t.json" "$work/j.json" || fail "run | head: the trace or --json is not whole"
  # the reader gone before the last lines (after the run's own checks): 141 and quiet too
  for cmd in "run --folder $work/ds --batch 4 --epochs 1" "inspect --folder $work/ds"; do
    "$bin" $cmd 2>"$work/err" | head -c 0
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 141 ] || [ "$rc" -eq 0 ] || fail "$cmd | head -c 0: status $rc, not 141"
    [ ! -s "$work/err" ] || fail "$cmd | head -c 0: stderr says $(head -c 300 "$work/err")"
  done
  ;;
slow-signal)  # SIGTERM is honoured at once while a worker, the serial loop or the step takes a minute per sample
  for args in "--synthetic-ms 60000 --workers 1" "--serial --synthetic-ms 60000" "--compute-ms 60000"; do
    "$bin" run --folder "$work/ds" --batch 4 $args >"$work/out" 2>&1 &
    pid=$!
    wait_catching $pid 15
    sleep 0.5  # into the minute-long sample or step
    stop_job $pid TERM
    [ $rc -eq 143 ] || fail "$args: status $rc, not 143: $(tail -2 "$work/out")"
    [ $ms -lt 5000 ] || fail "$args: exited $ms ms after SIGTERM"
    grep -q "^interrupted by SIGTERM" "$work/out" || fail "$args: $(tail -2 "$work/out")"
  done
  ;;
sweep-signal)  # SIGTERM mid-sweep: the point running is stopped, the finished rows are written to --csv, status 143; inspect prints its counts so far
  "$bin" sweep --folder "$work/ds" --workers 1,2,1,2 --batch 4 --epochs 10 --compute-ms 10 --csv "$work/s.csv" >"$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 300); do [ "$(grep -c ' 10.0 ' "$work/out")" -ge 1 ] && break; sleep 0.05; done  # the first row is out
  stop_job $pid TERM
  [ $rc -eq 143 ] || fail "sweep on SIGTERM: status $rc, not 143: $(tail -2 "$work/out")"
  [ $ms -lt 5000 ] || fail "sweep on SIGTERM: exited after $ms ms"
  grep -q "^interrupted by SIGTERM after [1-3] of 4 points" "$work/out" || fail "sweep on SIGTERM: $(tail -2 "$work/out")"
  rows=$(($(wc -l <"$work/s.csv") - 1))
  [ $rows -ge 1 ] && [ $rows -le 3 ] || fail "sweep on SIGTERM: $rows rows in --csv, not the finished ones"
  pgrep -f "sweep --folder $work/ds" >/dev/null && fail "sweep on SIGTERM left a point running"
  # inspect likewise: its counts so far, then 143
  for _ in $(seq 100000); do echo "$first 0"; done >"$work/many.txt"
  "$bin" inspect --list "$work/many.txt" --workers 1 >"$work/out" 2>&1 &
  pid=$!
  wait_catching $pid 15
  sleep 0.2
  stop_job $pid TERM
  [ $rc -eq 143 ] || fail "inspect on SIGTERM: status $rc, not 143: $(tail -2 "$work/out")"
  grep -Eq "^interrupted by SIGTERM after [0-9]+ of 100000 samples" "$work/out" && grep -q "^formats:" "$work/out" ||
    fail "inspect on SIGTERM: $(cat "$work/out")"
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
atomic-outputs)  # a failed --json, --trace or --csv write leaves the old file whole (or none), and no temporary
  # Where a tmpfs can be mounted (as root): a full disk. Elsewhere the case says so and checks the rest.
  "$bin" run --folder "$work/ds" --batch 4 --epochs 1 --json "$work/r.json" --trace "$work/t.json" >/dev/null 2>&1 ||
    fail "run --json --trace: status $?"
  for f in r.json t.json; do
    python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$work/$f" || fail "$f is not JSON"
  done
  ln -s r.json "$work/link.json"  # a link stays a link; the file it names is replaced
  chmod 600 "$work/r.json"
  "$bin" run --folder "$work/ds" --batch 4 --epochs 1 --json "$work/link.json" >/dev/null 2>&1 || fail "run --json LINK"
  [ -L "$work/link.json" ] || fail "--json through a link replaced the link"
  [ "$(stat -c %a "$work/r.json")" = 600 ] || fail "--json lost the file's mode: $(stat -c %a "$work/r.json")"
  if mkdir "$work/tiny" && mount -t tmpfs -o size=64k tmpfs "$work/tiny" 2>/dev/null; then
    printf '{"old": true}\n' >"$work/tiny/r.json"
    printf '{"old": true}\n' >"$work/tiny/t.json"
    printf 'old\n' >"$work/tiny/s.csv"
    head -c $((1 << 20)) /dev/zero >"$work/tiny/filler" 2>/dev/null  # fills the disk
    # --synthetic-ms: the workers sleep instead of decoding, so the 150 epochs a large
    # --json needs stay fast under the sanitizers.
    expect 1 "run --json onto a full disk" -- run --folder "$work/ds" --batch 8 --epochs 150 --synthetic-ms 0.01 \
      --json "$work/tiny/r.json"
    err_has "--json: cannot write $work/tiny/r.json: No space left on device" "--json on a full disk"
    expect 1 "run --trace onto a full disk" -- run --folder "$work/ds" --batch 1 --epochs 20 --synthetic-ms 0.01 \
      --trace "$work/tiny/t.json"
    err_has "--trace: cannot write $work/tiny/t.json: No space left on device" "--trace on a full disk"
    "$bin" sweep --folder "$work/ds" --batch 1 --workers 1,2,1,2,1,2,1,2 --csv "$work/tiny/s.csv" >/dev/null 2>"$work/err"
    for f in r.json t.json; do
      [ "$(cat "$work/tiny/$f")" = '{"old": true}' ] || fail "the failed write destroyed the old $f: $(head -c 100 "$work/tiny/$f")"
    done
    grep -q "cannot write" "$work/err" && { [ "$(cat "$work/tiny/s.csv")" = old ] || fail "the failed --csv destroyed s.csv"; }
    leftover=$(ls -A "$work/tiny" | grep -v -x -e r.json -e t.json -e s.csv -e filler)
    [ -z "$leftover" ] || fail "a failed write left $leftover behind"
    umount "$work/tiny"
  else
    echo "note: no tmpfs could be mounted here (not root?); the full-disk part did not run"
  fi
  ;;
extra-shards)  # a .tar beside pack's manifest that it does not list is refused by name; --extra-shards reads it
  "$bin" pack --folder "$work/ds" --out "$work/train" >/dev/null 2>&1 || fail "pack: status $?"
  "$bin" pack --folder "$work/ds" --out "$work/val" >/dev/null 2>&1 || fail "pack val: status $?"
  cp "$work/val/shard-000000.tar" "$work/train/val-000000.tar"
  expect 2 "run --shards with an unlisted shard" -- run --shards "$work/train" --epochs 1
  err_has "val-000000.tar: not listed in $work/train/.conveyor-manifest (written by conveyor pack: 1 shard(s) of 30 samples)" "unlisted shard"
  timeout 60 "$bin" run --shards "$work/train" --epochs 1 --batch 10 --extra-shards >"$work/out" 2>&1 || fail "--extra-shards: $(tail -2 "$work/out")"
  grep -q "^epoch 0: 60 images" "$work/out" || fail "--extra-shards did not read both: $(grep '^epoch' "$work/out")"
  expect 2 "--extra-shards without --shards" -- run --folder "$work/ds" --extra-shards
  err_has "--extra-shards: needs a --shards dataset" "--extra-shards alone"
  ;;
*)
  echo "unknown case $case"; exit 2 ;;
esac

if [ $failures -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "hostile $case: all checks passed"
