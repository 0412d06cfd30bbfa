# Types of the extension module (python/module.cpp's bindings), for IDEs and
# mypy. Loader's keyword arguments, their order and their defaults are the
# binding's: python/tests/test_stubs.py compares them with the module's own
# signature.
import os
from typing import Any, Dict, List, Literal, Optional, Tuple, TypeVar, Union

__version__: str

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
_Batch = Tuple["Array", "Array"]
_Self = TypeVar("_Self", bound="Loader")

class PipelineError(RuntimeError):
    """A sample or stage failed: which stage, epoch and sample, and why."""

    stage: str
    epoch: int
    sample: Optional[int]
    reason: str

class Array:
    """images or labels of one batch, shared with the pipeline (zero copy)."""

    def __dlpack__(self, *, stream: Optional[int] = None) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def indices(self) -> List[int]: ...
    def record_stream(self, stream: int) -> None: ...
    def __len__(self) -> int: ...

class HostArray(Array):
    """an Array in host memory: also a buffer (numpy.asarray, memoryview) without a copy."""

class EpochIterator:
    """One epoch's batches: (images, labels) pairs."""

    epoch: int
    def __iter__(self) -> "EpochIterator": ...
    def __next__(self) -> _Batch: ...

class Loader:
    """The pipeline over one dataset: folder=, list=, shards= or arrays=(x, y); docs/python.md."""

    def __init__(
        self,
        *,
        folder: Optional[_Path] = None,
        list: Optional[_Path] = None,
        shards: Optional[_Path] = None,
        arrays: Optional[Tuple[Any, Any]] = None,
        batch_size: int = 32,
        workers: int = 2,
        crop: Optional[int] = None,
        augment: Optional[Literal["rrc", "crop", "center"]] = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        epochs: int = 0,
        device: str = "auto",
        normalize: Optional[Literal["float32", "float16", "bfloat16"]] = None,
        host_queue: int = 2,
        device_queue: int = 2,
        device_buffers: int = 0,
        on_error: Literal["fail", "skip"] = "fail",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        rank_by_shard: bool = False,
        gpu_decode: Union[Literal["off", "auto"], float] = "off",
        max_memory_mb: float = 0.0,
        slot_timeout: Optional[float] = 60.0,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> EpochIterator: ...
    def epoch(self, e: int) -> EpochIterator: ...
    @property
    def current_epoch(self) -> int: ...
    @property
    def dataset_size(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    @property
    def gpu_share(self) -> float: ...
    @property
    def gpu_decode_note(self) -> str: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def device_description(self) -> str: ...
    def state_dict(self) -> Dict[str, str]: ...
    def load_state_dict(self, state: Dict[str, str], /) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    def skipped(self) -> List[Dict[str, Any]]: ...
    def close(self) -> None: ...
    def __enter__(self: _Self) -> _Self: ...
    def __exit__(self, *args: object) -> None: ...
    def _set_stream_source(self, f: Any, /) -> None: ...
