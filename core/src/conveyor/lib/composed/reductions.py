"""Composed reductions: statistics, truth tests and the log-sum-exp family over planned sums.

``mean`` is ``sum / count``, ``var`` the corrected mean square of deviations, ``any``/``all``
count truth values with ``reduce_sum`` (so empty axes give the identities ``False``/``True``
instead of the "no identity" refusal of ``reduce_max``), and ``logsumexp``/``softmax`` shift by
the (detached) maximum so they neither overflow nor lose the gradient.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib.composed.creation import full_like
from conveyor.lib.composed.logic import truth
from conveyor.lib.composed.predicates import isclose, isfinite
from conveyor.types import dtypes

__all__ = [
    "all",
    "allclose",
    "any",
    "count_nonzero",
    "log_softmax",
    "logsumexp",
    "mean",
    "softmax",
    "std",
    "var",
]

_Axis = int | Sequence[int] | None


def _axes(x: Tensor, axis: _Axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    items = (axis,) if isinstance(axis, int) else tuple(axis)
    ndim = max(x.ndim, 1)
    for a in items:
        if not -ndim <= a < ndim:
            msg = f"axis {a} is out of range for a tensor of shape {x.shape}"
            raise IndexError(msg)
    return tuple(sorted({a % ndim for a in items})) if x.ndim else ()


def _count(x: Tensor, axis: _Axis) -> int:
    return math.prod(x.shape[a] for a in _axes(x, axis))


def mean(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    """The arithmetic mean over ``axis`` (NaN over an empty axis); integers mean in float32."""
    if x.dtype.is_integer or x.dtype.is_bool:
        x = x.astype(dtypes.default_float)
    total = F.reduce_sum(x, axis=axis, keepdims=keepdims)
    return F.div(total, _count(x, axis))


def var(
    x: Tensor, /, *, axis: _Axis = None, correction: float = 0.0, keepdims: bool = False
) -> Tensor:
    """The variance ``sum(|x - mean|^2) / (N - correction)``; NaN where that count is ``<= 0``."""
    if x.dtype.is_integer or x.dtype.is_bool:
        x = x.astype(dtypes.default_float)
    centre = mean(x, axis=axis, keepdims=True)
    deviation = F.sub(x, centre)
    magnitude = F.abs(deviation) if x.dtype.is_complex else deviation
    square = F.mul(magnitude, magnitude)
    total = F.reduce_sum(square, axis=axis, keepdims=keepdims)
    dof = _count(x, axis) - correction
    if dof <= 0:
        return F.mul(total, math.nan)
    return F.div(total, dof)


def std(
    x: Tensor, /, *, axis: _Axis = None, correction: float = 0.0, keepdims: bool = False
) -> Tensor:
    """The standard deviation, ``sqrt(var)``."""
    return F.sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def count_nonzero(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    """How many elements are non-zero over ``axis`` (int64)."""
    return F.reduce_sum(truth(x), axis=axis, keepdims=keepdims)


def any(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    """Whether any element over ``axis`` is non-zero (``False`` over an empty axis)."""
    return F.lt(0, count_nonzero(x, axis=axis, keepdims=keepdims))


def all(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    """Whether every element over ``axis`` is non-zero (``True`` over an empty axis)."""
    zeros = F.reduce_sum(F.logical_not(x), axis=axis, keepdims=keepdims)
    return F.eq(zeros, 0)


def allclose(
    a: Any, b: Any, *, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> bool:
    """Whether every element pair is ``isclose``."""
    return bool(all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)).item())


def _shift(x: Tensor, axis: _Axis) -> Tensor:
    """The detached maximum over ``axis`` (kept dims), with non-finite maxima replaced by 0."""
    high = F.reduce_max(x, axis=axis, keepdims=True).detach()
    return F.select(isfinite(high), high, 0.0)


def logsumexp(x: Tensor, /, *, axis: _Axis = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis`` without overflow (``-inf`` over an empty axis)."""
    if x.size == 0:
        return F.log(F.reduce_sum(F.exp(x), axis=axis, keepdims=keepdims))
    shift = _shift(x, axis)
    total = F.reduce_sum(F.exp(F.sub(x, shift)), axis=axis, keepdims=True)
    result = F.add(F.log(total), shift)
    if not keepdims:
        result = F.squeeze(result, axes=_axes(x, axis))
    return result


def softmax(x: Tensor, /, *, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, shifted by the maximum."""
    if x.size == 0:
        return full_like(x, 0)
    e = F.exp(F.sub(x, _shift(x, axis)))
    return F.div(e, F.reduce_sum(e, axis=axis, keepdims=True))


def log_softmax(x: Tensor, /, *, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``."""
    if x.size == 0:
        return full_like(x, 0)
    return F.sub(x, logsumexp(x, axis=axis, keepdims=True))
