# Types of conveyor.torch (torch.py): conveyor.Loader's arguments, batches as tensors.
from typing import Iterator, Tuple

from torch import Tensor

from ._conveyor import Array, Loader as _Loader

__all__ = ["Loader", "to_tensors"]

def to_tensors(batch: Tuple[Array, Array]) -> Tuple[Tensor, Tensor]: ...

class Loader(_Loader):
    """conveyor.Loader whose batches are (images, labels) torch tensors."""

    def __iter__(self) -> Iterator[Tuple[Tensor, Tensor]]: ...  # type: ignore[override]
    def epoch(self, e: int) -> Iterator[Tuple[Tensor, Tensor]]: ...  # type: ignore[override]
