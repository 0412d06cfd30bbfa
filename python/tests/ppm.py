"""Test images as binary PPM (P6), which Conveyor reads: written by the tests, never taken from ../shared."""
import numpy as np


def write_ppm(path, pixels):
    """pixels: [H, W, 3] uint8."""
    h, w, _ = pixels.shape
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        f.write(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes())
