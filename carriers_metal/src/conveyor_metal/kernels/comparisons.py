"""Comparisons, ``logical_not``, ``select`` and ``clamp`` as TileLang expressions.

Comparisons are IEEE (NaN compares unequal to everything, ``ne`` is true for it). ``clamp``
skips an absent bound (the kernel then has fewer operand buffers; which bounds are present
is part of its key) and gives NaN when the value or a bound is NaN, and ``hi`` when
``lo > hi``, as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from conveyor_metal.kernels._pointwise import PointwiseKey

__all__ = ["BODIES"]

_Values = list[Any]


def _T() -> Any:
    import tilelang.language as T

    return T


def _nan_extreme(pick: str, a: Any, b: Any, key: PointwiseKey) -> Any:
    T = _T()
    chosen = getattr(T, pick)(a, b)
    if key.compute.startswith(("float", "bfloat")):
        return T.if_then_else(T.Or(T.isnan(a), T.isnan(b)), a + b, chosen)
    return chosen


def _clamp(v: _Values, key: PointwiseKey) -> Any:
    value = v[0]
    rest = iter(v[1:])
    if "lo" in key.params:
        value = _nan_extreme("max", value, next(rest), key)
    if "hi" in key.params:
        value = _nan_extreme("min", value, next(rest), key)
    return value


def _logical_not(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    return v[0] == T.cast(0, key.compute)


def _select(v: _Values, key: PointwiseKey) -> Any:
    return _T().if_then_else(v[0], v[1], v[2])


BODIES: Final[dict[str, Callable[[_Values, PointwiseKey], Any]]] = {
    "eq": lambda v, key: v[0] == v[1],
    "ne": lambda v, key: v[0] != v[1],
    "lt": lambda v, key: v[0] < v[1],
    "le": lambda v, key: v[0] <= v[1],
    "logical_not": _logical_not,
    "select": _select,
    "clamp": _clamp,
}
"""Comparison and selection names -> the expression of one output element."""
