"""Reference kernels: unary elementwise functions and activations.

Floating inputs are evaluated in float64 (complex in complex128) and rounded once to the plan's
output dtype. Activations return their limits at +-inf (``gelu(-inf)`` and ``silu(-inf)`` are
-0.0 rather than ``-inf * 0 = NaN``); NaN in gives NaN out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import Array, Kernel, convert, finish, quiet, widen

__all__ = ["UNARY_KERNELS", "erf", "gelu", "sigmoid"]

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)
_SQRT1_2 = math.sqrt(0.5)
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


def erf(x: Array) -> Array:
    """The error function of a float64 array, exactly as ``math.erf`` gives it per element."""
    return np.asarray(_erf(x), dtype=np.float64)


def _phi(x: Array) -> Array:
    """The standard normal CDF through ``erfc``, accurate in the far negative tail too."""
    return 0.5 * np.asarray(_erfc(-x * _SQRT1_2), dtype=np.float64)


def _negative_limit(x: Array, values: Array) -> Array:
    """``x * (something -> 0)`` at ``x = -inf`` is the limit -0.0, not NaN."""
    return np.where(x == -np.inf, -0.0, values)


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))`` without overflow: ``exp(x) / (1 + exp(x))`` for negative reals."""
    if x.dtype.kind == "c":
        return 1.0 / (1.0 + np.exp(-x))
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def gelu(x: Array, approximate: str) -> Array:
    """``x * Phi(x)``, or the tanh form ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``."""
    if approximate == "tanh":
        inner = _TANH_SCALE * (x + _TANH_CUBIC * x * x * x)
        values = 0.5 * x * (1.0 + np.tanh(inner))
    else:
        values = x * _phi(x)
    return _negative_limit(x, values)


def _silu(x: Array, options: Any) -> Array:
    return _negative_limit(x, x * sigmoid(x))


def _elu(x: Array, options: Any) -> Array:
    return np.where(x > 0, x, options.alpha * np.expm1(x))


def _leaky_relu(x: Array, options: Any) -> Array:
    return np.where(x > 0, x, x * options.negative_slope)


def _integral_identity(function: Callable[[Array], Array]) -> Callable[[Array, Any], Array]:
    """floor / ceil / round: integers are already integral, so they pass through unchanged."""

    def apply(x: Array, options: Any) -> Array:
        return function(x) if x.dtype.kind in "fc" else x

    return apply


def _plain(function: Callable[[Array], Array]) -> Callable[[Array, Any], Array]:
    return lambda x, options: function(x)


def _unary(function: Callable[[Array, Any], Array], name: str) -> Kernel:
    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        (x,) = convert(plan, (a,))
        assert x is not None  # input is required
        with quiet():
            values = function(widen(x), options)
        return finish(values, plan.outputs[0])

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"Elementwise ``{name}``."
    return kernel


def _relu(x: Array) -> Array:
    # Keeps NaN (np.maximum propagates it) and the integer dtype.
    return np.maximum(x, np.zeros((), x.dtype))


_FUNCTIONS: dict[str, Callable[[Array, Any], Array]] = {
    "neg": _plain(np.negative),
    "abs": _plain(np.abs),
    "sign": _plain(np.sign),
    "recip": _plain(lambda x: 1.0 / x),
    "sqrt": _plain(np.sqrt),
    "rsqrt": _plain(lambda x: 1.0 / np.sqrt(x)),
    "exp": _plain(np.exp),
    "exp2": _plain(np.exp2),
    "log": _plain(np.log),
    "log2": _plain(np.log2),
    "sin": _plain(np.sin),
    "cos": _plain(np.cos),
    "erf": _plain(erf),
    "floor": _integral_identity(np.floor),
    "ceil": _integral_identity(np.ceil),
    "round": _integral_identity(np.rint),  # half to even
    "logical_not": _plain(np.logical_not),
    "relu": _plain(_relu),
    "sigmoid": _plain(sigmoid),
    "tanh": _plain(np.tanh),
    "gelu": lambda x, options: gelu(x, options.approximate),
    "silu": _silu,
    "softplus": _plain(lambda x: np.logaddexp(0.0, x)),
    "elu": _elu,
    "leaky_relu": _leaky_relu,
    # Complex plans only (real input is composed in the core): NumPy's C99 functions.
    "tan": _plain(np.tan),
    "sinh": _plain(np.sinh),
    "cosh": _plain(np.cosh),
    "asin": _plain(np.arcsin),
    "acos": _plain(np.arccos),
    "atan": _plain(np.arctan),
    "asinh": _plain(np.arcsinh),
    "acosh": _plain(np.arccosh),
    "atanh": _plain(np.arctanh),
    "expm1": _plain(np.expm1),
    "log1p": _plain(np.log1p),
}

UNARY_KERNELS: dict[str, Kernel] = {name: _unary(f, name) for name, f in _FUNCTIONS.items()}
"""Unary elementwise names -> kernel(plan, options, input)."""
