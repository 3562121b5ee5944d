"""Elementwise arithmetic, math functions and activations as TileLang expressions.

Each name maps to ``body(values, key)``, the TIR expression of one output element from its
converted operands. Formulas follow the reference semantics: ``maximum`` / ``minimum``
propagate NaN (Metal's ``max`` would drop it), ``rem`` takes the divisor's sign, ``round`` is
ties-to-even, and the activations avoid overflow: ``sigmoid`` through ``exp(-|x|)``,
``softplus`` and ``elu`` through an accurate ``log1p`` / ``expm1`` built from ``log`` and
``exp`` (Metal has neither), and ``silu`` / ``gelu`` give -0.0 at -inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from conveyor_metal.kernels._pointwise import PointwiseKey
from conveyor_metal.kernels._tile import math as m

__all__ = ["BODIES", "FLOAT_ONLY", "params"]

_Values = list[Any]
_Body = Callable[[_Values, PointwiseKey], Any]


def _T() -> Any:
    import tilelang.language as T

    return T


def _const(value: float, dtype: str) -> Any:
    return _T().cast(value, dtype)


def _floating(key: PointwiseKey) -> bool:
    return key.compute.startswith(("float", "bfloat"))


def _is_nan(x: Any) -> Any:
    # T.isnan, not x != x: the TIR simplifier may fold x != x to false.
    return _T().isnan(x)


def _abs(x: Any, dtype: str) -> Any:
    """``|x|`` as a select (``0 - x`` turns -0.0 into 0.0): the C target has no ``fabs``."""
    zero = _const(0, dtype)
    return _T().if_then_else(x <= zero, zero - x, x)


def _extreme(pick: Callable[[Any, Any], Any], a: Any, b: Any, key: PointwiseKey) -> Any:
    T = _T()
    if key.compute == "bool":
        return T.Or(a, b) if pick is T.max else T.And(a, b)
    if not _floating(key):
        return pick(a, b)
    return T.if_then_else(T.Or(_is_nan(a), _is_nan(b)), a + b, pick(a, b))


def _add(v: _Values, key: PointwiseKey) -> Any:
    return _T().Or(v[0], v[1]) if key.compute == "bool" else v[0] + v[1]


def _mul(v: _Values, key: PointwiseKey) -> Any:
    return _T().And(v[0], v[1]) if key.compute == "bool" else v[0] * v[1]


def _rem(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    a, b = v
    zero = _const(0, key.compute)
    if not _floating(key):
        # NumPy's integer remainder: the divisor's sign, and 0 for a zero divisor.
        safe = T.if_then_else(b == zero, _const(1, key.compute), b)
        return T.if_then_else(b == zero, zero, T.floormod(a, safe))
    r = m("fmod", a, b)
    return T.if_then_else(T.And(r != zero, (r < zero) != (b < zero)), r + b, r)


def _pow(v: _Values, key: PointwiseKey) -> Any:
    """``x ** y`` through ``exp2(y * log2|x|)`` with the real-power sign and zero rules.

    Neither target's lowering of TileLang's ``pow`` is usable everywhere (the C target has
    none), so the power is built from ``exp2`` and ``log2``: a negative base with an integral
    exponent takes the exponent's parity, with a fractional one gives NaN; ``x ** 0`` is 1.
    """
    T = _T()
    x, y = v
    d = key.compute
    zero, one = _const(0, d), _const(1, d)
    magnitude = m("exp2", y * m("log2", _abs(x, d)))
    integral = m("floor", y) == y
    odd = T.And(integral, m("floor", y * _const(0.5, d)) * _const(2, d) != y)
    signed = T.if_then_else(x < zero, T.if_then_else(odd, -magnitude, magnitude), magnitude)
    real = T.if_then_else(T.And(x < zero, T.Not(integral)), _const(math.nan, d), signed)
    return T.if_then_else(T.Or(y == zero, x == one), one, real)


def _sign(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    zero, one = _const(0, key.compute), _const(1, key.compute)
    s = T.if_then_else(x > zero, one, T.if_then_else(x < zero, -one, zero))
    return T.if_then_else(_is_nan(x), x, s) if _floating(key) else s


def _integral(name: str) -> _Body:
    def body(v: _Values, key: PointwiseKey) -> Any:
        return m(name, v[0]) if _floating(key) else v[0]

    return body


def _log1p(e: Any, dtype: str) -> Any:
    """``log(1 + e)`` accurate for tiny ``e``: ``log(u) * e / (u - 1)`` with ``u = 1 + e``."""
    T = _T()
    u = _const(1, dtype) + e
    return T.if_then_else(u == _const(1, dtype), e, m("log", u) * e / (u - _const(1, dtype)))


def _expm1(x: Any, dtype: str) -> Any:
    """``exp(x) - 1`` accurate near 0: ``(u - 1) * x / log(u)`` with ``u = exp(x)``."""
    T = _T()
    one = _const(1, dtype)
    u = m("exp", x)
    middle = T.if_then_else(u - one == -one, -one, (u - one) * x / m("log", u))
    return T.if_then_else(u == one, x, middle)


def _sigmoid(x: Any, dtype: str) -> Any:
    T = _T()
    one = _const(1, dtype)
    e = m("exp", -_abs(x, dtype))
    return T.if_then_else(x >= _const(0, dtype), one / (one + e), e / (one + e))


def _negative_limit(x: Any, value: Any, dtype: str) -> Any:
    return _T().if_then_else(x == _const(-math.inf, dtype), _const(-0.0, dtype), value)


def _relu(v: _Values, key: PointwiseKey) -> Any:
    # x < 0 ? 0 : x keeps NaN and -0.0 exactly as the reference's maximum(x, 0) does.
    zero = _const(0, key.compute)
    return _T().if_then_else(v[0] < zero, zero, v[0])


def _softplus(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    zero = _const(0, key.compute)
    large = T.if_then_else(x > zero, x, zero) + _log1p(m("exp", -_abs(x, key.compute)), key.compute)
    return T.if_then_else(_is_nan(x), x, large)


# Chebyshev fit of erfc (Numerical Recipes' erfcc): relative error below 1.2e-7 everywhere.
_ERFC: Final = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip
# erf(x) = 2/sqrt(pi) * sum(c_k x^(2k+1)) for |x| < 0.5, where 1 - erfc would cancel.
_ERF_TAYLOR: Final = (1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360)


def _erfc(x: Any, d: str) -> Any:
    T = _T()
    t = _const(1, d) / (_const(1, d) + _const(0.5, d) * _abs(x, d))
    poly = _const(_ERFC[-1], d)
    for c in reversed(_ERFC[:-1]):
        poly = _const(c, d) + t * poly
    tail = t * m("exp", -x * x + poly)
    return T.if_then_else(x >= _const(0, d), tail, _const(2, d) - tail)


def _erf(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    d = key.compute
    x2 = x * x
    series = _const(_ERF_TAYLOR[-1], d)
    for c in reversed(_ERF_TAYLOR[:-1]):
        series = _const(c, d) + x2 * series
    small = _const(2 / math.sqrt(math.pi), d) * x * series
    return T.if_then_else(_abs(x, d) < _const(0.5, d), small, _const(1, d) - _erfc(x, d))


def _gelu(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    d = key.compute
    if key.params == ("none",):
        value = _const(0.5, d) * x * _erfc(-x * _const(math.sqrt(0.5), d), d)
        return T.if_then_else(_is_nan(x), x, _negative_limit(x, value, d))
    inner = _const(math.sqrt(2.0 / math.pi), d) * (x + _const(0.044715, d) * x * x * x)
    value = _const(0.5, d) * x * (_const(1, d) + m("tanh", inner))
    return _negative_limit(x, value, d)


def _silu(v: _Values, key: PointwiseKey) -> Any:
    (x,) = v
    return _negative_limit(x, x * _sigmoid(x, key.compute), key.compute)


def _elu(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    (alpha,) = key.params
    d = key.compute
    return T.if_then_else(x > _const(0, d), x, _const(alpha, d) * _expm1(x, d))


def _leaky_relu(v: _Values, key: PointwiseKey) -> Any:
    T = _T()
    (x,) = v
    (slope,) = key.params
    d = key.compute
    return T.if_then_else(x > _const(0, d), x, x * _const(slope, d))


def _unary(name: str) -> _Body:
    def body(v: _Values, key: PointwiseKey) -> Any:
        return m(name, v[0])

    return body


def _lazy(build: Callable[[Any, _Values, PointwiseKey], Any]) -> _Body:
    return lambda v, key: build(_T(), v, key)


BODIES: Final[dict[str, _Body]] = {
    "add": _add,
    "sub": lambda v, key: v[0] - v[1],
    "mul": _mul,
    "elementwise_mul": _mul,
    "div": lambda v, key: v[0] / v[1],
    "pow": _pow,
    "maximum": _lazy(lambda T, v, key: _extreme(T.max, v[0], v[1], key)),
    "minimum": _lazy(lambda T, v, key: _extreme(T.min, v[0], v[1], key)),
    "rem": _rem,
    "neg": lambda v, key: -v[0],
    "abs": lambda v, key: _abs(v[0], key.compute),
    "sign": _sign,
    "recip": lambda v, key: _const(1, key.compute) / v[0],
    "sqrt": _unary("sqrt"),
    "rsqrt": _lazy(lambda T, v, key: _const(1, key.compute) / m("sqrt", v[0])),
    "exp": _unary("exp"),
    "exp2": _unary("exp2"),
    "log": _unary("log"),
    "log2": _unary("log2"),
    "sin": _unary("sin"),
    "cos": _unary("cos"),
    "floor": _integral("floor"),
    "ceil": _integral("ceil"),
    "round": _integral("round"),
    "relu": _relu,
    "sigmoid": lambda v, key: _sigmoid(v[0], key.compute),
    "tanh": _unary("tanh"),
    "gelu": _gelu,
    "erf": _erf,
    "silu": _silu,
    "softplus": _softplus,
    "elu": _elu,
    "leaky_relu": _leaky_relu,
}
"""Elementwise names -> the expression of one output element."""

#: Names whose kernels are written for floating compute only (integer plans not advertised):
#: integer ``pow`` needs a loop the expression form cannot hold.
FLOAT_ONLY: Final = frozenset({"pow"})


def params(name: str, options: Any) -> tuple[Any, ...]:
    """The option values a name bakes into its kernel (part of the cache key)."""
    if name == "elu":
        return (float(options.alpha),)
    if name == "leaky_relu":
        return (float(options.negative_slope),)
    if name == "gelu":
        return (options.approximate,)
    return ()
