"""Array API creation functions, mapped onto Conveyor's constructors (``device`` = carrier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.engine.tensor import Tensor
from conveyor.engine.tensor import arange as _arange
from conveyor.engine.tensor import full as _full
from conveyor.engine.tensor import zeros as _zeros
from conveyor.lib import composed as C
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "from_dlpack",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]

_Shape = int | Sequence[int]


def _device(x: Tensor, device: Any) -> Any:
    return device if device is not None else type(x.carrier)


def arange(
    start: float,
    /,
    stop: float | None = None,
    step: float = 1,
    *,
    dtype: DType | None = None,
    device: Any = None,
) -> Tensor:
    if step == 0:
        msg = "arange: step must not be zero"
        raise ValueError(msg)
    return _arange(start, stop, step, dtype, device)


def asarray(
    obj: Any, /, *, dtype: DType | None = None, device: Any = None, copy: bool | None = None
) -> Tensor:
    return C.asarray(obj, dtype=dtype, carrier=device, copy=copy)


def zeros(shape: _Shape, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _zeros(shape, dtype, device)


def empty(shape: _Shape, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _zeros(shape, dtype, device)


def ones(shape: _Shape, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _full(shape, 1, dtype or dtypes.default_float, device)


def full(
    shape: _Shape, fill_value: Any, *, dtype: DType | None = None, device: Any = None
) -> Tensor:
    return _full(shape, fill_value, dtype, device)


def zeros_like(x: Tensor, /, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _zeros(x.shape, dtype or x.dtype, _device(x, device))


def empty_like(x: Tensor, /, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _zeros(x.shape, dtype or x.dtype, _device(x, device))


def ones_like(x: Tensor, /, *, dtype: DType | None = None, device: Any = None) -> Tensor:
    return _full(x.shape, 1, dtype or x.dtype, _device(x, device))


def full_like(
    x: Tensor, /, fill_value: Any, *, dtype: DType | None = None, device: Any = None
) -> Tensor:
    return _full(x.shape, fill_value, dtype or x.dtype, _device(x, device))


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: DType | None = None,
    device: Any = None,
) -> Tensor:
    return C.eye(n_rows, n_cols, k, dtype, device)


def linspace(
    start: float | complex,
    stop: float | complex,
    /,
    num: int,
    *,
    dtype: DType | None = None,
    device: Any = None,
    endpoint: bool = True,
) -> Tensor:
    return C.linspace(start, stop, num, dtype, device, endpoint=endpoint)  # type: ignore[arg-type]


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    return C.meshgrid(*arrays, indexing=indexing)


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    return C.tril(x, k=k)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    return C.triu(x, k=k)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    return C.from_dlpack(x, carrier=device, copy=copy)
