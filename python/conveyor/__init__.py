"""Conveyor: a deterministic, pipelined data loader for PyTorch and NumPy.

    import conveyor
    loader = conveyor.Loader(folder="train/", batch_size=64, workers=8,
                             normalize="float32", seed=7)
    for epoch in range(10):
        for images, labels in loader:          # this epoch's batches
            x = torch.from_dlpack(images)      # zero copy; or conveyor.torch.Loader
            ...

Every batch is the same bytes whatever the worker count: output depends on
(seed, epoch, sample) alone. `loader.state_dict()` taken mid-epoch and given to
a new Loader's `load_state_dict()` resumes with exactly the batches that
follow. `loader.stats()` names the bottleneck. See docs/python.md.

Batches are pairs of Arrays (images, labels) over the pipeline's own memory:
`torch.from_dlpack`, `numpy.from_dlpack`/`numpy.asarray` (host memory) and
CuPy take them without a copy, and the memory returns to the pipeline when the
last array over it dies.
"""

from ._conveyor import (  # noqa: F401  (the public names)
    Array,
    EpochIterator,
    HostArray,
    Loader,
    PipelineError,
    __version__,
)

__all__ = ["Array", "EpochIterator", "HostArray", "Loader", "PipelineError", "__version__"]
