"""Running a planned ``matmul``: NumPy's shape rules, batch layout class, one tiled launch.

1-D operands gain a unit axis (by a stride-0 axis, no copy) that the result drops again; batch
axes broadcast with stride 0 and are merged where both operands walk them as one. Both
operands are read in place through their strides (a transposed operand is just other
strides). The shape refusals are the central definition's (they run before the carrier is
reached, for Generic too); what is left here is the 32-bit index limit, refused before
anything is allocated.
"""

from __future__ import annotations

import math
from typing import Any

import conveyor as cv
from conveyor.sdk import broadcast_shapes
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["matmul_call"]


def _as_matrix(layout: cv.Layout, left: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) with two or more axes: a 1-D left operand is a row, a right one a column."""
    shape, strides = layout.shape, layout.strides
    if len(shape) == 1:
        if left:
            return (1, *shape), (0, *strides)
        return (*shape, 1), (*strides, 0)
    return shape, strides


def matmul_call(
    engine: Engine, plan: cv.OperationPlan, a: Operand, b: Operand, carrier: str
) -> tuple[Any, cv.Layout]:
    """Run a matmul plan; returns (flat result buffer, result layout)."""
    from conveyor_metal.kernels._tile import INT32_MAX, accumulating_key, merge
    from conveyor_metal.kernels.matmul import THREADS, TILE_M, TILE_N, MatmulClass, build
    from conveyor_metal.kernels.matmul import meta_layout as parts_of

    a_shape, a_strides = _as_matrix(a.layout, left=True)
    b_shape, b_strides = _as_matrix(b.layout, left=False)
    m, k = a_shape[-2:]
    n = b_shape[-1]
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    a_batch = cv.Layout(a_shape[:-2], a_strides[:-2]).broadcast_to(batch).strides
    b_batch = cv.Layout(b_shape[:-2], b_strides[:-2]).broadcast_to(batch).strides
    shape = (*batch, *((m,) if a.layout.ndim > 1 else ()), *((n,) if b.layout.ndim > 1 else ()))
    result = cv.Layout(shape)
    count = math.prod(batch)
    if max(count * m * n, m, n, k, a.layout.span()[1], b.layout.span()[1]) > INT32_MAX:
        msg = f"matmul on {carrier}: more than 2**31 - 1 elements; split the operands"
        raise ValueError(msg)
    buffer = engine.empty(result.size, plan.outputs[0])
    if result.size == 0:
        return buffer, result
    if k == 0:  # an empty contraction: every entry is the sum of nothing
        buffer.zero_()
        return buffer, result
    merged, (merged_a, merged_b) = merge(batch, [a_batch, b_batch])
    layout_class = MatmulClass(len(merged))
    parts = parts_of(layout_class)
    meta = [a.layout.offset, a_strides[-2], a_strides[-1]]
    meta += [b.layout.offset, b_strides[-2], b_strides[-1]]
    meta += [*merged, *merged_a, *merged_b]
    assert len(meta) == parts["size"]
    key = accumulating_key("matmul", plan)
    source = engine.source(key, layout_class, lambda: build(key, layout_class))
    buffers = {"A": a.buffer, "B": b.buffer, "Y": buffer, "meta": engine.meta(meta)}
    scalars = {
        "na": int(a.buffer.numel()),
        "nb": int(b.buffer.numel()),
        "ny": int(buffer.numel()),
        "batch": count,
        "M": m,
        "N": n,
        "K": k,
    }
    grid = (math.ceil(n / TILE_N), math.ceil(m / TILE_M), count)
    engine.run(source, buffers, scalars, Launch(grid, (THREADS, 1, 1)))
    return buffer, result
