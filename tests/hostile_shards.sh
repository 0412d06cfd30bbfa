# Shards: pack and make-dataset raced or interrupted, ranks whose shards are empty, and a
# shard beside the manifest that it does not list.
# Sourced by hostile_test.sh after hostile_lib.sh, for one $case of this file.

case $case in
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
  echo "unknown case $case in hostile_shards.sh"; exit 2 ;;
esac
