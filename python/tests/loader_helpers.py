"""What the Loader's test modules share: a digest of a batch, the batches of a run, a folder of large images."""
import hashlib

import numpy as np

from ppm import write_ppm


def digest(images, labels):
    return hashlib.sha1(np.asarray(images).tobytes() + np.asarray(labels).tobytes()).hexdigest()


def run(loader, epochs):
    """(epoch, batch index, sample indices, digest) of every batch of `epochs` epochs."""
    out = []
    for _ in range(epochs):
        for images, labels in loader:
            out.append((images.epoch, images.index, tuple(images.indices), digest(images, labels)))
    return out


def big_slow_folder(tmp_path, n=8, side=1500):
    (tmp_path / "a").mkdir()
    for i in range(n):
        write_ppm(tmp_path / "a" / f"{i}.ppm", np.full((side, side, 3), i, dtype=np.uint8))
    return tmp_path
