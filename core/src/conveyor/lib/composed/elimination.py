"""Composed elimination: inverse, solve, determinant, Cholesky and QR from planned names.

One elimination step per column, batched over leading axes: ``argmax`` picks the pivot row,
``gather`` swaps it into place, and a rank-one ``mul``/``sub`` update clears the column. That is
``O(n)`` dispatches of ``O(n^2)`` work each, fine for the small matrices these functions see in
everyday code, and differentiable through the operations it is made of.
"""

from __future__ import annotations

from typing import NamedTuple

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, full
from conveyor.lib.composed.creation import constant, eye
from conveyor.lib.composed.elementwise import real
from conveyor.lib.composed.manipulation import concatenate
from conveyor.lib.composed.reductions import any as any_of
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


def _eliminate(m: Tensor, n: int, *, pivoting: bool, upward: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Reduce the first ``n`` columns of ``m`` (``(..., n, w)``).

    Returns the reduced matrix, the pivots (before normalisation, ``(..., n)``) and the sign of
    the row permutation. With ``upward`` the pivot rows are normalised and every other row is
    cleared (Gauss-Jordan); without it only the rows below are cleared and rows keep their scale.
    """
    ladder = constant(list(range(n)), dtypes.int64, m)
    sign = _ones(m)
    pivots = []
    for k in range(n):
        if pivoting:
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
        keep = [r != k and (upward or r > k) for r in range(n)]
        factors = F.mul(column, constant([[1.0 if c else 0.0] for c in keep], m.dtype, m))
        # A zero pivot (a singular matrix) divides by one instead, so no inf or NaN spreads
        # through the matrix: every caller reads the pivots (inv, solve and cholesky refuse a
        # zero one; det and slogdet give 0 and -inf, as NumPy does).
        safe = F.select(F.eq(pivot, 0), 1.0, pivot)
        scaled_row = F.div(row, F.unsqueeze(F.unsqueeze(safe, axes=safe.ndim), axes=safe.ndim + 1))
        m = F.sub(m, F.mul(factors, scaled_row))
        if upward:
            is_k = constant([[r == k] for r in range(n)], dtypes.bool_, m)
            m = F.select(is_k, scaled_row, m)
    return m, _stack(pivots), sign


def _ones(m: Tensor) -> Tensor:
    """Ones of ``m``'s dtype over its batch axes (the leading ones)."""
    return full(m.shape[:-2], 1, m.dtype, type(m.carrier))


def _stack(values: list[Tensor]) -> Tensor:
    return concatenate([F.unsqueeze(v, axes=v.ndim) for v in values], axis=-1)


def _refuse_singular(what: str, x: Tensor, pivots: Tensor) -> None:
    """Raise NumPy's ``LinAlgError`` if any matrix has a zero pivot (is singular)."""
    if pivots.size and any_of(F.eq(pivots, 0)).item():
        import numpy as np

        msg = (
            f"{what} on {type(x.carrier).__name__}: Singular matrix (elimination met a zero "
            f"pivot); pass a non-singular matrix, or regularise it (add a small multiple of the "
            f"identity)"
        )
        raise np.linalg.LinAlgError(msg)


def inv(x: Tensor, /) -> Tensor:
    """The inverse of each square matrix (partial pivoting).

    Raises:
        numpy.linalg.LinAlgError: a matrix is singular (a ``ValueError``, as in NumPy).
    """
    n = _square(x, "inv")
    identity = F.broadcast_to(eye(n, dtype=x.dtype, carrier=type(x.carrier)), shape=x.shape)
    both = concatenate([x, identity], axis=-1)
    reduced, pivots, _ = _eliminate(both, n, pivoting=True, upward=True)
    _refuse_singular("inv", x, pivots)
    return reduced[..., :, n:]


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The solution ``X`` of ``x1 @ X = x2`` (``x2`` a matrix stack, or a vector when 1-D).

    Raises:
        numpy.linalg.LinAlgError: a matrix of ``x1`` is singular (a ``ValueError``, as in NumPy).
    """
    n = _square(x1, "solve")
    vector = x2.ndim == 1
    rhs = F.unsqueeze(x2, axes=1) if vector else x2
    batch = F.broadcast_to(x1, shape=(*_batch(x1, rhs), n, n))
    rhs = F.broadcast_to(rhs, shape=(*_batch(x1, rhs), n, rhs.shape[-1]))
    both = concatenate([batch, rhs], axis=-1)
    reduced, pivots, _ = _eliminate(both, n, pivoting=True, upward=True)
    _refuse_singular("solve", x1, pivots)
    result = reduced[..., :, n:]
    return F.squeeze(result, axes=-1) if vector else result


def _batch(a: Tensor, b: Tensor) -> tuple[int, ...]:
    from conveyor.types.layout import broadcast_shapes

    return broadcast_shapes(a.shape[:-2], b.shape[:-2])


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def slogdet(x: Tensor, /) -> SlogdetResult:
    """The sign and ``log|det|`` of each square matrix (``0, -inf`` when singular)."""
    n = _square(x, "slogdet")
    if n == 0:
        return SlogdetResult(_ones(x), full(x.shape[:-2], 0, x.dtype, type(x.carrier)))
    _, pivots, sign = _eliminate(x, n, pivoting=True, upward=False)
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
    _, pivots, sign = _eliminate(x, n, pivoting=True, upward=False)
    return F.add(F.mul(sign, F.reduce_prod(pivots, axis=-1)), 0.0)  # singular: 0.0, not -0.0


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of each symmetric positive-definite matrix (lower unless ``upper``).

    Elimination without pivoting turns ``A = L D L^T`` into ``U = D L^T``; scaling each row of
    ``U`` by ``1/sqrt`` of its pivot gives ``L^T``. The matrix is positive definite exactly
    when every pivot is positive.

    Raises:
        numpy.linalg.LinAlgError: a matrix is not positive definite (a ``ValueError``, as in
            NumPy).
    """
    n = _square(x, "cholesky")
    reduced, pivots, _ = _eliminate(x, n, pivoting=False, upward=False)
    # ``not 0 < pivot`` also catches a NaN pivot (a NaN in the input).
    positive = F.lt(0, real(pivots) if pivots.dtype.is_complex else pivots)
    if pivots.size and any_of(F.logical_not(positive)).item():
        import numpy as np

        msg = (
            f"cholesky on {type(x.carrier).__name__}: Matrix is not positive definite (a pivot "
            f"is not positive); pass a symmetric positive-definite matrix"
        )
        raise np.linalg.LinAlgError(msg)
    scale = F.rsqrt(F.unsqueeze(pivots, axes=pivots.ndim))
    upper_factor = F.mul(reduced, scale)
    mask = constant([[c >= r for c in range(n)] for r in range(n)], dtypes.bool_, x)
    upper_factor = F.select(mask, upper_factor, 0)
    return upper_factor if upper else upper_factor.mT


def _norm(column: Tensor) -> Tensor:
    """The 2-norm of each column vector, scaled by its largest magnitude so squares neither
    overflow nor underflow (as LAPACK's ``nrm2``)."""
    high = F.reduce_max(F.abs(column), axis=-2, keepdims=True)
    safe = F.select(F.eq(high, 0), 1.0, high)
    scaled = F.div(column, safe)
    return F.mul(safe, F.sqrt(F.reduce_sum(F.mul(scaled, scaled), axis=-2, keepdims=True)))


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


def qr(x: Tensor, /, *, mode: str = "reduced") -> QRResult:
    """The QR factorisation of each matrix by Householder reflections (LAPACK's signs).

    Step ``k`` reflects column ``k`` below the diagonal onto ``-sign(x_kk) |x| e_k`` with
    ``H = I - 2 u u^T`` (``u`` the normalised ``x + sign(x_kk) |x| e_k``), applied to ``R``
    from the left and accumulated into ``Q``; a column with nothing below the diagonal leaves
    ``H = I``.

    Raises:
        ValueError: ``mode`` is neither ``'reduced'`` nor ``'complete'``, or ``x`` has fewer
            than two axes.
    """
    if mode not in ("reduced", "complete"):
        msg = f"qr: mode must be 'reduced' or 'complete', got {mode!r}"
        raise ValueError(msg)
    if x.ndim < 2:
        msg = f"qr: needs matrices in the last two axes, got shape {x.shape}"
        raise ValueError(msg)
    if not x.dtype.is_floating:
        msg = f"qr: needs a real floating dtype, got {x.dtype.name}; cast with .astype() first"
        raise TypeError(msg)
    m, n = x.shape[-2:]
    k_max = min(m, n)
    identity = eye(m, dtype=x.dtype, carrier=type(x.carrier))
    q = F.broadcast_to(identity, shape=(*x.shape[:-2], m, m))
    r = x
    for k in range(min(k_max, m - 1) if m > 1 else 0):
        below = constant([[float(i >= k)] for i in range(m)], x.dtype, x)
        at_k = constant([[float(i == k)] for i in range(m)], x.dtype, x)
        column = F.mul(r[..., :, k : k + 1], below)
        lead = r[..., k : k + 1, k : k + 1]
        sign = F.select(F.lt(lead, 0), -1.0, 1.0)
        v = F.add(column, F.mul(at_k, F.mul(sign, _norm(column))))
        # Nothing below the diagonal: LAPACK leaves the column alone (H = I), keeping its sign.
        tail = F.sub(column, F.mul(at_k, lead))
        skip = F.eq(F.reduce_max(F.abs(tail), axis=-2, keepdims=True), 0)
        u = F.select(skip, 0.0, F.div(v, F.select(skip, 1.0, _norm(v))))
        # R <- H R = R - 2 u (u^T R);  Q <- Q H = Q - 2 (Q u) u^T
        r = F.sub(r, F.mul(F.matmul(u, F.matmul(u.mT, r)), 2.0))
        q = F.sub(q, F.mul(F.matmul(F.matmul(q, u), u.mT), 2.0))
    upper = constant([[c >= i for c in range(n)] for i in range(m)], dtypes.bool_, x)
    r = F.select(upper, r, 0.0)
    if mode == "reduced":
        q = q[..., :, :k_max]
        r = r[..., :k_max, :]
    return QRResult(q, r)
