#!/usr/bin/env python3
"""Holds TrivialAugmentWide's and RandAugment's draws and magnitudes to torchvision's.

    python3 tests/auto_augment_test.py PHOTOMETRIC_REF

1. The magnitude tables: every op and bin of both policies' augmentation spaces
   (several bin counts and image sizes) equals torchvision's within one float32
   ulp, and exactly where it is truncated (translate's pixels, posterize's bits).
   One exception, counted and printed: torch 2.x's float32 linspace (a fused
   multiply-add) puts a few bins one ulp off the correctly rounded value that
   torch 1.13 and Conveyor give, e.g. linspace(0, 32, 31)[15] = 15.999999, so
   its TrivialAugmentWide translates int(15.999999) = 15 px at that bin where
   Conveyor translates 16. A truncated magnitude may differ only there: where
   Conveyor's is the correctly rounded value and this torch's is not.
2. The draws: with fixed seeds, Conveyor's draws (photometric_ref --draws, the
   code Augment::plan_pixels runs) and torchvision's (its forward, _apply_op
   recorded instead of run) hit the same set of (op, magnitude, sign) values,
   the whole space, and a two-sample chi-square test at p = 1e-4 finds no
   difference between them; RandAugment's pairs of ops too. The same test must
   reject a sample with 3% of its draws moved, or it could not fail.
Exits 77 (CTest's skip) without torchvision, 1 on a difference.
"""
import math
import subprocess
import sys

from chi_square import chi_square, critical

try:
    import numpy as np
    import torch
    from torchvision.transforms import autoaugment
except ImportError as e:  # CTest reads 77 as a skip
    print(f"auto_augment_test: skipped: {e}")
    sys.exit(77)

TRIVIAL, RAND = 0, 1


def space(kind, bins, height, width):
    """torchvision's space as [(name, magnitudes or None, signed)] in its order."""
    if kind == TRIVIAL:
        s = autoaugment.TrivialAugmentWide()._augmentation_space(bins)
    else:
        s = autoaugment.RandAugment()._augmentation_space(bins, (height, width))
    return [(name, m if m.ndim > 0 else None, signed) for name, (m, signed) in s.items()]


def run(ref, *args):
    out = subprocess.run([ref, *map(str, args)], capture_output=True, text=True, check=True).stdout
    return [tuple(float(v) for v in line.split()) for line in out.splitlines()]


def correctly_rounded(mags, b):
    """linspace(mags[0], mags[-1], len(mags))[b] computed in float64, rounded once to float32."""
    start, end, steps = mags[0].item(), mags[-1].item(), mags.numel()
    return float(np.float32(start + (end - start) * b / (steps - 1)))


def check_tables(ref):
    failures, compared, torch_rounding = [], 0, []
    for kind in (TRIVIAL, RAND):
        for bins in (2, 5, 31, 47):
            for height, width in ((224, 224), (120, 97), (3, 5)):
                mine = {(int(o), int(b)): m for o, b, m in run(ref, "--space", kind, bins, width, height)}
                for op, (name, mags, _) in enumerate(space(kind, bins, height, width)):
                    for b in range(bins):
                        want = float(mags[b].item()) if mags is not None else 0.0
                        got = mine[(op, b)]
                        ulp = float(np.spacing(np.float32(abs(want)))) if want else 0.0
                        truncated = name in ("TranslateX", "TranslateY", "Posterize")
                        compared += 1
                        where = (f"policy {kind} bins {bins} {width}x{height} {name}[{b}]: "
                                 f"conveyor {got!r}, torchvision {want!r}")
                        if abs(got - want) > ulp:
                            failures.append(where)
                        elif truncated and int(got) != int(want):
                            if name != "Posterize" and got == correctly_rounded(mags, b) != want:
                                torch_rounding.append(where)
                            else:
                                failures.append(where)
    print(f"tables: {compared} magnitudes compared, {len(failures)} differ")
    if torch_rounding:
        print(f"tables: {len(torch_rounding)} truncated magnitudes where torch {torch.__version__}'s linspace is "
              f"off the correctly rounded value and Conveyor is on it, e.g. {torch_rounding[0]}")
    return failures


def key(entry, value, negative):
    """A draw as (op name, magnitude value, negated) in torchvision's values."""
    name, _, signed = entry
    return (name, round(value, 6), bool(negative) if signed else False)


def conveyor_draws(ref, kind, samples, seed, bins, height, width, num_ops=2, magnitude=9):
    sp = space(kind, bins, height, width)
    extra = (num_ops, magnitude) if kind == RAND else ()
    out = []
    for op, b, neg in run(ref, "--draws", kind, samples, seed, bins, *extra):
        entry = sp[int(op)]
        value = float(entry[1][int(b)].item()) if entry[1] is not None else 0.0
        out.append(key(entry, value, neg))
    return out


def torchvision_draws(kind, samples, seed, bins, height, width, num_ops=2, magnitude=9):
    """torchvision's forward with _apply_op recording (op, magnitude) instead of running."""
    sp = {name: entry for name, *entry in space(kind, bins, height, width)}
    drawn = []
    real = autoaugment._apply_op
    autoaugment._apply_op = lambda img, name, m, interpolation, fill: drawn.append(
        key((name, *sp[name]), abs(m), math.copysign(1.0, m) < 0)) or img
    try:
        torch.manual_seed(seed)
        policy = (autoaugment.TrivialAugmentWide(bins) if kind == TRIVIAL else
                  autoaugment.RandAugment(num_ops, magnitude, bins))
        img = torch.zeros((3, height, width), dtype=torch.uint8)
        for _ in range(samples):
            policy(img)
    finally:
        autoaugment._apply_op = real
    return drawn


def all_keys(kind, bins, height, width, magnitude=None):
    keys = set()
    for entry in space(kind, bins, height, width):
        _, mags, signed = entry
        values = [0.0] if mags is None else [float(m) for m in (mags if magnitude is None else mags[magnitude:magnitude + 1])]
        for v in values:
            for neg in ((False, True) if signed else (False,)):
                keys.add(key(entry, v, neg))
    return keys


def compare(label, mine, theirs, possible):
    failures = []
    if set(mine) != possible or set(theirs) != possible:
        failures.append(f"{label}: conveyor drew {len(set(mine))} values, torchvision {len(set(theirs))}, "
                        f"the space has {len(possible)}; conveyor outside it: {sorted(set(mine) - possible)[:5]}")
    stat, df = chi_square(mine, theirs)
    print(f"{label}: {len(mine)} draws each, {df + 1} values; chi-square {stat:.1f} on {df} df "
          f"(critical {critical(df):.1f})")
    if stat > critical(df):
        failures.append(f"{label}: chi-square {stat:.1f} > {critical(df):.1f}")
    # Power: move 3% of the draws to the first value; the same test must see it.
    moved = list(mine)
    for i in range(0, len(moved), 33):
        moved[i] = moved[0]
    if chi_square(moved, theirs)[0] <= critical(df):
        failures.append(f"{label}: the test did not reject a sample with 3% of its draws moved")
    return failures


def check_draws(ref):
    failures = []
    n, h, w = 60000, 224, 224
    mine = conveyor_draws(ref, TRIVIAL, n, 7, 31, h, w)
    theirs = torchvision_draws(TRIVIAL, n, 7, 31, h, w)
    failures += compare("TrivialAugmentWide", mine, theirs, all_keys(TRIVIAL, 31, h, w))
    n = 30000
    mine = conveyor_draws(ref, RAND, n, 8, 31, h, w)
    theirs = torchvision_draws(RAND, n, 8, 31, h, w)
    failures += compare("RandAugment", mine, theirs, all_keys(RAND, 31, h, w, magnitude=9))
    pairs = lambda d: [(d[i][0], d[i + 1][0]) for i in range(0, len(d), 2)]  # noqa: E731
    stat, df = chi_square(pairs(mine), pairs(theirs))
    print(f"RandAugment pairs of ops: chi-square {stat:.1f} on {df} df (critical {critical(df):.1f})")
    if df + 1 != 14 * 14 or stat > critical(df):
        failures.append(f"RandAugment pairs: {df + 1} of 196 pairs drawn, chi-square {stat:.1f}")
    return failures


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    failures = check_tables(sys.argv[1]) + check_draws(sys.argv[1])
    for line in failures[:20]:
        print("FAIL " + line)
    print("passed" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
