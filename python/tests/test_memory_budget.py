"""The memory guard's estimate against what a loader really takes, for arrays=.

Each shape runs in a fresh process: the guard's own figure (read from its
refusal under a tiny max_memory_mb), then a loader of that shape to its first
batch, and its peak RSS growth (VmHWM after, less VmRSS before, the peak reset
through /proc/self/clear_refs). Every shape whose estimate or growth is at
least 64 MiB must come within 25%: below that, a process's fixed costs (thread stacks, the
allocator's arenas, NumPy's temporaries: some 15 MiB) are a large share of a
small figure. The image shapes are tests/test_memory_budget.cpp's.
"""
import os
import re
import subprocess
import sys

import pytest

FLOOR_MIB = 64

CHILD = r'''
import re, sys, numpy as np, conveyor
rows, width, batch = map(int, sys.argv[1:4])
x = np.ones((rows, width), np.uint8)  # resident before the baseline, as a user's array is
y = np.arange(rows, dtype=np.int64) % 10
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
try:
    conveyor.Loader(arrays=(x, y), batch_size=batch, device="cpu", max_memory_mb=1e-3)
    raise SystemExit("not refused")
except ValueError as e:
    need = float(re.match(r"the batch pools need ([0-9.e+]+) MiB", str(e)).group(1))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
loader = conveyor.Loader(arrays=(x, y), batch_size=batch, device="cpu")
images, labels = next(iter(loader))
print(need, (status("VmHWM:") - before) / 2**20)
'''

# rows, row bytes, batch_size: from a dataset-sized table to a batch-sized pool.
SHAPES = [
    (8 << 20, 16, 1 << 20),  # the outside tester's: estimated 256 MiB, grew 757 MB
    (4 << 20, 4, 1 << 18),
    (1 << 20, 64, 1 << 16),
    (1024, 150528, 128),     # 224 x 224 x 3 rows
    (2_000_000, 16, 256),    # the epoch's order and the labels alone: below the floor
    (100_000, 4096, 1024),   # below the floor
]


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/clear_refs")
def test_the_estimate_is_within_a_quarter_of_the_peak_rss_at_the_first_batch():
    report, wrong = [], []
    for rows, width, batch in SHAPES:
        out = subprocess.run([sys.executable, "-c", CHILD, str(rows), str(width), str(batch)], capture_output=True,
                             text=True, timeout=60, env=os.environ)
        assert out.returncode == 0, out.stderr
        need, grew = map(float, out.stdout.split())
        line = f"{rows} rows x {width} B, batch_size {batch}: estimate {need:.1f} MiB, grew {grew:.1f} MiB ({grew / need:.2f})"
        report.append(line)
        if max(need, grew) >= FLOOR_MIB and not 0.75 <= grew / need <= 1.25:
            wrong.append(line)
    print("\n".join(report))
    assert not wrong, "\n".join(["outside 25%:"] + wrong + ["all:"] + report)
