#!/usr/bin/env python3
"""What `conveyor pack`'s restart markers (its default), `--max-side N --quality Q` (FFCV's
max_resolution) and `--raw N` (FFCV's RAW) buy: the same photos packed as they are
(`--original-bytes`), with restart markers, re-encoded smaller, and stored as pixels, read side by side.

    python3 apps/peers/pack_formats.py --folder ../shared/data/photos-200 --repeat 5 --rounds 5 \\
        --max-side 256,384
    python3 apps/peers/pack_formats.py --folder ../shared/data/photos-200 --repeat 5 --rounds 5 \\
        --max-side 32 --raw 32 --crop 32     # small images (CIFAR-like): JPEG against pixels

The photos are copied --repeat times (distinct files), listed, and packed with
`conveyor pack --shard-mb 64`: once as they are (--original-bytes), once with
pack's default (JPEGs re-encoded losslessly with restart markers), once per
--max-side N with --quality (default 90), and once per --raw N. Each round runs every packing, in an order rotated from round
to round, as `conveyor bench --shards DIR` for one warm-up epoch and --epochs measured
ones (RandomResizedCrop --crop, default 224, + flip, normalize to float32 on the host backend's
transfer thread, handed over, batch 64, --workers), the shards' pages warm (read just
before). Reported per packing: the shards' size, the pack's wall time (and, beside
it, one epoch's at the median rate), images/s
(median, min-max, from bench's epoch lines over the measured epochs) and CPU per image
(the bench process's user + system time over all its epochs, divided by their images).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from common import copy_photos  # this folder's
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


EPOCH = re.compile(r"^epoch (\d+): (\d+) images in \d+ batches, [\d.]+ s, ([\d.]+) images/s")


def run_bench(conveyor, shards, workers, epochs, crop, out):
    """One bench: (images/s of the measured epochs, CPU seconds per image over all epochs)."""
    cmd = [conveyor, "bench", "--shards", shards, "--workers", str(workers), "--batch", "64", "--crop", str(crop),
           "--augment", "rrc", "--normalize", "float32", "--device", "host", "--host-transfer", "handover",
           "--epochs", str(epochs + 1)]
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"pack_formats: {' '.join(cmd)} failed")
    rows = [m.groups() for m in map(EPOCH.match, open(out).read().splitlines()) if m]
    if len(rows) != epochs + 1:
        sys.exit(f"pack_formats: {' '.join(cmd)}: {len(rows)} epoch lines, not {epochs + 1}")
    measured = rows[1:]  # after the warm-up
    images = sum(int(r[1]) for r in measured)
    seconds = sum(int(r[1]) / float(r[2]) for r in measured)  # the line's images/s: more digits than its seconds
    return images / seconds, (usage.ru_utime + usage.ru_stime) / sum(int(r[1]) for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs per run, after one warm-up epoch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-side", default="256,384", help="comma list of --max-side values to pack with")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--raw", default="", help="comma list of --raw values to pack with (none by default)")
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    a = ap.parse_args()
    conveyor = os.path.join(os.path.abspath(a.build), "apps", "conveyor")
    work = tempfile.mkdtemp(prefix="conveyor-pack-formats-")
    try:
        listfile, files = copy_photos(a.folder, a.repeat, work)
        packings = {"as they are (--original-bytes)": ["--original-bytes"], "restart markers (default)": []}
        for side in filter(None, a.max_side.split(",")):
            packings[f"--max-side {side} --quality {a.quality}"] = ["--max-side", side, "--quality", str(a.quality)]
        for side in filter(None, a.raw.split(",")):
            packings[f"--raw {side}"] = ["--raw", side]
        dirs, sizes, pack_s = {}, {}, {}
        for n, flags in packings.items():
            d = os.path.join(work, f"shards-{len(dirs)}")
            t0 = time.perf_counter()
            subprocess.run([conveyor, "pack", "--list", listfile, "--out", d, "--shard-mb", "64", *flags], check=True,
                           stdout=subprocess.DEVNULL)
            pack_s[n] = time.perf_counter() - t0
            tars = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tar")]
            dirs[n], sizes[n] = (d, tars), sum(os.path.getsize(p) for p in tars) / 1e6
        print(f"{len(files)} samples; {a.rounds} rounds; {a.workers} workers; crop {a.crop}; "
              f"1 warm-up + {a.epochs} epochs a run",
              flush=True)
        names = list(packings)
        results = {n: [] for n in names}
        for r in range(a.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                d, tars = dirs[n]
                warm(tars)
                ips, cpu = run_bench(conveyor, d, a.workers, a.epochs, a.crop, os.path.join(work, "bench.txt"))
                results[n].append((ips, cpu))
                print(f"  round {r + 1}: {n:28s} {ips:8.1f} images/s  {1e3 * cpu:5.2f} ms CPU/image", flush=True)
        print("| packing | shards (MB) | pack (s) | one epoch (s) | images/s, median (min-max) | per core | CPU ms / image |")
        print("|---|---|---|---|---|---|---|")
        for n in names:
            xs = [x[0] for x in results[n]]
            cpu = statistics.median(x[1] for x in results[n])
            print(f"| {n} | {sizes[n]:.1f} | {pack_s[n]:.1f} | {len(files) / statistics.median(xs):.2f} "
                  f"| {statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f}) "
                  f"| {statistics.median(xs) / a.workers:.0f} | {1e3 * cpu:.3f} |")
        base = results[names[0]]
        for n in names[1:]:
            ratios = [x[0] / b[0] for x, b in zip(results[n], base)]
            cpu = [x[1] / b[1] for x, b in zip(results[n], base)]
            print(f"{n} / as they are, per round: images/s " + ", ".join(f"{v:.3f}" for v in ratios) +
                  f" (median {statistics.median(ratios):.3f}); CPU per image " + ", ".join(f"{v:.3f}" for v in cpu) +
                  f" (median {statistics.median(cpu):.3f}); shards {sizes[n] / sizes[names[0]]:.4f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
