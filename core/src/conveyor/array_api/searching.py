"""Array API searching functions."""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C

__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]

count_nonzero = C.count_nonzero
nonzero = C.nonzero
searchsorted = C.searchsorted


def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return F.argmax(x, axis=axis, keepdims=keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return F.argmin(x, axis=axis, keepdims=keepdims)


def where(condition: Tensor, x1: Any, x2: Any, /) -> Tensor:
    return C.where(condition, x1, x2)
