"""conveyor.Loader's arguments and bad input: one clear error naming the argument, file or field.

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


def test_an_unknown_keyword_or_a_positional_argument_is_one_line_naming_it(folder):
    # pybind11 printed every signature, with the repr of arrays= (thousands of
    # lines for a real array), and never said which argument was wrong.
    x, y = np.zeros((1000, 8), np.uint8), np.arange(1000) % 3
    cases = [
        (dict(arrays=(x, y), shard_policy="drop"), r"^Loader\(\) got an unexpected keyword argument 'shard_policy'$"),
        (dict(folder=folder, num_workers=4), r"'num_workers' \(DataLoader's num_workers; here: workers= \(threads\)\)$"),
        (dict(folder=folder, pin_memory=True), r"'pin_memory' \(DataLoader's pin_memory; here: device=\"cuda\""),
    ]
    for kwargs, says in cases:
        with pytest.raises(TypeError, match=says) as e:
            conveyor.Loader(**kwargs)
        assert "\n" not in str(e.value) and len(str(e.value)) < 200
    with pytest.raises(TypeError, match=r"^Loader\(\) takes keyword arguments only .* not 1 positional$"):
        conveyor.Loader(folder)
    # Every keyword of the signature is known to the fallback: a bad value for
    # each is refused for its value, never as an unexpected keyword.
    first = conveyor.Loader.__init__.__doc__.split("1. ", 1)[1].split("\n", 1)[0]
    names = re.findall(r"(\w+): object", first)
    assert "folder" in names and "max_memory_mb" in names and len(names) >= 20
    for name in names:
        with pytest.raises(Exception) as e:
            conveyor.Loader(**{name: object()})
        assert "unexpected keyword" not in str(e.value), name


def test_a_loader_with_no_batch_in_an_epoch_is_refused():
    # batch_size over the samples with drop_last: every epoch empty, and a
    # `for` over the loader yielded nothing, forever, without a word.
    x, y = np.zeros((103, 2, 2, 1), np.uint8), np.arange(103) % 7
    with pytest.raises(ValueError, match=r"no batch in an epoch: the dataset holds 103 samples, fewer than batch_size 200 with drop_last=True"):
        conveyor.Loader(arrays=(x, y), batch_size=200, drop_last=True, device="cpu")
    with pytest.raises(ValueError, match=r"rank 1's share holds 3 of the 9 samples \(world_size 4\), fewer than batch_size 4"):
        conveyor.Loader(arrays=(x[:9], y[:9]), batch_size=4, drop_last=True, rank=1, world_size=4, device="cpu")
    assert len(conveyor.Loader(arrays=(x, y), batch_size=103, drop_last=True, device="cpu")) == 1


def test_bad_paths_and_crops_are_value_errors_naming_the_argument(folder):
    with pytest.raises(ValueError, match=r"folder=.*: a path holds no NUL byte"):
        conveyor.Loader(folder=str(folder) + "\0x", device="cpu")
    for crop in (0, -3, 16385, 2**40):
        with pytest.raises(ValueError, match=rf"crop={crop}: expected 1 to 16384"):
            conveyor.Loader(folder=str(folder), crop=crop, device="cpu")


@pytest.mark.parametrize("kw, error, says", [
    (dict(batch_size=-1), ValueError, r"^batch_size=-1: expected a non-negative integer$"),
    (dict(seed=2**64), ValueError, r"^seed=18446744073709551616: expected 0 to 18446744073709551615$"),
    (dict(workers=-2), ValueError, r"^workers=-2: expected a non-negative integer$"),
    (dict(epochs=-1), ValueError, r"^epochs=-1"),
    (dict(rank=-1), ValueError, r"^rank=-1"),
    (dict(batch_size=2.5), TypeError, r"^batch_size=2.5: expected an integer, not float$"),
    (dict(batch_size=True), TypeError, r"^batch_size=True: expected an integer, not a bool$"),
    (dict(device_buffers="2"), TypeError, r"^device_buffers='2': expected an integer, not str$"),
    (dict(device_queue="2"), ValueError, r"^device_queue='2': expected a depth in batches or 'auto'$"),
    (dict(device="cuda:1x"), ValueError, r"^device='cuda:1x': expected 'auto', 'cuda', 'cuda:N'"),
    (dict(device="cuda:-1"), ValueError, r"^device='cuda:-1'"),
])


def test_integer_arguments_get_one_line_errors_naming_them(kw, error, says):
    # pybind11's own conversion answered -1 with a TypeError listing the whole
    # signature, took True as 1, and std::stoi read "cuda:1x" as cuda:1.
    x = np.zeros((4, 4), np.uint8)
    with pytest.raises(error, match=says):
        conveyor.Loader(arrays=(x, np.arange(4)), **{"device": "cpu", **kw})


def test_batch_pools_over_the_memory_budget_are_refused_before_allocation():
    # host_queue=2**31 grew the process to 24 GB until the OOM killer ended it; it is now past
    # host_queue's range, and the largest queue with 1 MiB rows is what the budget refuses.
    x = np.zeros((40, 1 << 20), np.uint8)  # calloc'd: never touched, never resident
    with pytest.raises(ValueError, match=r"^the batch pools need \d+ MiB .*host_queue 65536.*over max_memory_mb \d+ "
                                         r"\(default: a quarter of physical memory\)$"):
        conveyor.Loader(arrays=(x, np.arange(40)), batch_size=8, host_queue=2**16, device="cpu")
    for arg, top in (("host_queue", 2**16), ("device_queue", 2**16), ("device_buffers", 2**20), ("world_size", 2**20)):
        with pytest.raises(ValueError, match=rf"^{arg}={top + 1}: expected \d to {top}$"):
            conveyor.Loader(arrays=(x, np.arange(40)), device="cpu", **{arg: top + 1})
    rows = np.zeros((8, 64, 64, 3), np.uint8)  # 12 KiB a row: 64 batches of 8 are 6 MiB
    with pytest.raises(ValueError, match=r"over max_memory_mb 1$"):
        conveyor.Loader(arrays=(rows, np.arange(8)), batch_size=8, host_queue=64, max_memory_mb=1, device="cpu")
    assert len(conveyor.Loader(arrays=(rows, np.arange(8)), batch_size=8, max_memory_mb=64, device="cpu")) == 1
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"^max_memory_mb=.*: expected a finite number >= 0$"):
            conveyor.Loader(arrays=(rows, np.arange(8)), max_memory_mb=bad, device="cpu")
    for bad in (True, np.bool_(True), "5", 5j):
        with pytest.raises(TypeError, match=r"^max_memory_mb=.*: expected a number"):
            conveyor.Loader(arrays=(rows, np.arange(8)), max_memory_mb=bad, device="cpu")
    for good in (np.int64(64), np.float32(64.0), np.uint16(64)):  # NumPy scalars, as the integer arguments take them
        assert len(conveyor.Loader(arrays=(rows, np.arange(8)), batch_size=8, max_memory_mb=good, device="cpu")) == 1
    with pytest.raises(ValueError, match=r"over max_memory_mb 1$"):
        conveyor.Loader(arrays=(rows, np.arange(8)), batch_size=8, host_queue=64, max_memory_mb=np.int32(1), device="cpu")


def test_an_integer_argument_whose_index_raises_keeps_its_exception():
    class Interrupting:
        def __index__(self):
            raise KeyboardInterrupt

    x = np.zeros((4, 4), np.uint8)
    with pytest.raises(KeyboardInterrupt):
        conveyor.Loader(arrays=(x, np.arange(4)), batch_size=Interrupting(), device="cpu")
    with pytest.raises(ValueError, match=r"^batch_size=(<int>|\d{40}\.\.\.): expected 0 to"):
        conveyor.Loader(arrays=(x, np.arange(4)), batch_size=10**5000, device="cpu")


def test_numpy_integers_are_taken_as_ints():
    x = np.zeros((6, 4), np.uint8)
    loader = conveyor.Loader(arrays=(x, np.arange(6)), batch_size=np.int64(3), workers=np.uint8(1), device="cpu")
    assert loader.batch_size == 3 and len(loader) == 2
    assert len(list(loader.epoch(np.int32(0)))) == 2


def test_a_bad_file_names_itself_or_is_skipped(tmp_path, folder):
    lines = [f"{p} {i % 3}" for i, p in enumerate(sorted(folder.rglob("*.ppm"))[:10])]
    (tmp_path / "bad.ppm").write_bytes(b"P6\n10 10\n255\n" + b"\0" * 17)  # cut short
    lines.insert(4, f"{tmp_path / 'bad.ppm'} 1")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    # One epoch: with more, a worker already in epoch 1 can fail on the same file first, and the
    # first failure is the one that sticks (seen once in ten runs on a loaded machine).
    loader = conveyor.Loader(list=str(tmp_path / "list.txt"), batch_size=3, crop=16, shuffle=False, device="cpu",
                             epochs=1)
    with pytest.raises(conveyor.PipelineError) as e:
        run(loader, 1)
    assert "bad.ppm" in str(e.value) and e.value.epoch == 0 and e.value.sample == 4 and e.value.stage == "worker"
    skip = conveyor.Loader(list=str(tmp_path / "list.txt"), batch_size=3, crop=16, on_error="skip", device="cpu")
    delivered = sorted(i for (_, _, idx, _) in run(skip, 1) for i in idx)
    assert delivered == [i for i in range(11) if i != 4]
    assert [s["index"] for s in skip.skipped()] == [4] and "bad.ppm" in skip.skipped()[0]["reason"]
    assert skip.stats()["samples_skipped"] == 1


def test_names_that_are_not_utf8_are_given_as_os_gives_them(tmp_path, folder):
    # A class folder and a file whose names hold a byte that is not UTF-8:
    # classes as os.fsdecode gives them, messages with the byte as \xNN; the
    # folder given back as such a str, or as bytes, is found (each
    # of these raised UnicodeDecodeError, or could not be cast).
    root = os.fsencode(tmp_path / "odd")
    good = sorted(folder.rglob("*.ppm"))
    for cls, names in ((b"caf\xe9", [b"a.ppm", b"bad\xe9.ppm"]), (b"tea", [b"b.ppm", b"c.ppm"])):
        os.makedirs(os.path.join(root, cls))
        for k, name in enumerate(names):
            data = b"not an image" if name.startswith(b"bad") else good[k].read_bytes()
            with open(os.path.join(root, cls, name), "wb") as f:
                f.write(data)
    for given in (root, os.fsdecode(root)):
        loader = conveyor.Loader(folder=given, batch_size=1, crop=8, shuffle=False, on_error="skip", epochs=1, device="cpu")
        assert loader.classes == [os.fsdecode(b"caf\xe9"), "tea"]
        assert os.fsencode(loader.classes[0]) == b"caf\xe9"
        assert sum(len(images) for images, _ in loader) == 3
        (skipped,) = loader.skipped()
        assert "caf\\xe9/bad\\xe9.ppm: not an image" in skipped["reason"], skipped
    failing = conveyor.Loader(folder=root, batch_size=1, crop=8, shuffle=False, epochs=1, device="cpu")
    with pytest.raises(conveyor.PipelineError, match=r"caf\\xe9/bad\\xe9\.ppm: not an image") as e:
        run(failing, 1)
    assert "caf\\xe9/bad\\xe9.ppm" in e.value.reason
    with pytest.raises(ValueError, match=r"nope\\xe9: image folder not found"):
        conveyor.Loader(folder=os.path.join(root, b"nope\xe9"))


def test_bad_arguments_are_one_clear_error(tmp_path, folder):
    with pytest.raises(ValueError, match="exactly one dataset"):
        conveyor.Loader(folder=str(folder), list="x.txt")
    with pytest.raises(ValueError, match="no .tar shards"):
        conveyor.Loader(shards=str(folder))
    with pytest.raises(ValueError, match="device=gpu: expected one of auto, cuda, cpu"):
        conveyor.Loader(folder=str(folder), device="gpu")
    with pytest.raises(ValueError, match="normalize=int8"):
        conveyor.Loader(folder=str(folder), normalize="int8")
    with pytest.raises(ValueError, match="augment=big"):
        conveyor.Loader(folder=str(folder), augment="big")
    with pytest.raises(ValueError, match="nowhere"):
        conveyor.Loader(folder=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="batch_size"):
        conveyor.Loader(folder=str(folder), batch_size=0)
    with pytest.raises(ValueError, match="3 samples but y has 2"):
        conveyor.Loader(arrays=(np.zeros((3, 2)), [1, 2]))
    with pytest.raises(ValueError, match="not for arrays"):
        conveyor.Loader(arrays=(np.zeros((3, 2)), [1, 2, 3]), augment="crop")
    with pytest.raises(ValueError, match="C-contiguous"):
        conveyor.Loader(arrays=(np.zeros((3, 4))[:, ::2], [1, 2, 3]))
    with pytest.raises(ValueError, match="other settings"):
        conveyor.Loader(folder=str(folder), seed=1).load_state_dict(conveyor.Loader(folder=str(folder), seed=2).state_dict())


def test_an_epoch_near_two_to_the_64_is_refused(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=2, crop=16, device="cpu")
    with pytest.raises(ValueError, match="epoch 18446744073709551615 is out of range"):
        list(loader.epoch(2**64 - 1))


def test_paths_flags_and_pairs_are_taken_as_python_users_write_them(folder):
    import pathlib
    loader = conveyor.Loader(folder=pathlib.Path(folder), batch_size=2, crop=16, device="cpu", epochs=1)
    assert sum(len(b[0].indices) for b in loader) == loader.dataset_size
    for kw, pattern in ((dict(shuffle="yes"), r"^shuffle='yes': expected True or False, not str$"),
                        (dict(drop_last=None), r"^drop_last=None: expected True or False"),
                        (dict(on_error=None), r"^on_error=None: expected a str, not NoneType$"),
                        (dict(folder=3), r"^folder=3: expected a path \(str, bytes or os.PathLike\), not int$")):
        args = dict(folder=str(folder), device="cpu")
        args.update(kw)
        with pytest.raises(TypeError, match=pattern):
            conveyor.Loader(**args)
    x = np.arange(24, dtype=np.uint8).reshape(6, 4)
    listed = conveyor.Loader(arrays=[x, np.arange(6)], batch_size=3, shuffle=False, device="cpu", epochs=1)
    assert [list(b[0].indices) for b in listed] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match=r"^arrays=: expected a pair \(x, y\), not dict$"):
        conveyor.Loader(arrays={"x": x}, device="cpu")


def test_a_launchers_world_size_without_world_size_given_warns(folder, monkeypatch):
    # torchrun sets WORLD_SIZE; a loader not told its rank reads everything on every rank.
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.warns(UserWarning, match=r"WORLD_SIZE=4 in the environment, but world_size= not given"):
        conveyor.Loader(folder=str(folder), device="cpu")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = conveyor.Loader(folder=str(folder), device="cpu", rank=1, world_size=4, batch_size=2, crop=16, epochs=1)
        assert 0 < sum(len(b[0].indices) for b in loader) < loader.dataset_size
    monkeypatch.setenv("WORLD_SIZE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conveyor.Loader(folder=str(folder), device="cpu")
