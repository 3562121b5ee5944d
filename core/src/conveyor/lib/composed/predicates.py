"""Composed value tests: NaN, infinity, finiteness and closeness, from comparisons only.

``x != x`` is true exactly for NaN, and ``x - x`` is NaN exactly for NaN and the infinities, so
the tests need nothing beyond the planned comparisons and arithmetic; integer and bool inputs
(which hold neither) give constant answers without computing.
"""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib.composed.creation import full_like
from conveyor.lib.composed.logic import logical_and, logical_or
from conveyor.types import dtypes

__all__ = ["isclose", "isfinite", "isinf", "isnan", "signbit"]


def _exact(x: Tensor) -> bool:
    return x.dtype.is_integer or x.dtype.is_bool


def isnan(x: Tensor, /) -> Tensor:
    """Elementwise: is the value NaN (for complex: either part)."""
    if _exact(x):
        return full_like(x, False, dtypes.bool_)
    return F.ne(x, x)


def isfinite(x: Tensor, /) -> Tensor:
    """Elementwise: is the value neither infinite nor NaN."""
    if _exact(x):
        return full_like(x, True, dtypes.bool_)
    return F.eq(F.sub(x, x), 0)


def isinf(x: Tensor, /) -> Tensor:
    """Elementwise: is the value (or, for complex, either part) infinite."""
    if _exact(x):
        return full_like(x, False, dtypes.bool_)
    return logical_and(F.logical_not(isfinite(x)), F.eq(x, x))


def signbit(x: Tensor, /) -> Tensor:
    """Elementwise: is the sign bit set (true for ``-0.0`` and negative NaN-free values).

    ``-0.0`` is told from ``0.0`` by its reciprocal, ``-inf``. The sign of a NaN is not
    observable through arithmetic, so NaN gives ``False``.
    """
    if x.dtype.is_bool or x.dtype.kind == "unsigned_integer":
        return full_like(x, False, dtypes.bool_)
    negative = F.lt(x, 0)
    if x.dtype.is_integer:
        return negative
    return logical_or(negative, logical_and(F.eq(x, 0), F.lt(F.recip(x), 0)))


def isclose(
    a: Any, b: Any, *, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> Tensor:
    """``|a - b| <= atol + rtol * |b|`` elementwise (NumPy's rule); equal infinities are close."""
    diff = F.abs(F.sub(a, b))
    bound = F.add(F.mul(F.abs(b) if isinstance(b, Tensor) else abs(b), rtol), atol)
    close = logical_or(F.le(diff, bound), F.eq(a, b))
    if equal_nan:
        both_nan = logical_and(_nan_of(a), _nan_of(b))
        close = logical_or(close, both_nan)
    return close


def _nan_of(v: Any) -> Any:
    return isnan(v) if isinstance(v, Tensor) else v != v
