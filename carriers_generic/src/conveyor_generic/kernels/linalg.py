"""Reference kernels: the linear-algebra names, through NumPy's LAPACK.

Each name works on the matrices in the last two axes, batched over the leading ones (NumPy 2
returns empty stacks and ``(0, 0)`` matrices as LAPACK's conventions extend to them: ``U`` of
a ``(3, 0)`` matrix is the identity). Operands
are evaluated in float64 (complex in complex128), which LAPACK supports for every plan's
dtype (half precision has no LAPACK routine), and every result is rounded once to its output
dtype. The refusals are worded as the central shape rules word them
(``conveyor.engine.builtin_operations``), so a definition-backed carrier and Generic agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    KernelValueError,
    check_broadcast,
    convert,
    finish,
    quiet,
    widen,
)

__all__ = ["LINALG_KERNELS"]


def _matrices(plan: cv.OperationPlan, operands: tuple[Any, ...], square: bool) -> list[Array]:
    """The operands converted and widened; the first must be a stack of (square) matrices."""
    arrays = [widen(x) for x in convert(plan, operands) if x is not None]
    shape = arrays[0].shape
    if len(shape) < 2 or (square and shape[-1] != shape[-2]):
        need = "a stack of square matrices" if square else "a stack of matrices"
        msg = (
            f"input of shape {shape} is not {need} (the last two axes); pass an array of shape "
            f"(..., {'n, n' if square else 'm, n'})"
        )
        raise KernelValueError(msg)
    return arrays


def _lapack(function: Any, *arrays: Array, refusal: str, **kwargs: Any) -> Any:
    """Run a LAPACK-backed NumPy function; its ``LinAlgError`` becomes the kernel's refusal."""
    try:
        with quiet():
            return function(*arrays, **kwargs)
    except np.linalg.LinAlgError:
        raise KernelValueError(refusal) from None


def inv(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
    """The inverse of each matrix; a singular one is refused."""
    (x,) = _matrices(plan, (a,), True)
    refusal = (
        "a matrix is singular, so it has no inverse; use conveyor.array_api.linalg.pinv for a "
        "least-squares inverse"
    )
    return finish(_lapack(np.linalg.inv, x, refusal=refusal), plan.outputs[0])


def cholesky(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
    """The Cholesky factor (lower, or upper with ``upper=True``) of each Hermitian matrix."""
    (x,) = _matrices(plan, (a,), True)
    refusal = "a matrix is not positive definite, so it has no Cholesky factor"
    factor = _lapack(np.linalg.cholesky, x, refusal=refusal, upper=options.upper)
    return finish(factor, plan.outputs[0])


def solve(plan: cv.OperationPlan, options: Any, a: Any, b: Any) -> Array:
    """``x`` with ``a @ x == b``; ``b`` of shape ``(n,)`` is one vector (NumPy 2's rule)."""
    x, y = _matrices(plan, (a, b), True)
    n = x.shape[-1]
    rows = y.shape[0] if y.ndim == 1 else y.shape[-2] if y.ndim >= 2 else None
    if rows != n:
        msg = (
            f"operand shapes {x.shape} and {y.shape} do not fit: other must be of shape ({n},) "
            f"or (..., {n}, k); reshape other"
        )
        raise KernelValueError(msg)
    if y.ndim > 1:
        batch = check_broadcast(plan.operation, x.shape[:-2], y.shape[:-2])
        x = np.broadcast_to(x, (*batch, n, n))
        y = np.broadcast_to(y, (*batch, *y.shape[-2:]))
    refusal = (
        "a matrix is singular, so the system has no unique solution; multiply by "
        "conveyor.array_api.linalg.pinv of it for the least-squares one"
    )
    return finish(_lapack(np.linalg.solve, x, y, refusal=refusal), plan.outputs[0])


def eigh(plan: cv.OperationPlan, options: Any, a: Any) -> tuple[Array, Array]:
    """Eigenvalues (ascending) and eigenvectors of each Hermitian matrix (its lower triangle)."""
    (x,) = _matrices(plan, (a,), True)
    refusal = "the eigenvalue iteration did not converge"
    values, vectors = _lapack(np.linalg.eigh, x, refusal=refusal)
    return finish(values, plan.outputs[0]), finish(vectors, plan.outputs[1])


def qr(plan: cv.OperationPlan, options: Any, a: Any) -> tuple[Array, Array]:
    """``Q`` (orthonormal columns) and ``R`` (upper triangular) with ``Q @ R`` the input."""
    (x,) = _matrices(plan, (a,), False)
    refusal = "the factorization did not converge"
    q_factor, r_factor = _lapack(np.linalg.qr, x, refusal=refusal, mode=options.mode)
    return finish(q_factor, plan.outputs[0]), finish(r_factor, plan.outputs[1])


def svd(plan: cv.OperationPlan, options: Any, a: Any) -> tuple[Array, Array, Array]:
    """``U``, the singular values (descending) and ``Vh`` with ``U * S @ Vh`` the input."""
    (x,) = _matrices(plan, (a,), False)
    refusal = "the singular value decomposition did not converge"
    u, s, vh = _lapack(np.linalg.svd, x, refusal=refusal, full_matrices=options.full_matrices)
    u_dtype, s_dtype, vh_dtype = plan.outputs
    return finish(u, u_dtype), finish(s, s_dtype), finish(vh, vh_dtype)


LINALG_KERNELS: dict[str, Kernel] = {
    "inv": inv,
    "cholesky": cholesky,
    "solve": solve,
    "eigh": eigh,
    "qr": qr,
    "svd": svd,
}
"""Linear-algebra names -> kernel(plan, options, input[, other])."""
