"""CPU kernels: activation formulas as in-place ufunc sequences over cache-sized blocks.

An activation such as ``sigmoid`` is several NumPy passes; chaining them on whole arrays would
stream every temporary through memory. Here each formula runs block by block (``BLOCK``
elements, a few of them fit in L2) inside the output buffer plus a small per-call scratch, so
only the input read and the output write touch memory.

float32 has no NumPy ``erf``: ``erf`` and exact ``gelu`` use approximations fitted for this
module (weighted least squares against ``math.erf`` / ``math.erfc``, evaluated by Horner's rule):

- ``erf(x) = tanh(x * H(x**2))`` for ``|x| <= 4`` (``H`` of degree 7, ``erf`` is 1.0 beyond):
  NumPy's float32 ``tanh`` is a SIMD loop, and the result stays within 2 ulps (measured on
  3.2 million points); ``erfc`` in this form loses its relative accuracy, so ``gelu`` keeps:
- ``erfc(z) = t * exp(-z**2 + Q(t))`` with ``t = 1 / (1 + z/2)`` for ``z >= 0`` (degree 9 on
  ``z <= 11``, absolute error of ``Q`` 5e-8). In float32 the rounding of ``-z**2`` grows with
  ``z``: measured against ``math.erfc``, ``gelu`` is within 4 ulps on ``[0, 6]``, 6 on
  ``[-2, 0]``, 20 on ``[-5, -2]`` (where ``|gelu| >= 1.4e-6``) and about 100 further out.

``gelu(x) = x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt 2) / 2`` needs no branch, and the
tanh form is evaluated as ``x / (1 + exp(-2u))``, equal to ``x/2 (1 + tanh(u))`` without its
cancellation for negative ``x``.
float64 keeps the reference's exact ``math.erf`` (see ``cpu_elementwise``).

No formula uses a masked copy (``np.copyto(..., where=)``): on random signs it mispredicts and
cost 9.5 ns an element on the reference machine, against 0.3-0.5 ns for an arithmetic pass.
Branches become arithmetic instead: ``max(x, 0) + f(min(x, 0))`` where ``f(0) = 0`` (``elu``,
``softplus``, ``leaky_relu``).
``softplus`` is ``max(x, 0) + log1p(exp(-|x|))`` with ``exp`` in float64 (NumPy's float32
``logaddexp`` took 82 ns an element), ``elu`` uses NumPy's ``expm1`` on ``min(x, 0)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

__all__ = ["ACTIVATIONS", "BLOCK", "step"]

Array = np.ndarray[Any, Any]
Step = Callable[[Array, Array], None]

# Elements per block: every formula's buffers (input, output, up to four scratch) stay in one
# core's 1 MiB L2. Measured on 16M float32 gelu: 16K blocks 123 ms, 32K 87.5 ms, 64K 86.1 ms
# (each ufunc call costs about a microsecond, so small blocks pay it many times).
BLOCK = 32768

ACTIVATIONS: Final = ("sigmoid", "silu", "elu", "leaky_relu", "gelu", "erf", "softplus")

# H(s) for erf(x) = tanh(x * H(x**2)) on |x| <= 4, i.e. atanh(erf(x)) / x: degree 7,
# fitted (iteratively reweighted least squares) for the relative error of erf itself.
_ERF_TANH: Final = (
    1.1283792471922438,
    0.10276986398069123,
    -0.00019528758692533054,
    -0.0006148390217442442,
    8.459703836347493e-05,
    -4.794729014745794e-06,
    2.7591386906262887e-08,
    5.420919988695022e-09,
)
_ERF_CLAMP: Final = 4.0  # erf(4) rounds to 1.0 in float32, and so does tanh(4 * H(16))
# Q(t) for erfc(z) = t exp(-z^2 + Q(t)); the constant term of the gelu variant adds log(1/2).
_ERFC: Final = (
    -1.2654623461403613,
    0.9989176306623933,
    0.3842519311457828,
    0.04574991766496559,
    -0.030773828974830802,
    -0.021222423612393907,
    -0.7663085986887792,
    1.2084781670472406,
    -0.7024844137678409,
    0.14885401460030093,
)
_SQRT1_2: Final = math.sqrt(0.5)
_LOG_HALF: Final = math.log(0.5)
_TANH_SCALE: Final = math.sqrt(2.0 / math.pi)
_TANH_CUBIC: Final = 0.044715
# Clamp for formulas whose limit at -inf is -inf * 0: past it the result is -0.0 anyway.
_FLOOR: Final = -1000.0


def _horner(out: Array, t: Array, coefficients: tuple[float, ...]) -> None:
    """``out = sum(c[i] * t**i)`` in place (``out`` and ``t`` are distinct buffers)."""
    np.multiply(t, coefficients[-1], out=out)
    for c in coefficients[-2:0:-1]:
        np.add(out, c, out=out)
        np.multiply(out, t, out=out)
    np.add(out, coefficients[0], out=out)


def _half_erfc(out: Array, z: Array, t: Array, q: Array, scale_log: float) -> None:
    """``out = exp(scale_log) * erfc(z)`` for ``z >= 0``; ``t``, ``q`` are scratch."""
    np.multiply(z, 0.5, out=t)
    np.add(t, 1.0, out=t)
    np.reciprocal(t, out=t)
    _horner(q, t, (_ERFC[0] + scale_log, *_ERFC[1:]))
    np.multiply(z, z, out=out)
    np.subtract(q, out, out=out)
    np.exp(out, out=out)
    np.multiply(out, t, out=out)


def _sigmoid(out: Array, x: Array, scratch: list[Array]) -> None:
    np.negative(x, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.reciprocal(out, out=out)


def _silu(out: Array, x: Array, scratch: list[Array]) -> None:
    s = scratch[0]
    np.maximum(x, _FLOOR, out=s)
    np.negative(s, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(s, out, out=out)


def _gelu(out: Array, x: Array, scratch: list[Array]) -> None:
    a, t, q = scratch[:3]
    np.absolute(x, out=a)
    np.minimum(a, -_FLOOR, out=a)
    np.multiply(a, _SQRT1_2, out=out)
    _half_erfc(q, out, t, scratch[3], _LOG_HALF)  # q = erfc(|x| / sqrt 2) / 2
    np.multiply(q, a, out=q)
    np.maximum(x, 0.0, out=out)
    np.subtract(out, q, out=out)


def _gelu_tanh(out: Array, x: Array, scratch: list[Array]) -> None:
    # (x / 2)(1 + tanh(u)) = x / (1 + exp(-2u)): the same value without the cancellation of
    # 1 + tanh(u) for negative x, with u = k (x + c x**3).
    s = scratch[0]
    np.maximum(x, _FLOOR, out=s)
    np.multiply(s, s, out=out)
    np.multiply(out, _TANH_CUBIC, out=out)
    np.add(out, 1.0, out=out)
    np.multiply(out, s, out=out)
    np.multiply(out, -2.0 * _TANH_SCALE, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(s, out, out=out)


def _erf(out: Array, x: Array, scratch: list[Array]) -> None:
    # erf(x) = tanh(x * H(x**2)) with |x| clamped to 4, where erf is 1 in float32 already:
    # NumPy's float32 tanh is a SIMD loop, so this is 19 passes against 37 for the erfc form.
    s, t = scratch[:2]
    np.minimum(x, _ERF_CLAMP, out=s)
    np.maximum(s, -_ERF_CLAMP, out=s)
    np.multiply(s, s, out=t)
    _horner(out, t, _ERF_TANH)
    np.multiply(out, s, out=out)
    np.tanh(out, out=out)


def _elu(alpha: float) -> Callable[[Array, Array, list[Array]], None]:
    def apply(out: Array, x: Array, scratch: list[Array]) -> None:
        # max(x, 0) + alpha * expm1(min(x, 0)): one term is 0 (exactly) on either side.
        s = scratch[0]
        np.minimum(x, 0.0, out=out)
        np.expm1(out, out=out)
        np.multiply(out, alpha, out=out)
        np.maximum(x, 0.0, out=s)
        np.add(out, s, out=out)

    return apply


def _softplus(out: Array, x: Array, scratch: list[Array]) -> None:
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): exp never overflows, and log1p keeps
    # the relative accuracy of the far negative tail (where softplus(x) ~ exp(x)). exp runs in
    # the float64 scratch (see _WIDE_SCRATCH): all in float32, softplus reached 2.6 ulps on a
    # dense grid, 1.7 with a float64 exp (a float64 log1p is a scalar loop, 16x slower).
    w, s = scratch[:2]
    np.absolute(x, out=w)
    np.negative(w, out=w)
    np.exp(w, out=w)
    np.copyto(out, w, casting="same_kind")
    np.log1p(out, out=out)
    np.maximum(x, 0.0, out=s)
    np.add(out, s, out=out)


def _leaky_relu(slope: float) -> Callable[[Array, Array, list[Array]], None]:
    def apply(out: Array, x: Array, scratch: list[Array]) -> None:
        np.multiply(x, slope, out=out)
        if 0.0 < slope <= 1.0:
            # max(x, slope * x) is x for x > 0 and slope * x otherwise, NaN included.
            np.maximum(out, x, out=out)
        else:
            # max(x, 0) + slope * min(x, 0): one term is 0 (exactly) on either side.
            s = scratch[0]
            np.minimum(x, 0.0, out=out)
            np.multiply(out, slope, out=out)
            np.maximum(x, 0.0, out=s)
            np.add(out, s, out=out)

    return apply


_SCRATCH: Final = {
    "sigmoid": 0,
    "silu": 1,
    "elu": 1,
    "leaky_relu": 1,
    "gelu": 4,
    "erf": 2,
    "softplus": 2,
}


# Names whose first scratch buffer is float64 whatever the output dtype.
_WIDE_SCRATCH: Final = frozenset({"softplus"})


def step(name: str, options: Any, dtype: np.dtype[Any]) -> Step:
    """``step(out, x)``: the activation of the 1-D contiguous ``x`` into ``out``, blockwise."""
    formula: Callable[[Array, Array, list[Array]], None]
    if name == "sigmoid":
        formula = _sigmoid
    elif name == "silu":
        formula = _silu
    elif name == "elu":
        formula = _elu(1.0 if options is None else options.alpha)
    elif name == "leaky_relu":
        formula = _leaky_relu(0.01 if options is None else options.negative_slope)
    elif name == "erf":
        formula = _erf
    elif name == "softplus":
        formula = _softplus
    elif options is not None and options.approximate == "tanh":
        formula = _gelu_tanh
    else:
        formula = _gelu
    count = _SCRATCH[name]
    wide = name in _WIDE_SCRATCH

    def run(out: Array, x: Array) -> None:
        n = out.shape[0]
        width = min(n, BLOCK)
        scratch = [np.empty(width, dtype) for _ in range(count)]
        if wide:
            scratch[0] = np.empty(width, np.float64)
        if n <= BLOCK:
            formula(out, x, [s[:n] for s in scratch])
            return
        for low in range(0, n, BLOCK):
            high = min(low + BLOCK, n)
            part = scratch if high - low == width else [s[: high - low] for s in scratch]
            formula(out[low:high], x[low:high], part)

    return run
