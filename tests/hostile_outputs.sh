# Outputs: a write that fails, an output that cannot be written, one named like an input
# or another output, and a failed write that must leave the old file whole.
# Sourced by hostile_test.sh after hostile_lib.sh, for one $case of this file.

case $case in
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
*)
  echo "unknown case $case in hostile_outputs.sh"; exit 2 ;;
esac
