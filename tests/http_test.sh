#!/usr/bin/env bash
# Shards read over HTTP: a folder `conveyor pack` wrote, served by lighttpd on
# a loopback port this test picks, read with --shards http://... through a
# cache. Shows: the same samples in the same order as the folder read locally
# (the command's epoch digests; with the Python module, every batch's bytes
# for 1 and 3 workers, and a resume from the local run's state); a warm second
# run served from the cache (the access log holds no shard GET); an epoch
# read by range requests alone while the shard downloads are held back (the
# run not waiting for them); a shard missing on the server failing the run in
# one line, or with --on-error skip its samples skipped and listed; three
# processes on one cold cache fetch each shard once; 503 and 429 retried and a
# body broken off half-way resumed with a Range request; a 404, a closed port, a
# host name that does not resolve, a shard damaged on the server and one cut
# short each fail with one line naming the URL (credentials hidden); the
# shards listed by URL with braces, no manifest, read as the folder; 4 ranks
# by shard each fetching its own shards alone; a
# build without libcurl says so in one line.
# Usage: http_test.sh CONVEYOR [PYTHONPATH PYTHON]  (the built module and the
# interpreter it is for; exit 77, skipped, without lighttpd)
set -euo pipefail
conveyor=$1
pythonpath=${2:-}
python=${3:-python3}
work=$(mktemp -d)
server_pid= cut_pid=
cleanup() {
  for pid in $server_pid $cut_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/remote_test_lib.sh
. "$(dirname "$0")/remote_test_lib.sh"
lighttpd=$(command -v lighttpd || echo /usr/sbin/lighttpd)

mkdir -p "$work/www" "$work/log"
pack_dataset "$work/www/ds"

# Without libcurl the URL is refused in one line, whatever the server.
if "$conveyor" inspect --shards http://127.0.0.1:9/ds/ >"$work/out" 2>"$work/err"; then fail "no server, yet exit 0"; fi
if grep -q "built without libcurl" "$work/err"; then
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "without libcurl: more than one line: $(cat "$work/err")"
  echo "http: this build has no libcurl; said so in one line"
  exit 0
fi
[ -x "$lighttpd" ] || { echo "http: lighttpd is not installed (Debian: lighttpd); skipped"; exit 77; }

port=$(free_port)
cat >"$work/lighttpd.conf" <<CONF
server.document-root = "$work/www"
server.bind = "127.0.0.1"
server.port = $port
server.modules = ("mod_accesslog")
accesslog.filename = "$work/log/access.log"
server.errorlog = "$work/log/error.log"
server.pid-file = "$work/log/pid"
server.stat-cache-engine = "disable"
CONF
# The shards are changed in place below: no stat cache. lighttpd buffers its
# access log for seconds: it is counted with the server
# stopped (which flushes it), and the server started again on the same port.
start_server() {
  "$lighttpd" -D -f "$work/lighttpd.conf" &
  server_pid=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && return
    kill -0 "$server_pid" 2>/dev/null || fail "lighttpd did not start: $(cat "$work/log/error.log" 2>/dev/null)"
    sleep 0.1
  done
  fail "lighttpd does not answer on port $port"
}
stop_server() {
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
start_server
url=http://127.0.0.1:$port/ds/
count_gets() {  # gets=how many whole shard GETs the server has logged, ranges=how many range reads of shards
  stop_server
  gets=$(grep -c '"GET /ds/[^ ]*\.tar HTTP/1.1" 200 ' "$work/log/access.log" || true)
  ranges=$(grep -c '"GET /ds/[^ ]*\.tar HTTP/1.1" 206 ' "$work/log/access.log" || true)
  start_server
}

# Cold, then warm: the same epochs as the local folder, and the second run
# asks for the manifest only.
run local --shards "$work/www/ds"
run cold --shards "$url" --cache-dir "$work/cache"
count_gets
[ "$gets" -eq "$shards" ] || fail "cold run: $gets shard GETs for $shards shards"
ranges_cold=$ranges
run warm --shards "$url" --cache-dir "$work/cache"
count_gets
[ "$gets" -eq "$shards" ] || fail "warm run fetched shards again: $gets GETs for $shards shards"
[ "$ranges" -eq "$ranges_cold" ] || fail "warm run read $((ranges - ranges_cold)) samples by range"
same_epochs "the URL against the folder, cold and warm" local cold warm
# --download-first: every shard whole before the first batch, no range read.
run first --shards "$url" --cache-dir "$work/cfirst" --download-first
count_gets
[ "$gets" -eq $((2 * shards)) ] || fail "--download-first: $((gets - shards)) shard GETs for $shards shards"
[ "$ranges" -eq "$ranges_cold" ] || fail "--download-first read $((ranges - ranges_cold)) samples by range"
same_epochs "--download-first against the folder" local first
# TOML names the URL as the flag does.
printf 'shards = "%s"\ncache-dir = "%s"\n' "$url" "$work/cache" >"$work/c.toml"
run toml --config "$work/c.toml"

# The bytes of every batch, for 1 and 3 workers, and a resume of the local run
# over the URL (the Python module, when built).
if [ -n "$pythonpath" ]; then
  PYTHONPATH=$pythonpath "$python" - "$work/www/ds" "$url" "$work/pycache" <<'PY' || fail "Python: the URL's batches differ from the folder's"
import hashlib, sys
import numpy as np
import conveyor
local, url, cache = sys.argv[1:]
def run(loader, skip=0):
    out, it = [], iter(loader)
    for images, labels in it:
        out.append((images.index, hashlib.sha1(np.asarray(images).tobytes() + np.asarray(labels).tobytes()).hexdigest()))
    return out
for workers in (1, 3):
    kw = dict(batch_size=4, crop=16, seed=5, workers=workers, device="cpu")
    a = run(conveyor.Loader(shards=local, **kw))
    b = run(conveyor.Loader(shards=url, cache_dir=cache, **kw))
    assert a == b and len(a) > 2, (workers, a[:2], b[:2])
kw = dict(batch_size=4, crop=16, seed=5, workers=2, device="cpu")
first = conveyor.Loader(shards=local, **kw)
it = iter(first)
for _ in range(2):
    next(it)
resumed = conveyor.Loader(shards=url, cache_dir=cache, **kw)
resumed.load_state_dict(first.state_dict())
assert run(resumed) == run(conveyor.Loader(shards=local, **kw))[2:]
try:
    conveyor.Loader(shards=url.replace("/ds/", "/none/"), cache_dir=cache, device="cpu")
    raise SystemExit("a 404 raised nothing")
except ValueError as e:
    assert "/none/.conveyor-manifest: HTTP 404" in str(e), e
# cache_gb=: a limit the cache keeps, the shards left out read by range.
limited = conveyor.Loader(shards=url, cache_dir=cache + "-limit", cache_gb=1e-6, **kw)
assert run(limited) == run(conveyor.Loader(shards=local, **kw)) and limited.cache_gb == 1e-6
remote = limited.stats()["remote"]
assert remote["uncached"] >= 1 and "no room" in remote["uncached_why"], remote
for bad in (0, -1, float("nan")):
    try:
        conveyor.Loader(shards=url, cache_gb=bad, device="cpu")
        raise SystemExit(f"cache_gb={bad} raised nothing")
    except ValueError as e:
        assert str(e).startswith("cache_gb="), e
try:
    conveyor.Loader(shards=local, cache_gb=1, device="cpu")
    raise SystemExit("cache_gb= for a local folder raised nothing")
except ValueError as e:
    assert "needs shards= an http(s):// or s3:// URL" in str(e), e
PY
fi

# Three processes on one cold cache: each shard fetched once, all runs whole.
count_gets
before=$gets
pids=()
for r in 0 1 2; do
  "$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards "$url" --cache-dir "$work/shared" \
    --json "$work/p$r.json" >"$work/p$r.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a process on the shared cache failed: $(cat "$work"/p*.out | tail -5)"; done
count_gets
[ $((gets - before)) -eq "$shards" ] || fail "3 processes on one cache: $((gets - before)) shard GETs for $shards shards"
ls "$work/shared"/*/*/ | grep -q '\.part$' && fail "a partial download left in the cache"

# --rank-by-shard over the URL: each of 4 ranks fetches its own shards alone
# (the folder's index, served beside them, tells which) and reads the samples
# the local folder gives that rank.
count_gets
before=$gets
for r in 0 1 2 3; do
  EPOCHS=1 WORKERS=2 run "rank$r-local" --shards "$work/www/ds" --rank-by-shard --rank "$r" --world-size 4
  EPOCHS=1 WORKERS=2 run "rank$r-url" --shards "$url" --rank-by-shard --rank "$r" --world-size 4 --cache-dir "$work/crank$r"
  same_epochs "rank $r of 4 by shard, the URL against the folder" "rank$r-local" "rank$r-url"
  cached_own_only "rank $r of 4 by shard" "$work/crank$r" "$r" 4
done
count_gets
[ $((gets - before)) -eq "$shards" ] || fail "4 ranks by shard: $((gets - before)) shard GETs for $shards shards"

# 503 and 429 are retried, and a body broken off half-way resumes with a Range
# request from the byte it reached (a server that answers so once each).
cut_port=$(free_port)
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$cut_port" "$work/log/cut.log" &
cut_pid=$!
wait_for_port "$cut_port"
# inspect downloads every shard before it reads (a run would stream, and
# might end before its last downloads), then a run reads the cache.
"$conveyor" inspect --shards "http://127.0.0.1:$cut_port/ds/" --cache-dir "$work/ccut" >"$work/cut.out" 2>&1 \
  || fail "503, 429 or a body cut short: $(tail -3 "$work/cut.out")"
"$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards "http://127.0.0.1:$cut_port/ds/" --cache-dir "$work/ccut" \
  --json "$work/cut.json" >"$work/cut.out" 2>&1 || fail "the cut shards, resumed: $(tail -3 "$work/cut.out")"
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
[ "$(grep 'manifest - ' "$work/log/cut.log" | head -3 | awk '{ print $3 }' | tr '\n' ' ')" = "503 429 200 " ] \
  || fail "503 and 429 were not retried: $(cat "$work/log/cut.log")"
[ "$(grep -c ' cut$' "$work/log/cut.log")" -eq "$shards" ] || fail "the server cut $(grep -c ' cut$' "$work/log/cut.log") bodies, not $shards"
[ "$(grep -c 'bytes=[1-9][0-9]*- 206$' "$work/log/cut.log")" -eq "$shards" ] || fail "no Range resume per shard: $(cat "$work/log/cut.log")"
same_first_epoch "the resumed shards against the folder's" local cut

# Errors: one line naming the URL, a non-zero exit.
one_line_error "404" "http://127.0.0.1:$port/nothing/.conveyor-manifest: HTTP 404" --shards "http://127.0.0.1:$port/nothing/" --cache-dir "$work/c404"
one_line_error "a name that does not resolve" "http://conveyor-test.invalid/ds/.conveyor-manifest: " \
  --shards http://conveyor-test.invalid/ds/ --cache-dir "$work/cdns"
closed=$(free_port)
one_line_error "a closed port" "http://127.0.0.1:$closed/ds/.conveyor-manifest: " --shards "http://127.0.0.1:$closed/ds/" --cache-dir "$work/cclosed"
grep -q "tries)" "$work/err" || fail "a closed port was not retried: $(cat "$work/err")"
# A cache folder that cannot be made (a file in its place) or written (read-only; root writes there anyway).
touch "$work/afile"
one_line_error "a file where the cache folder goes" "$work/afile/c/" --shards "$url" --cache-dir "$work/afile/c"
grep -q "cannot make the cache folder: Not a directory" "$work/err" || fail "a file in the cache's place: $(cat "$work/err")"
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$work/readonly"
  chmod 555 "$work/readonly"
  one_line_error "a read-only cache folder" "$work/readonly/c/" --shards "$url" --cache-dir "$work/readonly/c"
  grep -q "Permission denied" "$work/err" || fail "a read-only cache: $(cat "$work/err")"
fi
one_line_error "credentials hidden" "http://***@127.0.0.1:$closed/ds/" --shards "http://user:s3cret@127.0.0.1:$closed/ds/" --cache-dir "$work/cclosed"
grep -q s3cret "$work/err" && fail "the password was printed"
# A shard damaged on the server (same size, one byte changed), then one cut short.
first=$(ls "$work/www/ds"/*.tar | head -1)
name=$(basename "$first")
cp "$first" "$work/good.tar"
printf 'X' | dd of="$first" bs=1 seek=600 conv=notrunc 2>/dev/null
one_line_error "a damaged shard" "$url$name: checksum " --shards "$url" --cache-dir "$work/cbad"
ls "$work/cbad"/*/*/ | grep -qx "$name" && fail "the damaged shard was kept in the cache"
head -c 1000 "$work/good.tar" >"$first"
one_line_error "a shard cut short" "$url$name: " --shards "$url" --cache-dir "$work/cbad"
cp "$work/good.tar" "$first"
"$conveyor" inspect --shards "$url" --cache-dir "$work/cbad" >"$work/out" 2>&1 || fail "the shard mended: $(tail -3 "$work/out")"
# Read while they download: with every whole shard GET held back for 60 s,
# an epoch reads its samples by range requests alone (some sent ahead, on
# the pipeline's advice), the same bytes as the folder, and the run ends
# without waiting for the downloads (cancelled).
slow_port=$(free_port)
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$slow_port" "$work/log/slow.log" slow &
cut_pid=$!
wait_for_port "$slow_port"
started=$(date +%s)
EPOCHS=1 run slow --shards "http://127.0.0.1:$slow_port/ds/" --cache-dir "$work/cslow"
took=$(( $(date +%s) - started ))
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
[ "$took" -lt 50 ] || fail "the run waited for the held-back downloads ($took s)"
samples=$(grep -c . "$work/list.txt")
read_by_range=$(grep -c 'bytes=[0-9]*-[0-9][0-9]* 206$' "$work/log/slow.log" || true)
[ "$read_by_range" -ge "$samples" ] || fail "$read_by_range range reads for $samples samples: $(tail -3 "$work/log/slow.log")"
same_first_epoch "the samples read by range against the folder's" local slow
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["remote"]; assert r["read_ahead"] > 0, r' "$work/slow.json" \
  || fail "no range read was sent ahead of the worker's read"
ls "$work/cslow"/*/*/ | grep -q '\.tar$' && fail "a held-back shard is in the cache"
ls "$work/cslow"/*/*/ | grep -q '\.part$' && fail "a cancelled download left its .part"

# SIGTERM (as Ctrl-C; a background job here ignores SIGINT) while every shard
# request stalls: the workers' range reads give up within a second or so
# (not after the 30 s stall limit and its retries), status 143.
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$slow_port" "$work/log/stall.log" stall &
cut_pid=$!
wait_for_port "$slow_port"
"$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards "http://127.0.0.1:$slow_port/ds/" --cache-dir "$work/cstall" \
  >"$work/stall.out" 2>&1 &
run_pid=$!
# Until the server holds a request (30 s at most), then a moment for the others.
for _ in $(seq 300); do grep -qs ' stalled$' "$work/log/stall.log" && break; sleep 0.1; done
grep -qs ' stalled$' "$work/log/stall.log" || fail "SIGTERM during stalled range reads: no request reached the server in 30 s"
sleep 0.5
started=$(date +%s%N)
kill -TERM "$run_pid"
rc=0
wait "$run_pid" || rc=$?
waited=$(( ($(date +%s%N) - started) / 1000000 ))
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
[ "$rc" -eq 143 ] || fail "SIGTERM during stalled range reads: status $rc, not 143: $(tail -3 "$work/stall.out")"
[ "$waited" -lt 6000 ] || fail "SIGTERM during stalled range reads: exited after $waited ms"

# A shard missing on the server (deleted after packing) while the rest stream
# in: without --on-error skip the run fails in one line naming its URL; with
# it, that shard's samples are skipped and listed, each naming the URL, and
# every other sample is read.
cp -r "$work/www/ds" "$work/www/gone"
rm "$work/www/gone/shard-000001.tar"
if "$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards "http://127.0.0.1:$port/gone/" --cache-dir "$work/cgone" \
     >"$work/gone.out" 2>"$work/gone.err"; then fail "a missing shard: exit 0"; fi
[ "$(grep -c . "$work/gone.err")" -eq 1 ] || fail "a missing shard: not one line: $(cat "$work/gone.err")"
grep -qF "http://127.0.0.1:$port/gone/shard-000001.tar: HTTP 404" "$work/gone.err" || fail "a missing shard: $(cat "$work/gone.err")"
EPOCHS=1 WORKERS=2 run gone-skip --shards "http://127.0.0.1:$port/gone/" --cache-dir "$work/cgone" --on-error skip
python3 - "$work/gone-skip.json" "$(grep -c . "$work/list.txt")" "http://127.0.0.1:$port/gone/shard-000001.tar: HTTP 404" <<'PY' \
  || fail "a missing shard with --on-error skip: not every sample accounted for"
import json, sys
r, samples, why = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
assert r["epoch_images"][0] + r["epoch_skipped"][0] == samples and r["epoch_skipped"][0] > 0, r
assert len(r["skipped"]) == r["epoch_skipped"][0] and all(why in k["reason"] for k in r["skipped"]), r["skipped"][:2]
assert r["remote"]["failed"] == 1, r["remote"]
PY

# Shards listed by URL (WebDataset's brace form), no manifest: the same epochs
# as the folder, each shard fetched once, cold then warm; a body cut short
# resumes with a Range request though no size was known beforehand; a listed
# URL that is missing, and a pattern that does not expand, fail in one line.
last=$(printf %06d $((shards - 1)))
listed="http://127.0.0.1:$port/ds/shard-{000000..$last}.tar"
count_gets
before=$gets
run listed --shards "$listed" --cache-dir "$work/clist"
run listed-warm --shards "$listed" --cache-dir "$work/clist"
count_gets
[ $((gets - before)) -eq "$shards" ] || fail "listed URLs: $((gets - before)) shard GETs for $shards shards, cold and warm"
compgen -G "$work/clist/*/shards/.conveyor-index" >/dev/null || fail "listed URLs: no index cached beside the shards"
cut_port=$(free_port)
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$cut_port" "$work/log/cutlist.log" &
cut_pid=$!
wait_for_port "$cut_port"
run listed-cut --shards "http://127.0.0.1:$cut_port/ds/shard-{000000..$last}.tar" --cache-dir "$work/clistcut"
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
[ "$(grep -c ' cut$' "$work/log/cutlist.log")" -eq "$shards" ] || fail "listed URLs: the server cut $(grep -c ' cut$' "$work/log/cutlist.log") bodies, not $shards"
[ "$(grep -c 'bytes=[1-9][0-9]*- 206$' "$work/log/cutlist.log")" -eq "$shards" ] || fail "listed URLs: no Range resume per shard: $(cat "$work/log/cutlist.log")"
same_epochs "the listed URLs against the folder" local listed listed-warm listed-cut
missing=$(printf %06d "$shards")
one_line_error "a listed URL that is missing" "http://127.0.0.1:$port/ds/shard-$missing.tar: HTTP 404" \
  --shards "http://127.0.0.1:$port/ds/shard-{000000..$missing}.tar" --cache-dir "$work/clist404"
one_line_error "a pattern that does not expand" "http://***@127.0.0.1:$port/ds/shard-{0..2.tar: a '{' that is never closed" \
  --shards "http://u:s3cret@127.0.0.1:$port/ds/shard-{0..2.tar" --cache-dir "$work/clistbad"
grep -q s3cret "$work/err" && fail "the password was printed"
# Downloads that keep failing with 503 while ranges are served: the samples
# are read by range, none fails. The run lasts about 10 s (a 20 ms step a
# batch), past a download's 6 tries (4 to 8 s of waits): a download that
# failed is tried again, and its shard's samples still read.
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$slow_port" "$work/log/down.log" down &
cut_pid=$!
wait_for_port "$slow_port"
EPOCHS=4 run down --shards "http://127.0.0.1:$slow_port/ds/" --cache-dir "$work/cdown" --compute-ms 20
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
python3 - "$work/log/down.log" <<'PY' || fail "no download was refused 6 times and tried again: $(tail -3 "$work/log/down.log")"
import collections, sys
refused = collections.Counter(l.split()[0] for l in open(sys.argv[1]) if l.endswith(".tar - 503\n"))
assert refused and max(refused.values()) > 6, refused
PY
same_first_epoch "the samples read by range while downloads fail, against the folder's" local down
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["remote"]; assert r["failed"] == 0, r' "$work/down.json" \
  || fail "downloads refused with 503 failed their shards"

# A body changed on the way (the server's file intact): the manifest's
# checksum refuses it, in one line naming the URL, and nothing is cached.
python3 "$(dirname "$0")/http_cut_server.py" "$work/www" "$slow_port" "$work/log/corrupt.log" corrupt &
cut_pid=$!
wait_for_port "$slow_port"
one_line_error "a body changed on the way" "http://127.0.0.1:$slow_port/ds/shard-" --shards "http://127.0.0.1:$slow_port/ds/" --cache-dir "$work/ccorrupt"
grep -q ": checksum [0-9a-f]*, not the " "$work/err" || fail "a body changed on the way: $(cat "$work/err")"
kill "$cut_pid"; wait "$cut_pid" 2>/dev/null || true
cut_pid=
compgen -G "$work/ccorrupt/*/*/*.tar" >/dev/null && fail "a body changed on the way was cached"

# The cache's limit (--cache-gb), half the shards' bytes: a streamed run
# caches what fits and reads the rest by range, the same epochs, the cache
# under the limit; then a second location takes the room, the first's shards
# going; downloading every shard first over the limit fails in one line.
bytes_in() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
total=$(cat "$work/www/ds"/*.tar | wc -c)
limit=$((total / 2))
limit_gb=$(python3 -c "print($limit / 1e9)")
run limit --shards "$url" --cache-dir "$work/climit" --cache-gb "$limit_gb"
run limit-warm --shards "$url" --cache-dir "$work/climit" --cache-gb "$limit_gb"
same_epochs "under --cache-gb, against the folder" local limit limit-warm
python3 - "$work/limit.json" "$work/limit-warm.json" <<'PY' || fail "--cache-gb: the shards that fit were not cached, or the rest not left out"
import json, sys
cold, warm = (json.load(open(f))["remote"] for f in sys.argv[1:])
assert cold["uncached"] >= 1 and "no room for it in the cache" in cold["uncached_why"], cold
assert warm["cached"] >= 1 and warm["uncached"] >= 1, warm
PY
grep -q "^not cached, read by range: .*no room for it in the cache" "$work/limit.out" || fail "--cache-gb: the run does not say why shards were not cached"
[ "$(bytes_in "$work/climit")" -le "$limit" ] || fail "--cache-gb: the cache holds $(bytes_in "$work/climit") bytes, over $limit"
cp -r "$work/www/ds" "$work/www/ds2"
run limit-other --shards "http://127.0.0.1:$port/ds2/" --cache-dir "$work/climit" --cache-gb "$limit_gb"
same_epochs "a second location under --cache-gb" local limit-other
[ "$(bytes_in "$work/climit")" -le "$limit" ] || fail "--cache-gb: the cache holds $(bytes_in "$work/climit") bytes, over $limit"
[ "$(grep -l -r --include=.conveyor-url ds2 "$work/climit" | wc -l)" -eq 1 ] || fail "--cache-gb: no folder for the second location"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["remote"]; assert r["downloaded"] >= 1, r' "$work/limit-other.json" \
  || fail "--cache-gb: the second location found no room: the first's shards were not evicted"
# The second location's folder, leased by its run, keeps every shard it
# downloaded: room was made from the first's. (How many shards stay is not
# fixed: a big one of the first's may go where a small one stays.)
ds2_tars=$(find "$work/climit" -path "$work/climit/*_ds2_*" -name '*.tar' | wc -l)
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["remote"]; assert r["downloaded"] == int(sys.argv[2]), (r, sys.argv[2])' \
  "$work/limit-other.json" "$ds2_tars" || fail "--cache-gb: the second location's downloads are not all in the cache"
one_line_error "--download-first over --cache-gb" "over the cache's limit of $limit" --shards "$url" --cache-dir "$work/climit2" --cache-gb "$limit_gb"

# A cache folder that fills up: a 256 KiB tmpfs (smaller than any shard) in
# a mount namespace of its own, where the system allows one. Streamed, the
# samples are read by range; downloaded first, one line saying so. Then a
# read-only one (a read-only mount, which root cannot write either).
mkdir -p "$work/tiny"
in_tiny() {  # ARGS...: run in a namespace where $work/tiny is a 256 KiB tmpfs
  unshare -r -m sh -c 'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$@"' "$work/tiny" "$@"
}
if in_tiny true 2>/dev/null; then
  in_tiny "$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards "$url" --cache-dir "$work/tiny/c" \
    --json "$work/full.json" >"$work/full.out" 2>&1 || fail "a full cache, streamed: $(tail -3 "$work/full.out")"
  same_first_epoch "a full cache, read by range, against the folder" local full
  if in_tiny "$conveyor" inspect --shards "$url" --cache-dir "$work/tiny/c" >"$work/out" 2>"$work/err"; then fail "a full cache: exit 0"; fi
  [ "$(grep -c . "$work/err")" -eq 1 ] || fail "a full cache: not one line: $(cat "$work/err")"
  grep -q "No space left on device" "$work/err" || fail "a full cache: $(cat "$work/err")"
  # Read-only for root too: a read-only mount.
  if unshare -r -m sh -c 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"' "$work/tiny" \
       "$conveyor" inspect --shards "$url" --cache-dir "$work/tiny/c" >"$work/out" 2>"$work/err"; then
    fail "a read-only cache: exit 0"
  fi
  [ "$(grep -c . "$work/err")" -eq 1 ] || fail "a read-only cache: not one line: $(cat "$work/err")"
  grep -q "$work/tiny/c.*Read-only file system" "$work/err" || fail "a read-only cache: $(cat "$work/err")"
else
  echo "http: no mount namespace here (unshare -r -m): the full-cache check skipped"
fi
echo "http: $shards shards over $url: same samples as the folder, warm cache without shard GETs, 3 processes fetched each once, listed URLs (cut bodies resumed), ranks by shard fetched their own, downloads refused read by range, --cache-gb kept, a full cache, errors in one line"
