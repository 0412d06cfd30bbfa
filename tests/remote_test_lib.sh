# What tests/http_test.sh and tests/s3_test.sh share, sourced by both after
# they set $conveyor and $work: failing, ports, the packed dataset, runs and
# their epochs, and the one-line error check.

fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for_port() {  # PORT: until something listens there (10 s at most)
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done
  fail "nothing answers on port $1"
}

# pack_dataset OUT: 40 generated images listed 16 times (640 samples, the
# list in $work/list.txt) packed into OUT in several shards (--shard-mb 1);
# sets shards= to their count.
pack_dataset() {
  "$conveyor" make-dataset --out "$work/data" --images-per-class 4 >/dev/null
  for _ in $(seq 16); do
    find "$work/data" -name '*.png' -o -name '*.jpg' | sort | awk '{ print $0, NR % 10 }'
  done >"$work/list.txt"
  mkdir -p "$(dirname "$1")"
  "$conveyor" pack --list "$work/list.txt" --out "$1" --shard-mb 1 >/dev/null
  shards=$(ls "$1"/*.tar | wc -l)
  [ "$shards" -ge 2 ] || fail "expected several shards, got $shards"
}

# run NAME ARGS...: 2 epochs on 3 workers (EPOCHS=, WORKERS= for others),
# its --json in $work/NAME.json. Every run crops to 32 pixels: the tests are
# about where the bytes come from, and the default 224 (these images are about
# 70 pixels) made each epoch cost 14 s under TSan, against 1 s.
run() { "$conveyor" run --epochs "${EPOCHS:-2}" --workers "${WORKERS:-3}" --batch 5 --crop 32 --json "$work/$1.json" "${@:2}" \
          >"$work/$1.out" 2>&1 || fail "run $*: $(tail -3 "$work/$1.out")"; }
# same_epochs WHAT NAME...: the runs' --json give the same epochs (digests and sample counts).
same_epochs() {
  local what=$1 files=()
  for name in "${@:2}"; do files+=("$work/$name.json"); done
  python3 - "${files[@]}" <<'PY' || fail "$what: the epochs differ"
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
assert all(r["epoch_digest"] == runs[0]["epoch_digest"] and r["epoch_images"] == runs[0]["epoch_images"] for r in runs), runs
PY
}
# same_first_epoch WHAT A B: run B's first epoch is run A's.
same_first_epoch() {
  python3 - "$work/$2.json" "$work/$3.json" <<'PY' || fail "$1: the first epochs differ"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["epoch_digest"][0] == b["epoch_digest"][0], (a["epoch_digest"], b["epoch_digest"])
PY
}

# one_line_error WHAT WANT ARGS...: `conveyor inspect ARGS` (under `env
# $ENV_ARGS` when set) fails with one line holding WANT; the lines go to
# $work/errors.txt too.
one_line_error() {
  local what=$1 want=$2; shift 2
  # shellcheck disable=SC2086  # ENV_ARGS is a list of words for env
  if timeout 120 env ${ENV_ARGS:-} "$conveyor" inspect "$@" >"$work/out" 2>"$work/err"; then fail "$what: exit 0"; fi
  [ "$(grep -c . "$work/err")" -eq 1 ] || fail "$what: not one line: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || fail "$what: wanted '$want', got: $(cat "$work/err")"
  cat "$work/err" >>"$work/errors.txt"
}

# own_shards RANK WORLD: the shard files rank RANK of WORLD reads by shard
# (RANK, RANK + WORLD, ...), one name a line, sorted.
own_shards() {
  local i
  for ((i = $1; i < shards; i += $2)); do printf 'shard-%06d.tar\n' "$i"; done
}
# cached_own_only WHAT CACHE RANK WORLD: CACHE holds no shard but the rank's
# own. Not that it holds all of them: a run ends without waiting for the
# downloads still under way (their samples read by range), so how many landed
# depends on the machine's speed.
cached_own_only() {
  local stray
  stray=$(comm -13 <(own_shards "$3" "$4") <(ls "$2"/*/*/ | grep '\.tar$' | sort) | tr '\n' ' ')
  [ -z "$stray" ] || fail "$1: fetched another rank's shards: $stray"
}
