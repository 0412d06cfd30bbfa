"""conveyor.Loader across threads and processes: shared loaders, held batches, Ctrl-C, fork, leaks.

Run by CTest (python_module) with PYTHONPATH at the build tree's python/ folder.
The images are written here (binary PPM, which Conveyor reads), never taken from ../shared.
"""
import gc
import hashlib
import os
import re
import shutil
import signal
import threading
import time
import numpy as np
import pytest
import conveyor
from ppm import write_ppm  # python/tests/ppm.py; the `folder` fixture is conftest.py's
from loader_helpers import digest, run, big_slow_folder  # noqa: F401  (python/tests/loader_helpers.py)


def test_the_pool_refills_only_after_the_last_array_dies():
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, host_queue=1, device_queue=1, device="cpu")
    it = iter(loader)
    held = [next(it) for _ in range(3)]  # device_queue + 2 slots: every one
    with pytest.raises(RuntimeError, match="device slots are held"):
        next(it)
    view = np.asarray(held[0][0])  # a NumPy view keeps its batch too
    del held[0]
    with pytest.raises(RuntimeError, match="device slots are held"):
        next(it)
    del view
    gc.collect()
    assert len(next(it)[0]) == 2  # taken and dropped at once
    held.clear()
    assert sum(1 for _ in it) > 0


def run_in_threads(target, n):
    """Runs target in n threads at once; fails if one is still running after 60 s."""
    threads = [threading.Thread(target=target, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"


def test_threads_sharing_a_loader_wait_for_each_others_batches():
    # Three `for` loops on one loader with the default 4 device slots: each
    # holds its last batch while it takes the next, and two for a moment after,
    # so every slot is often held, by threads that will give theirs back.
    # next() waits for them (it raised).
    x = np.zeros((96, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(96)), batch_size=2, workers=2, epochs=1, device="cpu")
    seen, errors = [], []

    def consume():
        try:
            for _, labels in loader:
                seen.extend(np.asarray(labels).tolist())
                time.sleep(0.002)  # the step: the batch is held meanwhile
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    run_in_threads(consume, 3)
    assert errors == []
    assert sorted(seen) == list(range(96))  # each batch to one thread, every sample once


def test_threads_that_all_wait_for_a_slot_raise_instead_of_hanging():
    # Two threads hold 2 of the 4 slots each, then both ask for more: neither
    # can give one back while it waits, so one raises, naming the other; once
    # it drops its batches the other gets its batch.
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=2, device="cpu")
    both_hold = threading.Barrier(2, timeout=30)
    results = []

    def hold_two_then_ask():
        it = iter(loader)
        mine = [next(it), next(it)]
        both_hold.wait()
        try:
            mine.append(next(it))
            results.append("got")
        except RuntimeError as e:
            results.append(str(e))
        mine.clear()

    run_in_threads(hold_two_then_ask, 2)
    assert sorted(results, key=len)[0] == "got"
    assert re.search(r"all 4 device slots are held .*\(2 taken by this thread, 2 by 1 other thread\(s\) now waiting in "
                     r"next\(\) too, so none can come back\)", sorted(results, key=len)[1]), results


def test_device_buffers_is_how_many_batches_a_cpu_consumer_may_hold():
    # On the CPU a batch is the workers' own buffer: raising device_buffers
    # used to stop at the host pool's size (8 here), where next() waited for
    # ever. Now the pool has room for them: 16 held, then the error.
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, device_buffers=16, device="cpu")
    held, errors = [], []

    def hold_all():
        it = iter(loader)
        try:
            for _ in range(17):
                held.append(next(it))
        except RuntimeError as e:
            errors.append(str(e))

    run_in_threads(hold_all, 1)
    assert len(held) == 16
    assert len(errors) == 1 and "all 16 device slots are held" in errors[0], errors
    held.clear()


def test_batches_handed_on_by_an_ended_thread_are_not_waited_for():
    # A thread took two batches, handed them to this one and ended; this
    # thread takes the third slot and asks again: nobody else can give one
    # back, so it raises at once (it waited for ever on the ended thread).
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=1, device="cpu")
    it = iter(loader)
    kept = []
    run_in_threads(lambda: kept.extend([next(it), next(it)]), 1)
    kept.append(next(it))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"all 3 device slots are held by batches still alive \(1 taken by this thread, "
                                           r"2 by threads that have ended \(batches handed on\), so none can come back\)"):
        next(it)
    assert time.monotonic() - start < 5
    kept.clear()
    assert len(next(it)[0]) == 2


def test_batches_an_ended_thread_handed_to_a_live_one_are_waited_for():
    # A producer took three batches, handed them to this thread and ended; a
    # second thread asks for more while this one still holds them, and gets
    # one once they are dropped (it raised at once, though a live thread held them).
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=1, device="cpu")
    it = iter(loader)
    handed = []
    run_in_threads(lambda: handed.extend([next(it), next(it), next(it)]), 1)
    got, errors = [], []

    def ask():
        try:
            got.append(next(it))
        except RuntimeError as e:
            errors.append(str(e))

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    time.sleep(0.3)
    handed.clear()
    asker.join(timeout=60)
    assert not asker.is_alive() and errors == [] and len(got) == 1


def test_slot_timeout_ends_a_wait_on_a_batch_nobody_drops():
    # This thread keeps a batch and waits on another that loops over the
    # loader with 2 slots: the other waits for that batch, then raises after
    # slot_timeout (it would wait for ever with None).
    x = np.zeros((64, 4), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=1, device_buffers=2,
                             slot_timeout=0.3, device="cpu")
    it = iter(loader)
    first = next(it)
    errors = []

    def loop():
        try:
            for _ in it:
                pass
        except RuntimeError as e:
            errors.append(str(e))

    start = time.monotonic()
    run_in_threads(loop, 1)
    assert 0.3 <= time.monotonic() - start < 30
    assert len(errors) == 1 and re.search(r"\(1 taken by this thread, 1 by 1 other thread\(s\); none came back in 0.3 s "
                                          r"\(slot_timeout=\)\)", errors[0]), errors
    del first
    for bad, error in ((0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(error, match=r"^slot_timeout="):
            conveyor.Loader(arrays=(x, np.arange(64)), slot_timeout=bad, device="cpu")
    assert len(conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, slot_timeout=None, device="cpu")) == 32


def test_the_interpreter_exits_cleanly_with_a_daemon_thread_waiting_in_next(tmp_path):
    # At exit Python ends a daemon thread that takes the GIL back with
    # pthread_exit, which aborted the process (status 134) from inside next().
    import subprocess
    import sys
    script = tmp_path / "exit.py"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(conveyor.__file__)))

    def exits_cleanly(text):
        script.write_text(text)
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]

    # A daemon thread waiting in next() for a slot the main thread holds.
    waiting = (
        "import conveyor, numpy as np, sys, threading, time\n"
        "x = np.zeros((64, 4), dtype=np.uint8)\n"
        "L = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=1, device_buffers=2,"
        " device='cpu')\n"
        "it = iter(L)\n"
        "first = next(it)\n"
        "threading.Thread(target=lambda: [b for b in it], daemon=True).start()\n")
    exits_cleanly(waiting + "time.sleep(0.5)\n")
    # The same thread already waiting for the GIL when the interpreter starts
    # finalizing: the main thread keeps the GIL (a switch interval of 100 s)
    # until it exits, and lets it go inside finalization (a __del__ that
    # sleeps, collected there). The daemon thread then gets it and is ended
    # from inside the wait, which aborted one CI run in about a hundred.
    exits_cleanly(
        waiting +
        "time.sleep(0.3)\n"
        "class LetsTheGilGo:\n"
        "    def __del__(self, sleep=time.sleep):\n"
        "        sleep(0.3)\n"
        "cycle = LetsTheGilGo()\n"
        "cycle.me = cycle\n"
        "del cycle\n"
        "sys.setswitchinterval(100)\n"
        "end = time.monotonic() + 0.3\n"
        "while time.monotonic() < end:\n"
        "    pass\n")
    # The thread that finalizes closes a loader too: a generator left open
    # in a `with` block is closed at exit, on the main thread (which hung).
    exits_cleanly(
        "import conveyor, numpy as np\n"
        "def batches():\n"
        "    with conveyor.Loader(arrays=(np.zeros((64, 4), dtype=np.uint8), np.arange(64)), batch_size=2,"
        " device='cpu') as loader:\n"
        "        yield from loader\n"
        "g = batches()\n"
        "next(g)\n")


def test_ctrl_c_while_the_pools_are_allocated_raises_within_half_a_second_and_the_loader_starts_again():
    # The first next() allocates and first touches 1.8 GB of pools (batch 96 of 512 x 512 x 3, float32 slots),
    # most of a second on a 2-core VM; a SIGINT 100 ms into it used to wait for all of it.
    x = np.ones((96, 512, 512, 3), np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(96) % 2), batch_size=96, normalize="float32", device="cpu",
                             max_memory_mb=8192)
    state = loader.state_dict()
    sent = []
    timer = threading.Timer(0.1, lambda: (sent.append(time.monotonic()), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(iter(loader))
    ended = time.monotonic()
    timer.join()
    assert sent and ended - sent[0] < 0.5, f"{ended - sent[0]:.3f} s from the SIGINT to KeyboardInterrupt"
    assert loader.state_dict() == state  # nothing taken
    xb, yb = next(iter(loader))  # the loader starts again, from where it was
    assert np.asarray(xb).shape == (96, 3, 512, 512) and len(np.asarray(yb)) == 96
    loader.close()


def test_ctrl_c_while_waiting_raises_keyboard_interrupt_promptly_and_the_loader_closes(tmp_path):
    # Batches of 512 big images on 1 worker take seconds each: the signal lands while next() waits.
    root = big_slow_folder(tmp_path)
    (tmp_path / "list.txt").write_text("".join(f"{p} 0\n" for p in sorted(root.rglob("*.ppm"))) * 64)
    loader = conveyor.Loader(list=str(tmp_path / "list.txt"), batch_size=512, workers=1, crop=32, augment="center",
                             device="cpu")
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in range(1000):
            for _ in loader:
                pass
    assert time.monotonic() - start < 0.3 + 0.5  # promptly: the wait checks every 50 ms
    t0 = time.monotonic()
    loader.close()
    assert time.monotonic() - t0 < 5
    with pytest.raises(RuntimeError, match="^loader: closed"):
        list(loader)


def test_ctrl_c_while_waiting_loses_no_batch(tmp_path):
    # A signal every 5 ms while next() waits for slow batches: each raises in
    # next() before it takes a batch, never after (a batch taken and then
    # dropped for KeyboardInterrupt was missing from the epoch, and state_dict()
    # counted it as delivered). The handler raises only while armed, so no
    # interrupt lands in the test's own bookkeeping.
    # Under load the signal also lands while next() has let the GIL go to take
    # a batch: that batch is held back for the next call, and state_dict()
    # leaves it out (checked against loaders that took as many batches).
    root = big_slow_folder(tmp_path, n=8, side=1200)
    kw = dict(folder=str(root), batch_size=2, workers=1, crop=32, augment="center", device="cpu", epochs=1, seed=5)
    loader = conveyor.Loader(**kw)
    armed = {"on": False}

    def handler(signum, frame):
        if armed["on"]:
            armed["on"] = False
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    stop = threading.Event()

    def interrupter():
        while not stop.wait(0.005):
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupter, daemon=True)
    thread.start()
    seen, states, it = [], [], iter(loader)
    try:
        while True:
            armed["on"] = True
            try:
                images, labels = next(it)
            except KeyboardInterrupt:
                states.append((len(seen) // 2, loader.state_dict()["conveyor_state"]))
                continue
            except StopIteration:
                break
            finally:
                armed["on"] = False
            seen.extend(images.indices)
            del images, labels
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)
    assert states
    assert sorted(seen) == list(range(8)), (seen, len(states))
    assert loader.current_epoch == 1
    for taken, state in sorted(set(states)):
        reference = conveyor.Loader(**kw)
        batches = iter(reference)
        for _ in range(taken):
            next(batches)
        assert reference.state_dict()["conveyor_state"] == state, taken


def test_a_child_forked_after_start_is_refused_in_one_line_and_exits_cleanly(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=2, workers=2, crop=16, device="cpu")
    fresh = conveyor.Loader(folder=str(folder), batch_size=2, workers=2, crop=16, device="cpu", epochs=1)
    next(iter(loader))  # started: its threads run in this process
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            try:
                next(iter(loader))
            except RuntimeError as e:
                if "after fork()" in str(e) and "\n" not in str(e):
                    code = 0
            # A loader that had not started is the child's own to use.
            if code == 0 and sum(len(b[0].indices) for b in fresh) != fresh.dataset_size:
                code = 2
            del loader  # its threads are in the parent: dropped without a join
            gc.collect()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert len(next(iter(loader))[0].indices) == 2  # the parent's loader is intact


def threads():
    return len(os.listdir("/proc/self/task"))


def test_a_loader_dropped_mid_epoch_joins_its_threads(folder):
    gc.collect()
    before = threads()
    loader = conveyor.Loader(folder=str(folder), batch_size=2, workers=4, crop=16, device="cpu")
    images, labels = next(iter(loader))
    assert threads() >= before + 5  # 4 workers and the delivery thread
    del loader
    gc.collect()
    assert threads() <= before + 1  # workers and transfer joined; the host device's stream lives with the batch
    assert np.asarray(images).shape == (2, 16, 16, 3)  # the batch outlives its loader
    del images, labels
    gc.collect()
    assert threads() == before


def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def test_no_leak_over_50_epochs_rss_and_fds(folder):
    x = np.random.default_rng(1).integers(0, 255, (256, 32, 32, 3), dtype=np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(256)), batch_size=16, workers=2, normalize="float32", device="cpu")
    files = conveyor.Loader(folder=str(folder), batch_size=4, crop=16, device="cpu")
    for _ in range(5):
        run(loader, 1), run(files, 1)
    gc.collect()
    rss, fds = rss_kib(), len(os.listdir("/proc/self/fd"))
    for _ in range(45):
        run(loader, 1), run(files, 1)
    for _ in range(20):  # loaders made and dropped
        conveyor.Loader(folder=str(folder), batch_size=4, crop=16, device="cpu").epoch(0).__next__()
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds
    assert rss_kib() - rss < 8 * 1024, (rss, rss_kib())
