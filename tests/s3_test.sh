#!/usr/bin/env bash
# Shards read from s3://: a folder `conveyor pack` wrote, served by
# tests/s3_server.py (S3's path-style GETs, every request's Signature V4
# checked with botocore's signer, itself first checked against signatures AWS
# publishes) on a loopback port, reached through AWS_ENDPOINT_URL_S3 with keys
# from AWS's variables, temporary ones with their session token. Shows: the
# same samples in the same order as the folder read locally (the command's
# epoch digests; with the Python module, every batch's bytes for 1 and 3
# workers); a warm second run served from the cache; an epoch read by signed
# range requests while the downloads are held back; shards listed with
# braces; ranks by shard fetching their own shards alone; a public bucket read
# unsigned; and each of a wrong secret, an unknown key, a missing or wrong
# token, another region, a missing prefix or bucket, a bad bucket name and a
# bad endpoint failing in one line naming the s3:// URL or the variable. No
# key or token appears in any output, --json, trace, state or cache file.
# Usage: s3_test.sh CONVEYOR [PYTHONPATH PYTHON]  (exit 77, skipped, without
# Debian's python3-botocore)
set -euo pipefail
conveyor=$1
pythonpath=${2:-}
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
server_pid= slow_pid=
cleanup() {
  for pid in $server_pid $slow_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/remote_test_lib.sh
. "$here/remote_test_lib.sh"

# Without libcurl an s3:// URL is refused in one line.
if "$conveyor" inspect --shards s3://bucket/ds/ >"$work/out" 2>"$work/err"; then fail "no server, yet exit 0"; fi
if grep -q "built without libcurl" "$work/err"; then
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "without libcurl: more than one line: $(cat "$work/err")"
  echo "s3: this build has no libcurl; said so in one line"
  exit 0
fi
python3 -c 'import botocore' 2>/dev/null || { echo "s3: botocore is not installed (Debian: python3-botocore); skipped"; exit 77; }
python3 "$here/s3_server.py" --self-check || fail "botocore's signer does not give AWS's published signatures"

pack_dataset "$work/root/bucket/ds"
mkdir -p "$work/root/open"
cp -r "$work/root/bucket/ds" "$work/root/open/ds"

key=AKIDCONVEYORTEST secret='wJalr/s3cretKEY+Conveyor' token=Tok3nSessionConveyor
port=$(free_port)
python3 "$here/s3_server.py" "$work/root" "$port" "$work/s3.log" "$key" "$secret" eu-central-1 "$token" --public open &
server_pid=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || fail "s3_server.py did not start"
  sleep 0.1
done
touch "$work/s3.log"

# The job's environment, as an AWS CLI user would have it; nothing else AWS.
unset AWS_ENDPOINT_URL AWS_DEFAULT_REGION AWS_PROFILE
export AWS_ENDPOINT_URL_S3=http://127.0.0.1:$port AWS_REGION=eu-central-1
export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_SESSION_TOKEN=$token

shard_gets() { grep -c "^GET /bucket/ds/[^ ]*\.tar - 200 " "$work/s3.log" || true; }

# Cold, then warm: the folder's epochs; the warm run fetches no shard.
run local --shards "$work/root/bucket/ds"
run cold --shards s3://bucket/ds/ --cache-dir "$work/cache" --trace "$work/cold.trace"
[ "$(shard_gets)" -eq "$shards" ] || fail "cold run: $(shard_gets) shard GETs for $shards shards"
run warm --shards s3://bucket/ds/ --cache-dir "$work/cache"
[ "$(shard_gets)" -eq "$shards" ] || fail "warm run fetched shards again: $(shard_gets) GETs for $shards shards"
same_epochs "s3:// against the folder, cold and warm" local cold warm
grep -q ' 403 \| 400 ' "$work/s3.log" && fail "a signed request was refused: $(grep ' 403 \| 400 ' "$work/s3.log" | head -3)"

# Read while they download: with every whole GET held back for 60 s, an
# epoch reads its samples by signed range requests alone, the same bytes as
# the folder, and the run ends without waiting for the downloads.
slow_port=$(free_port)
python3 "$here/s3_server.py" "$work/root" "$slow_port" "$work/slow.log" "$key" "$secret" eu-central-1 "$token" --slow-whole &
slow_pid=$!
wait_for_port "$slow_port"
started=$(date +%s)
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$slow_port EPOCHS=1 run slow --shards s3://bucket/ds/ --cache-dir "$work/cslow"
took=$(( $(date +%s) - started ))
kill "$slow_pid"; wait "$slow_pid" 2>/dev/null || true
[ "$took" -lt 50 ] || fail "the run waited for the held-back downloads ($took s)"
samples=$(grep -c . "$work/list.txt")
by_range=$(grep -c '^GET /bucket/ds/shard-[0-9]*\.tar bytes=[0-9]*-[0-9]* 206 ' "$work/slow.log" || true)
[ "$by_range" -ge "$samples" ] || fail "$by_range signed range reads for $samples samples: $(tail -3 "$work/slow.log")"
grep -q ' 40[03] ' "$work/slow.log" && fail "a signed range read was refused: $(grep ' 40[03] ' "$work/slow.log" | head -3)"
python3 - "$work/local.json" "$work/slow.json" "$samples" <<'PY' || fail "the samples read by range differ from the folder's, or --json does not count them"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["epoch_digest"][0] == b["epoch_digest"][0], (a["epoch_digest"], b["epoch_digest"])
r = b["remote"]
assert r["range_reads"] >= int(sys.argv[3]) and r["cached"] == 0 and r["downloaded"] == 0 and r["network_wait_s"] > 0, r
PY

# Listed with braces (no manifest), and 4 ranks by shard, each fetching its own shards alone.
last=$(printf %06d $((shards - 1)))
run listed --shards "s3://bucket/ds/shard-{000000..$last}.tar" --cache-dir "$work/clist"
same_epochs "listed s3:// URLs against the folder" local listed
for r in 0 1 2 3; do
  EPOCHS=1 WORKERS=2 run "rank$r-local" --shards "$work/root/bucket/ds" --rank-by-shard --rank "$r" --world-size 4
  logged=$(wc -l <"$work/s3.log")
  EPOCHS=1 WORKERS=2 run "rank$r-s3" --shards s3://bucket/ds/ --rank-by-shard --rank "$r" --world-size 4 --cache-dir "$work/crank$r"
  same_epochs "rank $r of 4 by shard, s3:// against the folder" "rank$r-local" "rank$r-s3"
  cached_own_only "rank $r of 4 by shard" "$work/crank$r" "$r" 4
  # Every shard it asked for, whole or by range, is its own, and it asked for each of them.
  asked=$(tail -n +"$((logged + 1))" "$work/s3.log" | sed -n 's|^GET /bucket/ds/\(shard-[0-9]*\.tar\) .*|\1|p' | sort -u)
  [ "$asked" = "$(own_shards "$r" 4)" ] || fail "rank $r of 4 by shard asked for $(echo $asked), not its $(echo $(own_shards "$r" 4))"
done

# A public bucket, read with no keys at all: unsigned requests.
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
  "$conveyor" run --epochs 1 --workers 2 --batch 5 --crop 32 --shards s3://open/ds/ --cache-dir "$work/copen" \
  --json "$work/open.json" >"$work/open.out" 2>&1 || fail "a public bucket, unsigned: $(tail -3 "$work/open.out")"
grep -q "^GET /open/ds/.conveyor-manifest - 200 " "$work/s3.log" || fail "the public bucket's manifest was not served"

# The bytes of every batch from Python, for 1 and 3 workers, and its state holds no key.
if [ -n "$pythonpath" ]; then
  PYTHONPATH=$pythonpath "$python" - "$work/root/bucket/ds" "$work/pycache" "$secret" "$token" <<'PY' || fail "Python: s3:// batches differ from the folder's"
import hashlib, os, pickle, sys
import numpy as np
import conveyor
local, cache, secret, token = sys.argv[1:]
def run(loader):
    return [(images.index, hashlib.sha1(np.asarray(images).tobytes() + np.asarray(labels).tobytes()).hexdigest())
            for images, labels in loader]
for workers in (1, 3):
    kw = dict(batch_size=4, crop=16, seed=5, workers=workers, device="cpu")
    a = run(conveyor.Loader(shards=local, **kw))
    b = run(conveyor.Loader(shards="s3://bucket/ds/", cache_dir=cache, **kw))
    assert a == b and len(a) > 2, (workers, a[:2], b[:2])
first = conveyor.Loader(shards="s3://bucket/ds/", cache_dir=cache + "-first", download_first=True, **kw)
assert first.download_first and "remote" not in first.stats() and run(first) == run(conveyor.Loader(shards=local, **kw))
loader = conveyor.Loader(shards="s3://bucket/ds/", cache_dir=cache, batch_size=4, crop=16, device="cpu")
it = iter(loader)
next(it)
remote = loader.stats()["remote"]
assert remote["shards"] > 1 and remote["failed"] == 0 and remote["range_reads"] >= 0, remote
state = pickle.dumps(loader.state_dict()) + repr(loader).encode() + repr(loader.stats()).encode()
assert secret.encode() not in state and token.encode() not in state, "a key in the state"
# A child of fork() that drops its copy of a loader whose shards stream in
# leaves the parent's download threads and connections alone, and the parent
# reads on.
forked = conveyor.Loader(shards="s3://bucket/ds/", cache_dir=cache + "-fork", **kw)
pid = os.fork()
if pid == 0:
    del forked
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
assert run(forked) == run(conveyor.Loader(shards=local, **kw))
try:
    conveyor.Loader(shards="s3://bucket/none/", cache_dir=cache, device="cpu")
    raise SystemExit("a missing prefix raised nothing")
except ValueError as e:
    assert "s3://bucket/none/.conveyor-manifest: HTTP 404 (NoSuchKey)" in str(e), e
PY
fi

# Errors: one line naming the s3:// URL or the variable, a non-zero exit.
m=s3://bucket/ds/.conveyor-manifest
ENV_ARGS="AWS_SECRET_ACCESS_KEY=wrong" one_line_error "a wrong secret" "$m: HTTP 403 (SignatureDoesNotMatch)" --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="AWS_ACCESS_KEY_ID=AKIDNOBODY" one_line_error "an unknown key" "$m: HTTP 403 (InvalidAccessKeyId)" --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="-u AWS_SESSION_TOKEN" one_line_error "no session token" "$m: HTTP 403 (InvalidToken)" --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="AWS_SESSION_TOKEN=stale" one_line_error "a wrong session token" "$m: HTTP 403 (InvalidToken)" --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="AWS_REGION=us-west-2" one_line_error "another region" \
  "$m: HTTP 400 (AuthorizationHeaderMalformed); the bucket is in another region than us-west-2: set AWS_REGION" --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="-u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY" one_line_error "no keys for a private bucket" \
  "$m: HTTP 403 (AccessDenied); the request went unsigned: AWS_ACCESS_KEY_ID is not set" --shards s3://bucket/ds/ --cache-dir "$work/ce"
one_line_error "a missing prefix" "s3://bucket/none/.conveyor-manifest: HTTP 404 (NoSuchKey)" --shards s3://bucket/none/ --cache-dir "$work/ce"
one_line_error "a missing bucket" "s3://nobucket/ds/.conveyor-manifest: HTTP 404 (NoSuchBucket)" --shards s3://nobucket/ds/ --cache-dir "$work/ce"
one_line_error "a bad bucket name" "s3://Bad_Bucket/ds/: not a bucket name" --shards s3://Bad_Bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="AWS_ENDPOINT_URL_S3=minio:9000" one_line_error "a bad endpoint" "AWS_ENDPOINT_URL_S3=minio:9000: not an http:// or https:// URL" \
  --shards s3://bucket/ds/ --cache-dir "$work/ce"
ENV_ARGS="AWS_SECRET_ACCESS_KEY=" one_line_error "a key id without a secret" "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" \
  --shards s3://bucket/ds/ --cache-dir "$work/ce"

# No key or token anywhere the job wrote.
if grep -rlF -e "$secret" -e "$token" "$work"/*.out "$work"/*.json "$work"/*.trace "$work/errors.txt" \
     "$work/cache" "$work/clist" "$work"/crank* "$work/copen" "$work/cslow" 2>/dev/null; then
  fail "a key or token was written out"
fi
echo "s3: $shards shards over s3://bucket/ds/ (signed, session token): same samples as the folder, warm cache without shard GETs, listed URLs, ranks by shard, a public bucket unsigned, 11 errors in one line, no key written out"
