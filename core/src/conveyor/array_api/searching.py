"""Array API searching functions."""

from __future__ import annotations

from typing import Any

from conveyor import composed as C
from conveyor import functional as F
from conveyor.tensor import Tensor

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
