#!/usr/bin/env python3
"""Files against tar shards, side by side: images/s and file opens per epoch,
with a warm page cache and with the data's pages evicted before each epoch.

    python3 apps/peers/shards_bench.py --folder ../shared/data/photos-200 --repeat 5 --rounds 3

The photos are copied --repeat times (distinct files, as a real dataset has), listed,
and packed with `conveyor pack --shard-mb 64`. Each round runs, in an order rotated
from round to round: files warm, files cold, shards warm, shards cold; each run is
`conveyor bench` for one epoch (RandomResizedCrop 224 + flip, batch 64, --workers).
Warm: every byte read once just before. Cold: posix_fadvise(POSIX_FADV_DONTNEED) on
every file (or shard) just before, since dropping the whole page cache may be refused.
Shards run cold twice: with read-ahead advice (the default) and with `--read-ahead off`.
Reported: images/s (median, min-max) and file opens per epoch (bench --json's count).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from common import conveyor_binary, copy_photos, photo_bench_arguments  # this folder's



def evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)  # DONTNEED leaves dirty pages (fresh copies) in the cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def main():
    ap = photo_bench_arguments(__doc__, rounds=3)
    ap.add_argument("--work", help="folder for the copies and shards (default: a temporary one)")
    a = ap.parse_args()
    conveyor = conveyor_binary(a)
    work = a.work or tempfile.mkdtemp(prefix="conveyor-shards-")
    try:
        listfile, files = copy_photos(a.folder, a.repeat, work)
        shards_dir = os.path.join(work, "shards")
        if os.path.exists(shards_dir):
            shutil.rmtree(shards_dir)
        subprocess.run([conveyor, "pack", "--list", listfile, "--out", shards_dir, "--shard-mb", "64"], check=True,
                       stdout=subprocess.DEVNULL)
        shards = sorted(os.path.join(shards_dir, f) for f in os.listdir(shards_dir) if f.endswith(".tar"))
        data_mb = sum(os.path.getsize(p) for p in files) / 1e6
        print(f"{len(files)} files ({data_mb:.0f} MB) and {len(shards)} shards; {a.rounds} rounds; "
              f"{a.workers} workers", flush=True)
        runs = {
            "files, warm": (["--list", listfile], files, warm),
            "files, cold": (["--list", listfile], files, evict),
            "shards, warm": (["--shards", shards_dir], shards, warm),
            "shards, cold": (["--shards", shards_dir], shards, evict),
            "shards, cold, no read-ahead": (["--shards", shards_dir, "--read-ahead", "off"], shards, evict),
        }
        names = list(runs)
        results = {n: [] for n in names}
        for r in range(a.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                flags, paths, prepare = runs[n]
                prepare(paths)
                out = os.path.join(work, "bench.json")
                subprocess.run([conveyor, "bench", *flags, "--workers", str(a.workers), "--batch", "64", "--crop", "224",
                                "--augment", "rrc", "--epochs", "1", "--json", out], check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    j = json.load(f)
                results[n].append((j["images_per_s"], j["file_opens"]))
                print(f"  round {r + 1}: {n:27s} {j['images_per_s']:8.1f} images/s  {j['file_opens']:6d} opens", flush=True)
        print("| dataset, page cache | images/s, median (min-max) | file opens per epoch |")
        print("|---|---|---|")
        for n in names:
            xs = [x[0] for x in results[n]]
            print(f"| {n} | {statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f}) | {results[n][0][1]} |")
        for num, den in (("shards, warm", "files, warm"), ("shards, cold", "files, cold"),
                         ("shards, cold, no read-ahead", "files, cold"), ("shards, cold", "shards, cold, no read-ahead")):
            ratios = [s[0] / f[0] for s, f in zip(results[num], results[den])]
            print(f"{num} / {den}, per round: " + ", ".join(f"{x:.3f}" for x in ratios) +
                  f" (median {statistics.median(ratios):.3f})")
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
