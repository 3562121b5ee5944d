"""Reference kernels: ``gather``, ``scatter`` and ``scatter_add`` along one axis.

Index tensors follow ``torch.gather``: the index has the input's number of axes, may be smaller
than the input on every other axis (and than ``src`` on every axis), and each entry must lie in
``[0, extent)`` of the indexed axis; negative entries are refused, not counted from the end.
Every check runs before any result is computed. ``scatter`` is functional (it returns a new
array) and, for duplicate targets, the last write in the index's row-major order wins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    KernelIndexError,
    KernelValueError,
    convert,
    finish,
    lane_axes,
    quiet,
)

__all__ = ["INDEXING_KERNELS", "check_index", "flat_targets"]


def check_index(
    index: Array, shape: tuple[int, ...], axis: int, src: tuple[int, ...] | None = None
) -> int:
    """Validate an index tensor against the indexed shape (and ``src``); return the axis.

    Raises:
        KernelValueError: the index has another number of axes, or is larger than the input
            on a non-indexed axis or than ``src`` on any axis.
        KernelIndexError: the axis is out of range, or an entry lies outside ``[0, extent)``.
    """
    if index.ndim != len(shape) or (src is not None and len(src) != len(shape)):
        also = f" and src has {len(src)}" if src is not None else ""
        msg = (
            f"index has {index.ndim} axes but input has {len(shape)}{also}; they must have the "
            f"same number of axes"
        )
        raise KernelValueError(msg)
    axis = lane_axes(axis, len(shape))
    for d, extent in enumerate(index.shape):
        if d != axis and extent > shape[d]:
            msg = (
                f"index shape {index.shape} exceeds input shape {shape} on axis {d}; only the "
                f"indexed axis {axis} may be larger"
            )
            raise KernelValueError(msg)
        if src is not None and extent > src[d]:
            msg = f"index shape {index.shape} exceeds src shape {src} on axis {d}"
            raise KernelValueError(msg)
    if index.size:
        extent = shape[axis] if shape else 1
        low, high = index.min(), index.max()
        if low < 0 or high >= extent:
            bad = low if low < 0 else high
            msg = (
                f"index {int(bad)} is out of range for axis {axis} with extent {extent}; "
                f"indices must lie in [0, {extent}) (negative indices are not counted from the end)"
            )
            raise KernelIndexError(msg)
    return axis


def flat_targets(index: Array, shape: tuple[int, ...], axis: int) -> Array:
    """Row-major flat positions in ``shape`` that each index entry addresses (index order)."""
    if not shape:
        return np.zeros(index.size, np.intp)
    coords: list[Array] = list(np.indices(index.shape, sparse=True))
    coords[axis] = index.astype(np.intp)
    full = np.broadcast_arrays(*coords)
    return np.ravel_multi_index(tuple(full), shape).reshape(-1)


def _leading(values: Array, shape: tuple[int, ...]) -> Array:
    """The leading ``shape`` block of ``values`` (the part of ``src`` an index addresses)."""
    return values[tuple(slice(0, e) for e in shape)]


def gather(plan: cv.OperationPlan, options: Any, a: Any, i: Any) -> Array:
    """``out[p] = input[p with p[axis] replaced by index[p]]``; ``out`` has the index's shape."""
    axis = check_index(i, a.shape, options.axis)
    x, index = convert(plan, (a, i))
    assert x is not None and index is not None  # neither role is optional
    if x.ndim == 0:
        return finish(x, plan.outputs[0])
    block = x[tuple(slice(None) if d == axis else slice(0, e) for d, e in enumerate(index.shape))]
    return finish(np.take_along_axis(block, index, axis=axis), plan.outputs[0])


def _scatter_prepare(
    plan: cv.OperationPlan, options: Any, a: Any, i: Any, s: Any
) -> tuple[Array, Array, Array]:
    axis = check_index(i, a.shape, options.axis, s.shape)
    x, index, src = convert(plan, (a, i, s))
    assert x is not None and index is not None and src is not None  # none is optional
    out = np.array(x, order="C")  # a fresh, contiguous copy: scatter is functional
    targets = flat_targets(index, x.shape, axis)
    values = _leading(src, index.shape).reshape(-1)
    return out, targets, values


def scatter(plan: cv.OperationPlan, options: Any, a: Any, i: Any, s: Any) -> Array:
    """A copy of ``input`` with ``src`` written at the indexed positions (last write wins)."""
    out, targets, values = _scatter_prepare(plan, options, a, i, s)
    if targets.size:
        # For each distinct target keep the last writer in index order.
        _, first_from_end = np.unique(targets[::-1], return_index=True)
        last = targets.size - 1 - first_from_end
        out.reshape(-1)[targets[last]] = values[last]
    return finish(out, plan.outputs[0])


def scatter_add(plan: cv.OperationPlan, options: Any, a: Any, i: Any, s: Any) -> Array:
    """A copy of ``input`` with ``src`` added at the indexed positions, in index order."""
    out, targets, values = _scatter_prepare(plan, options, a, i, s)
    with quiet():
        np.add.at(out.reshape(-1), targets, values)
    return finish(out, plan.outputs[0])


INDEXING_KERNELS: dict[str, Kernel] = {
    "gather": gather,
    "scatter": scatter,
    "scatter_add": scatter_add,
}
"""Indexing names -> kernel(plan, options, input, index[, src])."""
