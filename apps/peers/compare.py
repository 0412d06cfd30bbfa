#!/usr/bin/env python3
"""Conveyor against what users run today, side by side on this machine.

    python3 apps/peers/compare.py --folder ../shared/data/photos-200 --rounds 3

Systems, each given the same list file, the same transforms (--recipe: rrc,
RandomResizedCrop 224 + horizontal flip, or trivialaugment, which adds
TrivialAugmentWide and RandomErasing(0.1); then normalize to float32; batch
64) and the same number of workers:
  conveyor            `conveyor bench` (host backend handing the workers' buffers to
                      the consumer, as CPU training does; normalize on the transfer thread)
  conveyor-1          the same with 1 worker (the scaling figure: conveyor / conveyor-1)
  conveyor-wn(-1)     only with --only: the workers normalize (--normalize-in workers)
  conveyor-packed     `conveyor bench --shards`: the list packed first by `conveyor pack`
                      (JPEGs re-encoded losslessly with restart markers, its default)
  conveyor-packed-original  the same shards packed with --original-bytes (the files' bytes)
  conveyor-python     conveyor.torch.Loader from Python (conveyor_python.py): the same
                      pipeline, tensors through DLPack (needs BUILD/python: CONVEYOR_PYTHON)
  dataloader-0/1/2    PyTorch's DataLoader with num_workers 0, 1, 2 (pin_memory off: no GPU)
  two-queue           decode threads -> Queue(12) -> transfer thread -> Queue(1) -> consumer
and a reference: libjpeg-turbo full-size decode alone (no resize, no augment)
with 1 and 2 threads (conveyor-bench-images full-decode).

Each round runs every system once, in an order rotated from round to round so
machine drift hits all of them; each run does one warm-up epoch, then
--epochs measured ones. Reported per system: images/s (median of the rounds,
with min-max), the ratio to Conveyor, CPU seconds per image over the measured
epochs, and the peak RSS summed over the whole process tree (DataLoader's
worker processes included; pages shared between them count once per process).

From --folder the harness builds the list itself, under file names with spaces
and apostrophes (symlinks), as real datasets have; every image appears
--repeat times per epoch so an epoch lasts long enough to time.
This script needs only the standard library; the PyTorch benchmarks run under
the first interpreter that can import torch, torchvision and PIL (on our
machines the first python3 on PATH may be one without them).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from common import RECIPES  # this folder's: the recipes every system runs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER_EPOCH = re.compile(r"^epoch (\d+): (\d+) images in ([\d.]+) s")
CONVEYOR_EPOCH = re.compile(r"^epoch (\d+): (\d+) images in \d+ batches, ([\d.]+) s")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def torch_python(explicit):
    """The first interpreter that imports torch, torchvision and PIL."""
    candidates = [explicit] if explicit else []
    candidates += [sys.executable, "/usr/bin/python3", shutil.which("python3") or ""]
    for py in candidates:
        if py and os.path.exists(py):
            ok = subprocess.run([py, "-c", "import torch, torchvision, PIL"], capture_output=True).returncode == 0
            if ok:
                return py
    sys.exit("compare.py: no python3 here imports torch, torchvision and PIL "
             "(apt-get install python3-torch python3-torchvision python3-pil), tried: " + ", ".join(c for c in candidates if c))


def make_list(folder, repeat, work):
    """Symlinks under names with spaces and apostrophes, and a list file over them."""
    names = sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))
    if not names:
        sys.exit(f"compare.py: {folder}: no files")
    linkdir = os.path.join(work, "it's a folder")
    os.makedirs(linkdir)
    lines = []
    for i, name in enumerate(names):
        link = f"photo {i:04d} o'{name}"
        os.symlink(os.path.abspath(os.path.join(folder, name)), os.path.join(linkdir, link))
        lines.append(f"it's a folder/{link} {i % 1000}")
    path = os.path.join(work, "train list.txt")
    with open(path, "w") as f:
        for _ in range(repeat):
            f.write("\n".join(lines) + "\n")
    return path, len(names) * repeat


def tree(pid):
    """pid and its descendants, from /proc."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(d))
        except OSError:
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_usage(pid):
    """(CPU seconds, RSS bytes) of the tree: each live process's user+system time,
    plus the root's waited-for children, and the sum of resident pages."""
    cpu, rss = 0.0, 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / CLK_TCK
            if p == pid:
                cpu += (int(fields[13]) + int(fields[14])) / CLK_TCK
            rss += int(fields[21]) * PAGE
        except (OSError, IndexError):
            continue
    return cpu, rss


def run(cmd, epochs_pattern, measured):
    """Runs cmd; returns (images/s, CPU s/image, peak tree RSS MiB) over the epochs after the first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_usage(proc.pid)[1])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    epochs, cpu_marks = [], []
    for line in proc.stdout:
        m = epochs_pattern.match(line)
        if m:
            cpu_marks.append(tree_usage(proc.pid)[0])  # read as the epoch's line arrives
            epochs.append((int(m.group(2)), float(m.group(3))))
    err = proc.stderr.read()
    rc = proc.wait()
    done.set()
    sampler.join()
    if rc != 0 or len(epochs) != measured + 1:
        raise RuntimeError(f"{' '.join(cmd)}: status {rc}, {len(epochs)} epoch lines: {err.strip()[-300:]}")
    images = sum(n for n, _ in epochs[1:])
    seconds = sum(s for _, s in epochs[1:])
    cpu = cpu_marks[-1] - cpu_marks[0]
    return images / seconds, cpu / images, peak[0] / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--folder", help="a folder of images (the list is built under awkward names)")
    src.add_argument("--list", help="a list file, `path label` per line")
    ap.add_argument("--repeat", type=int, default=5, help="--folder: times each image appears per epoch")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="rrc",
                    help="the transforms every system runs (common.py's RECIPES), then normalize to float32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs per run, after one warm-up epoch")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"), help="Conveyor build folder")
    ap.add_argument("--python", help="interpreter with torch, torchvision and PIL (default: the first found)")
    ap.add_argument("--only", help="comma list of systems to run")
    ap.add_argument("--device", choices=["host", "cuda"], default="host",
                    help="cuda (a GPU machine): Conveyor's batches go to the GPU and are normalized there; "
                         "DataLoader pins its batches (pin_memory=True), copies them non_blocking and "
                         "normalizes on the GPU")
    ap.add_argument("--out", help="also write the table (Markdown) to this file")
    a = ap.parse_args()

    py = torch_python(a.python)
    a.build = os.path.abspath(a.build)  # the systems run from apps/peers/
    conveyor = os.path.join(a.build, "apps", "conveyor")
    bench_images = os.path.join(a.build, "apps", "conveyor-bench-images")
    for b in (conveyor, bench_images):
        if not os.access(b, os.X_OK):
            sys.exit(f"compare.py: {b} is not built (cmake --build {a.build})")
    work = tempfile.mkdtemp(prefix="conveyor-peers-")
    try:
        if a.folder:
            listfile, size = make_list(a.folder, a.repeat, work)
        else:
            listfile, size = os.path.abspath(a.list), sum(1 for l in open(a.list) if l.strip() and not l.startswith("#"))
        total = a.epochs + 1
        w = str(a.workers)
        gpu = a.device == "cuda"
        packs = {"conveyor-packed": [], "conveyor-packed-original": ["--original-bytes"]}  # made when wanted
        def conveyor_bench(workers, normalize_in="device", source=None):
            where = ["--device", "cuda"] if gpu else ["--device", "host", "--host-transfer", "handover"]
            return ([conveyor, "bench", *(source or ["--list", listfile]), "--workers", workers, "--batch", "64",
                     "--transforms", RECIPES[a.recipe], "--normalize", "float32", "--normalize-in", normalize_in] +
                    where + ["--epochs", str(total)], CONVEYOR_EPOCH)
        peer_device = (["--device", "cuda"] if gpu else []) + ["--recipe", a.recipe]
        def dataloader(workers):
            return ([py, "torch_dataloader.py", "--list", listfile, "--workers", workers, "--epochs", str(total)] + peer_device,
                    PEER_EPOCH)

        systems = {
            "conveyor": conveyor_bench(w),
            "conveyor-1": conveyor_bench("1"),
            **{n: conveyor_bench(w, source=["--shards", os.path.join(work, n)]) for n in packs},
            "dataloader-0": dataloader("0"),
            "dataloader-1": dataloader("1"),
            "dataloader-2": dataloader("2"),
            "conveyor-python": ([py, "conveyor_python.py", "--list", listfile, "--workers", w, "--epochs", str(total),
                                 "--module", os.path.join(a.build, "python")] + peer_device, PEER_EPOCH),
            "two-queue": ([py, "two_queue.py", "--list", listfile, "--workers", w, "--epochs", str(total),
                           "--recipe", a.recipe], PEER_EPOCH),
            "decode-only-1": ([bench_images, "full-decode", listfile, "--threads", "1", "--epochs", str(total)], PEER_EPOCH),
            "decode-only-2": ([bench_images, "full-decode", listfile, "--threads", "2", "--epochs", str(total)], PEER_EPOCH),
        }
        if a.workers != 2:
            systems["dataloader-" + w] = dataloader(w)
        # Run only when --only names them: the workers normalizing (no work left
        # on the transfer thread), with 2 and 1 workers.
        extras = {"conveyor-wn": conveyor_bench(w, "workers"), "conveyor-wn-1": conveyor_bench("1", "workers")}
        wanted = a.only.split(",") if a.only else list(systems)
        unknown = [n for n in wanted if n not in systems and n not in extras]
        if unknown:
            sys.exit(f"compare: unknown system(s) {', '.join(unknown)}; known: {', '.join(list(systems) + list(extras))}")
        systems.update(extras)
        names = [n for n in wanted if n in systems]
        for n in names:
            if n in packs:
                subprocess.run([conveyor, "pack", "--list", listfile, "--out", os.path.join(work, n), *packs[n]],
                               check=True, stdout=subprocess.DEVNULL)
        results = {n: [] for n in names}
        print(f"{size} samples per epoch ({listfile}); {a.rounds} rounds x {len(names)} systems, "
              f"1 warm-up + {a.epochs} measured epochs each; torch from {py}", flush=True)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                cmd, pattern = systems[n]
                ips, cpu, rss = run(cmd, pattern, a.epochs)
                results[n].append((ips, cpu, rss))
                print(f"  round {r + 1}: {n:14s} {ips:8.1f} images/s  {1e3 * cpu:6.2f} ms CPU/image  {rss:7.1f} MiB", flush=True)
        ref = statistics.median(x[0] for x in results["conveyor"]) if "conveyor" in results else None
        rows = ["| system | images/s, median (min-max) | ratio to Conveyor | CPU ms / image | peak RSS, process tree (MiB) |",
                "|---|---|---|---|---|"]
        for n in names:
            xs = results[n]
            ips = statistics.median(x[0] for x in xs)
            rows.append(f"| {n} | {ips:.0f} ({min(x[0] for x in xs):.0f}-{max(x[0] for x in xs):.0f}) | "
                        f"{(ips / ref) if ref else float('nan'):.2f} | {1e3 * statistics.median(x[1] for x in xs):.2f} | "
                        f"{max(x[2] for x in xs):.0f} |")
        table = "\n".join(rows)
        print(table)
        if a.out:
            with open(a.out, "w") as f:
                f.write(table + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
