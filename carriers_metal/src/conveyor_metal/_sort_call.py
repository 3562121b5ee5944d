"""Running a planned ``sort`` or ``topk``: the sorted axis, the launch sequence, the results.

The input is read in place: its kept axes are merged where the strides allow and the sorted
axis is walked through its own stride. A row of ``n`` elements is padded to the power of two
``width``; rows of at most one tile are sorted by one ``local`` launch, longer rows by local
tile sorts, then per bitonic stage the global ``step`` launches and one ``local`` merge (see
``kernels.sorting``). ``topk`` is the sort in its order (``largest``: descending) keeping the
first ``k`` slots. Refusals match the reference, before anything is allocated: an
out-of-range axis is an ``IndexError``, ``k`` beyond the axis a ``ValueError``.
"""

from __future__ import annotations

import math
from typing import Any

import conveyor as cv
from conveyor.sdk import normalize_axis
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["sort_call"]


def _axis(name: str, axis: int, ndim: int, carrier: str) -> int:
    """The sorted axis; a 0-d input accepts 0 and -1 (and sorts its one element)."""
    try:
        return normalize_axis(axis, max(ndim, 1))
    except IndexError as exc:
        bound = max(ndim, 1)
        msg = f"{name} on {carrier}: {exc}; pass an axis in [-{bound}, {bound})"
        raise IndexError(msg) from None


def _refuse_k(name: str, k: int, axis: int, shape: tuple[int, ...], carrier: str) -> None:
    extent = shape[axis] if shape else 1
    if k <= extent:
        return
    if not shape:
        msg = f"{name} on {carrier}: k={k} is larger than the 1 element of a 0-d input; pass k <= 1"
    else:
        msg = (
            f"{name} on {carrier}: k={k} is larger than axis {axis} of extent {extent} "
            f"(shape {shape}); pass k <= {extent}"
        )
    raise ValueError(msg)


def _result_layout(shape: tuple[int, ...], axis: int, kout: int) -> cv.Layout:
    """The layout of a (kept..., sorted axis) row-major result, in the input's axis order."""
    if not shape:
        return cv.Layout((0,) if kout == 0 else ())
    kept = [a for a in range(len(shape)) if a != axis]
    order = [*kept, axis]
    inverse = tuple(order.index(a) for a in range(len(shape)))
    return cv.Layout((*(shape[a] for a in kept), kout)).permute(inverse)


def sort_call(
    engine: Engine, plan: cv.OperationPlan, options: Any, x: Operand, carrier: str
) -> list[tuple[Any, cv.Layout]]:
    """Run a ``sort`` or ``topk`` plan; (flat buffer, layout) of the values and the indices."""
    from conveyor_metal.kernels._tile import BLOCK, INT32_MAX, merge, tl_dtype
    from conveyor_metal.kernels.sorting import TILE, SortClass, SortKey, build, meta_layout

    name = plan.operation
    layout = x.layout
    shape, strides = layout.shape, layout.strides
    axis = _axis(name, options.axis, len(shape), carrier)
    if name == "topk":
        _refuse_k(name, options.k, axis, shape, carrier)
        descending = bool(options.largest)
    else:
        descending = bool(options.descending)
    n = shape[axis] if shape else 1
    kout = options.k if name == "topk" else n
    kept_shape, (kept_strides,) = merge(
        tuple(e for a, e in enumerate(shape) if a != axis),
        [tuple(s for a, s in enumerate(strides) if a != axis)],
    )
    rows = math.prod(kept_shape)
    width = 1 << max(n - 1, 0).bit_length()  # the power of two at or above n
    if max(rows * width, layout.span()[1]) > INT32_MAX:
        msg = f"{name} on {carrier}: more than 2**31 - 1 elements; split the tensor"
        raise ValueError(msg)
    result = _result_layout(shape, axis, kout)
    values = engine.empty(result.size, plan.outputs[0])
    indices = engine.empty(result.size, plan.outputs[1])
    outputs = [(values, result), (indices, result)]
    if result.size == 0:
        return outputs
    layout_class = SortClass(len(kept_shape))
    parts = meta_layout(layout_class)
    meta = [0] * parts["size"]
    meta[parts["kept_shape"] : parts["kept_strides"]] = kept_shape
    meta[parts["kept_strides"] : parts["offset"]] = kept_strides
    meta[parts["offset"]] = layout.offset
    meta[parts["stride"]] = strides[axis] if shape else 0
    stored = tl_dtype(plan.outputs[0])
    local_key, step_key = (
        SortKey("sorting", "sort_local", stored),
        SortKey("sorting", "sort_step", stored),
    )
    local = engine.source(local_key, layout_class, lambda: build(local_key, layout_class))
    # Positions between launches; a row within one tile never leaves threadgroup memory.
    scratch = engine.empty(rows * width if width > TILE else 1, cv.int32)
    buffers = {"X": x.buffer, "P": scratch, "meta": engine.meta(meta)}
    sizes = {"nx": int(x.buffer.numel()), "rows": rows, "width": width}
    outputs_bound = {"Y": values, "J": indices}
    tiles = Launch(((width + TILE - 1) // TILE, rows, 1), (BLOCK, 1, 1))
    order = int(descending)

    def run_local(stage: int) -> None:
        final = int(stage == (width if width > TILE else 0))
        scalars = sizes | {
            "kout": kout,
            "length": n,
            "descending": order,
            "stage": stage,
            "final": final,
        }
        engine.run(local, buffers | outputs_bound, scalars, tiles)

    run_local(0)
    if width > TILE:
        step = engine.source(step_key, layout_class, lambda: build(step_key, layout_class))
        stage = 2 * TILE
        while stage <= width:
            j = stage // 2
            while j >= TILE:
                scalars = sizes | {"descending": order, "stage": stage, "j": j}
                engine.run(step, buffers, scalars, tiles)
                j //= 2
            run_local(stage)
            stage *= 2
    return outputs
