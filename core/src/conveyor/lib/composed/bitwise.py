"""Composed bitwise operations on integers, from floored remainders and wrapping arithmetic.

No planned name reads bits, but floored ``rem`` by a power of two returns an integer's low bits
exactly (two's complement included), integer arithmetic wraps, and ``pow(2, k)`` is ``0`` for a
negative ``k`` in integer plans. So bit ``k`` of ``v`` is ``rem(v, 2**(k+1)) >= 2**k`` and the
result is reassembled bit by bit: about seven dispatches per bit, slow but exact on every
carrier that plans those names. Bool operands use logical arithmetic instead.
"""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib.composed.creation import constant
from conveyor.lib.composed.logic import logical_and, logical_or, logical_xor
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

__all__ = [
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
]


def _common(name: str, a: Any, b: Any) -> tuple[Tensor, Tensor, DType]:
    """Both operands as tensors of their result dtype (a Python int takes the tensor's dtype)."""
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    like = a if ta else b
    dtype = dtypes.promote_types(a.dtype, b.dtype) if ta and tb else like.dtype
    if not (dtype.is_integer or dtype.is_bool):
        msg = (
            f"{name} on {type(like.carrier).__name__}: needs integer or bool operands, got "
            f"{dtype.name}; cast with .astype() first"
        )
        raise TypeError(msg)
    return _as(a, dtype, like), _as(b, dtype, like), dtype


def _as(v: Any, dtype: DType, like: Tensor) -> Tensor:
    if isinstance(v, Tensor):
        return v if v.dtype is dtype else v.astype(dtype)
    if not isinstance(v, int) or (isinstance(v, bool) and not dtype.is_bool):
        msg = f"bitwise operations take integer or bool operands, got {v!r}"
        raise TypeError(msg)
    return constant(v, dtype, like)


def _bits(v: Tensor, dtype: DType) -> list[Tensor]:
    """The bits of ``v``, least significant first (bool tensors)."""
    n = dtype.bits
    bits = []
    low = v
    if dtype.kind == "signed_integer":
        negative = F.lt(v, 0)
        # v - int_min wraps negative values onto their low n-1 bits; non-negative ones are those.
        low = F.select(negative, F.sub(v, -(2 ** (n - 1))), v)
        width = n - 1
    else:
        width = n
    for k in range(width):
        part = low if k + 1 >= width else F.rem(low, 2 ** (k + 1))
        bits.append(F.le(2**k, part))
    if dtype.kind == "signed_integer":
        bits.append(negative)
    return bits


def _assemble(bits: list[Tensor], like: Tensor, dtype: DType) -> Tensor:
    acc = constant(0, dtype, like)
    n = dtype.bits
    for k, bit in enumerate(bits):
        weight = -(2 ** (n - 1)) if k == n - 1 and dtype.kind == "signed_integer" else 2**k
        acc = F.select(bit, F.add(acc, weight), acc)
    return acc


def _bitwise(name: str, a: Any, b: Any, logic: Any) -> Tensor:
    x, y, dtype = _common(name, a, b)
    if dtype.is_bool:
        return logic(x, y)  # type: ignore[no-any-return]
    combined = [logic(p, q) for p, q in zip(_bits(x, dtype), _bits(y, dtype), strict=True)]
    shape_like = F.add(x, y)  # the broadcast shape, exact (the sum is discarded)
    return _assemble(combined, F.mul(shape_like, 0), dtype)


def bitwise_and(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a & b`` (logical and for bool)."""
    return _bitwise("bitwise_and", a, b, logical_and)


def bitwise_or(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a | b`` (logical or for bool)."""
    return _bitwise("bitwise_or", a, b, logical_or)


def bitwise_xor(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a ^ b`` (logical xor for bool)."""
    return _bitwise("bitwise_xor", a, b, logical_xor)


def bitwise_invert(x: Tensor, /) -> Tensor:
    """Elementwise ``~x``: ``-1 - x`` in wrapping arithmetic (logical not for bool)."""
    if x.dtype.is_bool:
        return F.logical_not(x)
    _common("bitwise_invert", x, 0)
    return F.sub(-1, x)


def bitwise_left_shift(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a << b``: ``a * 2**b`` wrapping (shifts past the width give 0)."""
    x, y, dtype = _common("bitwise_left_shift", a, b)
    if dtype.is_bool:
        msg = "bitwise_left_shift: needs integer operands, got bool; cast with .astype() first"
        raise TypeError(msg)
    return F.mul(x, F.pow(constant(2, dtype, x), y))


def bitwise_right_shift(a: Any, b: Any, /) -> Tensor:
    """Elementwise ``a >> b``, arithmetic for signed integers (``-1 >> k`` stays ``-1``).

    A negative value is shifted as ``~(~a >> b)``, so only non-negative values are split.
    """
    x, y, dtype = _common("bitwise_right_shift", a, b)
    if dtype.is_bool:
        msg = "bitwise_right_shift: needs integer operands, got bool; cast with .astype() first"
        raise TypeError(msg)
    signed = dtype.kind == "signed_integer"
    negative = F.lt(x, 0) if signed else None
    v = F.select(negative, F.sub(-1, x), x) if negative is not None else x
    two = constant(2, dtype, x)
    acc = F.mul(F.add(v, y), 0)  # zeros of the broadcast shape and dtype
    for k, bit in enumerate(_bits(v, dtype)):
        if signed and k == dtype.bits - 1:
            break  # v is non-negative: its sign bit is clear
        acc = F.select(bit, F.add(acc, F.pow(two, F.sub(k, y))), acc)
    if negative is not None:
        acc = F.select(negative, F.sub(-1, acc), acc)
    return acc
