#!/usr/bin/env python3
"""Holds image/photometric.h's ops to torchvision's functional ops on uint8 tensors.

    python3 tests/photometric_test.py PHOTOMETRIC_REF

For each op, many parameter draws over images of several sizes (photo-like
colour, flat, noisy and grey ones): torchvision.transforms.functional gives the
expected image, PHOTOMETRIC_REF (tests/photometric_ref.cpp) Conveyor's, and every
value must agree within 1 grey level. Prints one line per op with the worst
difference and the share of values off by one; exits 77 (CTest's skip) without
torchvision, 1 on a disagreement.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision.transforms.functional as F
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


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ref = sys.argv[1]
    rng = np.random.default_rng(20261126)
    imgs = images(rng)
    records, expected, labels = [], [], []
    for op, params, tv in cases(rng):
        for name, img in imgs:
            h, w, _ = img.shape
            if op == "blur" and (params[0] // 2 >= w or params[1] // 2 >= h):
                continue  # reflect padding needs the image wider than half the kernel (torch refuses too)
            p = list(params) + [0] * (4 - len(params))
            records.append(f"{op} {w} {h} {' '.join(repr(float(v)) for v in p)}\n".encode() + img.tobytes())
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
    worst, off_by_one, values, failures = {}, {}, {}, []
    at = 0
    for want, (op, params, name) in zip(expected, labels):
        n = want.size
        mine = np.frombuffer(got[at:at + n], dtype=np.uint8).reshape(want.shape)
        at += n
        diff = np.abs(mine.astype(np.int16) - want.astype(np.int16))
        worst[op] = max(worst.get(op, 0), int(diff.max()))
        off_by_one[op] = off_by_one.get(op, 0) + int((diff == 1).sum())
        values[op] = values.get(op, 0) + n
        if diff.max() > 1:
            y, x, c = np.unravel_index(int(diff.argmax()), diff.shape)
            failures.append(f"{op}{params} on {name}: {int(diff.max())} grey levels at ({x}, {y}) channel {c}: "
                            f"conveyor {mine[y, x, c]}, torchvision {want[y, x, c]}")
    if at != len(got):
        print(f"photometric_test: {len(got) - at} bytes more than expected from {ref}")
        return 1
    for op in worst:
        print(f"{op:13s} worst {worst[op]} grey level(s); {100 * off_by_one[op] / values[op]:.3f}% of "
              f"{values[op]} values off by one")
    for line in failures[:20]:
        print("FAIL " + line)
    print(f"{len(labels) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
