"""Reference kernels: ``matmul`` and ``conv_general``.

Both convert their operands to the plan's accumulator dtype, contract there (integers wrap) and
round once to the output dtype. The convolution is written for clarity: dilate and pad the
input, then add one strided window per kernel offset, group by group.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    KernelValueError,
    check_broadcast,
    convert,
    finish,
    quiet,
)

__all__ = ["CONTRACTION_KERNELS", "conv_layouts", "conv_output_shape", "matmul"]


def _pair(plan: cv.OperationPlan, a: Any, b: Any) -> tuple[Array, Array]:
    x, y = convert(plan, (a, b))
    assert x is not None and y is not None  # neither role is optional
    return x, y


def matmul(plan: cv.OperationPlan, options: Any, a: Any, b: Any) -> Array:
    """``a @ b`` with NumPy's rules: batch axes broadcast, 1-D operands gain and lose an axis."""
    x, y = _pair(plan, a, b)
    if x.ndim == 0 or y.ndim == 0:
        msg = (
            f"operands of shapes {x.shape} and {y.shape}: matmul needs at least 1-D operands; "
            f"use mul for scalars"
        )
        raise KernelValueError(msg)
    inner_x = x.shape[-1]
    inner_y = y.shape[-2] if y.ndim > 1 else y.shape[0]
    if inner_x != inner_y:
        msg = (
            f"operand shapes {x.shape} and {y.shape} do not contract: {inner_x} != {inner_y}; "
            f"transpose or reshape an operand"
        )
        raise KernelValueError(msg)
    if x.ndim > 2 or y.ndim > 2:
        check_broadcast(plan.operation, x.shape[:-2], y.shape[:-2])
    with quiet():
        return finish(np.matmul(x, y), plan.outputs[0])


_Perm = tuple[int, ...]


def conv_layouts(options: Any, ndim: int) -> tuple[_Perm, _Perm, _Perm]:
    """Axis permutations taking lhs, rhs and out to canonical (N, C, spatial...) order.

    Spatial dimensions are matched by letter and ordered as they appear in the lhs layout;
    without ``dimension_numbers`` every operand is already canonical.
    """
    layouts = options.dimension_numbers
    if layouts is None:
        identity = tuple(range(ndim))
        return identity, identity, identity
    lhs, rhs, out = layouts
    if len(lhs) != ndim:
        msg = f"dimension_numbers {layouts!r} describe {len(lhs)}-d operands, got {ndim}-d ones"
        raise KernelValueError(msg)
    spatial = [c for c in lhs if c not in "NC"]
    return (
        (lhs.index("N"), lhs.index("C"), *(lhs.index(c) for c in spatial)),
        (rhs.index("O"), rhs.index("I"), *(rhs.index(c) for c in spatial)),
        (out.index("N"), out.index("C"), *(out.index(c) for c in spatial)),
    )


def _dilated(extent: int, dilation: int) -> int:
    return (extent - 1) * dilation + 1 if extent else 0


def _spatial_options(options: Any, n: int) -> tuple[Any, Any, Any, Any]:
    ones = (1,) * n
    fields = (
        options.window_strides or ones,
        options.padding or ((0, 0),) * n,
        options.lhs_dilation or ones,
        options.rhs_dilation or ones,
    )
    for name, value in zip(
        ("window_strides", "padding", "lhs_dilation", "rhs_dilation"), fields, strict=True
    ):
        if len(value) != n:
            msg = f"option {name} has {len(value)} entries for {n} spatial dimensions; pass {n}"
            raise KernelValueError(msg)
    return fields


def conv_output_shape(
    lhs_shape: tuple[int, ...], rhs_shape: tuple[int, ...], options: Any
) -> tuple[int, ...]:
    """The canonical (N, O, spatial...) output shape, validating every operand and option."""
    if len(lhs_shape) < 2 or len(lhs_shape) != len(rhs_shape):
        msg = (
            f"input {lhs_shape} and weight {rhs_shape} must both have 2 + (number of spatial "
            f"dimensions) axes"
        )
        raise KernelValueError(msg)
    n, channels, *in_sp = lhs_shape
    o, i, *k_sp = rhs_shape
    groups = options.feature_group_count
    if channels != i * groups or o % groups:
        msg = (
            f"input has {channels} channels and weight {o} outputs x {i} inputs, which does not "
            f"fit feature_group_count={groups}; input channels must equal {i} * {groups} and "
            f"outputs must divide by {groups}"
        )
        raise KernelValueError(msg)
    if 0 in k_sp:
        msg = f"weight spatial extents {tuple(k_sp)} must all be >= 1"
        raise KernelValueError(msg)
    strides, padding, lhs_dil, rhs_dil = _spatial_options(options, len(in_sp))
    out_sp = []
    for e, k, s, (lo, hi), ld, rd in zip(
        in_sp, k_sp, strides, padding, lhs_dil, rhs_dil, strict=True
    ):
        span = _dilated(e, ld) + lo + hi - _dilated(k, rd)
        out_sp.append(span // s + 1 if span >= 0 else 0)
    return (n, o, *out_sp)


def conv_general(plan: cv.OperationPlan, options: Any, a: Any, b: Any) -> Array:
    """N-d grouped cross-correlation (no kernel flip), XLA-style.

    ``lhs_dilation`` inserts ``d - 1`` zeros between input elements, then ``padding`` (low,
    high) pads the dilated input; ``rhs_dilation`` spaces the kernel taps; ``window_strides``
    steps the window.
    """
    x, w = _pair(plan, a, b)
    perm_x, perm_w, perm_out = conv_layouts(options, x.ndim)
    if w.ndim != x.ndim:
        conv_output_shape(x.shape, w.shape, options)  # refuses with the shapes
    x, w = np.transpose(x, perm_x), np.transpose(w, perm_w)
    out_shape = conv_output_shape(x.shape, w.shape, options)
    n_sp = x.ndim - 2
    strides, padding, lhs_dil, rhs_dil = _spatial_options(options, n_sp)
    groups = options.feature_group_count
    # Dilate, then pad, the input.
    dilated = np.zeros(
        (*x.shape[:2], *(_dilated(e, d) for e, d in zip(x.shape[2:], lhs_dil, strict=True))),
        x.dtype,
    )
    dilated[(slice(None), slice(None), *(slice(None, None, d) for d in lhs_dil))] = x
    padded = np.pad(dilated, ((0, 0), (0, 0), *padding))
    out = np.zeros(out_shape, x.dtype)
    per_in, per_out = w.shape[1], w.shape[0] // groups
    with quiet():
        for taps in itertools.product(*(range(k) for k in w.shape[2:])):
            window = tuple(
                slice(t * rd, t * rd + (y - 1) * s + 1, s) if y else slice(0, 0)
                for t, rd, y, s in zip(taps, rhs_dil, out_shape[2:], strides, strict=True)
            )
            for g in range(groups):
                part = padded[(slice(None), slice(g * per_in, (g + 1) * per_in), *window)]
                tap: tuple[Any, ...] = (slice(g * per_out, (g + 1) * per_out), slice(None), *taps)
                kernel = w[tap]
                # (N, I, Y...) x (O, I) -> (N, Y..., O), moved to (N, O, Y...).
                contribution = np.moveaxis(np.tensordot(part, kernel, axes=([1], [1])), -1, 1)
                out[:, g * per_out : (g + 1) * per_out] += contribution
    inverse = tuple(int(i) for i in np.argsort(perm_out))
    return finish(np.transpose(out, inverse), plan.outputs[0])


CONTRACTION_KERNELS: dict[str, Kernel] = {"matmul": matmul, "conv_general": conv_general}
"""Contraction names -> kernel(plan, options, input, other / weight)."""
