"""Comparison with the Generic oracle: tolerances by dtype and accumulation, readable mismatches.

Integer and bool results must be equal. Floating results may differ from Generic by a few units
in the last place of the output dtype: two for exactly rounded operations, eight (plus the same
absolute slack) for transcendental functions and complex arithmetic, and a summation bound for
accumulations (``terms * eps(accumulator) * scale``, where ``scale`` is the largest finite operand
magnitude, or the product of the two largest for contractions). NaN must meet NaN, infinities
must match exactly, and ``-0.0`` equals ``0.0`` except for ``neg`` and ``abs``, whose whole job
is the sign bit (IEEE 754 defines it exactly there; elsewhere carriers legitimately differ).

Accumulation cases (``Case.accumulation``: long sums, half of them cancelling exactly) get a
bound derived from the plan's accumulator dtype instead: ``2 * eps(accumulator) * sqrt(k) * rss``,
``k`` the terms per result and ``rss`` the largest root of the sum of their squares. Rounding
errors of a sum in that precision, in any order, stay an order of magnitude below it; one
accumulated in a narrower dtype (float16 for a float32 plan) is far above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import ml_dtypes
import numpy as np

import conveyor as cv
from conveyor.sdk import OperationPlan

__all__ = ["Mismatch", "Tolerance", "compare", "tolerance"]

_Array = np.ndarray[Any, Any]

_TRANSCENDENTAL: Final = frozenset(
    {"pow", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "tanh", "erf"}
    | {"sigmoid", "gelu", "silu", "softplus", "elu"}
)
_CONTRACTIONS: Final = frozenset({"matmul", "conv_general"})
_SUMS: Final = frozenset({"reduce_sum", "cumsum", "scatter_add"})


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference ``|got - expected| <= atol + rtol * |expected|``; exact when both 0."""

    rtol: float = 0.0
    atol: float = 0.0
    signed_zero: bool = False  # a zero's sign must match too

    @property
    def exact(self) -> bool:
        return self.rtol == 0.0 and self.atol == 0.0

    def __str__(self) -> str:
        return "exact" if self.exact else f"rtol={self.rtol:.3g}, atol={self.atol:.3g}"


@dataclass(frozen=True)
class Mismatch:
    """How one output differs from the oracle's: the text names the first differing element."""

    text: str
    max_abs_error: float | None = None
    index: tuple[int, ...] | None = None


def _eps(dtype: cv.DType) -> float:
    if dtype is cv.bfloat16:
        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)  # type: ignore[no-untyped-call]  # ml_dtypes ships no annotations for finfo
    if dtype.is_complex:
        return float(np.finfo(np.float32 if dtype is cv.complex64 else np.float64).eps)
    return float(np.finfo(dtype.numpy).eps)


def _tiny(dtype: cv.DType) -> float:
    if dtype is cv.bfloat16:
        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal)  # type: ignore[no-untyped-call]  # as above
    if dtype.is_complex:
        return float(np.finfo(np.float32 if dtype is cv.complex64 else np.float64).smallest_normal)
    return float(np.finfo(dtype.numpy).smallest_normal)


def _largest(values: _Array) -> float:
    if values.size == 0:
        return 0.0
    if values.dtype.kind == "b":
        return 1.0 if values.any() else 0.0
    with np.errstate(all="ignore"):
        magnitudes = np.abs(np.asarray(values).astype(np.complex128))
    finite = magnitudes[np.isfinite(magnitudes)]
    return float(finite.max()) if finite.size else 0.0


# Operations that only move or clear the sign bit: the sign of a zero result is exact.
_SIGN_EXACT: Final = frozenset({"neg", "abs"})


def _root_sum_squares(plan: OperationPlan, operands: Sequence[_Array]) -> tuple[int, float]:
    """Terms per result and the largest root of the sum of their squares, for an accumulation
    case: sums along the last axis, or a 2-d ``matmul``."""
    squares = [np.square(np.abs(np.asarray(a).astype(np.complex128))) for a in operands]
    if plan.operation in _CONTRACTIONS:
        left, right = squares
        return left.shape[-1], float(np.sqrt((left @ right).max(initial=0.0)))
    rows = squares[0].sum(axis=-1)
    return squares[0].shape[-1], float(np.sqrt(rows.max(initial=0.0)))


def accumulation_tolerance(
    plan: OperationPlan, output: int, operands: Sequence[_Array]
) -> Tolerance:
    """The bound of an accumulation case, from the plan's accumulator dtype (module docstring)."""
    dtype = plan.outputs[output]
    accumulator = plan.accumulator_dtype or plan.compute
    terms, rss = _root_sum_squares(plan, operands)
    atol = 2 * _eps(accumulator) * math.sqrt(terms) * rss + 4 * _tiny(dtype)
    return Tolerance(4 * _eps(dtype), atol)


def tolerance(
    plan: OperationPlan,
    output: int,
    operands: Sequence[_Array],
    accumulation: bool = False,
    expected: _Array | None = None,
) -> Tolerance:
    """The tolerance for output ``output`` of ``plan`` given the tensor ``operands``;
    ``accumulation``: the case is an accumulation case (module docstring); ``expected``: the
    oracle's output, whose magnitude also scales a sum's bound (below)."""
    dtype = plan.outputs[output]
    if not (dtype.is_floating or dtype.is_complex):
        return Tolerance()
    if accumulation:
        return accumulation_tolerance(plan, output, operands)
    name, eps, tiny = plan.operation, _eps(dtype), _tiny(dtype)
    if name in _SIGN_EXACT:
        return Tolerance(2 * eps, 4 * tiny, signed_zero=True)
    accumulator = plan.accumulator_dtype or plan.compute
    if name in _CONTRACTIONS or name in _SUMS or name == "reduce_prod":
        terms = max([a.size for a in operands] + [1])
        acc_eps = _eps(accumulator) if accumulator.is_floating or accumulator.is_complex else eps
        if name == "reduce_prod":
            return Tolerance(4 * eps + 2 * terms * acc_eps, 4 * tiny)
        magnitudes = [_largest(a) for a in operands]
        scale = math.prod(magnitudes[:2]) if name in _CONTRACTIONS else max([*magnitudes, 0.0])
        if name in _SUMS and expected is not None:
            # Same-sign terms (a broadcast operand is one value repeated) make every partial
            # sum as large as the result, and a sequential sum's error grows with them.
            scale = max(scale, _largest(expected))
        return Tolerance(4 * eps, 2 * terms * acc_eps * scale + 4 * tiny)
    if name in _TRANSCENDENTAL or plan.compute.is_complex:
        scale = max([_largest(a) for a in operands] + [1.0]) if plan.compute.is_complex else 1.0
        return Tolerance(8 * eps, 8 * eps * scale * scale + 4 * tiny)
    return Tolerance(2 * eps, 4 * tiny)


def _wide(values: _Array) -> _Array:
    kind = values.dtype.kind
    if kind == "c":
        return values.astype(np.complex128)
    if kind == "f" or values.dtype == ml_dtypes.bfloat16:
        return values.astype(np.float64)
    return values


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def compare(got: _Array, want: _Array, tol: Tolerance) -> Mismatch | None:
    """``None`` when ``got`` matches ``want`` within ``tol``, else the first difference."""
    if got.shape != want.shape:
        return Mismatch(f"shape {got.shape}, expected {want.shape}")
    if got.size == 0:
        return None
    if got.dtype == want.dtype and got.tobytes() == want.tobytes():
        return None  # bit-identical (the common case): no need to measure
    a, b = _wide(got).reshape(-1), _wide(want).reshape(-1)
    if tol.exact or a.dtype.kind not in "fc":
        bad = a != b
        if not bad.any():
            return None
        first = int(np.argmax(bad))
        index = _index(first, got.shape)
        return Mismatch(
            f"{int(bad.sum())} of {got.size} elements differ; first at {index}: got "
            f"{got.reshape(-1)[first].item()!r}, expected {want.reshape(-1)[first].item()!r}",
            None,
            index,
        )
    parts = [(a.real, b.real), (a.imag, b.imag)] if a.dtype.kind == "c" else [(a, b)]
    bad = np.zeros(a.shape, bool)
    worst = 0.0
    with np.errstate(all="ignore"):
        for x, y in parts:
            nan = np.isnan(y)
            inf = np.isinf(y)
            finite = ~(nan | inf)
            diff = np.abs(x - y)
            bad |= np.isnan(x) != nan
            bad |= inf & (x != y)
            bad |= finite & ~(diff <= tol.atol + tol.rtol * np.abs(y))
            if tol.signed_zero:
                bad |= (y == 0) & (x == 0) & (np.signbit(x) != np.signbit(y))
            both = finite & np.isfinite(x)
            if both.any():
                worst = max(worst, float(diff[both].max()))
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    index = _index(first, got.shape)
    if tol.signed_zero and a[first] == 0 and b[first] == 0:
        return Mismatch(
            f"{int(bad.sum())} of {got.size} elements have the wrong sign of zero; first at "
            f"{index}: got {a[first].item()!r}, expected {b[first].item()!r}",
            0.0,
            index,
        )
    return Mismatch(
        f"{int(bad.sum())} of {got.size} elements outside {tol}; max abs error {worst:.6g}; "
        f"first at {index}: got {a[first].item()!r}, expected {b[first].item()!r}",
        worst,
        index,
    )
