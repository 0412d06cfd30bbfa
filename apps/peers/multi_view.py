"""DINO's multi-crop (2 global crops, 6 local ones) from Conveyor against DataLoader, side by side.

    python3 multi_view.py --folder ../shared/data/photos-200 [--repeat 2] [--rounds 3] [--workers 2]
                          [--build build/release] [--module build/debug/python]

Every system reads the same list of photos and makes, for each one, DINO's
views (DataAugmentationDINO, as torchvision ports write it: torchvision's
GaussianBlur(23, sigma=(0.1, 2)) for DINO's PIL blur, and bilinear crops on both
sides where DINO asks for bicubic, which Conveyor does not have):
    global 1: RandomResizedCrop(224, scale=(0.4, 1)), flip, ColorJitter(0.4, 0.4, 0.2, 0.1) with p=0.8,
              RandomGrayscale(0.2), GaussianBlur with p=1
    global 2: the same, GaussianBlur with p=0.1, then RandomSolarize(128, p=0.2)
    local x6: RandomResizedCrop(96, scale=(0.05, 0.4)), flip, the colour ops, GaussianBlur with p=0.5
as uint8 images, batch 32 (DINO normalizes each view in the step):
  conveyor         conveyor bench --views (C++), workers as --workers
  conveyor-python  conveyor.Loader(views=...), the same text
  dataloader       torch DataLoader(num_workers=--workers, persistent_workers=True) over a Dataset that
                   opens each image once (PIL) and applies the three torchvision Composes, PILToTensor last
Each round runs every system once, in a rotated order; each run takes one warm-up epoch and
--epochs measured ones. Prints each run's samples/s and, per system, the median and its ratio to
DataLoader's, round by round.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import copy_photos, load_rgb, read_list  # noqa: E402  (this folder's)

JITTER = "RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8), RandomGrayscale(0.2)"
BLUR = "GaussianBlur(23, sigma=(0.1, 2), p={})"
VIEWS = (f"1: RandomResizedCrop(224, scale=(0.4, 1)), {JITTER}, {BLUR.format(1.0)}; "
         f"1: RandomResizedCrop(224, scale=(0.4, 1)), {JITTER}, {BLUR.format(0.1)}, RandomSolarize(128, p=0.2); "
         f"6: RandomResizedCrop(96, scale=(0.05, 0.4)), {JITTER}, {BLUR.format(0.5)}")
LOCAL = 6


def torchvision_views():
    import torchvision.transforms as T

    def chain(size, scale, blur, solarize=False):
        ops = [T.RandomResizedCrop(size, scale=scale), T.RandomHorizontalFlip(),
               T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), T.RandomGrayscale(0.2),
               T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=blur)]
        if solarize:
            ops.append(T.RandomSolarize(128, p=0.2))
        return T.Compose(ops + [T.PILToTensor()])

    return chain(224, (0.4, 1.0), 1.0), chain(224, (0.4, 1.0), 0.1, True), chain(96, (0.05, 0.4), 0.5)


def median_rate(loader, epochs):
    """Samples/s of an iterable of (views, labels) batches: the median of `epochs` epochs after a warm-up one."""
    rates = []
    for e in range(epochs + 1):
        t0, n = time.perf_counter(), 0
        for views, labels in loader:
            n += labels.shape[0]
        if e > 0:
            rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def run_dataloader(samples, a):
    import torch

    g1, g2, local = torchvision_views()

    class Views(torch.utils.data.Dataset):
        def __len__(self):
            return len(samples)

        def __getitem__(self, i):
            path, label = samples[i]
            img = load_rgb(path)  # read and decoded once for all eight views
            return [g1(img), g2(img)] + [local(img) for _ in range(LOCAL)], label

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(Views(), batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                         persistent_workers=True, drop_last=False)
    return median_rate(loader, a.epochs)


def run_conveyor_python(listfile, a):
    sys.path.insert(0, a.module)
    import conveyor
    loader = conveyor.Loader(list=listfile, batch_size=a.batch, workers=a.workers, device="cpu", views=VIEWS)
    rate = median_rate(loader, a.epochs)
    loader.close()
    return rate


def run_conveyor(listfile, a):
    out = subprocess.run([os.path.join(a.build, "apps", "conveyor"), "bench", "--list", listfile, "--views", VIEWS,
                          "--workers", str(a.workers), "--batch", str(a.batch), "--epochs", str(a.epochs + 1)],
                         capture_output=True, text=True, check=True).stdout
    rates = [float(line.split(", ")[2].split()[0]) for line in out.splitlines() if line.startswith("epoch ")]
    return statistics.median(rates[1:])


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", required=True)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2, help="measured epochs per run, after one warm-up")
    ap.add_argument("--build", default=os.path.join(root, "build", "release"))
    ap.add_argument("--module", default=os.path.join(root, "build", "debug", "python"))
    ap.add_argument("--only", default="conveyor,conveyor-python,dataloader")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    systems = a.only.split(",")
    with tempfile.TemporaryDirectory() as work:
        listfile, _ = copy_photos(a.folder, a.repeat, work)
        samples = read_list(listfile)
        runs = {"conveyor": lambda: run_conveyor(listfile, a),
                "conveyor-python": lambda: run_conveyor_python(listfile, a),
                "dataloader": lambda: run_dataloader(samples, a)}
        rates = {s: [] for s in systems}
        for r in range(a.rounds):
            for s in systems[r % len(systems):] + systems[:r % len(systems)]:
                rates[s].append(runs[s]())
                print(f"round {r + 1} {s}: {rates[s][-1]:.1f} samples/s (8 views each)", flush=True)
    base = rates.get("dataloader")
    for s in systems:
        line = f"multi_view: {s}: median {statistics.median(rates[s]):.1f} samples/s"
        if base and s != "dataloader":
            per_round = [x / y for x, y in zip(rates[s], base)]
            line += f", / dataloader per round {', '.join(f'{x:.2f}' for x in per_round)}, median {statistics.median(per_round):.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
