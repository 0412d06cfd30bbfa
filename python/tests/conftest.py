"""What the Python suite's modules share: ppm.py importable (also under --import-mode=importlib,
as the wheel test runs the suite), and the `folder` fixture."""
import os
import signal
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ppm import write_ppm  # noqa: E402  (after the path it needs)

# Python turns SIGINT into KeyboardInterrupt only when the process did not start
# with SIGINT ignored, and a shell starts `cmd &` so when job control is off (a
# script run in the background). The Ctrl-C tests need Python's own handler,
# whatever started pytest; without it they wait for a KeyboardInterrupt that
# never comes.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """30 images in 3 class folders, of varied sizes (20 to 59 pixels a side)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    for i in range(30):
        d = root / f"class{i % 3}"
        d.mkdir(exist_ok=True)
        h, w = int(rng.integers(20, 60)), int(rng.integers(20, 60))
        write_ppm(d / f"img{i:02d}.ppm", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return root
