"""The Array API ``linalg`` extension, as far as contractions and elimination reach.

Products and norms are composed from ``matmul``, reductions and ``sqrt``; ``inv``, ``solve``,
``det``, ``slogdet`` and ``cholesky`` from Gaussian elimination and ``qr`` from Householder
reflections (``conveyor.lib.composed``). Spectral functions (``svd``, ``svdvals``, ``eigh``,
``eigvalsh``, ``pinv``, ``matrix_rank``) are left out rather than computed off the carrier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C

__all__ = [
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_transpose",
    "outer",
    "qr",
    "slogdet",
    "solve",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]

cholesky = C.cholesky
det = C.det
inv = C.inv
matmul = F.matmul
qr = C.qr
slogdet = C.slogdet
solve = C.solve
matrix_transpose = C.matrix_transpose
outer = C.outer
tensordot = C.tensordot
vecdot = C.vecdot


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """The diagonal ``offset`` of the last two axes (a strided view)."""
    rows, cols = x.shape[-2:]
    length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    start = (0, offset) if offset >= 0 else (-offset, 0)
    strides = x.strides
    layout_offset = x.layout.offset + start[0] * strides[-2] + start[1] * strides[-1]
    if length == 0:
        layout_offset = x.layout.offset
    return F.as_strided(
        x,
        shape=(*x.shape[:-2], length),
        strides=(*strides[:-2], strides[-2] + strides[-1]),
        offset=layout_offset,
    )


def trace(x: Tensor, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """The sum of diagonal ``offset`` of the last two axes."""
    total = F.reduce_sum(diagonal(x, offset=offset), axis=-1)
    return total if dtype is None or total.dtype is dtype else total.astype(dtype)


def vector_norm(
    x: Tensor, /, *, axis: int | Sequence[int] | None = None, keepdims: bool = False, ord: float = 2
) -> Tensor:
    """The ``ord``-norm over ``axis`` (``inf``: the largest magnitude, ``0``: the count)."""
    magnitude = F.abs(x)
    if ord == math.inf:
        return F.reduce_max(magnitude, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return F.reduce_min(magnitude, axis=axis, keepdims=keepdims)
    if ord == 0:
        count = C.count_nonzero(magnitude, axis=axis, keepdims=keepdims)
        return count.astype(magnitude.dtype)
    powered = F.pow(magnitude, ord)
    return F.pow(F.reduce_sum(powered, axis=axis, keepdims=keepdims), 1.0 / ord)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:
    """The Frobenius norm (``ord='fro'``) or the max column / row sum norms (``1``, ``inf``).

    Raises:
        ValueError: an ``ord`` that needs singular values (``2``, ``-2``, ``'nuc'``).
    """
    magnitude = F.abs(x)
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        sum_axis, pick_axis = (-2, -1) if ord in (1, -1) else (-1, -2)
        sums = F.reduce_sum(magnitude, axis=sum_axis, keepdims=True)
        pick = F.reduce_max if ord > 0 else F.reduce_min
        result = pick(sums, axis=pick_axis, keepdims=True)
        return result if keepdims else F.squeeze(result, axes=(-2, -1))
    msg = f"matrix_norm: ord={ord!r} needs singular values, which no planned operation computes"
    raise ValueError(msg)


def cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``axis``."""
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        msg = f"cross: needs extent 3 along axis {axis}, got {x1.shape} and {x2.shape}"
        raise ValueError(msg)
    a = C.unstack(x1, axis=axis)
    b = C.unstack(x2, axis=axis)
    parts = [
        F.sub(F.mul(a[1], b[2]), F.mul(a[2], b[1])),
        F.sub(F.mul(a[2], b[0]), F.mul(a[0], b[2])),
        F.sub(F.mul(a[0], b[1]), F.mul(a[1], b[0])),
    ]
    return C.stack(parts, axis=axis if axis >= 0 else len(parts[0].shape) + 1 + axis)


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """``x`` multiplied by itself ``n`` times (square matrices; ``n = 0`` gives the identity).

    Raises:
        ValueError: ``n`` is negative (that needs an inverse, which no planned operation gives).
    """
    if n < 0:
        msg = f"matrix_power: n={n} needs a matrix inverse, which no planned operation computes"
        raise ValueError(msg)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        msg = f"matrix_power: needs square matrices, got shape {x.shape}"
        raise ValueError(msg)
    result = F.broadcast_to(
        C.eye(x.shape[-1], dtype=x.dtype, carrier=type(x.carrier)), shape=x.shape
    )
    base = x
    while n:
        if n & 1:
            result = F.matmul(result, base)
        n >>= 1
        if n:
            base = F.matmul(base, base)
    return result if result is not x else x.copy()
