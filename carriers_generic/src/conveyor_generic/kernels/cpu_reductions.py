"""CPU kernels: sums, products, extrema, arg-extrema and ``cumsum``.

Each reduction is one NumPy reduction writing into a fresh aligned output (``out=``) in the
plan's accumulator dtype, rounded once to the output dtype when they differ. Large reductions
that keep at least one axis split the output along the longest kept axis across the cores: every
output element is still reduced by one thread in NumPy's order, so the split never changes a
value. Sums over float data may differ from Generic in the last bits where NumPy's pairwise
blocking differs (Generic converts to the accumulator first; CPU converts on the fly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels._common import (
    is_bfloat16,
    lane_axes,
    reduced_axes,
    refuse_empty,
)

__all__ = ["REDUCTION_KERNELS"]

Array = rt.Array


def _reduced_shape(
    shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool
) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if a in axes else e for a, e in enumerate(shape))
    return tuple(e for a, e in enumerate(shape) if a not in axes)


def _split_axis(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, int]:
    """(input axis, output axis) of the longest kept axis, or (-1, -1) when none can split."""
    best, best_out, extent = -1, -1, 1
    out_axis = 0
    for a, e in enumerate(shape):
        if a in axes:
            out_axis += keepdims
            continue
        if e > extent:
            best, best_out, extent = a, out_axis, e
        out_axis += 1
    return best, best_out


def reduce_into(
    reduce: Callable[..., Any], x: Array, axes: Any, keepdims: bool, out: Array, **kwargs: Any
) -> None:
    """``reduce(x, axis=axes, keepdims=keepdims, out=out)``, split across cores when large."""
    tuple_axes = tuple(range(x.ndim)) if axes is None else axes
    if x.size >= rt.PARALLEL_MIN and out.size > 1 and rt.THREADS > 1:
        axis, out_axis = _split_axis(x.shape, tuple_axes, keepdims)
        if axis >= 0:
            tasks = []
            for low, high in _ranges(x.shape[axis], rt.THREADS):
                key = (slice(None),) * axis + (slice(low, high),)
                out_key = (slice(None),) * out_axis + (slice(low, high),)
                tasks.append(_reduction_task(reduce, x[key], axes, keepdims, out[out_key], kwargs))
            rt.run_parallel(tasks)
            return
    reduce(x, axis=axes, keepdims=keepdims, out=out, **kwargs)


def _reduction_task(
    reduce: Callable[..., Any],
    x: Array,
    axes: Any,
    keepdims: bool,
    out: Array,
    kwargs: dict[str, Any],
) -> Callable[[], object]:
    return lambda: reduce(x, axis=axes, keepdims=keepdims, out=out, **kwargs)


def _ranges(extent: int, parts: int) -> list[tuple[int, int]]:
    step = -(-extent // parts)
    return [(low, min(low + step, extent)) for low in range(0, extent, step)]


_PREPARED_MAX = 4096


def _accumulate(reduce: Callable[..., Any], name: str) -> Callable[..., Array]:
    # (id(plan), input shape, axis, keepdims) -> (plan, axes, result shape, result size, output
    # dtype, accumulator dtype, integer accumulator): derived once per call shape (a tiny sum
    # otherwise spends most of its time here). Keyed by plan identity like the elementwise
    # kernels; the entry keeps its plan alive, so the id stays its own.
    prepared: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def kernel(plan: cv.OperationPlan, options: Any, x: Array) -> Array:
        axis = None if options is None else options.axis
        keepdims = False if options is None else options.keepdims
        key = (id(plan), x.shape, axis, keepdims)
        entry = prepared.get(key)
        if entry is None or entry[0] is not plan:
            axes = reduced_axes(axis, x.ndim)
            shape = _reduced_shape(x.shape, axes, keepdims)
            acc = plan.operands[0].convert_to
            assert acc is not None  # the input always converts to the accumulator
            if len(prepared) >= _PREPARED_MAX:
                prepared.clear()
            entry = prepared[key] = (
                plan,
                axes,
                shape,
                math.prod(shape),
                plan.outputs[0].numpy,
                acc.numpy,
                acc.is_integer,
            )
        _, axes, shape, size, out_dtype, acc_dtype, integer = entry
        out = rt.empty(shape, out_dtype, size)
        target = out if acc_dtype == out_dtype else np.empty(shape, acc_dtype)
        source = x if x.dtype == acc_dtype or integer else x.astype(acc_dtype)
        if x.size < rt.PARALLEL_MIN:  # one core: the ufunc directly (reduce_into is a call)
            reduce(source, axis=axes, keepdims=keepdims, out=target, dtype=acc_dtype)
        else:
            reduce_into(reduce, source, axes, keepdims, target, dtype=acc_dtype)
        if target is not out:
            np.copyto(out, target, casting="unsafe")
        return out

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _native(x: Array) -> Array:
    """bfloat16 compares through float32 (exact), every other dtype as stored."""
    return x.astype(np.float32) if is_bfloat16(x.dtype) else x


def _extremum(reduce: Callable[..., Any], what: str) -> Callable[..., Array]:
    def kernel(plan: cv.OperationPlan, options: Any, x: Array) -> Array:
        axis = None if options is None else options.axis
        keepdims = False if options is None else options.keepdims
        axes = reduced_axes(axis, x.ndim)
        refuse_empty(what, x.shape, axes)
        shape = _reduced_shape(x.shape, axes, keepdims)
        out_dtype = plan.outputs[0].numpy
        out = rt.empty(shape, out_dtype, math.prod(shape))
        source = _native(x.astype(out_dtype, copy=False))
        target = out if source.dtype == out_dtype else np.empty(shape, source.dtype)
        reduce_into(reduce, source, axes, keepdims, target)
        if target is not out:
            np.copyto(out, target, casting="unsafe")
        return out

    kernel.__name__ = kernel.__qualname__ = f"reduce_{what}"
    return kernel


def _arg(reduce: Callable[..., Any], what: str) -> Callable[..., Array]:
    def kernel(plan: cv.OperationPlan, options: Any, x: Array) -> Array:
        axis = None if options is None else options.axis
        keepdims = False if options is None else options.keepdims
        if x.ndim == 0:
            reduced_axes(axis, 0)  # validates 0 / -1
            out = rt.empty((), np.dtype(np.int64), 1)
            out[()] = 0
            return out
        if axis is None:
            refuse_empty(what, (x.size,), (0,))
            shape: tuple[int, ...] = (1,) * x.ndim if keepdims else ()
        else:
            axis = lane_axes(axis, x.ndim)
            refuse_empty(what, x.shape, (axis,))
            shape = _reduced_shape(x.shape, (axis,), keepdims)
        out = rt.empty(shape, np.dtype(np.int64), math.prod(shape))
        # NumPy returns the first winning index and lets the first NaN win, as the reference.
        reduce(_native(x), axis=axis, keepdims=keepdims, out=out)
        return out

    kernel.__name__ = kernel.__qualname__ = what
    return kernel


def cumsum(plan: cv.OperationPlan, options: Any, x: Array) -> Array:
    """Inclusive running sum along ``axis`` (``None``: the row-major flattened input)."""
    axis = None if options is None else options.axis
    out_dtype = plan.outputs[0].numpy
    acc = plan.operands[0].convert_to
    assert acc is not None  # the input always converts to the accumulator
    if axis is None:
        x, axis = x.reshape(-1), 0
    elif x.ndim == 0:
        reduced_axes(axis, 0)  # validates 0 / -1
        out = rt.empty((), out_dtype, 1)
        np.copyto(out, x.astype(acc.numpy), casting="unsafe")
        return out
    else:
        axis = lane_axes(axis, x.ndim)
    out = rt.empty(x.shape, out_dtype, x.size)
    target = out if acc.numpy == out_dtype else np.empty(x.shape, acc.numpy)
    np.cumsum(x, axis=axis, dtype=acc.numpy, out=target)
    if target is not out:
        np.copyto(out, target, casting="unsafe")
    return out


REDUCTION_KERNELS: dict[str, Callable[..., Array]] = {
    # The ufuncs' own reduce methods: np.sum and friends are Python wrappers around them.
    "reduce_sum": _accumulate(np.add.reduce, "reduce_sum"),
    "reduce_prod": _accumulate(np.multiply.reduce, "reduce_prod"),
    "reduce_max": _extremum(np.maximum.reduce, "max"),
    "reduce_min": _extremum(np.minimum.reduce, "min"),
    "argmax": _arg(np.argmax, "argmax"),
    "argmin": _arg(np.argmin, "argmin"),
    "cumsum": cumsum,
}
"""Reduction and scan names -> kernel(plan, options, input) returning a fresh aligned array."""
