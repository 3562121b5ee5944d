"""Reference kernels: reductions, ``cumsum``, ``sort`` and ``topk``.

Sums and products run in the plan's accumulator dtype and round once (integers wrap in their
64-bit accumulator). Maxima, minima and arg-reductions let NaN win; sorting is stable with NaN
ordered as the largest value (last ascending, first descending). Floating inputs are compared
as float64, which is exact for every floating dtype and sidesteps ``bfloat16`` gaps in NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    KernelValueError,
    convert,
    finish,
    lane_axes,
    quiet,
    reduced_axes,
    refuse_empty,
    widen,
)

__all__ = ["REDUCTION_KERNELS", "sort_indices"]


def _input(plan: cv.OperationPlan, a: Any) -> Array:
    (x,) = convert(plan, (a,))
    assert x is not None  # input is required
    return x


def _accumulate(function: Any) -> Kernel:
    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        x = _input(plan, a)
        axes = reduced_axes(options.axis, x.ndim)
        with quiet():
            values = function(x, axis=axes, keepdims=options.keepdims, dtype=x.dtype)
        return finish(values, plan.outputs[0])

    kernel.__name__ = kernel.__qualname__ = f"reduce_{function.__name__}"
    return kernel


def _extremum(function: Any, what: str) -> Kernel:
    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        x = _input(plan, a)
        axes = reduced_axes(options.axis, x.ndim)
        refuse_empty(what, x.shape, axes)
        with quiet():
            values = function(widen(x), axis=axes, keepdims=options.keepdims)
        return finish(values, plan.outputs[0])

    kernel.__name__ = kernel.__qualname__ = f"reduce_{what}"
    return kernel


def _arg(function: Any, what: str) -> Kernel:
    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        x = widen(_input(plan, a))
        axis = options.axis
        if x.ndim == 0:
            reduced_axes(axis, 0)  # validates 0 / -1
            return finish(0, plan.outputs[0])
        if axis is None:
            refuse_empty(what, (x.size,), (0,))
        else:
            axis = lane_axes(axis, x.ndim)
            refuse_empty(what, x.shape, (axis,))
        # np.argmax / np.argmin return the first winning index and let the first NaN win.
        return finish(function(x, axis=axis, keepdims=options.keepdims), plan.outputs[0])

    kernel.__name__ = kernel.__qualname__ = what
    return kernel


def cumsum(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
    """Inclusive running sum along ``axis`` (``None``: of the row-major flattened input)."""
    x = _input(plan, a)
    if options.axis is None:
        x, axis = x.reshape(-1), 0
    elif x.ndim == 0:
        reduced_axes(options.axis, 0)  # validates 0 / -1
        return finish(x, plan.outputs[0])
    else:
        axis = lane_axes(options.axis, x.ndim)
    with quiet():
        return finish(np.cumsum(x, axis=axis, dtype=x.dtype), plan.outputs[0])


def sort_indices(x: Array, axis: int, descending: bool) -> Array:
    """Stable sorting permutation along ``axis``, NaN as the largest value.

    Descending order sorts the reversed lanes ascending and reverses the result: ties then keep
    their original order and NaN comes first.
    """
    keys = widen(x)
    if not descending:
        return np.argsort(keys, axis=axis, kind="stable")
    extent = keys.shape[axis]
    backwards = np.flip(keys, axis=axis)
    order = np.flip(np.argsort(backwards, axis=axis, kind="stable"), axis=axis)
    return (extent - 1) - order  # type: ignore[no-any-return]  # ndarray arithmetic


def _sorted(plan: cv.OperationPlan, x: Array, axis: Any, descending: bool, k: int | None) -> Any:
    if x.ndim == 0:
        reduced_axes(axis, 0)  # validates 0 / -1
        if k is not None and k > 1:
            msg = f"k={k} is larger than the 1 element of a 0-d input; pass k <= 1"
            raise KernelValueError(msg)
        if k == 0:
            values, indices = x.reshape(1)[:0], np.zeros(0, np.int64)
            return finish(values, plan.outputs[0]), finish(indices, plan.outputs[1])
        return finish(x, plan.outputs[0]), finish(0, plan.outputs[1])
    axis = lane_axes(axis, x.ndim)
    if k is not None and k > x.shape[axis]:
        msg = (
            f"k={k} is larger than axis {axis} of extent {x.shape[axis]} (shape {x.shape}); "
            f"pass k <= {x.shape[axis]}"
        )
        raise KernelValueError(msg)
    order = sort_indices(x, axis, descending)
    if k is not None:
        order = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    return finish(values, plan.outputs[0]), finish(order, plan.outputs[1])


def sort(plan: cv.OperationPlan, options: Any, a: Any) -> tuple[Array, Array]:
    """(values, int64 indices) sorted stably along ``axis``; ``stable=False`` is also stable."""
    result: tuple[Array, Array] = _sorted(
        plan, _input(plan, a), options.axis, options.descending, None
    )
    return result


def topk(plan: cv.OperationPlan, options: Any, a: Any) -> tuple[Array, Array]:
    """The ``k`` largest (or smallest) along ``axis``, sorted; ties go to the lower index."""
    result: tuple[Array, Array] = _sorted(
        plan, _input(plan, a), options.axis, options.largest, options.k
    )
    return result


REDUCTION_KERNELS: dict[str, Kernel] = {
    "reduce_sum": _accumulate(np.sum),
    "reduce_prod": _accumulate(np.prod),
    "reduce_max": _extremum(np.max, "max"),
    "reduce_min": _extremum(np.min, "min"),
    "argmax": _arg(np.argmax, "argmax"),
    "argmin": _arg(np.argmin, "argmin"),
    "cumsum": cumsum,
    "sort": sort,
    "topk": topk,
}
"""Reduction, scan and sorting names -> kernel(plan, options, input)."""
