"""Shared pieces of the reference kernels: operand conversion, rounding, axes and refusals.

A kernel executes one accepted ``OperationPlan`` literally: each operand is converted to its
``convert_to`` dtype (Python scalars too, integers wrapping modulo ``2**bits``), the arithmetic
runs in the plan's compute dtype, and the result is rounded once to the plan's output dtype.
Floating elementwise functions are evaluated in float64 (complex128) and rounded once to the
compute dtype, which is the correctly rounded compute-dtype result up to float64's own rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np
from numpy.exceptions import AxisError

import conveyor as cv
from conveyor.sdk import normalize_axes, normalize_axis

__all__ = [
    "Array",
    "Kernel",
    "KernelAxisError",
    "KernelIndexError",
    "KernelValueError",
    "check_broadcast",
    "convert",
    "finish",
    "lane_axes",
    "quiet",
    "reduced_axes",
    "refuse_empty",
    "scalar",
    "widen",
]

Array: TypeAlias = np.ndarray[Any, Any]
Kernel: TypeAlias = Callable[..., Array | tuple[Array, ...]]
"""``kernel(plan, options, *operands)``: operands are NumPy arrays (any dtype as stored, any
strides, possibly read-only), Python scalars or ``None`` in the plan's role order; ``options`` is
the complete ``OperationExecutionOptions`` (defaults filled in, never ``None``). The result is a
fresh array (or tuple of arrays) already in the plan's output dtypes, never a view of an input."""


class KernelIndexError(IndexError):
    """An index operand refers outside its tensor; carriers re-raise it with their own prefix.

    ``public`` is the builtin type the carrier raises (NumPy's ``AxisError`` for axes).
    """

    public: ClassVar[type[IndexError]] = IndexError


class KernelAxisError(KernelIndexError):
    """An axis is out of range for the operand's rank; re-raised as NumPy's ``AxisError``."""

    public = AxisError


class KernelValueError(ValueError):
    """Operand shapes or option values do not fit; carriers re-raise it with their own prefix."""


def is_bfloat16(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is bfloat16, without importing ml_dtypes (its import costs ~0.5 s)."""
    return dtype.name == "bfloat16"


def quiet() -> Any:
    """NumPy error state for kernels: overflow, division by zero and NaN are values, not noise."""
    return np.errstate(all="ignore")


def _wrap_int(value: int, dtype: cv.DType) -> int:
    bits = dtype.bits
    value %= 1 << bits
    if dtype.kind == "signed_integer" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def scalar(value: Any, dtype: cv.DType) -> Array:
    """A weak Python scalar converted to ``dtype`` (integers wrap, large floats become inf)."""
    if dtype.is_bool:
        return np.array(bool(value))
    if dtype.is_integer:
        return np.array(_wrap_int(int(value), dtype), dtype.numpy)
    if dtype.is_complex:
        return np.array(complex(value)).astype(dtype.numpy)
    try:
        number = float(value)
    except OverflowError:  # a Python int beyond float64 (copysign would convert it too)
        number = math.inf if value > 0 else -math.inf
    with quiet():
        return np.array(number).astype(dtype.numpy)


def convert(plan: cv.OperationPlan, operands: Sequence[Any]) -> list[Array | None]:
    """Each operand converted to its plan ``convert_to`` dtype (``None`` stays ``None``)."""
    out: list[Array | None] = []
    with quiet():
        for value, operand in zip(operands, plan.operands, strict=True):
            target = operand.convert_to
            if value is None or target is None:
                out.append(None)
            elif isinstance(value, np.ndarray):
                out.append(value.astype(target.numpy, copy=False))
            else:
                out.append(scalar(value, target))
    return out


def widen(array: Array) -> Array:
    """Floating arrays as float64, complex ones as complex128; other kinds unchanged."""
    kind = array.dtype.kind
    if kind == "f" or array.dtype.name == "bfloat16":
        return array.astype(np.float64, copy=False)
    if kind == "c":
        return array.astype(np.complex128, copy=False)
    return array


def finish(values: Any, dtype: cv.DType) -> Array:
    """``values`` rounded once to ``dtype``, always as a fresh array."""
    with quiet():
        return np.array(values).astype(dtype.numpy)


def check_broadcast(name: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of the operands, or a refusal naming them."""
    try:
        return cv.broadcast_shapes(*shapes)
    except ValueError:
        listed = ", ".join(str(s) for s in shapes)
        msg = f"operand shapes {listed} do not broadcast together; reshape or broadcast_to first"
        raise KernelValueError(msg) from None


def reduced_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """The axes a reduction runs over; a 0-d input has none (axis 0 / -1 name its element)."""
    if ndim == 0:
        if axis is not None:
            for a in (axis,) if isinstance(axis, int) else axis:
                lane_axes(a, 0)
        return ()
    try:
        return tuple(sorted(normalize_axes(axis, ndim)))
    except IndexError as exc:
        raise KernelAxisError(f"{exc}; pass axes in [-{max(ndim, 1)}, {max(ndim, 1)})") from None


def lane_axes(axis: int, ndim: int) -> int:
    """One axis for scans, sorts and indexing (0-d inputs accept 0 and -1, as PyTorch)."""
    if ndim == 0 and axis in (0, -1):
        return 0
    try:
        return normalize_axis(axis, ndim)
    except IndexError as exc:
        bound = max(ndim, 1)
        raise KernelAxisError(f"{exc}; pass an axis in [-{bound}, {bound})") from None


def refuse_empty(name: str, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    """Refuse an identity-less reduction (max, argmin, ...) over an empty axis."""
    empty = [a for a in axes if shape[a] == 0]
    if empty:
        msg = (
            f"cannot take {name} over axis {empty[0]} of extent 0 (shape {shape}); it has no "
            f"identity, so reduce a non-empty axis"
        )
        raise KernelValueError(msg)
