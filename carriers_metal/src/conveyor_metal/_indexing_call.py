"""Running a planned ``gather``, ``scatter`` or ``scatter_add``: checks, meta, one launch.

The index is checked by the reference's own rules (``conveyor_generic``'s ``check_index``:
the same exception types and messages) on a host copy of its entries, before anything is
allocated or launched. Input, index and ``src`` are then read in place through their strides
(``kernels.indexing`` describes the meta each kernel reads).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["INDEXING", "indexing_call", "indexing_key"]

INDEXING = frozenset({"gather", "scatter", "scatter_add"})


def indexing_key(plan: cv.OperationPlan) -> Any:
    """The kernel key of an indexing plan: name, value dtype, stored index dtype."""
    from conveyor_metal.kernels._tile import tl_dtype
    from conveyor_metal.kernels.indexing import IndexKey

    index = plan.operands[1].dtype
    assert index is not None  # the index is a tensor
    return IndexKey("indexing", plan.operation, tl_dtype(plan.compute), tl_dtype(index))


def _host(value: Operand, dtype: cv.DType) -> np.ndarray[Any, Any]:
    """The entries an operand views, copied to the host in one bulk transfer."""
    layout = value.layout
    if layout.size == 0:
        return np.empty(layout.shape, dtype.numpy)
    view = value.buffer.as_strided(layout.shape, layout.strides, layout.offset)
    return np.asarray(view.cpu().numpy())


def _check(
    plan: cv.OperationPlan, options: Any, operands: list[Any], carrier: str
) -> tuple[int, Operand | None]:
    """The normalized axis, after the reference's checks (raised with ``carrier``'s prefix)."""
    from conveyor_generic import KernelIndexError, KernelValueError, check_index

    name = plan.operation
    x, index = operands[0], operands[1]
    src = operands[2] if len(operands) == 3 else None
    dtype = plan.operands[1].dtype
    assert dtype is not None  # the index is a tensor
    src_shape = None if src is None else src.layout.shape
    try:
        axis = check_index(_host(index, dtype), x.layout.shape, options.axis, src_shape)
    except KernelIndexError as exc:
        raise exc.public(f"{name} on {carrier}: {exc}") from None
    except KernelValueError as exc:
        raise ValueError(f"{name} on {carrier}: {exc}") from None
    return axis, src


def _too_large(name: str, carrier: str, *layouts: cv.Layout) -> None:
    from conveyor_metal.kernels._tile import INT32_MAX

    if any(max(layout.size, layout.span()[1]) > INT32_MAX for layout in layouts):
        msg = f"{name} on {carrier}: more than 2**31 - 1 elements; split the tensor"
        raise ValueError(msg)


def indexing_call(
    engine: Engine, plan: cv.OperationPlan, options: Any, operands: list[Any], carrier: str
) -> tuple[Any, cv.Layout]:
    """Run an indexing plan; returns (flat result buffer, result layout).

    Raises:
        IndexError: the axis, or an index entry, is out of range (NumPy's ``AxisError`` for
            the axis, as the reference).
        ValueError: the index does not fit the input or ``src`` shape, or an operand exceeds
            the 2**31 - 1 elements a kernel indexes.
    """
    axis, src = _check(plan, options, operands, carrier)
    x, index = operands[0], operands[1]
    layouts = [o.layout for o in operands]
    _too_large(plan.operation, carrier, *layouts)
    if plan.operation == "gather":
        return _gather(engine, plan, x, index, axis)
    assert src is not None  # scatter and scatter_add take src
    return _scatter(engine, plan, x, index, src, axis)


def _gather(
    engine: Engine, plan: cv.OperationPlan, x: Operand, index: Operand, axis: int
) -> tuple[Any, cv.Layout]:
    from conveyor_metal.kernels._tile import BLOCK, merge
    from conveyor_metal.kernels.indexing import IndexClass, build, gather_meta

    shape = index.layout.shape
    result = engine.empty(math.prod(shape), plan.outputs[0])
    if result.numel() == 0:
        return result, cv.Layout(shape)
    steps = tuple(0 if d == axis else s for d, s in enumerate(x.layout.strides))
    merged, (index_strides, input_strides) = merge(shape, [index.layout.strides, steps])
    rank = len(merged)
    parts = gather_meta(rank)
    meta = [*merged, index.layout.offset, *index_strides, x.layout.offset, *input_strides]
    meta.append(x.layout.strides[axis] if x.layout.shape else 0)
    assert len(meta) == parts["size"]  # invariant: the layout gather_meta describes
    key = indexing_key(plan)
    layout_class = IndexClass(rank)
    source = engine.source(key, layout_class, lambda: build(key, layout_class))
    buffers = {"X": x.buffer, "Index": index.buffer, "Y": result, "meta": engine.meta(meta)}
    size = int(result.numel())
    scalars = {"n": size, "nx": int(x.buffer.numel()), "ni": int(index.buffer.numel())}
    engine.run(source, buffers, scalars, Launch(((size + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1)))
    return result, cv.Layout(shape)


def _scatter(
    engine: Engine, plan: cv.OperationPlan, x: Operand, index: Operand, src: Operand, axis: int
) -> tuple[Any, cv.Layout]:
    from conveyor_metal.kernels._tile import BLOCK
    from conveyor_metal.kernels.indexing import IndexClass, build, scatter_meta

    shape = x.layout.shape
    size = math.prod(shape)
    result = engine.empty(size, plan.outputs[0])
    if size == 0:
        return result, cv.Layout(shape)
    rank = len(shape)
    lanes = index.layout.shape
    bound = [shape[d] if d == axis else lanes[d] for d in range(rank)]

    def walk(operand: Operand, zero: bool = True) -> list[int]:
        """Offset and strides; index and src step along the axis only through the lane."""
        steps = [0 if zero and d == axis else s for d, s in enumerate(operand.layout.strides)]
        return [operand.layout.offset, *steps]

    index_buffer, src_buffer = index.buffer, src.buffer
    if index.layout.size == 0:
        # No entry is read (the lane count is 0), but Metal refuses an empty buffer.
        index_buffer = engine.empty(1, plan.operands[1].dtype)  # type: ignore[arg-type]  # a tensor
        src_buffer = engine.empty(1, plan.compute)
    inner = math.prod(shape[axis + 1 :])
    extent = shape[axis] if rank else 1
    lane = lanes[axis] if rank else 1
    steps = [index.layout.strides[axis], src.layout.strides[axis]] if rank else [0, 0]
    meta = [
        *shape,
        *bound,
        *walk(x, zero=False),
        *walk(index),
        *walk(src),
        inner,
        extent,
        lane,
        *steps,
    ]
    assert len(meta) == scatter_meta(rank)["size"]  # invariant: the layout scatter_meta describes
    key = indexing_key(plan)
    layout_class = IndexClass(rank)
    source = engine.source(key, layout_class, lambda: build(key, layout_class))
    buffers = {"X": x.buffer, "Index": index_buffer, "S": src_buffer, "Y": result}
    buffers["meta"] = engine.meta(meta)
    scalars = {"n": size, "nx": int(x.buffer.numel())}
    scalars |= {"ni": int(index_buffer.numel()), "ns": int(src_buffer.numel())}
    engine.run(source, buffers, scalars, Launch(((size + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1)))
    return result, cv.Layout(shape)
