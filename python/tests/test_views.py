"""conveyor.Loader(views=...): several views of each sample (SimCLR, DINO) as one tuple of arrays a batch.

Run by CTest (python_module) with PYTHONPATH at the build tree's python/ folder; `folder` is
conftest.py's. Each view's pixels against a one-view render are tests/test_views.cpp's; here: the
arrays (shape, strides, zero copy), the bytes for any worker count, torch, and the refusals.
"""
import numpy as np
import pytest

import conveyor
from conveyor import transforms as T

DINO = [(2, [T.RandomResizedCrop(32, scale=(0.4, 1)), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4)]),
        (3, "RandomResizedCrop(16, scale=(0.05, 0.4)), RandomHorizontalFlip(), RandomGrayscale(0.5)")]
SAMPLE = 2 * 32 * 32 * 3 + 3 * 16 * 16 * 3


def epochs_of(loader, epochs=2):
    """{(epoch, index): the sample's views as bytes} over `epochs` epochs."""
    out = {}
    for _ in range(epochs):
        for views, labels in loader:
            arrays = [np.asarray(v) for v in views]
            for j, i in enumerate(views[0].indices):
                out[(views[0].epoch, i)] = b"".join(a[j].tobytes() for a in arrays)
    return out


def test_each_batch_is_a_tuple_of_views_inside_the_samples_memory(folder):
    loader = conveyor.Loader(folder=str(folder), batch_size=7, workers=2, device="cpu", epochs=1, views=DINO)
    assert loader.views == DINO
    views, labels = next(iter(loader))
    assert isinstance(views, tuple) and len(views) == 5
    assert [v.shape for v in views] == [(7, 32, 32, 3)] * 2 + [(7, 16, 16, 3)] * 3
    assert all(v.dtype == "uint8" for v in views) and labels.shape == (7,)
    first, third = np.asarray(views[0]), np.asarray(views[2])
    assert first.strides == (SAMPLE, 32 * 3, 3, 1) and not first.flags["C_CONTIGUOUS"]
    # Zero copy: each view starts where the one before it ends, inside one sample.
    assert third.__array_interface__["data"][0] - first.__array_interface__["data"][0] == 2 * 32 * 32 * 3
    assert not np.array_equal(first, np.asarray(views[1]))  # distinct draws, not one crop twice
    loader.close()


def test_the_same_bytes_for_any_worker_count(folder):
    one = epochs_of(conveyor.Loader(folder=str(folder), batch_size=4, workers=1, device="cpu", seed=5, views=DINO))
    three = epochs_of(conveyor.Loader(folder=str(folder), batch_size=4, workers=3, device="cpu", seed=5, views=DINO))
    assert len(one) == 60 and one == three
    other = epochs_of(conveyor.Loader(folder=str(folder), batch_size=4, workers=3, device="cpu", seed=6, views=DINO))
    assert other != one  # the views follow the seed


def test_torch_gets_one_strided_tensor_per_view_and_a_copy_on_request(folder):
    torch = pytest.importorskip("torch")
    import conveyor.torch as ct
    loader = ct.Loader(folder=str(folder), batch_size=6, workers=2, device="cpu", epochs=1, views="2: rrc(24); 1: rrc(8)")
    views, labels = next(iter(loader))
    assert [tuple(v.shape) for v in views] == [(6, 24, 24, 3)] * 2 + [(6, 8, 8, 3)]
    assert views[0].stride() == (2 * 24 * 24 * 3 + 8 * 8 * 3, 72, 3, 1) and labels.dtype == torch.int64
    plain = conveyor.Loader(folder=str(folder), batch_size=6, workers=2, device="cpu", epochs=1, views="2: rrc(24); 1: rrc(8)")
    arrays, _ = next(iter(plain))
    assert torch.equal(views[2], torch.from_numpy(np.asarray(arrays[2]).copy()))
    # __dlpack__(copy=True): the view gathered into C order.
    copied = torch.utils.dlpack.from_dlpack(arrays[1].__dlpack__(copy=True))
    assert copied.is_contiguous() and torch.equal(copied, torch.from_numpy(np.asarray(arrays[1]).copy()))
    loader.close()
    plain.close()


def test_normalize_makes_each_view_a_dense_tensor_of_the_uint8_views_normalized(folder):
    kw = dict(folder=str(folder), batch_size=7, workers=2, device="cpu", epochs=1, seed=3, shuffle=False, views=DINO)
    plain = conveyor.Loader(**kw)
    normalized = conveyor.Loader(normalize="float32", **kw)
    mean, std = np.float32([0.485, 0.456, 0.406]), np.float32([0.229, 0.224, 0.225])
    batches = 0
    for (raw, _), (views, labels) in zip(plain, normalized):
        assert [v.shape for v in views] == [(len(labels), 3, 32, 32)] * 2 + [(len(labels), 3, 16, 16)] * 3
        assert all(v.dtype == "float32" for v in views)
        for u8, f in zip(raw, views):
            got = np.asarray(f)
            assert got.flags["C_CONTIGUOUS"]  # a tensor of its own, not strided inside the samples
            want = (np.asarray(u8).transpose(0, 3, 1, 2).astype(np.float32) / 255 - mean[:, None, None]) / std[:, None, None]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        batches += 1
    assert batches == 5  # 30 samples: 4 x 7 + 2
    half = conveyor.Loader(normalize="float16", **kw)
    views, _ = next(iter(half))
    assert [v.dtype for v in views] == ["float16"] * 5 and views[4].shape == (7, 3, 16, 16)
    for loader in (plain, normalized, half):
        loader.close()


def test_on_a_gpu_each_view_has_the_host_backends_bits_uint8_or_normalized(folder):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU this torch can use: the CUDA path is checked on a GPU machine (./go gpu)")
    import conveyor.torch as ct
    for extra in ({}, {"normalize": "float16"}, {"normalize": "float32"}):
        kw = dict(folder=str(folder), batch_size=7, workers=2, epochs=1, seed=3, views=DINO, **extra)
        cpu = [([v.clone() for v in views], labels.clone()) for views, labels in ct.Loader(device="cpu", **kw)]
        gpu = []
        for views, labels in ct.Loader(device="cuda", **kw):
            assert all(v.is_cuda for v in views) and labels.is_cuda
            gpu.append(([v.cpu() for v in views], labels.cpu()))
        assert len(gpu) == len(cpu) == 5, extra
        for (gv, gl), (cv, cl) in zip(gpu, cpu):
            assert torch.equal(gl, cl) and [v.shape for v in gv] == [v.shape for v in cv], extra
            assert all(torch.equal(g, c) for g, c in zip(gv, cv)), extra  # the strided kernel's bits are the twin's


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(views=DINO, transforms=[T.RandomResizedCrop(32)]), ValueError, r"views=: not with arrays=, crop=, augment= or transforms="),
    (dict(views=DINO, crop=32), ValueError, r"views=: not with"),
    (dict(views=DINO, gpu_decode=0.5), ValueError, r"gpu_decode=: not with views="),
    (dict(views="0: rrc(32)"), ValueError, r"views=: entry 1: count '0' is not a whole number from 1 to 64"),
    (dict(views="rrc(32); Flipp"), ValueError, r"views=: entry 2: transforms: unknown transform 'Flipp'"),
    (dict(views=[(2, [T.RandomResizedCrop(32)]), 3]), TypeError, r"views=: entry 2 is not a \(count, transforms\) pair"),
    (dict(views=[(2.5, [T.RandomResizedCrop(32)])]), TypeError, r"views=: entry 1's count is not an int"),
    (dict(views=[(2, [T.RandomResizedCrop(32), 7])]), TypeError, r"views=: entry 1: transforms=: item 1 is a int"),
    (dict(views=[(2, "rrc(32); rrc(16)")]), ValueError, r"views=: entry 1: its transforms hold ';' or ':'"),
    (dict(views="2: flip; 3: rrc(16)"), ValueError, r"views=: entry 1: augment: the output size depends on the image"),
    (dict(views=[(1, "rrc(16)"), (2, "jitter(0.4), rrc(32)")]), ValueError, r"views=: entry 2: "),
    (dict(views=[]), ValueError, r"views=\[\]: an empty list"),
    (dict(views="rrc(32), RandomErasing()"), ValueError, r"RandomErasing is not supported with views"),
])
def test_refusals_name_the_keyword(folder, kwargs, error, match):
    with pytest.raises(error, match=match):
        conveyor.Loader(folder=str(folder), device="cpu", **kwargs)
