"""conveyor.torch: a Loader that yields PyTorch tensors.

    from conveyor.torch import Loader
    for images, labels in Loader(folder="train/", batch_size=64, normalize="float32"):
        loss = F.cross_entropy(model(images), labels)

Same arguments as conveyor.Loader. The tensors are views of the pipeline's
memory (torch.from_dlpack: no copy). On CUDA they are device tensors, ready on
the stream PyTorch computes on when the batch is taken
(torch.cuda.current_stream()); the labels travelled with the pixels. With
MixUp or CutMix in transforms= the labels are soft, float32 [N, classes]:
F.cross_entropy takes them as they are. The batch
returns to the pipeline when both tensors (and every view of them) are gone.
A tensor also used on another stream: see docs/python.md ("Streams").
"""

import torch as _torch

from . import Loader as _Loader

__all__ = ["Loader", "to_tensors"]


def _tensor(array):
    if array.dtype == "bool" and array.device == "cpu":
        # DLPack's bool (code 6) is newer than some torch builds (Debian's
        # 1.13 refuses it); NumPy's buffer gives the same memory as bool.
        import numpy
        return _torch.from_numpy(numpy.asarray(array))
    return _torch.from_dlpack(array)


def to_tensors(batch):
    """(images, labels) Arrays -> (images, labels) tensors, without a copy.

    With MixUp or CutMix the labels are the soft labels (float32 [N, classes]);
    with mix_labels="pair" the batch is (images, labels, lam) and lam stays a float.
    With views= the images are a tuple, one tensor per view.
    """
    images, labels, *lam = batch
    if isinstance(images, tuple):  # views=: one tensor per view
        return (tuple(_tensor(v) for v in images), _torch.from_dlpack(labels), *lam)
    return (_tensor(images), _torch.from_dlpack(labels), *lam)


class _Tensors:
    def __init__(self, arrays):
        self._arrays = arrays

    def __iter__(self):
        return self

    def __next__(self):
        return to_tensors(next(self._arrays))


class Loader(_Loader):
    """conveyor.Loader whose batches are (images, labels) torch tensors."""

    def __init__(self, **kwargs):
        if kwargs.get("device", "auto") == "auto" and not _torch.cuda.is_available():
            kwargs["device"] = "cpu"  # a GPU this torch cannot use (a CPU build): tensors on the CPU
        super().__init__(**kwargs)
        if self.device.startswith("cuda"):
            device = _torch.device(self.device)
            self._set_stream_source(lambda: _torch.cuda.current_stream(device).cuda_stream)

    def __iter__(self):
        return _Tensors(super().__iter__())

    def epoch(self, e):
        return _Tensors(super().epoch(e))
