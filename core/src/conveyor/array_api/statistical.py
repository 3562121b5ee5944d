"""Array API statistical functions: planned reductions, with the standard's ``dtype=``."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C
from conveyor.types.dtypes import DType

__all__ = [
    "cumulative_prod",
    "cumulative_sum",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]

_Axis = int | Sequence[int] | None

cumulative_prod = C.cumulative_prod
cumulative_sum = C.cumulative_sum


def _axis(axis: _Axis) -> int | tuple[int, ...] | None:
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def _cast(result: Tensor, dtype: DType | None) -> Tensor:
    return result if dtype is None or result.dtype is dtype else result.astype(dtype)


def sum(  # the standard's name
    x: Tensor, /, *, axis: _Axis = None, dtype: DType | None = None, keepdims: bool = False
) -> Tensor:
    source = x if dtype is None or not (dtype.is_floating or dtype.is_complex) else x.astype(dtype)
    return _cast(F.reduce_sum(source, axis=_axis(axis), keepdims=keepdims), dtype)


def prod(
    x: Tensor, /, *, axis: _Axis = None, dtype: DType | None = None, keepdims: bool = False
) -> Tensor:
    source = x if dtype is None or not (dtype.is_floating or dtype.is_complex) else x.astype(dtype)
    return _cast(F.reduce_prod(source, axis=_axis(axis), keepdims=keepdims), dtype)


def max(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    return F.reduce_max(x, axis=_axis(axis), keepdims=keepdims)


def min(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    return F.reduce_min(x, axis=_axis(axis), keepdims=keepdims)


def mean(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    return C.mean(x, axis=_axis(axis), keepdims=keepdims)


def std(
    x: Tensor, /, *, axis: _Axis = None, correction: float = 0.0, keepdims: bool = False
) -> Tensor:
    return C.std(x, axis=_axis(axis), correction=correction, keepdims=keepdims)


def var(
    x: Tensor, /, *, axis: _Axis = None, correction: float = 0.0, keepdims: bool = False
) -> Tensor:
    return C.var(x, axis=_axis(axis), correction=correction, keepdims=keepdims)
