"""Composed logical operations: truth values combined through bool arithmetic.

On bool tensors the planned ``mul`` is logical and, ``add`` logical or and ``ne`` logical xor
(docs/operations.md), so after reducing each operand to its truth value (``not not x``) no new
dispatch name is needed.
"""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor

__all__ = ["logical_and", "logical_or", "logical_xor", "truth"]


def truth(x: Any) -> Any:
    """``x != 0`` as bool (a tensor stays on its carrier; a Python value becomes a bool)."""
    if isinstance(x, Tensor):
        return x if x.dtype.is_bool else F.logical_not(F.logical_not(x))
    return bool(x)


def logical_and(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a and b`` of the operands' truth values."""
    return F.mul(truth(a), truth(b))


def logical_or(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a or b`` of the operands' truth values."""
    return F.add(truth(a), truth(b))


def logical_xor(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a != b`` of the operands' truth values."""
    return F.ne(truth(a), truth(b))
