"""Running a planned ``conv_general``: canonical axes, options into ``meta``, one launch.

The operands' layouts are permuted to canonical (N, C, spatial...) and (O, I, spatial...)
order (``dimension_numbers`` is only a permutation of strides: nothing is copied) and the
kernel reads them in place. The kernel writes a channels-last result; its layout here is
that buffer viewed in the requested output axis order. The shape and option refusals are
the central definition's (they run before the carrier is reached, for Generic too); what is
left here is the 32-bit index limit, refused before anything is allocated.
"""

from __future__ import annotations

import math
from typing import Any

import conveyor as cv
from conveyor_generic import conv_layouts, conv_output_shape
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["conv_call"]


def conv_call(
    engine: Engine, plan: cv.OperationPlan, options: Any, x: Operand, w: Operand, carrier: str
) -> tuple[Any, cv.Layout]:
    """Run a convolution plan; returns (flat result buffer, result layout)."""
    from conveyor_metal.kernels._tile import INT32_MAX, accumulating_key
    from conveyor_metal.kernels.conv_general import ConvClass, build, meta_layout
    from conveyor_metal.kernels.matmul import THREADS, TILE_M, TILE_N

    x_order, w_order, out_order = conv_layouts(options, x.layout.ndim)
    xl, wl = x.layout.permute(x_order), w.layout.permute(w_order)
    n, _, *in_shape = xl.shape
    o, per_in, *kernel_shape = wl.shape
    d = len(in_shape)
    groups = options.feature_group_count
    step = options.window_strides or (1,) * d
    padding = options.padding or ((0, 0),) * d
    lhs_dil = options.lhs_dilation or (1,) * d
    rhs_dil = options.rhs_dilation or (1,) * d
    # The reference's own arithmetic (the central definition has validated the options).
    out_shape = conv_output_shape(xl.shape, wl.shape, options)[2:]
    # The kernel writes (N, output positions..., O); canonical order is (N, O, positions...).
    written = cv.Layout((n, *out_shape, o)).permute((0, d + 1, *range(1, d + 1)))
    result = written.permute(tuple(out_order.index(axis) for axis in range(d + 2)))
    positions, taps, per_out = math.prod(out_shape), math.prod(kernel_shape), o // groups
    rows, depth = n * positions, per_in * taps
    if max(written.size, rows, depth, xl.span()[1], wl.span()[1]) > INT32_MAX:
        msg = f"conv_general on {carrier}: more than 2**31 - 1 elements; split the operands"
        raise ValueError(msg)
    buffer = engine.empty(written.size, plan.outputs[0])
    if written.size == 0:
        return buffer, result
    if depth == 0:  # no input channel per group: every entry is the sum of nothing
        buffer.zero_()
        return buffer, result
    layout_class = ConvClass(d)
    parts = meta_layout(layout_class)
    meta = [0] * parts["size"]
    fields: dict[str, Any] = {
        "x_offset": [xl.offset],
        "x_strides": xl.strides,
        "w_offset": [wl.offset],
        "w_strides": wl.strides,
        "in_shape": in_shape,
        "out_shape": out_shape,
        "kernel_shape": kernel_shape,
        "step": step,
        "low": [lo for lo, _ in padding],
        "lhs_dilation": lhs_dil,
        "rhs_dilation": rhs_dil,
        "per_in": [per_in],
        "per_out": [per_out],
        "out_size": [positions],
        "taps": [taps],
        "channels": [o],
    }
    for name, values in fields.items():
        meta[parts[name] : parts[name] + len(values)] = list(values)
    key = accumulating_key("conv_general", plan)
    source = engine.source(key, layout_class, lambda: build(key, layout_class))
    buffers = {"A": x.buffer, "B": w.buffer, "Y": buffer, "meta": engine.meta(meta)}
    scalars = {
        "na": int(x.buffer.numel()),
        "nb": int(w.buffer.numel()),
        "ny": int(buffer.numel()),
        "batch": groups,
        "M": rows,
        "N": per_out,
        "K": depth,
    }
    grid = (math.ceil(per_out / TILE_N), math.ceil(rows / TILE_M), groups)
    engine.run(source, buffers, scalars, Launch(grid, (THREADS, 1, 1)))
    return buffer, result
