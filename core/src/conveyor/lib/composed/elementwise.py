"""Composed elementwise functions: the standard's functions that have no dispatch name.

Each is an identity over planned names (``tan = sin / cos``, ``atanh = log((1+x)/(1-x)) / 2``),
chosen to keep the usual accuracy where a naive identity loses it: ``log1p`` and ``expm1`` use
Goldberg's correction, ``atan`` reduces to ``|x| <= 1`` and refines with Newton steps on ``tan``,
and integer ``floor_divide`` divides exactly through float64. Gradients flow through every one
that is built from differentiable names.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib.composed.creation import constant, full_like
from conveyor.lib.composed.logic import logical_and, logical_or
from conveyor.lib.composed.predicates import isfinite, isnan
from conveyor.types import dtypes
from conveyor.types.policy import resolve_plan

__all__ = [
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "conj",
    "copysign",
    "cosh",
    "expm1",
    "floor_divide",
    "hypot",
    "imag",
    "log1p",
    "log10",
    "logaddexp",
    "nextafter",
    "positive",
    "real",
    "sinh",
    "square",
    "tan",
    "trunc",
]


def _float(x: Tensor) -> Tensor:
    """Integer input as the default float dtype, as the planned float-valued functions do."""
    if x.dtype.is_integer or x.dtype.is_bool:
        return x.astype(dtypes.default_float)
    return x


def _tensor_pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands as tensors: a Python scalar takes the dtype it promotes to weakly.

    The binary functions composed here need tensors for ``select`` and the predicates; the
    planned binary names accept scalars directly.
    """
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a, b
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):
        msg = f"expected at least one Tensor operand, got {a!r} and {b!r}; pass a tensor"
        raise TypeError(msg)
    scalar = b if a is like else a
    dtype = resolve_plan("add", like.dtype, scalar).compute
    if like.dtype is not dtype:
        like = like.astype(dtype)
    if isinstance(a, Tensor):
        return like, constant(b, dtype, like)
    return constant(a, dtype, like), like


def _complex_planned(planned: Callable[..., Tensor]) -> Callable[[Callable[..., Tensor]], Any]:
    """Complex input goes to the planned name (C99's special values); real input is composed."""

    def decorate(composed: Callable[..., Tensor]) -> Callable[..., Tensor]:
        @functools.wraps(composed)
        def function(x: Tensor, /) -> Tensor:
            if isinstance(x, Tensor) and x.dtype.is_complex:
                return planned(x)
            return composed(x)

        return function

    return decorate


def positive(x: Tensor, /) -> Tensor:
    """``+x``: the same values (a view, as NumPy returns a new array of the same values)."""
    return F.view(x, key=(Ellipsis,))


def square(x: Tensor, /) -> Tensor:
    """``x * x``."""
    return F.mul(x, x)


def trunc(x: Tensor, /) -> Tensor:
    """Round toward zero."""
    if x.dtype.is_integer or x.dtype.is_bool:
        return x
    return F.select(F.lt(x, 0), F.ceil(x), F.floor(x))


def floor_divide(a: Any, b: Any, /) -> Tensor:
    """``a // b``: floored division, Python's and NumPy's rule; integer ``x // 0`` is ``0``.

    Integers divide exactly (through float64, exact below ``2**53`` in magnitude): the floored
    remainder makes ``a - a % b`` a multiple of ``b``. Floats use the same remainder identity,
    which is correct where ``floor(a / b)`` is off by one (``1 // 0.1 == 9``), and fall back to
    ``floor(a / b)`` where it is not finite (division by zero, infinities).
    """
    mod = F.rem(a, b)
    if mod.dtype.is_integer or mod.dtype.is_bool:
        if mod.dtype.is_bool:
            msg = f"floor_divide on {type(mod.carrier).__name__}: bool operands; cast first"
            raise TypeError(msg)
        wide = dtypes.float64
        num = F.sub(_wide(a, wide, mod), mod.astype(wide))
        quotient = F.round(F.div(num, _wide(b, wide, mod)))
        return _where_zero(b, 0.0, quotient).astype(mod.dtype)
    # NumPy's divmod: the quotient comes from the truncated remainder, which is exact, and is
    # then moved down by one where the floored remainder would change sign. Subtracting the
    # floored remainder instead rounds differently past 2**52 (-2.23e16 // 2.5 was one off).
    a_tensor = a if isinstance(a, Tensor) else constant(a, mod.dtype, mod)
    b_tensor = b if isinstance(b, Tensor) else constant(b, mod.dtype, mod)
    size = F.rem(F.abs(a_tensor), F.abs(b_tensor))
    truncated = F.select(F.lt(a_tensor, 0), F.neg(size), size)
    quotient = F.div(F.sub(a_tensor, truncated), b_tensor)
    crosses = logical_and(F.ne(truncated, 0), F.ne(F.lt(b_tensor, 0), F.lt(truncated, 0)))
    quotient = F.select(crosses, F.sub(quotient, 1), quotient)
    whole = F.floor(quotient)
    q = F.select(F.lt(0.5, F.sub(quotient, whole)), F.add(whole, 1), whole)
    ratio = F.div(a, b)
    # NumPy's divmod conventions: a zero quotient takes the sign of a / b, a finite numerator
    # over an infinite divisor gives -1 when the signs differ, and x // 0 is x / 0.
    q = F.select(F.eq(q, 0), F.mul(ratio, 0), q)
    if isinstance(b, Tensor) or math.isinf(b):
        from conveyor.lib.composed.predicates import isinf, signbit

        differ = logical_and(F.ne(a_tensor, 0), F.ne(signbit(a_tensor), signbit(b_tensor)))
        special = F.select(differ, -1.0, ratio)
        q = F.select(logical_and(isinf(b_tensor), isfinite(a_tensor)), special, q)
    return _where_zero(b, ratio, q)


def _where_zero(b: Any, at_zero: Any, otherwise: Tensor) -> Tensor:
    """``at_zero`` where the divisor ``b`` (a tensor or a Python number) is zero."""
    if isinstance(b, Tensor):
        return F.select(F.eq(b, 0), at_zero, otherwise)
    if b == 0:
        return at_zero if isinstance(at_zero, Tensor) else full_like(otherwise, at_zero)
    return otherwise


def _wide(v: Any, wide: dtypes.DType, like: Tensor) -> Any:
    return v.astype(wide) if isinstance(v, Tensor) else float(v)


@_complex_planned(F.tan)
def tan(x: Tensor, /) -> Tensor:
    """``sin(x) / cos(x)``."""
    return F.div(F.sin(x), F.cos(x))


@_complex_planned(F.sinh)
def sinh(x: Tensor, /) -> Tensor:
    """``(e^x - e^-x) / 2``, through ``expm1`` so small arguments keep their digits."""
    x = _float(x)
    return F.mul(F.sub(expm1(x), expm1(F.neg(x))), 0.5)


@_complex_planned(F.cosh)
def cosh(x: Tensor, /) -> Tensor:
    """``(e^x + e^-x) / 2``."""
    return F.mul(F.add(F.exp(x), F.exp(F.neg(x))), 0.5)


@_complex_planned(F.asinh)
def asinh(x: Tensor, /) -> Tensor:
    """``sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``, accurate near 0 and finite far out."""
    x = _float(x)
    a = F.abs(x)
    big = F.lt(_huge(x), a)  # x*x would overflow: asinh(a) = log(2a) there
    safe = F.select(big, 0.0, a)
    small = log1p(
        F.add(safe, F.div(F.mul(safe, safe), F.add(F.sqrt(F.add(F.mul(safe, safe), 1)), 1)))
    )
    value = F.select(big, F.add(F.log(a), math.log(2.0)), small)
    return copysign(value, x)


def _huge(x: Tensor) -> float:
    """A magnitude past which ``x * x`` overflows in ``x``'s dtype."""
    return 1e18 if x.dtype.bits <= 32 else 1e150


@_complex_planned(F.acosh)
def acosh(x: Tensor, /) -> Tensor:
    """``log(x + sqrt(x - 1) sqrt(x + 1))`` (NaN below 1)."""
    x = _float(x)
    big = F.lt(_huge(x), x)
    safe = F.select(big, 1.0, x)
    small = F.log(F.add(safe, F.mul(F.sqrt(F.sub(safe, 1)), F.sqrt(F.add(safe, 1)))))
    return F.select(big, F.add(F.log(x), math.log(2.0)), small)


@_complex_planned(F.atanh)
def atanh(x: Tensor, /) -> Tensor:
    """``log1p(2x / (1 - x)) / 2`` (±inf at ±1, NaN outside)."""
    x = _float(x)
    return F.mul(log1p(F.div(F.mul(x, 2), F.sub(1, x))), 0.5)


@_complex_planned(F.log1p)
def log1p(x: Tensor, /) -> Tensor:
    """``log(1 + x)``, accurate for tiny ``x`` (Goldberg: ``log(u) * x / (u - 1)``)."""
    x = _float(x)
    u = F.add(x, 1)
    d = F.sub(u, 1)
    exact = F.eq(d, 0)
    corrected = F.mul(F.log(u), F.div(x, F.select(exact, 1.0, d)))
    value = F.select(exact, x, corrected)
    return F.select(isfinite(u), value, F.log(u))


@_complex_planned(F.expm1)
def expm1(x: Tensor, /) -> Tensor:
    """``e^x - 1``, accurate for tiny ``x`` (``(u - 1) * x / log(u)``)."""
    x = _float(x)
    u = F.exp(x)
    d = F.sub(u, 1)
    log_u = F.log(u)
    plain = logical_and(F.ne(u, 1), F.ne(d, -1))
    plain = logical_and(plain, isfinite(u))
    corrected = F.mul(d, F.div(x, F.select(plain, log_u, 1.0)))
    value = F.select(F.eq(u, 1), x, F.select(plain, corrected, d))
    return F.select(isnan(x), x, value)


def log10(x: Tensor, /) -> Tensor:
    """``log2(x) * log10(2)``."""
    return F.mul(F.log2(x), math.log10(2.0))


def logaddexp(a: Tensor, b: Tensor, /) -> Tensor:
    """``log(e^a + e^b)`` without overflow: ``max + log1p(e^-|a-b|)``."""
    high = F.maximum(a, b)
    diff = F.sub(a, b)
    # Equal infinities make a - b NaN; their sum is that infinity.
    tail = F.select(isnan(diff), 0.0, log1p(F.exp(F.neg(F.abs(diff)))))
    value = F.add(high, tail)
    return F.select(logical_and(isnan(diff), F.logical_not(isnan(high))), high, value)


def hypot(a: Any, b: Any, /) -> Tensor:
    """``sqrt(a^2 + b^2)`` scaled by the larger magnitude: no overflow, no underflow."""
    a, b = _tensor_pair(a, b)
    a, b = F.abs(_float(a)), F.abs(_float(b))
    high = F.maximum(a, b)
    low = F.minimum(a, b)
    scale = F.select(F.eq(high, 0), 1.0, high)
    ratio = F.div(low, scale)
    value = F.mul(scale, F.sqrt(F.add(F.mul(ratio, ratio), 1)))
    value = F.select(F.eq(high, 0), 0.0, value)
    from conveyor.lib.composed.predicates import isinf

    return F.select(F.add(isinf(a), isinf(b)), math.inf, value)


def copysign(a: Any, b: Any, /) -> Tensor:
    """``|a|`` with the sign of ``b`` (``-0.0`` counts as negative)."""
    from conveyor.lib.composed.predicates import signbit

    a, sign_of = _tensor_pair(a, b)
    magnitude = F.abs(a)
    return F.select(signbit(sign_of), F.neg(magnitude), magnitude)


def _atan_unit(x: Tensor) -> Tensor:
    """``atan`` on ``|x| <= 1``: a rational start refined by Newton steps on ``tan(y) = x``."""
    y = F.div(x, F.add(F.mul(F.mul(x, x), 0.28125), 1))
    steps = 3 if x.dtype.bits <= 32 else 4
    for _ in range(steps):
        s, c = F.sin(y), F.cos(y)
        y = F.sub(y, F.div(F.sub(s, F.mul(x, c)), F.add(c, F.mul(x, s))))
    return y


@_complex_planned(F.atan)
def atan(x: Tensor, /) -> Tensor:
    """Inverse tangent; ``atan(±inf) = ±pi/2``, ``atan(-0.0) = -0.0``."""
    x = _float(x)
    big = F.lt(1, F.abs(x))
    reduced = F.select(big, F.recip(F.select(big, x, 1.0)), x)
    core = _atan_unit(reduced)
    half_pi = copysign(constant(math.pi / 2, x.dtype, x), x)
    return F.select(big, F.sub(half_pi, core), core)


def atan2(y: Any, x: Any, /) -> Tensor:
    """The angle of the point ``(x, y)``, in ``[-pi, pi]``, with IEEE signed zeros."""
    from conveyor.lib.composed.predicates import isinf, signbit

    y, x = _tensor_pair(y, x)
    y, x = _float(y), _float(x)
    both_inf = logical_and(isinf(x), isinf(y))
    ratio = F.div(F.select(both_inf, F.sign(y), y), F.select(both_inf, F.sign(x), x))
    base = atan(F.select(isnan(ratio), 0.0, ratio))
    pi = copysign(constant(math.pi, base.dtype, base), y)
    angle = F.select(signbit(x), F.add(base, pi), base)
    zero_x = F.eq(x, 0)
    angle = F.select(zero_x, copysign(constant(math.pi / 2, base.dtype, base), y), angle)
    zero_y = F.eq(y, 0)
    angle = F.select(
        zero_y, F.select(signbit(x), pi, copysign(constant(0.0, base.dtype, base), y)), angle
    )
    nan = logical_and(F.logical_not(F.eq(x, x)), True)
    nan = F.add(nan, isnan(y))
    return F.select(nan, math.nan, angle)


@_complex_planned(F.asin)
def asin(x: Tensor, /) -> Tensor:
    """``atan2(x, sqrt(1 - x^2))`` (NaN outside ``[-1, 1]``)."""
    x = _float(x)
    return atan2(x, F.sqrt(F.mul(F.sub(1, x), F.add(1, x))))


@_complex_planned(F.acos)
def acos(x: Tensor, /) -> Tensor:
    """``atan2(sqrt(1 - x^2), x)`` (NaN outside ``[-1, 1]``)."""
    x = _float(x)
    return atan2(F.sqrt(F.mul(F.sub(1, x), F.add(1, x))), x)


def real(x: Tensor, /) -> Tensor:
    """The real part (real input is returned as is)."""
    if not x.dtype.is_complex:
        return x
    return x.astype(dtypes.float32 if x.dtype is dtypes.complex64 else dtypes.float64)


def imag(x: Tensor, /) -> Tensor:
    """The imaginary part: ``real(-1j * x)`` (zeros for real input)."""
    if not x.dtype.is_complex:
        return F.mul(x, 0)
    return real(F.mul(x, -1j))


def conj(x: Tensor, /) -> Tensor:
    """The complex conjugate ``2 real(x) - x`` (real input is returned as is)."""
    if not x.dtype.is_complex:
        return x
    return F.sub(F.mul(real(x).astype(x.dtype), 2), x)


def _float_bits(dtype: dtypes.DType) -> tuple[int, int]:
    """(significand precision, minimum normal exponent) of a floating dtype."""
    return (24, -126) if dtype.bits == 32 else (53, -1022)


def nextafter(x: Any, y: Any, /) -> Tensor:
    """The next representable value after ``x`` toward ``y`` (``y`` when they are equal).

    The spacing at ``x`` is ``2**(e - p + 1)`` with ``e = floor(log2|x|)`` (corrected where
    ``log2`` rounds up to the next integer), clamped at the subnormal spacing; a step toward zero
    from an exact power of two takes half of it. NaN in either operand gives NaN.
    """
    from conveyor.lib.composed.predicates import isinf

    x, target = _tensor_pair(x, y)
    if not x.dtype.is_floating or x.dtype.bits not in (32, 64):
        msg = (
            f"nextafter on {type(x.carrier).__name__}: needs float32 or float64, got {x.dtype.name}"
        )
        raise TypeError(msg)
    precision, emin = _float_bits(x.dtype)
    magnitude = F.abs(x)
    safe = F.select(logical_and(isfinite(magnitude), F.lt(0, magnitude)), magnitude, 1.0)
    exponent = F.floor(F.log2(safe))
    exponent = F.select(F.lt(safe, F.exp2(exponent)), F.sub(exponent, 1), exponent)
    exponent = F.maximum(exponent, float(emin))
    spacing = F.exp2(F.sub(exponent, precision - 1))
    power_of_two = logical_and(F.eq(F.exp2(exponent), safe), F.lt(float(emin), exponent))
    up = F.lt(x, target)
    away = F.eq(up, F.lt(0, x))  # moving away from zero grows the magnitude
    step = F.select(logical_and(power_of_two, F.logical_not(away)), F.mul(spacing, 0.5), spacing)
    moved = F.select(up, F.add(x, step), F.sub(x, step))
    tiny = constant(2.0 ** (emin - precision + 1), x.dtype, x)
    moved = F.select(F.eq(x, 0), F.select(up, tiny, F.neg(tiny)), moved)
    largest = constant(_largest(x.dtype), x.dtype, x)
    from_inf = F.select(F.lt(0, x), largest, F.neg(largest))
    moved = F.select(isinf(x), from_inf, moved)
    moved = F.select(F.eq(x, target), target, moved)
    return F.select(logical_or(isnan(x), isnan(target)), math.nan, moved)


def _largest(dtype: dtypes.DType) -> float:
    import numpy as np

    return float(np.finfo(dtype.numpy).max)
