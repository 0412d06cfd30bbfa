"""conveyor.Loader from Python: delivery, determinism, shards, arrays, normalize, tensors.

Run by CTest (python_module) with PYTHONPATH at the build tree's python/ folder.
The images are written here (binary PPM, which Conveyor reads), never taken from ../shared.
Arguments, resume and threads are test_loader_arguments.py, _resume.py and _threads.py.
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


def test_workers_auto_gives_the_fixed_counts_bytes_and_shows_its_choice(folder):
    fixed = conveyor.Loader(folder=str(folder), batch_size=7, workers=2, crop=16, seed=3, device="cpu")
    tuned = conveyor.Loader(folder=str(folder), batch_size=7, workers="auto", max_workers=3, crop=16, seed=3,
                            device="cpu")
    assert (tuned.workers, tuned.max_workers, fixed.max_workers) == ("auto", 3, None)
    assert run(tuned, 3) == run(fixed, 3)
    t = tuned.stats()["tune_workers"]
    assert 1 <= t["working"] <= 3 and t["changes"] >= len(t["decisions"])
    for d in t["decisions"]:
        assert set(d) == {"at_s", "from", "to", "images_per_s", "reason"} and 1 <= d["to"] <= 3
    assert fixed.stats()["tune_workers"] is None
    assert conveyor.Loader(folder=str(folder), workers="auto", device="cpu").max_workers >= 2  # twice the cores
    with pytest.raises(ValueError, match="workers='many': expected a count of threads or 'auto'"):
        conveyor.Loader(folder=str(folder), workers="many", device="cpu")
    with pytest.raises(ValueError, match="max_workers=: only with workers='auto'"):
        conveyor.Loader(folder=str(folder), workers=2, max_workers=4, device="cpu")
    with pytest.raises(ValueError, match="max_workers"):
        conveyor.Loader(folder=str(folder), workers="auto", max_workers=0, device="cpu")
    with pytest.raises(ValueError, match="gpu_decode='auto': not with workers='auto'"):
        conveyor.Loader(folder=str(folder), workers="auto", gpu_decode="auto", device="cpu")


@pytest.mark.parametrize("queue", ["host_queue", "device_queue"])
def test_queue_auto_gives_the_fixed_depths_bytes_and_shows_its_depth(folder, queue):
    ceiling = "max_" + queue
    fixed = conveyor.Loader(folder=str(folder), batch_size=7, workers=2, crop=16, seed=3, device="cpu")
    tuned = conveyor.Loader(folder=str(folder), batch_size=7, workers=2, crop=16, seed=3, device="cpu",
                            **{queue: "auto", ceiling: 5})
    assert (getattr(tuned, queue), getattr(tuned, ceiling)) == ("auto", 5)
    assert (getattr(fixed, queue), getattr(fixed, ceiling)) == (2, None)
    assert run(tuned, 3) == run(fixed, 3)
    t = tuned.stats()["tune_" + queue]
    assert set(t) == {"depth", "ceiling", "changes", "decisions"}
    assert 2 <= t["depth"] <= 5 and t["ceiling"] == 5 and t["changes"] >= len(t["decisions"])
    for d in t["decisions"]:
        assert set(d) == {"at_s", "from", "to", "images_per_s", "reason"} and d["from"] < d["to"] <= 5
    assert fixed.stats()["tune_" + queue] is None
    assert getattr(conveyor.Loader(folder=str(folder), device="cpu", **{queue: "auto"}), ceiling) == 8
    with pytest.raises(ValueError, match=queue + "='deep': expected a depth in batches or 'auto'"):
        conveyor.Loader(folder=str(folder), device="cpu", **{queue: "deep"})
    with pytest.raises(ValueError, match=ceiling + "=: only with " + queue + "='auto'"):
        conveyor.Loader(folder=str(folder), device="cpu", **{queue: 2, ceiling: 4})
    with pytest.raises(ValueError, match=ceiling):
        conveyor.Loader(folder=str(folder), device="cpu", **{queue: "auto", ceiling: 0})


def test_device_queue_auto_refuses_fixed_device_buffers(folder):
    with pytest.raises(ValueError, match="device_buffers.*tune_device_queue"):
        conveyor.Loader(folder=str(folder), device_queue="auto", device_buffers=6, device="cpu")


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


def test_normalize_gives_nchw_of_the_dtype(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=4, crop=16, normalize="float16", device="cpu", epochs=1)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 16, 16) and images.dtype == "float16"
    a = np.asarray(images)
    assert a.dtype == np.float16 and -3 < a.min() < a.max() < 3
    uint8 = conveyor.Loader(folder=str(folder), batch_size=4, crop=16, device="cpu", epochs=1)
    assert next(iter(uint8))[0].shape == (4, 16, 16, 3)


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
    feed = half.stats()["stages"]["gpu decode"]  # its busy time by the decoders' parts
    assert list(feed["parts"]) == ["parse", "setup", "decode", "taps"]
    assert feed["parts"]["decode"]["calls"] > 0 and 0 < feed["parts"]["decode"]["seconds"] <= feed["busy_s"]
    assert half.stats()["stages"]["workers"]["parts"] == {}
    _, four = batches(4, 0.5)
    assert one == four
    assert one != plain  # some samples took the GPU path's full decode + resize
    auto, _ = batches(2, "auto")
    assert auto.gpu_share == 0
    assert "the host backend has no GPU" in auto.gpu_decode_note
    for bad in (1.5, "fast", True):
        with pytest.raises(ValueError, match="gpu_decode="):
            conveyor.Loader(folder=str(tmp_path), device="cpu", gpu_decode=bad)
