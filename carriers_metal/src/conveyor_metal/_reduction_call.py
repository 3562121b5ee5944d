"""Running a planned reduction, arg-reduction or ``cumsum``: axes, layout class, one launch.

The input is read in place: its axes are split into kept and reduced groups (each merged
where the strides allow), so a transposed or sliced input needs no copy. Refusals match the
reference: an out-of-range axis is an ``IndexError``, an identity-less reduction over an
empty axis a ``ValueError``, both before anything is allocated.
"""

from __future__ import annotations

import math
from typing import Any

import conveyor as cv
from conveyor.sdk import normalize_axes, normalize_axis
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["REDUCTIONS", "reduction_call"]

REDUCTIONS = frozenset(
    {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin", "cumsum"}
)
_NO_IDENTITY = {"reduce_max": "max", "reduce_min": "min", "argmax": "argmax", "argmin": "argmin"}


def _axes(name: str, axis: Any, ndim: int, carrier: str) -> tuple[int, ...]:
    """The reduced axes (all for ``None``); a 0-d input accepts 0 and -1 and reduces nothing."""
    try:
        if ndim == 0:
            for a in () if axis is None else (axis,) if isinstance(axis, int) else axis:
                if a not in (0, -1):
                    normalize_axis(a, 1)
            return ()
        if axis is None:
            return tuple(range(ndim))
        if name in ("argmax", "argmin", "cumsum"):
            return (normalize_axis(axis, ndim),)
        return tuple(sorted(normalize_axes(axis, ndim)))
    except IndexError as exc:
        bound = max(ndim, 1)
        msg = f"{name} on {carrier}: {exc}; pass axes in [-{bound}, {bound})"
        raise IndexError(msg) from None


def _result_layout(
    name: str, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool, axis: Any
) -> cv.Layout:
    if name == "cumsum":
        if axis is None:
            return cv.Layout((math.prod(shape),))
        kept = [a for a in range(len(shape)) if a not in axes]
        order = kept + list(axes)  # the kernel writes (kept..., scanned) row-major
        inverse = tuple(order.index(a) for a in range(len(shape)))
        return cv.Layout(tuple(shape[a] for a in order)).permute(inverse)
    if keepdims:
        return cv.Layout(tuple(1 if a in axes else e for a, e in enumerate(shape)))
    return cv.Layout(tuple(e for a, e in enumerate(shape) if a not in axes))


def reduction_call(
    engine: Engine, plan: cv.OperationPlan, options: Any, x: Operand, carrier: str
) -> tuple[Any, cv.Layout]:
    """Run a reduction plan; returns (flat result buffer, result layout)."""
    from conveyor_metal.kernels._tile import BLOCK, INT32_MAX, accumulating_key, merge
    from conveyor_metal.kernels.reductions import ReductionClass, build, meta_layout

    name = plan.operation
    layout = x.layout
    shape, strides = layout.shape, layout.strides
    axes = _axes(name, options.axis, len(shape), carrier)
    if name in _NO_IDENTITY:
        empty = [a for a in axes if shape[a] == 0] or ([0] if 0 in shape and not axes else [])
        if empty and axes:
            msg = (
                f"{name} on {carrier}: cannot take {_NO_IDENTITY[name]} over axis {empty[0]} of "
                f"extent 0 (shape {shape}); it has no identity, so reduce a non-empty axis"
            )
            raise ValueError(msg)
    keepdims = bool(getattr(options, "keepdims", False))
    result = _result_layout(name, shape, axes, keepdims, options.axis)
    kept = [a for a in range(len(shape)) if a not in axes]
    kept_shape, (kept_strides,) = merge(
        tuple(shape[a] for a in kept), [tuple(strides[a] for a in kept)]
    )
    red_shape, (red_strides,) = merge(
        tuple(shape[a] for a in axes), [tuple(strides[a] for a in axes)]
    )
    rows, cols = math.prod(kept_shape), math.prod(red_shape)
    if max(rows, cols, layout.span()[1]) > INT32_MAX:
        msg = f"{name} on {carrier}: more than 2**31 - 1 elements; split the tensor"
        raise ValueError(msg)
    buffer = engine.empty(result.size, plan.outputs[0])
    if rows == 0 or (name == "cumsum" and cols == 0):
        return buffer, result
    layout_class = ReductionClass(len(kept_shape), len(red_shape))
    if name in ("argmax", "argmin") and not red_shape:
        # Every row holds one element (0-d input, or only extent-1 axes reduced): its index is
        # 0. No kernel: TileLang would lower one that never reads the input buffer at all.
        buffer.zero_()
        return buffer, result
    parts = meta_layout(layout_class)
    meta = [0] * parts["size"]
    meta[parts["kept_shape"] : parts["kept_strides"]] = kept_shape
    meta[parts["kept_strides"] : parts["red_shape"]] = kept_strides
    meta[parts["red_shape"] : parts["red_strides"]] = red_shape
    meta[parts["red_strides"] : parts["offset"]] = red_strides
    meta[parts["offset"]] = layout.offset
    meta[parts["count"]] = cols
    key = accumulating_key("reduction", plan)
    source = engine.source(key, layout_class, lambda: build(key, layout_class))
    buffers = {"X": x.buffer, "Y": buffer, "meta": engine.meta(meta)}
    scalars = {"nx": int(x.buffer.numel()), "rows": rows, "cols": cols}
    engine.run(source, buffers, scalars, Launch((rows, 1, 1), (BLOCK, 1, 1)))
    return buffer, result
