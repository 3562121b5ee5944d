"""The Array API ``linalg`` extension: planned decompositions, composed products and norms.

``inv``, ``solve``, ``cholesky``, ``qr``, ``eigh`` and ``svd`` are planned operations (LAPACK on
Generic and CPU); ``svdvals``, ``eigvalsh``, ``pinv``, ``matrix_rank``, the spectral matrix
norms and ``matrix_power`` with a negative exponent are built on them. Products and the other
norms are composed from ``matmul``, reductions and ``sqrt``, ``det`` and ``slogdet`` from
Gaussian elimination (``conveyor.lib.composed``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C

__all__ = [
    "EighResult",
    "SVDResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
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


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


def eigh(x: Tensor, /) -> EighResult:
    """Eigenvalues (ascending, real) and eigenvectors of each Hermitian matrix."""
    values, vectors = F.eigh(x)
    return EighResult(values, vectors)


def eigvalsh(x: Tensor, /) -> Tensor:
    """The eigenvalues (ascending, real) of each Hermitian matrix."""
    return F.eigh(x)[0]


def svd(x: Tensor, /, *, full_matrices: bool = True) -> SVDResult:
    """``U``, the singular values (descending) and ``Vh`` of each matrix."""
    u, s, vh = F.svd(x, full_matrices=full_matrices)
    return SVDResult(u, s, vh)


def svdvals(x: Tensor, /) -> Tensor:
    """The singular values (descending) of each matrix."""
    return F.svd(x, full_matrices=False)[1]


def _cutoff(s: Tensor, rtol: Any, shape: tuple[int, ...]) -> Tensor:
    """``rtol * max(s)`` per matrix, ``rtol`` defaulting to ``max(m, n) * eps`` (the standard's)."""
    import numpy as np

    if rtol is None:
        rtol = max(shape[-2:]) * float(np.finfo(s.dtype.numpy).eps)
    elif isinstance(rtol, Tensor):
        rtol = F.unsqueeze(rtol, axes=(-1,))
    largest = F.reduce_max(s, axis=-1, keepdims=True) if s.shape[-1] else F.mul(s[..., :1], 0)
    return F.mul(largest, rtol)


def pinv(x: Tensor, /, *, rtol: Any = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse: singular values below ``rtol * max(s)`` count as 0."""
    u, s, vh = F.svd(x, full_matrices=False)
    kept = F.lt(_cutoff(s, rtol, x.shape), s)
    inverse = F.select(kept, F.recip(F.select(kept, s, 1)), 0)
    scaled = F.mul(C.conj(vh).mT, F.unsqueeze(inverse.astype(x.dtype), axes=(-2,)))
    return F.matmul(scaled, C.conj(u).mT)


def matrix_rank(x: Tensor, /, *, rtol: Any = None) -> Tensor:
    """The number of singular values above ``rtol * max(s)`` (int64)."""
    s = svdvals(x)
    return C.count_nonzero(F.lt(_cutoff(s, rtol, x.shape), s), axis=-1)


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

    ``2``, ``-2`` and ``'nuc'`` are the largest, the smallest and the sum of the singular values.

    Raises:
        ValueError: an ``ord`` the standard does not name.
    """
    magnitude = F.abs(x)
    if ord in (2, -2, "nuc"):
        s = svdvals(x)
        spectral = {2: F.reduce_max, -2: F.reduce_min, "nuc": F.reduce_sum}[ord]
        result = spectral(s, axis=-1)
        return F.unsqueeze(result, axes=(-2, -1)) if keepdims else result
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        sum_axis, pick_axis = (-2, -1) if ord in (1, -1) else (-1, -2)
        sums = F.reduce_sum(magnitude, axis=sum_axis, keepdims=True)
        pick = F.reduce_max if ord > 0 else F.reduce_min
        result = pick(sums, axis=pick_axis, keepdims=True)
        return result if keepdims else F.squeeze(result, axes=(-2, -1))
    msg = (
        f"matrix_norm: ord={ord!r} is not a matrix norm; pass 'fro', 'nuc', 1, -1, 2, -2, inf "
        f"or -inf"
    )
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

    A negative ``n`` raises the inverse to ``-n``.

    Raises:
        ValueError: the matrices are not square, or ``n < 0`` and a matrix is singular.
    """
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        msg = f"matrix_power: needs square matrices, got shape {x.shape}"
        raise ValueError(msg)
    if n < 0:
        x, n = F.inv(x), -n
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
