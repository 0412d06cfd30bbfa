"""conveyor.Loader used carelessly, as a PyTorch user would: a closed loader,
settings assigned after construction, bool and torch inputs, the DLPack
keywords, and the messages of wrong arguments.

Run by CTest (python_module) with PYTHONPATH at the build tree's python/ folder.
"""
import threading

import numpy as np
import pytest

import conveyor


def rows_loader(n=12, **kw):
    x = np.arange(n * 4, dtype=np.uint8).reshape(n, 4)
    args = dict(batch_size=3, shuffle=False, device="cpu")
    args.update(kw)
    return conveyor.Loader(arrays=(x, np.arange(n)), **args), x


# ------------------------------------------------------------ a closed loader

def test_iterating_a_closed_loader_raises_instead_of_yielding_nothing():
    with rows_loader()[0] as loader:
        assert len(list(loader)) == 4
    with pytest.raises(RuntimeError, match=r"^loader: closed"):
        for _ in loader:
            pass
    with pytest.raises(RuntimeError, match=r"^loader: closed"):
        next(iter(loader))
    with pytest.raises(RuntimeError, match=r"^loader: closed"):
        loader.epoch(1)


def test_close_inside_the_loop_raises_at_the_next_batch():
    loader, _ = rows_loader()
    taken = 0
    with pytest.raises(RuntimeError, match=r"^loader: closed"):
        for _ in loader:
            taken += 1
            loader.close()
    assert taken == 1


def test_close_from_another_thread_raises_in_the_loop():
    loader, _ = rows_loader()
    it = iter(loader)
    next(it)
    closer = threading.Thread(target=loader.close)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive()
    with pytest.raises(RuntimeError, match=r"^loader: closed"):
        next(it)


# ------------------------------------------------------------ settings are read-only

@pytest.mark.parametrize("name, value", [("shuffle", True), ("seed", 5), ("drop_last", True), ("workers", 3),
                                         ("epochs", 2), ("batch_size", 4), ("device", "cuda"), ("arrays", None),
                                         ("max_memory_mb", 1)])
def test_assigning_a_setting_is_refused_and_changes_nothing(name, value):
    loader, _ = rows_loader(seed=1)
    before = loader.state_dict()
    with pytest.raises(AttributeError, match=rf"^Loader\.{name} is read-only: .*conveyor\.Loader\(\.\.\., {name}=\.\.\.\)$"):
        setattr(loader, name, value)
    assert loader.state_dict() == before
    assert [list(b[0].indices) for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]


def test_settings_read_back_as_given_and_other_attributes_are_refused():
    loader, _ = rows_loader(seed=7, workers=2, epochs=3)
    assert (loader.seed, loader.workers, loader.epochs, loader.shuffle, loader.drop_last) == (7, 2, 3, False, False)
    with pytest.raises(AttributeError, match=r"^Loader\.dataset_size is read-only"):
        loader.dataset_size = 3
    with pytest.raises(AttributeError):
        loader.shufle = False  # a typo is not a new attribute


def test_the_torch_loader_refuses_assignment_too():
    pytest.importorskip("torch")
    from conveyor.torch import Loader as TorchLoader
    x = np.zeros((4, 2), np.uint8)
    loader = TorchLoader(arrays=(x, np.arange(4)), batch_size=2, device="cpu")
    with pytest.raises(AttributeError, match=r"^Loader\.shuffle is read-only"):
        loader.shuffle = True


# ------------------------------------------------------------ bool rows

def test_bool_rows_arrive_as_bool():
    x = np.array([[True, False, True], [False, False, True]] * 3)
    with conveyor.Loader(arrays=(x, np.arange(6)), batch_size=6, shuffle=False, device="cpu") as loader:
        images, _ = next(iter(loader))
        assert images.dtype == "bool"
        a = np.asarray(images)
        assert a.dtype == np.bool_
        np.testing.assert_array_equal(a, x)
        torch = pytest.importorskip("torch")
        try:
            t = torch.from_dlpack(images)  # DLPack's kDLBool (6)
            assert t.dtype == torch.bool and t.tolist() == x.tolist()
        except RuntimeError as e:
            assert "Unsupported code 6" in str(e)  # a torch older than DLPack's bool: refused, not misread as uint8
    from conveyor.torch import Loader as TorchLoader
    with TorchLoader(arrays=(x, np.arange(6)), batch_size=6, shuffle=False, device="cpu") as loader:
        t, _ = next(iter(loader))
        assert t.dtype == torch.bool and t.tolist() == x.tolist()


# ------------------------------------------------------------ from PyTorch

def test_torch_tensors_are_taken_as_arrays():
    torch = pytest.importorskip("torch")
    x = torch.arange(10 * 3, dtype=torch.float32).reshape(10, 3)
    y = torch.arange(10)
    with conveyor.Loader(arrays=(x, y), batch_size=5, shuffle=False, device=torch.device("cpu")) as loader:
        assert loader.device == "cpu"
        images, labels = next(iter(loader))
        np.testing.assert_array_equal(np.asarray(images), x[:5].numpy())
        np.testing.assert_array_equal(np.asarray(labels), np.arange(5))
    with pytest.raises(ValueError, match=r"^arrays: x \(a Tensor\) must be C-contiguous \(x.contiguous\(\)\)$"):
        conveyor.Loader(arrays=(x.t(), torch.arange(3)), device="cpu")
    bools = conveyor.Loader(arrays=(torch.ones(4, 2, dtype=torch.bool), torch.arange(4)), batch_size=4, device="cpu")
    assert next(iter(bools))[0].dtype == "bool"
    with pytest.raises(ValueError, match=r"^arrays: x must be an array .*, not object$"):
        conveyor.Loader(arrays=(object(), [0]), device="cpu")


def test_an_array_indexes_and_iterates_as_numpy():
    loader, x = rows_loader()
    images, labels = next(iter(loader))
    np.testing.assert_array_equal(images[0], x[0])
    np.testing.assert_array_equal(images[1:, 2], x[1:3, 2])
    assert [int(v) for v in labels] == [0, 1, 2]
    assert labels[-1] == 2
    assert len([row for row in images]) == len(images) == 3


def test_dlpack_takes_the_current_protocols_keywords():
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import from_dlpack
    loader, x = rows_loader()
    images, _ = next(iter(loader))
    for kw in (dict(max_version=(1, 0)), dict(max_version=None, copy=None, stream=None), dict(copy=False),
               dict(dl_device=(1, 0)), dict(dl_device=images.__dlpack_device__(), max_version=(0, 8))):
        np.testing.assert_array_equal(from_dlpack(images.__dlpack__(**kw)).numpy(), x[:3])
    copied = from_dlpack(images.__dlpack__(copy=True))
    copied += 1
    np.testing.assert_array_equal(np.asarray(images), x[:3])  # a copy: the batch is unchanged
    with pytest.raises(BufferError, match=r"dl_device=\(2, 0\)\): this Array is on \(1, 0\)"):
        images.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match=r"stream=5\): this Array is in host memory"):
        images.__dlpack__(stream=5)
    with pytest.raises(TypeError, match=r"max_version='1'\): expected None or \(major, minor\)"):
        images.__dlpack__(max_version="1")


# ------------------------------------------------------------ messages

def test_an_empty_path_is_named():
    with pytest.raises(ValueError, match=r"^folder='': an empty path$"):
        conveyor.Loader(folder="", device="cpu")


def test_a_uint64_label_past_int64_is_named_by_its_row():
    with pytest.raises(ValueError, match=r"^arrays: y\[1\] = 18446744073709551615: a label must be 0 to \d+$"):
        conveyor.Loader(arrays=(np.zeros((2, 2), np.uint8), np.array([0, 2**64 - 1], np.uint64)), device="cpu")


def test_load_state_dict_of_none_is_one_line():
    loader, _ = rows_loader()
    with pytest.raises(TypeError, match=r"^load_state_dict: expected a dict \(a Loader's state_dict\(\)\), not NoneType$"):
        loader.load_state_dict(None)


def test_an_epoch_out_of_range_is_named_as_the_epoch_asked_for():
    loader, _ = rows_loader()
    with pytest.raises(ValueError, match=r"^epoch\(9223372036854775808\): epoch 9223372036854775808 is out of range "
                                         r"\(epochs are 0 to \d+\)$"):
        loader.epoch(2**63)


def test_a_fractional_memory_limit_is_shown_as_given():
    with pytest.raises(ValueError, match=r"over max_memory_mb 1.5$"):
        conveyor.Loader(arrays=(np.zeros((8, 1 << 20), np.uint8), np.arange(8)), batch_size=8, max_memory_mb=1.5,
                        device="cpu")


def test_record_stream_on_a_host_array_is_refused():
    loader, _ = rows_loader()
    images, _ = next(iter(loader))
    with pytest.raises(ValueError, match=r"^record_stream: this Array is in host memory"):
        images.record_stream(123)


# ------------------------------------------------------------ shards beside a manifest

def test_a_shard_the_manifest_does_not_list_is_refused_unless_asked_for(tmp_path):
    import io
    import tarfile

    def shard(path, keys):
        with tarfile.open(path, "w") as t:
            for k in keys:
                for name, data in ((f"{k}.ppm", b"P6\n1 1\n255\n\x00\x00\x00"), (f"{k}.cls", b"0")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))

    shard(tmp_path / "train.tar", ["a", "b"])
    (tmp_path / ".conveyor-manifest").write_text("conveyor-shard-manifest 1\n2 train.tar\n")
    assert conveyor.Loader(shards=str(tmp_path), device="cpu").dataset_size == 2
    shard(tmp_path / "val.tar", ["c"])  # validation copied into the training folder
    with pytest.raises(ValueError, match=r"val\.tar: not listed in .*\.conveyor-manifest .*extra_shards=True"):
        conveyor.Loader(shards=str(tmp_path), device="cpu")
    loader = conveyor.Loader(shards=str(tmp_path), device="cpu", extra_shards=True)
    assert loader.dataset_size == 3 and loader.extra_shards is True
    with pytest.raises(ValueError, match=r"^extra_shards=True: needs shards=$"):
        conveyor.Loader(folder=str(tmp_path), extra_shards=True, device="cpu")


# ------------------------------------------------------------ skips over many epochs

def test_skipped_keeps_each_bad_file_once_with_its_count(tmp_path):
    (tmp_path / "c").mkdir()
    for i in range(4):
        (tmp_path / "c" / f"good{i}.ppm").write_bytes(b"P6\n2 2\n255\n" + bytes(12))
    (tmp_path / "c" / "bad.ppm").write_bytes(b"not an image")
    loader = conveyor.Loader(folder=str(tmp_path), batch_size=5, crop=2, on_error="skip", device="cpu", epochs=6)
    for _ in range(3):
        for _ in loader:
            pass
    for _ in loader.epoch(5):  # a restart: the skips before it are kept, merged
        pass
    skipped = loader.skipped()
    assert len(skipped) == 1, skipped
    assert skipped[0]["times"] == 4 and skipped[0]["epoch"] == 0 and skipped[0]["last_epoch"] == 5
    assert "bad.ppm" in skipped[0]["reason"]
