#!/usr/bin/env python3
"""Holds RandomErasing's rectangles to torchvision's.

    python3 tests/erasing_test.py PHOTOMETRIC_REF

With the same parameters, Conveyor's rectangles (photometric_ref --erase: the
draw the Erase step runs, image/random_erasing.h) and torchvision's
(RandomErasing.forward's coin, then get_params, on a tensor of the same size)
agree in distribution: whether a sample is erased, and the rectangles'
heights, widths, tops and lefts, each by a two-sample chi-square test at
p = 1e-4, for the default parameters and for timm's (p 0.25) on two image
sizes. The same test must reject the heights with 3% of them moved, or it
could not fail. (The write itself, F.erase's img[..., i:i+h, j:j+w] = v, is
the erase kernel's, held in tests/test_erase.cpp.)
Exits 77 (CTest's skip) without torchvision, 1 on a difference.
"""
import subprocess
import sys

from chi_square import chi_square, critical

try:
    import torch
    from torchvision import transforms as T
except ImportError as e:  # CTest reads 77 as a skip
    print(f"erasing_test: skipped: {e}")
    sys.exit(77)


def conveyor_boxes(ref, n, seed, height, width, p, scale, ratio):
    out = subprocess.run([ref, "--erase", str(n), str(seed), str(height), str(width), str(p), *map(str, scale),
                          *map(str, ratio)], capture_output=True, text=True, check=True).stdout
    return [None if line == "none" else tuple(int(v) for v in line.split()) for line in out.splitlines()]


def torchvision_boxes(n, seed, height, width, p, scale, ratio):
    torch.manual_seed(seed)
    img = torch.zeros(3, height, width)
    boxes = []
    for _ in range(n):
        if not torch.rand(1) < p:  # RandomErasing.forward's coin
            boxes.append(None)
            continue
        i, j, h, w, _ = T.RandomErasing.get_params(img, scale=scale, ratio=ratio, value=[0])
        boxes.append(None if (i, j, h, w) == (0, 0, height, width) else (i, j, h, w))  # the fallback erases nothing
    return boxes


def compare(label, mine, theirs):
    failures = []
    features = {
        "erased": lambda b: b is not None,
        "top": lambda b: b[0], "left": lambda b: b[1], "height": lambda b: b[2], "width": lambda b: b[3],
    }
    for name, f in features.items():
        a = [f(b) for b in mine if name == "erased" or b is not None]
        c = [f(b) for b in theirs if name == "erased" or b is not None]
        stat, df = chi_square(a, c)
        print(f"{label} {name}: {len(a)} and {len(c)} draws; chi-square {stat:.1f} on {df} df "
              f"(critical {critical(df):.1f})")
        if stat > critical(df):
            failures.append(f"{label} {name}: chi-square {stat:.1f} > {critical(df):.1f}")
    heights = [b[2] for b in mine if b is not None]
    moved = list(heights)
    for i in range(0, len(moved), 33):  # power: 3% of the heights moved to the first one
        moved[i] = moved[0]
    if chi_square(moved, [b[2] for b in theirs if b is not None])[0] <= critical(chi_square(moved, heights)[1]):
        failures.append(f"{label}: the test did not reject the heights with 3% of them moved")
    return failures


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref, n, failures = sys.argv[1], 40000, []
    for label, p, scale, ratio in (("default", 0.5, (0.02, 0.33), (0.3, 3.3)),
                                   ("timm", 0.25, (0.02, 1 / 3), (0.3, 1 / 0.3))):
        for height, width in ((64, 48), (17, 29)):
            name = f"{label} {height}x{width}"
            mine = conveyor_boxes(ref, n, 5, height, width, p, scale, ratio)
            theirs = torchvision_boxes(n, 5, height, width, p, scale, ratio)
            for b in mine:
                if b is not None and not (b[0] + b[2] <= height and b[1] + b[3] <= width and b[2] < height
                                          and b[3] < width):
                    failures.append(f"{name}: conveyor's rectangle {b} does not fit")
                    break
            failures += compare(name, mine, theirs)
    for line in failures[:20]:
        print("FAIL " + line)
    print("passed" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
