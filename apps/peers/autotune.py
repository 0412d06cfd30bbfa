#!/usr/bin/env python3
"""`--workers auto`, `--host-queue auto` and `--device-queue auto` against the best fixed setting `conveyor sweep`
finds, side by side.

    python3 apps/peers/autotune.py --folder ../shared/data/photos-200 --repeat 20 --rounds 5

Workloads over a list of the photos (each --repeat times):
- photos (--workers): RandomResizedCrop 224 + flip, normalize to float32 on the host
  backend's transfer thread, handed over, batch 64 (the CPU decodes: the answer is the cores);
- synthetic (--workers): `--synthetic-ms 2` (each worker sleeps 2 ms a sample: 500
  samples/s, no CPU) and `--compute-ms 16` (the consumer sleeps 16 ms a batch of 64:
  4000 samples/s), so 8 workers keep up and more cannot help: a known answer;
- stalls (--host-queue): 4 workers sleep 0.2 ms a sample, one sample in 256 stalls 60 ms
  more (`--synthetic-stall-ms`), the consumer sleeps 4 ms a batch of 8: a stall is 15 of
  its steps, which the batches finished ahead of it must cover, so deeper queues pay up
  to about 16 and no further: a known answer;
- photos-queue (--host-queue): the photos workload at 2 workers, where no stall calls
  for depth: auto must cost nothing.
- bursts (--device-queue): 2 workers sleep 0.02 ms a sample, each batch of 8 crosses a
  simulated 1.2 GB/s link (about 1 ms), and the consumer's steps come in bursts: every
  16th takes 40 ms (`--compute-stall-ms`), the others nothing. The transfer keeps up on
  average, but after a long step the next 15 batches must already be across: deeper
  device queues pay up to about 16 and no further, and host queues not at all: a known
  answer;
- photos-device-queue (--device-queue): the photos workload at 2 workers: auto must cost
  nothing.
Each round runs `conveyor sweep` over the fixed settings (one process per point) and
`conveyor bench` with the knob on auto, the order alternating from round to round.
Every run is --epochs long from a cold start, so auto's tuning counts against it.
Reported per workload: the fixed settings' images/s (median over rounds), the best,
auto's images/s over the whole run, over its first epoch and over the later ones
(the median of their epoch lines), its ratios to the round's best (median, per
round), and the setting it has at the end.
"""
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

from common import photo_bench_arguments, conveyor_binary  # this folder's

EPOCH = re.compile(r"^epoch (\d+): (\d+) images in \d+ batches, [\d.]+ s, ([\d.]+) images/s")
TOTAL = re.compile(r"^bench: ([\d.]+) images/s over")
PHOTOS = ["--batch", "64", "--crop", "224", "--augment", "rrc", "--normalize", "float32", "--device", "host",
          "--host-transfer", "handover"]
WORKERS = {"knob": "workers", "tuned": re.compile(r"^workers tuned: (\d+) working now")}
QUEUE = {"knob": "host_queue", "tuned": re.compile(r"^host queue tuned: depth (\d+) of")}
DEVICE_QUEUE = {"knob": "device_queue", "tuned": re.compile(r"^device queue tuned: depth (\d+) of")}
WORKLOADS = {
    "photos": dict(WORKERS, flags=PHOTOS, fixed=None, auto=["--workers", "auto"]),  # fixed: 1 .. auto's ceiling
    "synthetic": dict(WORKERS, flags=["--batch", "64", "--synthetic-ms", "2", "--compute-ms", "16", "--device", "host"],
                      fixed=[4, 6, 7, 8, 10, 12, 16], auto=["--workers", "auto", "--max-workers", "16"]),
    "stalls": dict(QUEUE, flags=["--batch", "8", "--workers", "4", "--synthetic-ms", "0.2", "--synthetic-stall-ms", "60",
                                 "--synthetic-stall-every", "256", "--compute-ms", "4", "--device", "host"],
                   fixed=[2, 4, 8, 12, 16, 24], auto=["--host-queue", "auto", "--max-host-queue", "24"]),
    "photos-queue": dict(QUEUE, flags=PHOTOS + ["--workers", "2"], fixed=[1, 2, 4, 8],
                         auto=["--host-queue", "auto", "--max-host-queue", "8"]),
    "bursts": dict(DEVICE_QUEUE, flags=["--batch", "8", "--workers", "2", "--synthetic-ms", "0.02", "--device", "host",
                                        "--link-gbps", "1.2", "--compute-stall-ms", "40", "--compute-stall-every", "16"],
                   fixed=[2, 4, 8, 12, 16, 24], auto=["--device-queue", "auto", "--max-device-queue", "24"]),
    "photos-device-queue": dict(DEVICE_QUEUE, flags=PHOTOS + ["--workers", "2"], fixed=[1, 2, 4, 8],
                                auto=["--device-queue", "auto", "--max-device-queue", "8"]),
}


def sweep(conveyor, lst, w, epochs, counts, tmp):
    out = os.path.join(tmp, "sweep.csv")
    flag = "--" + w["knob"].replace("_", "-")
    cmd = [conveyor, "sweep", "--list", lst, "--epochs", str(epochs), flag, ",".join(map(str, counts)),
           "--csv", out] + w["flags"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = list(csv.DictReader(open(out)))
    if not all(r["ok"] == "1" for r in rows):
        sys.exit(f"autotune: a sweep point failed: {rows}")
    return {int(r[w["knob"]]): float(r["images_per_s"]) for r in rows}


def auto(conveyor, lst, w, epochs):
    cmd = [conveyor, "bench", "--list", lst, "--epochs", str(epochs)] + w["auto"] + w["flags"]
    lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
    epochs_rate = [float(m.group(3)) for m in map(EPOCH.match, lines) if m]
    total = [float(m.group(1)) for m in map(TOTAL.match, lines) if m]
    tuned = [int(m.group(1)) for m in map(w["tuned"].match, lines) if m]
    if len(epochs_rate) != epochs or not total or not tuned:
        sys.exit(f"autotune: {' '.join(cmd)}: unexpected output:\n" + "\n".join(lines[-20:]))
    return total[0], epochs_rate[0], statistics.median(epochs_rate[1:]), tuned[-1]


def main():
    ap = photo_bench_arguments(__doc__, rounds=5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--only", default="photos,synthetic,stalls,photos-queue,bursts,photos-device-queue")
    args = ap.parse_args()
    conveyor = conveyor_binary(args)
    photos = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder) if f.lower().endswith((".jpeg", ".jpg")))
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        lst = os.path.join(tmp, "photos.txt")
        with open(lst, "w") as f:
            for _ in range(args.repeat):
                for p in photos:
                    f.write(f"{os.path.abspath(p)} 0\n")
        for name in args.only.split(","):
            w = WORKLOADS[name]
            counts = w["fixed"] or list(range(1, 2 * cores + 1))
            fixed = {n: [] for n in counts}
            autos, firsts, laters, chosen, ratios, later_ratios = [], [], [], [], [], []
            for r in range(args.rounds):
                runs = ["sweep", "auto"] if r % 2 == 0 else ["auto", "sweep"]
                for kind in runs:
                    if kind == "sweep":
                        got = sweep(conveyor, lst, w, args.epochs, counts, tmp)
                        for n in counts:
                            fixed[n].append(got[n])
                        best_round = max(got.values())
                    else:
                        total, first, later, n = auto(conveyor, lst, w, args.epochs)
                        autos.append(total)
                        firsts.append(first)
                        laters.append(later)
                        chosen.append(n)
                ratios.append(autos[-1] / best_round)
                later_ratios.append(laters[-1] / best_round)
                print(f"{name} round {r + 1}: best fixed {best_round:.0f} images/s "
                      f"({w['knob']} {max(got, key=got.get)}), auto {autos[-1]:.0f} (first epoch {firsts[-1]:.0f}, later "
                      f"{laters[-1]:.0f}, {chosen[-1]} at the end): {ratios[-1]:.3f}, later {later_ratios[-1]:.3f}",
                      flush=True)
            print(f"\n{name}: {len(photos) * args.repeat} samples an epoch, {args.epochs} epochs, {cores} cores")
            print(f"| {w['knob']} | images/s, median (min-max) |")
            print("|---|---|")
            for n in counts:
                v = fixed[n]
                print(f"| {n} | {statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f}) |")
            print(f"| auto | {statistics.median(autos):.0f} ({min(autos):.0f}-{max(autos):.0f}); first epoch "
                  f"{statistics.median(firsts):.0f}, later epochs {statistics.median(laters):.0f}; at the end: "
                  f"{sorted(chosen)} |")
            print(f"auto over the whole run / the round's best fixed: median {statistics.median(ratios):.3f}, per round "
                  + ", ".join(f"{x:.3f}" for x in ratios))
            print(f"auto's epochs after the first / the round's best fixed (whole run): median "
                  f"{statistics.median(later_ratios):.3f}, per round " + ", ".join(f"{x:.3f}" for x in later_ratios)
                  + "\n", flush=True)


if __name__ == "__main__":
    main()
