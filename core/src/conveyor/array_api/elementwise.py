"""Array API element-wise functions: dispatch names under the standard's names, or composed."""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C

__all__ = [
    "abs",
    "acos",
    "acosh",
    "add",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "ceil",
    "clip",
    "conj",
    "copysign",
    "cos",
    "cosh",
    "divide",
    "equal",
    "exp",
    "expm1",
    "floor",
    "floor_divide",
    "greater",
    "greater_equal",
    "hypot",
    "imag",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log2",
    "log10",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "nextafter",
    "not_equal",
    "positive",
    "pow",
    "real",
    "reciprocal",
    "remainder",
    "round",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "subtract",
    "tan",
    "tanh",
    "trunc",
]

# Planned names under the standard's spelling.
abs = F.abs
add = F.add
ceil = F.ceil
cos = F.cos
divide = F.div
equal = F.eq
exp = F.exp
floor = F.floor
less = F.lt
less_equal = F.le
log = F.log
log2 = F.log2
logical_not = F.logical_not
maximum = F.maximum
minimum = F.minimum
multiply = F.mul
negative = F.neg
not_equal = F.ne
pow = F.pow
reciprocal = F.recip
remainder = F.rem
sin = F.sin
sqrt = F.sqrt
subtract = F.sub
tanh = F.tanh

# Composed in conveyor.lib.composed.
acos = C.acos
clip = C.clip
acosh = C.acosh
asin = C.asin
asinh = C.asinh
atan = C.atan
atan2 = C.atan2
atanh = C.atanh
bitwise_and = C.bitwise_and
bitwise_invert = C.bitwise_invert
bitwise_left_shift = C.bitwise_left_shift
bitwise_or = C.bitwise_or
bitwise_right_shift = C.bitwise_right_shift
bitwise_xor = C.bitwise_xor
conj = C.conj
copysign = C.copysign
cosh = C.cosh
expm1 = C.expm1
floor_divide = C.floor_divide
hypot = C.hypot
imag = C.imag
isfinite = C.isfinite
isinf = C.isinf
isnan = C.isnan
log10 = C.log10
log1p = C.log1p
logaddexp = C.logaddexp
logical_and = C.logical_and
logical_or = C.logical_or
logical_xor = C.logical_xor
nextafter = C.nextafter
positive = C.positive
real = C.real
signbit = C.signbit
sinh = C.sinh
square = C.square
tan = C.tan
trunc = C.trunc


def greater(x1: Any, x2: Any, /) -> Tensor:
    return F.lt(x2, x1)


def greater_equal(x1: Any, x2: Any, /) -> Tensor:
    return F.le(x2, x1)


def round(x: Tensor, /) -> Tensor:  # the standard's name
    """Round half to even; integers are returned unchanged."""
    return F.round(x)


def sign(x: Tensor, /) -> Tensor:
    """``-1``, ``0`` or ``1`` (NaN for NaN); for complex ``x / |x|`` (``0`` at ``0``)."""
    if x.dtype.is_complex:
        magnitude = F.abs(x)
        safe = F.select(F.eq(magnitude, 0), 1.0, magnitude)
        return F.select(F.eq(magnitude, 0), 0, F.div(x, safe))
    return F.sign(x)
