"""What the Python layer costs per batch: the time of `next()` on a batch that is already waiting.

    python3 python_overhead.py --module build/release/python [--batches 2000]

An in-memory array (64 rows of 224x224x3 bytes, cheap to fill) feeds a loader
whose consumer sleeps 2 ms a step, so every batch is ready when asked for:
what `next()` then takes is the Python path alone (wait_ready + next + two
Arrays and a tuple, and for conveyor.torch two torch.from_dlpack). The C++
consumer's own next() on a ready batch is measured by conveyor bench's stats.
Prints the median and 90th percentile in microseconds for both iterators.
"""
import argparse
import statistics
import sys
import time


def endless(loader):
    while True:
        yield from loader  # epoch after epoch


def measure(loader, batches):
    it, times = endless(loader), []
    for _ in range(batches):
        time.sleep(0.002)  # the training step: the pipeline fills ahead meanwhile
        t0 = time.perf_counter()
        images, labels = next(it)
        times.append(time.perf_counter() - t0)
        del images, labels
    times.sort()
    return 1e6 * statistics.median(times), 1e6 * times[int(0.9 * len(times))]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--module", required=True)
    ap.add_argument("--batches", type=int, default=2000)
    a = ap.parse_args()
    sys.path.insert(0, a.module)
    import numpy as np
    import conveyor

    x = np.zeros((64 * 4, 224, 224, 3), dtype=np.uint8)
    y = np.arange(len(x))
    kw = dict(arrays=(x, y), batch_size=64, workers=2, device="cpu")
    med, p90 = measure(conveyor.Loader(**kw), a.batches)
    print(f"conveyor.Loader       next(): median {med:.1f} us, p90 {p90:.1f} us per batch")
    try:
        import conveyor.torch as ct
    except ImportError:
        return
    med, p90 = measure(ct.Loader(**kw), a.batches)
    print(f"conveyor.torch.Loader next(): median {med:.1f} us, p90 {p90:.1f} us per batch")


if __name__ == "__main__":
    main()
