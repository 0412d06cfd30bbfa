# Signals and a reader that leaves: SIGINT, SIGTERM and SIGPIPE during run, --resident, sweep
# and inspect, also while a stage takes a minute per sample; the trace stays valid JSON.
# Sourced by hostile_test.sh after hostile_lib.sh, for one $case of this file.

case $case in
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
*)
  echo "unknown case $case in hostile_signals.sh"; exit 2 ;;
esac
