# What every hostile case shares (sourced by hostile_test.sh, which sets $bin and $case): a
# temporary $work removed on exit, fail (counted in $failures), expect, stop_job, wait_catching,
# err_has, and a small dataset made in $work/ds whose first image is $first.
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
