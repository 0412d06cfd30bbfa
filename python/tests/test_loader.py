"""conveyor.Loader from Python: delivery, determinism, resume, lifetimes, errors, interrupts, leaks.

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


def digest(images, labels):
    return hashlib.sha1(np.asarray(images).tobytes() + np.asarray(labels).tobytes()).hexdigest()


def run(loader, epochs):
    """(epoch, batch index, sample indices, digest) of every batch of `epochs` epochs."""
    out = []
    for _ in range(epochs):
        for images, labels in loader:
            out.append((images.epoch, images.index, tuple(images.indices), digest(images, labels)))
    return out


def test_every_sample_once_per_epoch_and_the_same_bytes_for_1_and_4_workers(folder):
    runs = {}
    for workers in (1, 4):
        loader = conveyor.Loader(folder=str(folder), batch_size=7, workers=workers, crop=16, seed=3, device="cpu")
        assert len(loader) == 5  # 30 samples, batches of 7: the last one short
        runs[workers] = run(loader, 3)
        loader.close()
    assert runs[1] == runs[4]
    for e in range(3):
        seen = sorted(i for (epoch, _, idx, _) in runs[1] if epoch == e for i in idx)
        assert seen == list(range(30))
    assert runs[1][0][2] != runs[1][5][2]  # each epoch its own order


def test_shards_give_the_same_batches_as_the_files(tmp_path, folder):
    import shutil
    import subprocess
    if shutil.which("tar") is None:
        pytest.skip("no tar here")
    files = sorted(folder.rglob("*.ppm"))
    (tmp_path / "flat").mkdir()
    (tmp_path / "shards").mkdir()
    lines = []
    for i, p in enumerate(files):
        shutil.copy(p, tmp_path / "flat" / f"{i:06d}.ppm")
        (tmp_path / "flat" / f"{i:06d}.cls").write_text(str(i % 3))
        lines.append(f"flat/{i:06d}.ppm {i % 3}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    names = [f"{i:06d}.{e}" for i in range(len(files)) for e in ("ppm", "cls")]
    subprocess.run(["tar", "-cf", str(tmp_path / "shards" / "a.tar")] + names[:30], cwd=tmp_path / "flat", check=True)
    subprocess.run(["tar", "-cf", str(tmp_path / "shards" / "b.tar")] + names[30:], cwd=tmp_path / "flat", check=True)
    kw = dict(batch_size=4, crop=16, seed=5, device="cpu")
    from_files = run(conveyor.Loader(list=str(tmp_path / "list.txt"), **kw), 2)
    from_shards = run(conveyor.Loader(shards=str(tmp_path / "shards"), workers=3, **kw), 2)
    assert from_shards == from_files
    # Whole shards per rank: a.tar (15 samples) to rank 0, b.tar (15) to rank 1; together every sample once.
    def samples(loader):  # each sample's bytes (a deterministic center crop), as a set
        return {np.asarray(im)[k].tobytes() for im, _ in loader for k in range(len(im))}
    center = dict(batch_size=4, crop=16, augment="center", device="cpu")
    every = samples(conveyor.Loader(list=str(tmp_path / "list.txt"), **center))
    ranks = [samples(conveyor.Loader(shards=str(tmp_path / "shards"), rank=r, world_size=2, rank_by_shard=True, **center))
             for r in (0, 1)]
    assert len(every) == 30 and len(ranks[0]) == len(ranks[1]) == 15
    assert ranks[0] | ranks[1] == every and not ranks[0] & ranks[1]


def pack_like_conveyor(folder, out):
    """The shards `conveyor pack --folder` writes (KEY.ppm, .cls, .conveyor-source, .conveyor-class), by tarfile."""
    import io
    import tarfile
    out.mkdir()
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    files = [(c, f) for c in classes for f in sorted((folder / c).rglob("*.ppm"))]
    with tarfile.open(out / "shard-000000.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for i, (c, f) in enumerate(files):
            for ext, data in (("ppm", f.read_bytes()), ("cls", str(classes.index(c)).encode()),
                              ("conveyor-source", str(f.relative_to(folder)).encode()), ("conveyor-class", c.encode())):
                info = tarfile.TarInfo(f"{i:09d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return out


def test_a_run_on_a_folder_resumes_on_its_packed_shards_and_back(tmp_path, folder):
    shards = pack_like_conveyor(folder, tmp_path / "packed")
    kw = dict(batch_size=4, crop=16, seed=3, device="cpu")
    on_folder = conveyor.Loader(folder=str(folder), **kw)
    on_shards = conveyor.Loader(shards=str(shards), **kw)
    assert on_shards.classes == on_folder.classes == ["class0", "class1", "class2"]
    straight = run(conveyor.Loader(folder=str(folder), **kw), 2)
    it = iter(on_folder)
    for _ in range(3):
        next(it)
    on_shards.load_state_dict(on_folder.state_dict())  # folder -> shards
    rest = run(on_shards, 2)
    assert rest == straight[3:]
    back = conveyor.Loader(folder=str(folder), **kw)
    it = iter(on_shards := conveyor.Loader(shards=str(shards), **kw))
    next(it)
    back.load_state_dict(on_shards.state_dict())  # shards -> folder
    assert run(back, 2) == straight[1:]


def test_arrays_rows_arrive_as_given_with_their_labels():
    x = np.arange(50 * 3 * 2, dtype=np.float32).reshape(50, 3, 2)
    y = np.arange(50) * 10
    with conveyor.Loader(arrays=(x, y), batch_size=8, workers=2, device="cpu") as loader:
        seen = []
        for images, labels in loader:
            a, l = np.asarray(images), np.asarray(labels)
            assert a.dtype == np.float32 and a.shape[1:] == (3, 2) and labels.dtype == "int64"
            np.testing.assert_array_equal(a, x[l // 10])
            np.testing.assert_array_equal(np.from_dlpack(images), a)  # DLPack and the buffer: the same memory
            seen += list(l // 10)
        assert sorted(seen) == list(range(50))


@pytest.mark.parametrize("y, says", [
    (np.array([-1, 0, 1, 2]), r"y\[0\] = -1: a label must be 0 to"),
    (np.array([0, 0, 0, 2**63 - 1]), r"y\[3\] = 9223372036854775807"),
    (np.array([0.5, 1, 2, 3]), r"y must hold integer labels .*, not elements of format 'd'"),
    # NumPy's cast to int64 truncated these with a warning at most: 0.99 read as label 0
    (np.array([0.99] * 4, np.float32), r"y must hold integer labels .*, not elements of format 'f'"),
    (np.array([0.9, 1.9, 2.9, 3.9], np.float16), r"y must hold integer labels"),
    (np.array([1 + 0j] * 4, np.complex64), r"y must hold integer labels"),
    (np.array([True, False, True, False]), r"y must hold integer labels .*, not elements of format '\?'"),
    ([0, 1, 2.5, 3], r"y must hold integer labels .*, not a float"),
    ([np.float32(0.99)] * 4, r"y must hold integer labels .*, not a numpy.float32"),
    ([0, 1, True, 3], r"y must hold integer labels .*, not a bool"),
    (np.array([0, 1, 2.5, 3], dtype=object), r"y must hold integer labels .*, not a float"),
    (np.zeros((4, 2), np.int64), r"y must be a 1-D sequence of integer labels"),
])
def test_arrays_labels_are_checked_as_a_datasets_are(y, says):
    """Also: integer labels in any integer dtype or sequence are taken."""
    for good in (np.arange(4, dtype=np.uint8), np.arange(4, dtype=np.int32), [0, 1, np.int64(2), 3],
                 np.arange(4, dtype=">i4"), np.array([0, 1, 2, 3], dtype=object)):  # big-endian; Python ints
        assert len(conveyor.Loader(arrays=(np.zeros((4, 4), np.uint8), good), batch_size=2, device="cpu")) == 2
    x = np.zeros((4, 4), np.uint8)
    with pytest.raises(ValueError, match=says):
        conveyor.Loader(arrays=(x, y), batch_size=2, device="cpu")


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
    (dict(device_queue="2"), TypeError, r"^device_queue='2': expected an integer, not str$"),
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


def test_normalize_gives_nchw_of_the_dtype(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=4, crop=16, normalize="float16", device="cpu", epochs=1)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 16, 16) and images.dtype == "float16"
    a = np.asarray(images)
    assert a.dtype == np.float16 and -3 < a.min() < a.max() < 3
    uint8 = conveyor.Loader(folder=str(folder), batch_size=4, crop=16, device="cpu", epochs=1)
    assert next(iter(uint8))[0].shape == (4, 16, 16, 3)


def test_resume_mid_epoch_is_bit_identical(folder):
    kw = dict(folder=str(folder), batch_size=4, workers=3, crop=16, seed=11, epochs=3, device="cpu")
    reference = run(conveyor.Loader(**kw), 3)
    for k in (0, 3, 8, 9, 20):
        first = conveyor.Loader(**kw)
        it, taken = iter(first), []
        while len(taken) < k:
            try:
                images, labels = next(it)
            except StopIteration:
                it = iter(first)  # the next epoch
                continue
            taken.append(digest(images, labels))
        state = first.state_dict()
        del first, it
        resumed = conveyor.Loader(**kw)
        resumed.load_state_dict(state)
        rest = [d for (_, _, _, d) in run(resumed, 3)]
        assert [d for (*_, d) in reference] == taken + rest, k


def test_the_state_is_whole_with_torch_loaded_first():
    # A module with its own static libstdc++ beside torch's shared one wrote "epoch=" and stopped
    # (its ostringstream took the wrong locale facet), then crashed: seen on the GPU machine.
    pytest.importorskip("torch")
    x = np.zeros((8, 4), dtype=np.uint8)
    state = conveyor.Loader(arrays=(x, np.arange(8)), batch_size=2, device="cpu").state_dict()["conveyor_state"]
    assert "epoch=0 " in state and state.endswith("shard_policy=pad"), state


def test_a_state_of_another_dataset_of_the_same_size_is_refused(folder, tmp_path):
    x = np.arange(64, dtype=np.uint8).reshape(16, 4)
    state = conveyor.Loader(arrays=(x, np.arange(16) % 3), batch_size=4, device="cpu").state_dict()
    assert state["dataset"].startswith("fnv1a:")
    conveyor.Loader(arrays=(x.copy(), np.arange(16) % 3), batch_size=4, device="cpu").load_state_dict(state)  # same data
    for other in [(x + 1, np.arange(16) % 3), (x, np.arange(16) % 2), (x.view(np.int8), np.arange(16) % 3)]:
        with pytest.raises(ValueError, match=r"^load_state_dict: the state was taken on another dataset of the same size"):
            conveyor.Loader(arrays=other, batch_size=4, device="cpu").load_state_dict(state)
    # files: another list of the same length (two lines swapped) is another dataset
    files = sorted(str(p) for p in folder.rglob("*.ppm"))[:4]
    (tmp_path / "a.txt").write_text("".join(f"{f} {i % 2}\n" for i, f in enumerate(files)))
    (tmp_path / "b.txt").write_text("".join(f"{f} {i % 2}\n" for i, f in enumerate(files[::-1])))
    a = conveyor.Loader(list=str(tmp_path / "a.txt"), batch_size=2, crop=16, device="cpu").state_dict()
    with pytest.raises(ValueError, match="another dataset"):
        conveyor.Loader(list=str(tmp_path / "b.txt"), batch_size=2, crop=16, device="cpu").load_state_dict(a)
    # the same dataset by another path, or moved: the same digest
    kw = dict(batch_size=4, crop=16, device="cpu")
    state = conveyor.Loader(folder=str(folder), **kw).state_dict()
    moved = tmp_path / "staged" / "images"
    shutil.copytree(folder, moved)
    for same in (str(folder) + "/", os.path.relpath(folder), str(moved)):
        conveyor.Loader(folder=same, **kw).load_state_dict(state)
    # a list of absolute paths, and the same list after staging the files elsewhere
    stage = tmp_path / "stage2"
    shutil.copytree(folder, stage)
    (tmp_path / "c.txt").write_text("".join(f"{f} {i % 2}\n" for i, f in enumerate(files)))
    moved_files = [str(stage / os.path.relpath(f, folder)) for f in files]
    (tmp_path / "d.txt").write_text("".join(f"{f} {i % 2}\n" for i, f in enumerate(moved_files)))
    c = conveyor.Loader(list=str(tmp_path / "c.txt"), batch_size=2, crop=16, device="cpu").state_dict()
    conveyor.Loader(list=str(tmp_path / "d.txt"), batch_size=2, crop=16, device="cpu").load_state_dict(c)
    for key in ("dataset", "conveyor_state"):  # not a str: a TypeError naming the key
        with pytest.raises(TypeError, match=rf"^load_state_dict: '{key}' is a int, not a str"):
            conveyor.Loader(list=str(tmp_path / "a.txt"), batch_size=2, crop=16, device="cpu").load_state_dict({**a, key: 5})
    legacy = {"conveyor_state": a["conveyor_state"]}  # a state saved before the digest: taken as it was
    conveyor.Loader(list=str(tmp_path / "b.txt"), batch_size=2, crop=16, device="cpu").load_state_dict(legacy)
    # Another dataset of another size and settings: all of it said, not "of the same size".
    (tmp_path / "e.txt").write_text("".join(f"{f} 0\n" for f in files[:3]))
    smaller = conveyor.Loader(list=str(tmp_path / "e.txt"), batch_size=3, crop=16, device="cpu")
    with pytest.raises(ValueError, match=r"^load_state_dict: the state was taken on another dataset \(dataset fnv1a:\w+ "
                                         r"there, fnv1a:\w+ here: other files, labels or rows; and dataset_size=\d+ there, "
                                         r"3 here, batch_size=2 there, 3 here\)$"):
        smaller.load_state_dict(a)


def test_a_refused_state_leaves_the_loader_where_it_was(folder):
    kw = dict(folder=str(folder), batch_size=4, crop=16, seed=11, device="cpu")
    reference = run(conveyor.Loader(**kw), 2)
    loader = conveyor.Loader(**kw)
    it = iter(loader)
    first = [next(it) for _ in range(2)]
    with pytest.raises(ValueError, match="other settings: seed=12 there, 11 here$"):
        loader.load_state_dict(conveyor.Loader(**{**kw, "seed": 12}).state_dict())
    del first
    assert run(loader, 2)[: len(reference) - 2] == reference[2:]


def test_epoch_picks_an_epoch_and_len_counts_batches(folder):
    kw = dict(folder=str(folder), batch_size=8, crop=16, seed=2, device="cpu")
    reference = run(conveyor.Loader(**kw), 3)
    loader = conveyor.Loader(**kw)
    third = [(e, i, idx, d) for (e, i, idx, d) in reference if e == 2]
    got = [(im.epoch, im.index, tuple(im.indices), digest(im, lb)) for im, lb in loader.epoch(2)]
    assert got == third and loader.current_epoch == 3
    assert len(loader) == 4
    assert len(conveyor.Loader(folder=str(folder), crop=16, drop_last=True, batch_size=8)) == 3


def test_defaults_come_from_the_cpp_config(folder):
    loader = conveyor.Loader(folder=str(folder), crop=16)
    assert loader.batch_size == 32 and len(loader) == 1  # Config's batch_size
    images, _ = next(iter(loader))
    assert images.shape == (30, 16, 16, 3)
    assert conveyor.Loader(folder=str(folder)).__iter__().__next__()[0].shape[1:] == (224, 224, 3)  # ImageConfig's crop


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
    script.write_text(
        "import conveyor, numpy as np, threading, time\n"
        "x = np.zeros((64, 4), dtype=np.uint8)\n"
        "L = conveyor.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, device_queue=1, device_buffers=2,"
        " device='cpu')\n"
        "it = iter(L)\n"
        "first = next(it)\n"
        "threading.Thread(target=lambda: [b for b in it], daemon=True).start()\n"
        "time.sleep(0.5)\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(conveyor.__file__)))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    # The thread that finalizes closes a loader too: a generator left open
    # in a `with` block is closed at exit, on the main thread (which hung).
    script.write_text(
        "import conveyor, numpy as np\n"
        "def batches():\n"
        "    with conveyor.Loader(arrays=(np.zeros((64, 4), dtype=np.uint8), np.arange(64)), batch_size=2,"
        " device='cpu') as loader:\n"
        "        yield from loader\n"
        "g = batches()\n"
        "next(g)\n")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_torch_tensor_keeps_its_batch():
    torch = pytest.importorskip("torch")
    import conveyor.torch as ct
    x = np.arange(64 * 4, dtype=np.uint8).reshape(64, 4)
    loader = ct.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, host_queue=1, device_queue=1, device="cpu")
    it = iter(loader)
    tensors = [next(it) for _ in range(3)]
    images, labels = tensors[0]
    assert isinstance(images, torch.Tensor) and labels.dtype == torch.int64
    assert torch.equal(images, torch.from_numpy(x[labels.numpy()]))
    del tensors[0]
    with pytest.raises(RuntimeError, match="device slots are held"):
        next(it)  # the first batch lives on in `images` and `labels`
    del images
    with pytest.raises(RuntimeError, match="device slots are held"):
        next(it)
    del labels
    assert next(it)[0].shape == (2, 4)


def cuda_torch_or_skip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU this torch can use: the CUDA path is checked on a GPU machine (./go gpu)")
    return torch


def test_auto_says_why_it_chose_and_a_cpu_consumer_reads_in_place(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=4, workers=1, crop=16, epochs=1)
    if loader.device == "cpu":  # auto's own reason, not "asked for": the device is opened once
        assert "auto: " in loader.device_description and "handover" in loader.device_description, \
            loader.device_description
    cpu = conveyor.Loader(folder=str(folder), batch_size=4, workers=1, crop=16, epochs=1, device="cpu")
    assert cpu.device == "cpu" and "handover" in cpu.device_description and "asked for" in cpu.device_description


def test_on_a_gpu_auto_gives_device_tensors_with_the_cpu_paths_values(folder):
    torch = cuda_torch_or_skip()
    import conveyor.torch as ct
    kw = dict(folder=str(folder), batch_size=4, workers=2, crop=16, seed=7, epochs=1, normalize="float16")
    cpu = [(i.clone(), l.clone()) for i, l in ct.Loader(device="cpu", **kw)]
    loader = ct.Loader(device="auto", **kw)
    assert loader.device == "cuda:0", loader.device_description
    side = torch.cuda.Stream()
    gpu = []
    with torch.cuda.stream(side):  # ready on the caller's current stream, whichever it is
        for images, labels in loader:
            assert images.is_cuda and labels.is_cuda and images.dtype == torch.float16
            gpu.append(((images * 1).cpu(), (labels + 0).cpu()))
    assert len(gpu) == len(cpu) == len(loader)
    for (gi, gl), (ci, cl) in zip(gpu, cpu):
        assert torch.equal(gl, cl) and torch.equal(gi, ci)  # the kernel's bits are the host's


def test_on_a_gpu_a_device_tensor_keeps_its_batch():
    torch = cuda_torch_or_skip()
    import conveyor.torch as ct
    x = np.arange(64 * 4, dtype=np.uint8).reshape(64, 4)
    loader = ct.Loader(arrays=(x, np.arange(64)), batch_size=2, workers=1, host_queue=1, device_queue=1,
                       device="cuda")
    it = iter(loader)
    tensors = [next(it) for _ in range(3)]
    images, labels = tensors[0]
    assert images.is_cuda and torch.equal(images.cpu(), torch.from_numpy(x[labels.cpu().numpy()]))
    del tensors[0]
    with pytest.raises(RuntimeError, match="device slots are held"):
        next(it)
    del images, labels
    assert next(it)[0].shape == (2, 4)


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


def big_slow_folder(tmp_path, n=8, side=1500):
    (tmp_path / "a").mkdir()
    for i in range(n):
        write_ppm(tmp_path / "a" / f"{i}.ppm", np.full((side, side, 3), i, dtype=np.uint8))
    return tmp_path


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


def test_torch_tensor_labels_are_taken():
    torch = pytest.importorskip("torch")
    x = np.zeros((6, 4), np.uint8)
    loader = conveyor.Loader(arrays=(x, torch.arange(6) * 2), batch_size=6, shuffle=False, device="cpu", epochs=1)
    assert list(np.asarray(next(iter(loader))[1])) == [0, 2, 4, 6, 8, 10]
    with pytest.raises(ValueError, match="integer labels"):
        conveyor.Loader(arrays=(x, torch.zeros(6)), device="cpu")


def test_stats_name_slow_workers_as_the_bottleneck(tmp_path):
    root = big_slow_folder(tmp_path, n=4, side=1000)
    loader = conveyor.Loader(folder=str(root), batch_size=4, workers=1, crop=32, augment="center", device="cpu")
    for _ in range(3):
        run(loader, 1)
    stats = loader.stats()
    assert stats["bottleneck"].startswith("bottleneck: workers"), stats
    assert stats["stages"]["consumer"]["starved"] > 0.5 and stats["batches"] == 3
    transfer = stats["stages"]["transfer"]
    assert 0 <= transfer["consumer_wait"] <= transfer["blocked"] and transfer["consumer_wait_s"] <= transfer["blocked_s"]


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


def test_gpu_decode_share_on_the_host_twin_gives_the_same_bytes_for_1_and_4_workers(tmp_path):
    """gpu_decode= on device='cpu': the host backend's decoder is the CPU twin of the
    GPU path, so a share runs the whole hand-off; the split goes by index, not by worker."""
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(9)
    for i in range(24):
        d = tmp_path / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"p{i:02d}.jpg", quality=90)

    def batches(workers, gpu_decode):
        loader = conveyor.Loader(folder=str(tmp_path), batch_size=5, workers=workers, crop=16, epochs=2,
                                 device="cpu", gpu_decode=gpu_decode)
        out = run(loader, 2)
        return loader, out

    off, plain = batches(2, "off")
    assert off.gpu_share == 0 and off.gpu_decode_note == ""
    half, one = batches(1, 0.5)
    assert half.gpu_share == 0.5
    assert half.gpu_decode_note.startswith("gpu decode: share 0.5 on host twin")
    _, four = batches(4, 0.5)
    assert one == four
    assert one != plain  # some samples took the GPU path's full decode + resize
    auto, _ = batches(2, "auto")
    assert auto.gpu_share == 0
    assert "the host backend has no GPU" in auto.gpu_decode_note
    for bad in (1.5, "fast", True):
        with pytest.raises(ValueError, match="gpu_decode="):
            conveyor.Loader(folder=str(tmp_path), device="cpu", gpu_decode=bad)
