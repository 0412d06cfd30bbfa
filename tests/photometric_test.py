#!/usr/bin/env python3
"""Holds image/photometric.h's and image/affine.h's ops to torchvision's functional ops on uint8 tensors.

    python3 tests/photometric_test.py PHOTOMETRIC_REF

For each op, many parameter draws over images of several sizes (photo-like
colour, flat, noisy and grey ones): torchvision.transforms.functional gives the
expected image (for TrivialAugmentWide's and RandAugment's ops, autoaugment's
_apply_op with the magnitude Conveyor's table gives the same op, bin and sign,
which tests/auto_augment_test.py holds to torchvision's table: torch 2.x's
float32 linspace rounds some bins one ulp away from torch 1.13's, and a
NEAREST shear or rotate by the other value moves whole pixels),
PHOTOMETRIC_REF (tests/photometric_ref.cpp) Conveyor's, and every
value must agree within 1 grey level. With torch 2.x (pip), whose affine grid
rounds differently from torch 1.13's (Debian 12, what CI runs), a policy's
shear, rotate or translate may also differ along one row or one column, where
a NEAREST sample sat on a tie between two source pixels; up to 8 such cases,
on images of at least 8 x 8 that are neither flat nor two-level, are counted
and printed, and anything more still fails. Prints one line per op with the worst
difference and the share of values off by one; exits 77 (CTest's skip) without
torchvision, 1 on a disagreement.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode, autoaugment
except ImportError as e:  # CTest reads 77 as a skip
    print(f"photometric_test: skipped: {e}")
    sys.exit(77)


def images(rng):
    """(name, H x W x 3 uint8) pairs: smooth colour, noise, flat, grey, tiny."""
    out = []
    for h, w in ((37, 53), (64, 48), (3, 5), (120, 97)):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        smooth = np.stack([127 + 120 * np.sin(x / (5 + 3 * c) + y / (7 + c) + c) for c in range(3)], axis=-1)
        noisy = smooth + rng.normal(0, 25, smooth.shape)
        out.append((f"photo {h}x{w}", np.clip(noisy, 0, 255).astype(np.uint8)))
        out.append((f"noise {h}x{w}", rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
        grey = np.clip(smooth[..., :1] + rng.normal(0, 10, (h, w, 1)), 0, 255).astype(np.uint8)
        out.append((f"grey {h}x{w}", np.repeat(grey, 3, axis=-1)))
        low = np.clip(smooth / 4 + 60, 0, 255).astype(np.uint8)  # low contrast: autocontrast and equalize stretch it
        out.append((f"low-contrast {h}x{w}", low))
    out.append(("flat 16x16", np.full((16, 16, 3), 77, dtype=np.uint8)))
    out.append(("two-level 8x8", (np.indices((8, 8)).sum(0) % 2 * 200 + 20).astype(np.uint8)[..., None].repeat(3, -1)))
    return out


def cases(rng):
    """(op, params for photometric_ref, torchvision call) for draws of each op's parameters."""
    draws = 12
    for _ in range(draws):
        f = float(rng.uniform(0, 2.5))
        yield "brightness", (f,), lambda t, f=f: F.adjust_brightness(t, f)
        f = float(rng.uniform(0, 2.5))
        yield "contrast", (f,), lambda t, f=f: F.adjust_contrast(t, f)
        f = float(rng.uniform(0, 2.5))
        yield "saturation", (f,), lambda t, f=f: F.adjust_saturation(t, f)
        f = float(rng.uniform(-0.5, 0.5))
        yield "hue", (f,), lambda t, f=f: F.adjust_hue(t, f)
        f = float(rng.uniform(0, 256))
        yield "solarize", (f,), lambda t, f=f: F.solarize(t, f)
        b = int(rng.integers(0, 9))
        yield "posterize", (b,), lambda t, b=b: F.posterize(t, b)
        f = float(rng.uniform(0, 3))
        yield "sharpness", (f,), lambda t, f=f: F.adjust_sharpness(t, f)
        kx, ky = int(rng.choice([1, 3, 5, 7])), int(rng.choice([1, 3, 5]))
        sx, sy = float(rng.uniform(0.1, 2.0)), float(rng.uniform(0.1, 2.0))
        yield "blur", (kx, ky, sx, sy), lambda t, kx=kx, ky=ky, sx=sx, sy=sy: F.gaussian_blur(t, [kx, ky], [sx, sy])
    for f in (0.0, 1.0, 2.0):  # the edges of each factor's range
        yield "brightness", (f,), lambda t, f=f: F.adjust_brightness(t, f)
        yield "contrast", (f,), lambda t, f=f: F.adjust_contrast(t, f)
        yield "saturation", (f,), lambda t, f=f: F.adjust_saturation(t, f)
        yield "sharpness", (f,), lambda t, f=f: F.adjust_sharpness(t, f)
    for f in (-0.5, 0.0, 0.5):
        yield "hue", (f,), lambda t, f=f: F.adjust_hue(t, f)
    yield "grayscale", (), lambda t: F.rgb_to_grayscale(t, num_output_channels=3)
    yield "autocontrast", (), F.autocontrast
    yield "equalize", (), F.equalize
    yield "invert", (), F.invert


def random_fill(rng):
    """None (black) or an RGB fill, sometimes with halves that round to even."""
    k = int(rng.integers(0, 3))
    if k == 0:
        return None
    if k == 1:
        return [float(v) for v in rng.integers(0, 256, 3)]
    return [float(rng.integers(0, 255)) + 0.5 for _ in range(3)]


def fill_params(fill):
    return tuple(fill) if fill is not None else (0.0, 0.0, 0.0)


def geometric_cases(rng):
    """F.rotate and F.affine (NEAREST, fill), at random and at the angles that land on pixel-centre ties."""
    angles = [float(a) for a in rng.uniform(-180, 180, 10)] + [0.0, 90.0, -90.0, 180.0, 45.0, -135.0]
    for angle in angles:
        fill = random_fill(rng)
        yield "rotate", (angle, *fill_params(fill)), lambda t, a=angle, f=fill: F.rotate(t, a, fill=f)
    for i in range(24):
        angle = float(rng.uniform(-60, 60)) if i % 3 == 0 else 0.0
        tx, ty = int(rng.integers(-40, 41)), int(rng.integers(-40, 41))
        scale = float(rng.uniform(0.7, 1.3)) if i % 4 == 0 else 1.0
        shear = [math.degrees(math.atan(float(v))) for v in rng.uniform(-0.99, 0.99, 2)]
        center = [[0, 0], None, [int(rng.integers(0, 40)), int(rng.integers(0, 40))]][i % 3]
        fill = random_fill(rng)
        c = center if center is not None else [0, 0]
        params = (angle, tx, ty, scale, shear[0], shear[1], 1 if center is not None else 0, c[0], c[1], *fill_params(fill))
        yield "affine", params, lambda t, a=angle, tr=[tx, ty], s=scale, sh=shear, ce=center, f=fill: F.affine(
            t, angle=a, translate=tr, scale=s, shear=sh, center=ce, fill=f)


def policy_space(space, bins, t):
    """torchvision's augmentation space (op name -> (magnitudes, signed)) for image tensor t."""
    if space == 0:
        return autoaugment.TrivialAugmentWide()._augmentation_space(bins)
    return autoaugment.RandAugment()._augmentation_space(bins, (t.shape[-2], t.shape[-1]))


CONVEYOR_TABLES = {}  # (space, bins, width, height) -> {(op, bin): magnitude}, from PHOTOMETRIC_REF --space
TABLE_DIFFERS = [0, 0]  # [cases whose magnitude differs from this torch's table, cases]


def conveyor_magnitude(ref, space, op, b, bins, width, height):
    """Conveyor's magnitude of op `op` at bin b (photometric_ref --space, the table Augment draws from)."""
    k = (space, bins, width, height)
    if k not in CONVEYOR_TABLES:
        out = subprocess.run([ref, "--space", str(space), str(bins), str(width), str(height)], capture_output=True,
                             text=True, check=True).stdout
        CONVEYOR_TABLES[k] = {(int(o), int(i)): float(m) for o, i, m in (line.split() for line in out.splitlines())}
    return CONVEYOR_TABLES[k][(op, b)]


def policy_op(t, ref, space, op, b, negative, bins, fill):
    """_apply_op for torchvision's op index `op` at bin b with Conveyor's magnitude, negated for the signed ops
    when asked."""
    name = list(policy_space(space, bins, t).keys())[op]
    magnitudes, signed = policy_space(space, bins, t)[name]
    theirs = float(magnitudes[b].item()) if magnitudes.ndim > 0 else 0.0
    magnitude = conveyor_magnitude(ref, space, op, b, bins, t.shape[-1], t.shape[-2]) if magnitudes.ndim > 0 else 0.0
    ulp = float(np.spacing(np.float32(abs(theirs)))) if theirs else 0.0
    if abs(magnitude - theirs) > ulp:
        raise AssertionError(f"{name}[{b}] of {bins} bins: conveyor {magnitude!r}, torchvision {theirs!r}")
    TABLE_DIFFERS[0] += magnitude != theirs
    TABLE_DIFFERS[1] += 1
    if signed and negative:
        magnitude *= -1.0
    return autoaugment._apply_op(t, name, magnitude, interpolation=InterpolationMode.NEAREST, fill=fill)


MAX_TIES = 8  # torch 2.11 on an H200 gave 4: one shear's parameters on each of the 4 images of its size


def geometric_tie(params, shape, diff, image):
    """Whether a policy case's disagreement is torch 2.x's NEAREST tie: torch 2 or later, a geometric op, an image
    of at least 8 x 8 that is neither flat nor two-level (where a translate off by a pixel would also differ along
    one line only), and every value off by more than 1 in one row or one column of the output."""
    if int(torch.__version__.split(".")[0]) < 2 or image.startswith(("flat", "two-level")) or min(shape[0], shape[1]) < 8:
        return False
    space, op, bins = int(params[0]), int(params[1]), int(params[4])
    name = list(policy_space(space, bins, torch.zeros(3, shape[0], shape[1])).keys())[op]
    if name not in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"):
        return False
    ys, xs, _ = np.nonzero(diff > 1)
    return len(set(ys.tolist())) == 1 or len(set(xs.tolist())) == 1


def policy_cases(rng, ref):
    """Every op of both policies at its first and last bin and at random bins, both signs."""
    for space in (0, 1):
        for op in range(14):
            for i in range(6):
                bins = 31 if i < 4 else int(rng.integers(2, 40))
                b = [0, bins - 1][i] if i < 2 else int(rng.integers(0, bins))
                negative = int(rng.integers(0, 2))
                fill = random_fill(rng)
                params = (space, op, b, negative, bins, *fill_params(fill))
                yield "autoaugment", params, lambda t, sp=space, o=op, b=b, n=negative, bins=bins, f=fill: policy_op(
                    t, ref, sp, o, b, n, bins, f)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref = sys.argv[1]
    rng = np.random.default_rng(20261126)
    imgs = images(rng)
    records, expected, labels = [], [], []
    all_cases = list(cases(rng)) + list(geometric_cases(rng)) + list(policy_cases(rng, ref))
    for op, params, tv in all_cases:
        for name, img in imgs:
            h, w, _ = img.shape
            if op == "blur" and (params[0] // 2 >= w or params[1] // 2 >= h):
                continue  # reflect padding needs the image wider than half the kernel (torch refuses too)
            records.append(f"{op} {w} {h} {' '.join(repr(float(v)) for v in params)}\n".encode() + img.tobytes())
            want = tv(torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous())
            expected.append(want.permute(1, 2, 0).numpy())
            labels.append((op, params, name))
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        with open(src, "wb") as f:
            f.write(b"".join(records))
        r = subprocess.run([ref, src, dst], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"photometric_test: {ref} failed: {r.stderr.strip()}")
            return 1
        got = open(dst, "rb").read()
    worst, off_by_one, values, failures, ties = {}, {}, {}, [], []
    at = 0
    for want, (op, params, name) in zip(expected, labels):
        n = want.size
        mine = np.frombuffer(got[at:at + n], dtype=np.uint8).reshape(want.shape)
        at += n
        diff = np.abs(mine.astype(np.int16) - want.astype(np.int16))
        worst[op] = max(worst.get(op, 0), int(diff.max()))
        off_by_one[op] = off_by_one.get(op, 0) + int((diff == 1).sum())
        values[op] = values.get(op, 0) + n
        if diff.max() > 1 and op == "autoaugment" and len(ties) < MAX_TIES and geometric_tie(params, want.shape, diff, name):
            ties.append(f"{op}{params} on {name}")
        elif diff.max() > 1:
            y, x, c = np.unravel_index(int(diff.argmax()), diff.shape)
            failures.append(f"{op}{params} on {name}: {int(diff.max())} grey levels at ({x}, {y}) channel {c}: "
                            f"conveyor {mine[y, x, c]}, torchvision {want[y, x, c]}")
    if at != len(got):
        print(f"photometric_test: {len(got) - at} bytes more than expected from {ref}")
        return 1
    for op in worst:
        print(f"{op:13s} worst {worst[op]} grey level(s); {100 * off_by_one[op] / values[op]:.3f}% of "
              f"{values[op]} values off by one")
    print(f"autoaugment: {TABLE_DIFFERS[0]} of {TABLE_DIFFERS[1]} cases took Conveyor's magnitude where this torch's "
          f"table ({torch.__version__}) differs by one float32 ulp")
    if ties:
        print(f"autoaugment: {len(ties)} cases differ along one row or column only (a NEAREST tie, torch "
              f"{torch.__version__}), e.g. {ties[0]}")
    for line in failures[:20]:
        print("FAIL " + line)
    print(f"{len(labels) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
