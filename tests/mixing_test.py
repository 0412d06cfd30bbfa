#!/usr/bin/env python3
"""Holds MixUp's and CutMix's draws to torchvision.transforms.v2's, in distribution.

    python3 tests/mixing_test.py PHOTOMETRIC_REF

Debian's torchvision 0.14 predates v2's MixUp and CutMix, so the reference is
their published code written out here with torch's own random numbers:
lam = Beta(alpha, alpha).sample(), CutMix._get_params' box, and the reference
recipe's RandomChoice([MixUp, CutMix]). Conveyor's draws (photometric_ref
--mix: the draw the Mix step runs, image/mixing.h) must agree with them by a
two-sample chi-square test at p = 1e-4: lambda in 20 bins for MixUp at
alpha 0.2 and 1; CutMix's box corners and adjusted lambda; the share of
batches each op takes with both. The same test must reject MixUp's lambda
drawn at alpha 0.25 instead of 0.2, or it could not fail. (The pixels and
labels, given a draw, are held to the formulas in tests/test_mixing.cpp and
python/tests/test_transforms.py.)
Exits 77 (CTest's skip) without torch, 1 on a difference.
"""
import math
import subprocess
import sys

from chi_square import chi_square, critical

try:
    import torch
except ImportError as e:  # CTest reads 77 as a skip
    print(f"mixing_test: skipped: {e}")
    sys.exit(77)

N = 20000
H, W = 48, 64
BINS = 20


def conveyor_draws(ref, n, seed, mixup_alpha, cutmix_alpha):
    out = subprocess.run([ref, "--mix", str(n), str(seed), str(H), str(W), str(mixup_alpha), str(cutmix_alpha)],
                         capture_output=True, text=True, check=True).stdout
    draws = []
    for line in out.splitlines():
        kind, lam, *box = line.split()
        draws.append((kind, float(lam), tuple(int(v) for v in box)))
    return draws


def torchvision_draws(n, seed, mixup_alpha, cutmix_alpha):
    torch.manual_seed(seed)
    ops = [op for op, alpha in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha)) if alpha > 0]
    draws = []
    for _ in range(n):
        # v2.RandomChoice(transforms): p defaults to equal, idx = multinomial(p, 1).
        kind = ops[int(torch.multinomial(torch.ones(len(ops)) / len(ops), 1))] if len(ops) > 1 else ops[0]
        alpha = mixup_alpha if kind == "mixup" else cutmix_alpha
        lam = float(torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha])).sample(()))
        if kind == "mixup":
            draws.append((kind, lam, ()))
            continue
        # CutMix._get_params, as published.
        r_x = torch.randint(W, size=(1,))
        r_y = torch.randint(H, size=(1,))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half = int(r * W)
        r_h_half = int(r * H)
        x1 = int(torch.clamp(r_x - r_w_half, min=0))
        y1 = int(torch.clamp(r_y - r_h_half, min=0))
        x2 = int(torch.clamp(r_x + r_w_half, max=W))
        y2 = int(torch.clamp(r_y + r_h_half, max=H))
        draws.append((kind, float(1.0 - (x2 - x1) * (y2 - y1) / (W * H)), (x1, y1, x2, y2)))
    return draws


def lam_bin(lam):
    return min(BINS - 1, int(lam * BINS))


def compare(label, mine, theirs):
    features = {
        "op": lambda d: d[0],
        "lambda": lambda d: (d[0], lam_bin(d[1])),
    }
    if any(d[0] == "cutmix" for d in mine):
        for i, corner in enumerate(("x1", "y1", "x2", "y2")):
            features[corner] = lambda d, i=i: d[2][i] if d[0] == "cutmix" else None
    failures = []
    for name, f in features.items():
        a = [v for v in map(f, mine) if v is not None]
        c = [v for v in map(f, theirs) if v is not None]
        stat, df = chi_square(a, c)
        print(f"{label} {name}: {len(a)} and {len(c)} draws; chi-square {stat:.1f} on {df} df "
              f"(critical {critical(df):.1f})")
        if stat > critical(df):
            failures.append(f"{label} {name}")
    return failures


def main():
    ref = sys.argv[1]
    failures = []
    for label, mixup, cutmix, seed in (("MixUp(0.2)", 0.2, 0, 1), ("MixUp(1)", 1.0, 0, 2), ("CutMix(1)", 0, 1.0, 3),
                                       ("MixUp(0.2) or CutMix(1)", 0.2, 1.0, 4)):
        failures += compare(label, conveyor_draws(ref, N, seed, mixup, cutmix), torchvision_draws(N, seed, mixup, cutmix))
    # Power: lambda at alpha 0.25 must not pass for torchvision's 0.2.
    if not compare("power: alpha 0.25 vs 0.2", conveyor_draws(ref, N, 5, 0.25, 0), torchvision_draws(N, 5, 0.2, 0)):
        failures.append("the test did not tell alpha 0.25 from 0.2")
    if failures:
        print("mixing_test: differs from torchvision: " + ", ".join(failures))
        return 1
    print("mixing_test: MixUp's and CutMix's draws agree with torchvision v2's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
