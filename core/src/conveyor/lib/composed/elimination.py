"""Composed elimination: determinants from planned names; the planned solvers' everyday names.

``inv``, ``solve``, ``cholesky`` and ``qr`` are planned operations (``docs/operations.md``);
``det`` and ``slogdet`` are composed: one elimination step per column, batched over leading axes:
``argmax`` picks the pivot row, ``gather`` swaps it into place, and a rank-one ``mul``/``sub``
update clears the column. That is ``O(n)`` dispatches of ``O(n^2)`` work each, fine for the small
matrices these functions see in everyday code, and differentiable through the operations it is
made of.
"""

from __future__ import annotations

from typing import NamedTuple

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, full
from conveyor.lib.composed.creation import constant
from conveyor.lib.composed.manipulation import concatenate
from conveyor.types import dtypes

__all__ = ["QRResult", "SlogdetResult", "cholesky", "det", "inv", "qr", "slogdet", "solve"]


def _square(x: Tensor, what: str) -> int:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        msg = f"{what}: needs square matrices in the last two axes, got shape {x.shape}"
        raise ValueError(msg)
    if not (x.dtype.is_floating or x.dtype.is_complex):
        msg = f"{what}: needs a floating dtype, got {x.dtype.name}; cast with .astype() first"
        raise TypeError(msg)
    return x.shape[-1]


def _rows(m: Tensor, index: Tensor) -> Tensor:
    """``m`` with its rows (axis -2) reordered by ``index`` of shape ``(..., n)``."""
    full = F.broadcast_to(F.unsqueeze(index, axes=index.ndim), shape=m.shape)
    return F.gather(m, full, axis=m.ndim - 2)


def _eliminate(m: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Reduce the ``(..., n, n)`` matrices ``m`` to upper triangular form, pivoting by rows.

    Returns the pivots (``(..., n)``) and the sign of the row permutation.
    """
    ladder = constant(list(range(n)), dtypes.int64, m)
    sign = _ones(m)
    pivots = []
    for k in range(n):
        offset = F.argmax(F.abs(m[..., k:, k]), axis=-1)
        pivot_row = F.add(offset, k)
        target = F.unsqueeze(pivot_row, axes=pivot_row.ndim)
        order = F.select(F.eq(ladder, k), target, F.select(F.eq(ladder, target), k, ladder))
        m = _rows(m, order)
        sign = F.select(F.eq(pivot_row, k), sign, F.neg(sign))
        pivot = m[..., k, k]
        pivots.append(pivot)
        row = m[..., k : k + 1, :]
        column = m[..., :, k : k + 1]
        factors = F.mul(column, constant([[1.0 if r > k else 0.0] for r in range(n)], m.dtype, m))
        # A zero pivot (a singular matrix) divides by one instead, so no inf or NaN spreads
        # through the matrix: det and slogdet then give 0 and -inf, as NumPy does.
        safe = F.select(F.eq(pivot, 0), 1.0, pivot)
        scaled_row = F.div(row, F.unsqueeze(F.unsqueeze(safe, axes=safe.ndim), axes=safe.ndim + 1))
        m = F.sub(m, F.mul(factors, scaled_row))
    return _stack(pivots), sign


def _ones(m: Tensor) -> Tensor:
    """Ones of ``m``'s dtype over its batch axes (the leading ones)."""
    return full(m.shape[:-2], 1, m.dtype, type(m.carrier))


def _stack(values: list[Tensor]) -> Tensor:
    return concatenate([F.unsqueeze(v, axes=v.ndim) for v in values], axis=-1)


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def slogdet(x: Tensor, /) -> SlogdetResult:
    """The sign and ``log|det|`` of each square matrix (``0, -inf`` when singular)."""
    n = _square(x, "slogdet")
    if n == 0:
        return SlogdetResult(_ones(x), full(x.shape[:-2], 0, x.dtype, type(x.carrier)))
    pivots, sign = _eliminate(x, n)
    magnitude = F.abs(pivots)
    logabs = F.reduce_sum(F.log(magnitude), axis=-1)
    unit = F.div(pivots, F.select(F.eq(magnitude, 0), 1.0, magnitude))
    # A singular matrix has a zero pivot, so its sign is 0; adding 0.0 makes NumPy's 0.0 of
    # the -0.0 an odd permutation would give (and changes no other value).
    total_sign = F.add(F.mul(sign, F.reduce_prod(unit, axis=-1)), 0.0)
    return SlogdetResult(total_sign, logabs)


def det(x: Tensor, /) -> Tensor:
    """The determinant of each square matrix: the product of the elimination pivots."""
    n = _square(x, "det")
    if n == 0:
        return _ones(x)
    pivots, sign = _eliminate(x, n)
    return F.add(F.mul(sign, F.reduce_prod(pivots, axis=-1)), 0.0)  # singular: 0.0, not -0.0


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


def qr(x: Tensor, /, *, mode: str = "reduced") -> QRResult:
    """The QR factorisation of each matrix (the planned ``qr``, LAPACK's Householder signs)."""
    q, r = F.qr(x, mode=mode)
    return QRResult(q, r)


# The solvers and factorisations are planned operations (LAPACK on Generic and CPU); these are
# their everyday names. A singular or indefinite matrix is refused with ValueError, as NumPy
# refuses it with LinAlgError.
inv = F.inv
solve = F.solve
cholesky = F.cholesky
