"""Reference kernels: binary arithmetic, comparisons, ``select`` and ``clamp``.

Operands broadcast like NumPy. Integer arithmetic wraps modulo ``2**bits``; floating and
complex arithmetic is evaluated in float64 / complex128 and rounded once (see ``_common``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    check_broadcast,
    convert,
    finish,
    quiet,
    widen,
)

__all__ = ["BINARY_KERNELS", "clamp", "int_pow", "select"]


def _shape(value: Array | None) -> tuple[int, ...]:
    return () if value is None else value.shape


def int_pow(base: Array, exponent: Array) -> Array:
    """Integer power that wraps; a negative exponent gives the truncated real power.

    ``1 ** -n`` is 1, ``(-1) ** -n`` is +-1 by parity, anything else (0 included) gives 0:
    NumPy refuses negative integer exponents, and this is the value C-style truncation gives.
    """
    negative = exponent < 0
    if not negative.any():
        return np.power(base, exponent)
    safe = np.where(negative, np.zeros_like(exponent), exponent)
    powered = np.power(base, safe)
    odd = (exponent % 2) != 0
    truncated = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, truncated.astype(powered.dtype), powered)


_Function = Callable[[Array, Array], Array]


def _binary(floating: _Function, integer: _Function | None = None) -> Kernel:
    """A kernel for a NumPy binary function: ``integer`` runs on bool and integer compute."""

    def kernel(plan: cv.OperationPlan, options: Any, a: Any, b: Any) -> Array:
        x, y = convert(plan, (a, b))
        assert x is not None and y is not None  # neither role is optional
        check_broadcast(plan.operation, x.shape, y.shape)
        compute = plan.compute
        with quiet():
            if compute.is_floating or compute.is_complex:
                values = floating(widen(x), widen(y))
            else:
                values = (integer or floating)(x, y)
        return finish(values, plan.outputs[0])

    kernel.__name__ = kernel.__qualname__ = floating.__name__
    kernel.__doc__ = f"Elementwise ``{floating.__name__}`` of two broadcast operands."
    return kernel


def _add(x: Array, y: Array) -> Array:
    # bool + bool is logical or (as PyTorch); np.add on bool arrays does exactly that.
    return np.add(x, y)


BINARY_KERNELS: dict[str, Kernel] = {
    "add": _binary(_add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "elementwise_mul": _binary(np.multiply),
    "div": _binary(np.true_divide),
    "pow": _binary(np.power, int_pow),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "rem": _binary(np.remainder),
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
}
"""Binary elementwise names -> kernel(plan, options, input, other)."""


def select(plan: cv.OperationPlan, options: Any, condition: Any, a: Any, b: Any) -> Array:
    """``condition ? a : b`` elementwise; only the chosen value of each element is read."""
    cond, x, y = convert(plan, (condition, a, b))
    assert cond is not None and x is not None and y is not None  # none is optional
    check_broadcast(plan.operation, cond.shape, x.shape, y.shape)
    return finish(np.where(cond, x, y), plan.outputs[0])


def clamp(plan: cv.OperationPlan, options: Any, x: Any, lo: Any, hi: Any) -> Array:
    """``minimum(maximum(x, lo), hi)`` with absent bounds skipped; NaN anywhere gives NaN.

    When ``lo > hi`` the result is ``hi``, as NumPy's ``clip`` and PyTorch's ``clamp`` give.
    """
    value, low, high = convert(plan, (x, lo, hi))
    assert value is not None  # input is required
    check_broadcast(plan.operation, value.shape, _shape(low), _shape(high))
    with quiet():
        if low is not None:
            value = np.maximum(value, low)
        if high is not None:
            value = np.minimum(value, high)
    return finish(value, plan.outputs[0])
