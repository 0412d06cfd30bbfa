"""conveyor.Loader's state: resume mid-epoch, bit-identical, and states that are refused.

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


@pytest.mark.parametrize("recipe", [dict(crop=16), dict(transforms="rrc(16), flip, erase(0.5), mixup(0.4), cutmix",
                                                    normalize="float32")], ids=["crop", "erasing-mixup-cutmix"])
def test_resume_mid_epoch_is_bit_identical(folder, recipe):
    kw = dict(folder=str(folder), batch_size=4, workers=3, seed=11, epochs=3, device="cpu", **recipe)
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
