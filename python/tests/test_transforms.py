"""conveyor.Loader(transforms=...): conveyor.transforms objects and their text, one parser with the command's.

Run by CTest (python_module) with PYTHONPATH at the build tree's python/ folder; `folder` is
conftest.py's (images written there, binary PPM).
"""
import hashlib

import numpy as np
import pytest

import conveyor
from conveyor import transforms as T
from ppm import write_ppm


def batches(loader, epochs=2):
    out = []
    for _ in range(epochs):
        for images, labels in loader:
            out.append((images.epoch, tuple(images.indices),
                        hashlib.sha1(np.asarray(images).tobytes() + np.asarray(labels).tobytes()).hexdigest()))
    loader.close()
    return out


def test_a_transform_prints_as_the_text_the_command_takes():
    assert str(T.RandomResizedCrop(176)) == "RandomResizedCrop(size=176)"
    assert str(T.RandomResizedCrop(176, scale=(0.35, 1))) == "RandomResizedCrop(size=176, scale=(0.35, 1))"
    assert str(T.ColorJitter(0.4, 0.4, 0.4, 0.1)) == "ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)"
    assert str(T.RandomCrop(32, padding=[4, 2])) == "RandomCrop(size=32, padding=(4, 2))"
    assert str(T.RandomHorizontalFlip()) == "RandomHorizontalFlip()"
    assert T.GaussianBlur(5, sigma=(0.1, 2.0)) == T.GaussianBlur(kernel_size=5, sigma=(0.1, 2.0))


def test_wrong_arguments_are_refused_as_a_python_call_would_be():
    with pytest.raises(TypeError, match=r"RandomResizedCrop\(\) got an unexpected keyword argument 'interpolation'"):
        T.RandomResizedCrop(224, interpolation="bilinear")
    with pytest.raises(TypeError, match=r"missing required argument: 'size'"):
        T.CenterCrop()
    with pytest.raises(TypeError, match=r"takes 1 argument"):
        T.RandomHorizontalFlip(0.5, 0.2)
    with pytest.raises(TypeError, match=r"multiple values for argument 'p'"):
        T.RandomGrayscale(0.2, p=0.3)
    with pytest.raises(TypeError, match=r"ColorJitter: brightness='a lot'"):
        T.ColorJitter(brightness="a lot")


def test_objects_text_and_the_preset_give_the_same_batches(folder):
    common = dict(folder=str(folder), batch_size=5, workers=2, seed=7, device="cpu")
    preset = batches(conveyor.Loader(augment="rrc", crop=24, **common))
    objects = batches(conveyor.Loader(transforms=[T.RandomResizedCrop(24), T.RandomHorizontalFlip()], **common))
    text = batches(conveyor.Loader(transforms="RandomResizedCrop(24), RandomHorizontalFlip()", **common))
    mixed = batches(conveyor.Loader(transforms=("rrc(24)", T.RandomHorizontalFlip(p=0.5)), **common))
    assert objects == preset
    assert text == preset
    assert mixed == preset


def test_colour_transforms_run_the_same_for_any_worker_count(folder):
    recipe = [T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
              T.RandomGrayscale(p=0.2), T.GaussianBlur(3), T.RandomSolarize(128), T.RandomEqualize()]
    runs = [batches(conveyor.Loader(folder=str(folder), batch_size=4, workers=w, seed=3, device="cpu",
                                    transforms=recipe)) for w in (1, 3)]
    assert runs[0] == runs[1]
    plain = batches(conveyor.Loader(folder=str(folder), batch_size=4, workers=1, seed=3, device="cpu",
                                    transforms=recipe[:3]))
    assert [b[:2] for b in plain] == [b[:2] for b in runs[0]]  # the same samples in the same batches
    assert plain != runs[0]  # with other pixels
    loader = conveyor.Loader(folder=str(folder), batch_size=4, device="cpu", transforms=recipe)
    images, _ = next(iter(loader))
    assert np.asarray(images).shape == (4, 20, 20, 3)
    assert loader.transforms == recipe  # read back as given
    with pytest.raises(AttributeError, match="read-only"):
        loader.transforms = []
    loader.close()


def test_a_bad_list_is_one_value_or_type_error_naming_it(folder):
    f = str(folder)
    with pytest.raises(ValueError, match=r"transforms=: .*RandomHorizontalFlip.*p"):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24), T.RandomHorizontalFlip(p=2)])
    with pytest.raises(ValueError, match=r"transforms=: .*unknown transform 'Rotate'"):
        conveyor.Loader(folder=f, transforms="RandomResizedCrop(24), Rotate(30)")
    with pytest.raises(ValueError, match=r"transforms=: not with crop= or augment="):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24)], crop=32)
    with pytest.raises(ValueError, match=r"transforms=: not with crop= or augment="):
        conveyor.Loader(folder=f, transforms="rrc(24)", augment="center")
    with pytest.raises(ValueError, match=r"not for arrays="):
        conveyor.Loader(arrays=(np.zeros((4, 3), np.float32), np.zeros(4, np.int64)), transforms="rrc(24)")
    with pytest.raises(ValueError, match=r"transforms=\[\]: an empty list"):
        conveyor.Loader(folder=f, transforms=[])
    with pytest.raises(TypeError, match=r"transforms=: item 1 is a dict"):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24), {"p": 0.5}])
    with pytest.raises(TypeError, match=r"transforms=: expected a list"):
        conveyor.Loader(folder=f, transforms=T.RandomResizedCrop(24))


def decoded(loader):
    """{sample index: H x W x 3 uint8} over one epoch."""
    out = {}
    for images, _ in loader:
        for i, image in zip(images.indices, np.asarray(images)):
            out[int(i)] = image.copy()
    loader.close()
    return out


def test_vertical_flip_is_torchvision_vflip(tmp_path):
    F = pytest.importorskip("torchvision.transforms.functional", reason="torchvision is not installed")
    torch = pytest.importorskip("torch", reason="torch is not installed")
    rng = np.random.default_rng(11)
    sources = []
    for i, (h, w) in enumerate(((11, 9), (20, 13), (17, 17))):  # odd heights: CenterCrop(6) is off centre
        (tmp_path / "c").mkdir(exist_ok=True)
        sources.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        write_ppm(tmp_path / "c" / f"img{i}.ppm", sources[-1])
    common = dict(folder=str(tmp_path), batch_size=3, workers=2, seed=5, device="cpu", shuffle=False)

    def tv(image, *ops):
        t = torch.from_numpy(image).permute(2, 0, 1)
        for op in ops:
            t = op(t)
        return t.permute(1, 2, 0).numpy()

    crop = lambda t: F.center_crop(t, [6, 6])  # noqa: E731
    after = decoded(conveyor.Loader(transforms=[T.CenterCrop(6), T.RandomVerticalFlip(p=1)], **common))
    before = decoded(conveyor.Loader(transforms="RandomVerticalFlip(p=1), CenterCrop(6)", **common))
    for i, image in enumerate(sources):
        assert np.array_equal(after[i], tv(image, crop, F.vflip))
        assert np.array_equal(before[i], tv(image, F.vflip, crop))
    # Drawn with p: each sample is its unflipped crop or exactly vflip of it, both seen.
    plain = decoded(conveyor.Loader(transforms="RandomResizedCrop(8)", **common))
    drawn = decoded(conveyor.Loader(transforms="RandomResizedCrop(8), vflip(p=0.5)", **common))
    always = decoded(conveyor.Loader(transforms="RandomResizedCrop(8), vflip(p=1)", **common))
    for i in plain:
        assert np.array_equal(always[i], tv(plain[i], F.vflip))
        assert np.array_equal(drawn[i], plain[i]) or np.array_equal(drawn[i], always[i])


def test_policies_print_as_text_and_refuse_what_torchvision_would():
    assert str(T.TrivialAugmentWide()) == "TrivialAugmentWide()"
    assert str(T.RandAugment(num_ops=2, magnitude=9)) == "RandAugment(num_ops=2, magnitude=9)"
    assert str(T.RandAugment(3, fill=(1, 2, 3))) == "RandAugment(num_ops=3, fill=(1, 2, 3))"
    with pytest.raises(TypeError, match=r"TrivialAugmentWide\(\) got an unexpected keyword argument 'magnitude'"):
        T.TrivialAugmentWide(magnitude=9)
    with pytest.raises(TypeError, match=r"RandAugment: interpolation="):
        T.RandAugment(interpolation="bilinear")


def test_policies_run_the_same_for_any_worker_count_and_check_their_values(folder):
    recipe = [T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.TrivialAugmentWide(fill=128), T.RandAugment()]
    runs = [batches(conveyor.Loader(folder=str(folder), batch_size=4, workers=w, seed=3, device="cpu",
                                    transforms=recipe)) for w in (1, 3)]
    assert runs[0] == runs[1]
    f = str(folder)
    with pytest.raises(ValueError, match=r"transforms=: .*RandAugment: magnitude must be in \[0, num_magnitude_bins - 1\]"):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24), T.RandAugment(magnitude=31)])
    with pytest.raises(ValueError, match=r"transforms=: .*TrivialAugmentWide: fill must be in \[0, 255\]"):
        conveyor.Loader(folder=f, transforms="rrc(24), TrivialAugmentWide(fill=300)")


def test_each_policy_sample_is_torchvision_apply_op_of_one_draw(tmp_path):
    """Every sample equals torchvision's _apply_op, on the same crop, for one (op, bin, sign) of the space."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    autoaugment = pytest.importorskip("torchvision.transforms.autoaugment", reason="torchvision is not installed")
    from torchvision.transforms import InterpolationMode
    rng = np.random.default_rng(12)
    (tmp_path / "c").mkdir()
    for i in range(6):
        write_ppm(tmp_path / "c" / f"img{i}.ppm", rng.integers(0, 256, (9 + i, 11, 3), dtype=np.uint8))
    common = dict(folder=str(tmp_path), batch_size=3, workers=2, seed=5, device="cpu", shuffle=False)
    plain = decoded(conveyor.Loader(transforms="CenterCrop(8)", **common))
    fill = [10.0, 20.0, 30.0]
    policies = {"TrivialAugmentWide(num_magnitude_bins=7, fill=(10, 20, 30))":
                autoaugment.TrivialAugmentWide(7)._augmentation_space(7),
                "RandAugment(num_ops=1, magnitude=4, num_magnitude_bins=7, fill=(10, 20, 30))":
                {k: (m[4:5] if m.ndim else m, s) for k, (m, s) in
                 autoaugment.RandAugment()._augmentation_space(7, (8, 8)).items()}}
    for text, space in policies.items():
        drawn = decoded(conveyor.Loader(transforms="CenterCrop(8), " + text, **common))
        assert sum(not np.array_equal(drawn[i], plain[i]) for i in plain) >= 3  # the policy ran (identity is 1 in 14)
        for i, image in plain.items():
            t = torch.from_numpy(image).permute(2, 0, 1).contiguous()
            found = False
            for name, (mags, signed) in space.items():
                for m in ([float(v) for v in mags] if mags.ndim else [0.0]):
                    for sign in ((1.0, -1.0) if signed else (1.0,)):
                        want = autoaugment._apply_op(t, name, sign * m, InterpolationMode.NEAREST, fill)
                        want = want.permute(1, 2, 0).numpy().astype(np.int16)
                        found = found or int(np.abs(want - drawn[i].astype(np.int16)).max()) <= 1
            assert found, f"{text}: sample {i} is no op of torchvision's space"


def test_random_erasing_follows_normalize_on_the_device_the_same_for_any_worker_count(folder):
    recipe = [T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.RandomErasing(p=1, value=(7, 8, 9))]
    common = dict(folder=str(folder), batch_size=4, seed=3, device="cpu", normalize="float32")
    runs = [batches(conveyor.Loader(workers=w, transforms=recipe, **common)) for w in (1, 3)]
    assert runs[0] == runs[1]
    erased = 0
    with_erasing = conveyor.Loader(workers=2, transforms=recipe, **common)
    without = conveyor.Loader(workers=2, transforms=recipe[:2], **common)
    for (images, _), (plain, _) in zip(with_erasing, without):
        for x, p in zip(np.asarray(images), np.asarray(plain)):  # [3, 20, 20] each
            mask = x[0] == 7
            assert (mask == (x[1] == 8)).all() and (mask == (x[2] == 9)).all()  # every channel, one rectangle
            assert (x[:, ~mask] == p[:, ~mask]).all()  # the rest as normalized
            if mask.any():
                erased += 1
                rows, cols = np.nonzero(mask)
                assert mask.sum() == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    with_erasing.close()
    without.close()
    assert erased > 10
    assert str(T.RandomErasing(0.25)) == "RandomErasing(p=0.25)"
    f = str(folder)
    with pytest.raises(ValueError, match=r"transforms=: RandomErasing follows Normalize, on the device: give normalize="):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24), T.RandomErasing()])
    with pytest.raises(ValueError, match=r"RandomHorizontalFlip: after RandomErasing"):
        conveyor.Loader(folder=f, normalize="float32", transforms=[T.RandomResizedCrop(24), T.RandomErasing(),
                                                                   T.RandomHorizontalFlip()])
    with pytest.raises(ValueError, match=r"RandomErasing: p must be in \[0, 1\]"):
        conveyor.Loader(folder=f, normalize="float32", transforms="rrc(24), RandomErasing(p=1.5)")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mixup_and_cutmix_mix_each_batch_as_torchvision_v2s_formula(folder, dtype):
    """float32: torch's bits. float16: within a unit in the last place of the two terms (2 ** -9 of their size),
    since torch 1.13 rounds the weight lam to float16 before it multiplies on the CPU, while Conveyor keeps it in
    float32, as torch's CUDA kernels do."""
    torch = pytest.importorskip("torch")
    base = [T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.RandomErasing(0.3)]
    mix = [T.MixUp(alpha=0.4), T.CutMix()]
    common = dict(folder=str(folder), batch_size=6, seed=3, device="cpu", normalize=dtype, epochs=2)
    ulp = 0 if dtype == "float32" else 2.0 ** -9
    plain = conveyor.Loader(workers=2, transforms=base, **common)
    soft = conveyor.Loader(workers=3, transforms=base + mix, **common)
    paired = conveyor.Loader(workers=1, transforms=base + mix, mix_labels="pair", **common)
    kinds = {"mixup": 0, "cutmix": 0}
    for (x, y), (m, s), (m2, y2, lam) in zip(plain, soft, paired):
        x = torch.from_numpy(np.asarray(x).copy())
        m = torch.from_numpy(np.asarray(m).copy())
        y = torch.from_numpy(np.asarray(y).copy())
        assert torch.equal(m, torch.from_numpy(np.asarray(m2).copy()))  # the same batch for 1 and 3 workers
        assert torch.equal(y, torch.from_numpy(np.asarray(y2).copy()))  # pair: the integer labels as they were
        assert isinstance(lam, float) and 0 <= lam <= 1
        rolled = x.roll(1, 0)
        # torchvision.transforms.v2.MixUp._transform, on a float16 tensor:
        terms = rolled.float().abs() * (1.0 - lam) + x.float().abs() * lam
        if ((m.float() - rolled.mul(1.0 - lam).add_(x.mul(lam)).float()).abs() <= ulp * terms).all():
            kinds["mixup"] += 1
        else:  # CutMix._transform: one box, the same for every sample, taken from the rolled batch
            inside = (m != x).any(0).any(0)  # [H, W]
            rows, cols = np.nonzero(inside.numpy())
            y1, y2_, x1, x2 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
            want = x.clone()
            want[..., y1:y2_, x1:x2] = rolled[..., y1:y2_, x1:x2]
            assert torch.equal(m, want)
            assert lam == pytest.approx(1.0 - (x2 - x1) * (y2_ - y1) / (20 * 20), abs=1e-12)
            kinds["cutmix"] += 1
        # _BaseMixUpCutMix._mixup_label: one-hot labels mixed by the same lambda.
        one_hot = torch.nn.functional.one_hot(y, num_classes=3).float()
        assert torch.equal(torch.from_numpy(np.asarray(s).copy()), one_hot.roll(1, 0).mul_(1.0 - lam).add_(one_hot.mul(lam)))
    assert kinds["mixup"] > 0 and kinds["cutmix"] > 0
    for loader in (plain, soft, paired):
        loader.close()
    assert str(T.MixUp(0.2)) == "MixUp(alpha=0.2)"
    f = str(folder)
    with pytest.raises(ValueError, match=r"transforms=: CutMix follows Normalize, on the device: give normalize="):
        conveyor.Loader(folder=f, transforms=[T.RandomResizedCrop(24), T.CutMix()])
    with pytest.raises(ValueError, match=r"RandomErasing: after MixUp or CutMix"):
        conveyor.Loader(folder=f, normalize="float32", transforms=[T.RandomResizedCrop(24), T.MixUp(), T.RandomErasing()])
    with pytest.raises(ValueError, match=r"MixUp: num_classes=2, but the dataset's labels go up to 2"):
        conveyor.Loader(folder=f, normalize="float32", transforms=[T.RandomResizedCrop(24), T.MixUp(num_classes=2)])
    with pytest.raises(ValueError, match=r"mix_labels='pair': needs MixUp or CutMix"):
        conveyor.Loader(folder=f, normalize="float32", transforms=[T.RandomResizedCrop(24)], mix_labels="pair")
    with pytest.raises(ValueError, match=r"mix_labels='hard': expected 'soft' or 'pair'"):
        conveyor.Loader(folder=f, normalize="float32", transforms=[T.RandomResizedCrop(24), T.MixUp()], mix_labels="hard")
    wider = conveyor.Loader(folder=f, normalize="float32", batch_size=4, device="cpu", transforms=[T.RandomResizedCrop(24), T.MixUp(num_classes=10)])
    _, s = next(iter(wider))
    assert np.asarray(s).shape == (4, 10)
    wider.close()
