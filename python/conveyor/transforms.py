"""Transforms for ``conveyor.Loader(transforms=[...])``, with torchvision's names, parameters and defaults.

    import conveyor
    from conveyor import transforms as T

    loader = conveyor.Loader(folder="train/", transforms=[
        T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4), T.RandomGrayscale(p=0.2)])

An object here only describes its transform: the Loader runs the list in its
C++ worker threads, drawing every random choice from (seed, epoch, sample), so
the batches are the same for any worker count. ``str(t)`` is the transform as
text, ``RandomResizedCrop(176)``: the form ``conveyor run --transforms`` and a
TOML config's ``transforms =`` take, so a recipe pastes across. ``transforms=``
also takes that text directly. The geometric transforms (RandomResizedCrop,
Resize, CenterCrop, RandomCrop, RandomHorizontalFlip, RandomVerticalFlip) come
first in a list, then the colour ones; the first sets the output size, so
``crop=`` and ``augment=`` are not given with it.

The arguments' values are checked when the Loader is made, each error naming
the transform and the parameter. ColorJitter's and GaussianBlur's ``p`` is the
probability torchvision's RandomApply around them would give (default 1).
TrivialAugmentWide and RandAugment come among the colour ones (they act on the
output); their interpolation is torchvision's default, NEAREST, the only one.
RandomErasing, as in torchvision, follows Normalize: it comes last and needs
``normalize=``; it runs on the device after normalize, so ``value`` is in
normalized units (0, the default, is the channel's mean).

MixUp and CutMix (torchvision.transforms.v2's) come after everything else and
also need ``normalize=``: they mix each batch on the device, sample i with
sample i - 1 (torchvision's roll), and the batches become (images, soft
labels), float32 [N, num_classes] (num_classes: the dataset's unless given).
With both, each batch takes one of them with equal chance, as torchvision's
reference recipe's RandomChoice. ``Loader(mix_labels="pair")`` gives
(images, labels, lam) instead, for a loss mixed by hand:
``lam * F.cross_entropy(out, labels) + (1 - lam) * F.cross_entropy(out, labels.roll(1, 0))``.
"""

__all__ = [
    "Transform",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomSolarize",
    "RandomPosterize",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomInvert",
    "TrivialAugmentWide",
    "RandAugment",
    "RandomErasing",
    "MixUp",
    "CutMix",
]

_REQUIRED = object()


def _text(name, value):
    """A parameter's value as the transform list's text: a number, True/False, None or a tuple of numbers."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return "(" + ", ".join(repr(v) for v in value) + (",)" if len(value) == 1 else ")")
    raise TypeError(f"{name}={value!r}: expected a number, a tuple of numbers, True, False or None")


class Transform:
    """One transform of the list: its class names it, its arguments are kept as given."""

    # (name, default) in torchvision's order; _REQUIRED for one without a default.
    _params = ()

    def __init__(self, *args, **kwargs):
        cls = type(self).__name__
        names = [n for n, _ in self._params]
        if len(args) > len(names):
            raise TypeError(f"{cls}() takes {len(names)} argument(s) ({', '.join(names) or 'none'}), "
                            f"{len(args)} given")
        given = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{cls}() got an unexpected keyword argument '{key}' "
                                f"(it takes {', '.join(names) or 'none'})")
            if key in given:
                raise TypeError(f"{cls}() got multiple values for argument '{key}'")
            given[key] = value
        for name, default in self._params:
            if default is _REQUIRED and name not in given:
                raise TypeError(f"{cls}() missing required argument: '{name}'")
        # In the parameters' order, each checked to have a value the text can hold.
        self._given = {n: given[n] for n in names if n in given}
        for name, value in self._given.items():
            _text(f"{cls}: {name}", value)

    def __repr__(self):
        args = ", ".join(f"{n}={_text(n, v)}" for n, v in self._given.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return type(self) is type(other) and self._given == other._given

    def __hash__(self):
        return hash(repr(self))


class RandomResizedCrop(Transform):
    """A random area (scale) and aspect ratio (ratio) of the image, resized to size."""
    _params = (("size", _REQUIRED), ("scale", (0.08, 1.0)), ("ratio", (3 / 4, 4 / 3)))


class Resize(Transform):
    """The shorter side to size (an int), or exactly (h, w)."""
    _params = (("size", _REQUIRED),)


class CenterCrop(Transform):
    """The centre size x size (or (h, w)), padded where the image is smaller."""
    _params = (("size", _REQUIRED),)


class RandomCrop(Transform):
    """A random size crop, after padding (int, (lr, tb) or (l, t, r, b)); pad_if_needed pads a smaller image."""
    _params = (("size", _REQUIRED), ("padding", None), ("pad_if_needed", False))


class RandomHorizontalFlip(Transform):
    """Mirrors the image with probability p."""
    _params = (("p", 0.5),)


class RandomVerticalFlip(Transform):
    """Turns the image upside down with probability p."""
    _params = (("p", 0.5),)


class ColorJitter(Transform):
    """Brightness, contrast, saturation and hue, each v (1 - v .. 1 + v; hue -v .. v) or (min, max), in a random order."""
    _params = (("brightness", 0), ("contrast", 0), ("saturation", 0), ("hue", 0), ("p", 1))


class RandomGrayscale(Transform):
    """Grey (as three equal channels) with probability p."""
    _params = (("p", 0.1),)


class GaussianBlur(Transform):
    """A Gaussian blur of kernel_size (odd; k or (kx, ky)) with sigma drawn from (min, max)."""
    _params = (("kernel_size", _REQUIRED), ("sigma", (0.1, 2.0)), ("p", 1))


class RandomSolarize(Transform):
    """Inverts every value at or above threshold, with probability p."""
    _params = (("threshold", _REQUIRED), ("p", 0.5))


class RandomPosterize(Transform):
    """Keeps the top bits of each value, with probability p."""
    _params = (("bits", _REQUIRED), ("p", 0.5))


class RandomAdjustSharpness(Transform):
    """Sharpens (factor > 1) or blurs (< 1) by sharpness_factor, with probability p."""
    _params = (("sharpness_factor", _REQUIRED), ("p", 0.5))


class RandomAutocontrast(Transform):
    """Stretches each channel to the full range, with probability p."""
    _params = (("p", 0.5),)


class RandomEqualize(Transform):
    """Equalizes each channel's histogram, with probability p."""
    _params = (("p", 0.5),)


class RandomInvert(Transform):
    """Inverts every value, with probability p."""
    _params = (("p", 0.5),)


class TrivialAugmentWide(Transform):
    """One of 14 ops (identity, shear, translate, rotate, colour, posterize, solarize, ...) at a random magnitude.

    fill: the RGB value (a number or (r, g, b)) rotate, shear and translate bring in; None is black.
    """
    _params = (("num_magnitude_bins", 31), ("interpolation", None), ("fill", None))


class RandAugment(Transform):
    """num_ops ops drawn from the same 14, each at bin `magnitude` of num_magnitude_bins; fill as TrivialAugmentWide's."""
    _params = (("num_ops", 2), ("magnitude", 9), ("num_magnitude_bins", 31), ("interpolation", None), ("fill", None))


class RandomErasing(Transform):
    """With probability p, one rectangle (area share in scale, aspect ratio in ratio) set to value, after normalize.

    value: a number or (r, g, b) in normalized units; 'random' is not supported. inplace has no effect.
    Last in the list, and only with the Loader's normalize=.
    """
    _params = (("p", 0.5), ("scale", (0.02, 0.33)), ("ratio", (0.3, 3.3)), ("value", 0), ("inplace", False))


class MixUp(Transform):
    """Each batch's samples blended with their neighbours' by lam ~ Beta(alpha, alpha), labels too; after normalize.

    num_classes: None for the dataset's number of classes. Last in the list, and only with the Loader's normalize=.
    """
    _params = (("alpha", 1.0), ("num_classes", None))


class CutMix(Transform):
    """A box of each sample (area 1 - lam, lam ~ Beta(alpha, alpha)) from its neighbour, labels by area; after normalize.

    num_classes: None for the dataset's number of classes. Last in the list, and only with the Loader's normalize=.
    """
    _params = (("alpha", 1.0), ("num_classes", None))
