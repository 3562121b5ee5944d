"""CPU kernels: ``matmul`` through BLAS and ``conv_general`` as im2col + BLAS products.

``matmul`` hands the operands (converted to the accumulator dtype only when they differ) to
``np.matmul`` with ``out=`` a fresh aligned buffer, so float32 / float64 / complex products run
in the multithreaded BLAS NumPy links.

``conv_general`` copies the input once into a zero-filled, dilated and padded buffer, takes
every window as a strided view (no copy) and, image by image and group by group, lays the
windows out as a ``(channels * taps, positions)`` matrix (the im2col copy, small enough to stay
in cache) that one BLAS product with the ``(outputs, channels * taps)`` weights turns into the
channels-first result, written in place when the output layout is the canonical one. Work
buffers come from the runtime pool. Contraction order differs from the reference's tap-by-tap
sum, so floating results agree within a summation tolerance.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels._common import KernelValueError, check_broadcast
from conveyor_generic.kernels.contraction import conv_layouts, conv_output_shape

__all__ = ["CONTRACTION_KERNELS", "conv_general", "matmul"]

Array = rt.Array


def _acc(plan: cv.OperationPlan, x: Array) -> Array:
    acc = plan.compute.numpy
    return x if x.dtype == acc else x.astype(acc)


def _matmul_shape(
    a: tuple[int, ...], b: tuple[int, ...], plan: cv.OperationPlan
) -> tuple[int, ...]:
    if not a or not b:
        msg = f"operands of shapes {a} and {b}: matmul needs at least 1-D operands; use mul"
        raise KernelValueError(msg)
    inner_b = b[-2] if len(b) > 1 else b[0]
    if a[-1] != inner_b:
        msg = (
            f"operand shapes {a} and {b} do not contract: {a[-1]} != {inner_b}; "
            f"transpose or reshape an operand"
        )
        raise KernelValueError(msg)
    batch: tuple[int, ...] = ()
    if len(a) > 2 or len(b) > 2:
        batch = check_broadcast(plan.operation, a[:-2], b[:-2])
    rows = (a[-2],) if len(a) > 1 else ()
    cols = (b[-1],) if len(b) > 1 else ()
    return (*batch, *rows, *cols)


def matmul(plan: cv.OperationPlan, options: Any, a: Array, b: Array) -> Array:
    """``a @ b`` with NumPy's rules: batch axes broadcast, 1-D operands gain and lose an axis."""
    shape = _matmul_shape(a.shape, b.shape, plan)
    out_dtype = plan.outputs[0].numpy
    out = rt.empty(shape, out_dtype, math.prod(shape))
    x, y = _acc(plan, a), _acc(plan, b)
    target = out if x.dtype == out_dtype else np.empty(shape, x.dtype)
    np.matmul(x, y, out=target)
    if target is not out:
        np.copyto(out, target, casting="unsafe")
    return out


def _spatial(options: Any, n: int) -> tuple[Any, Any, Any, Any]:
    ones = (1,) * n
    return (
        options.window_strides or ones,
        options.padding or ((0, 0),) * n,
        options.lhs_dilation or ones,
        options.rhs_dilation or ones,
    )


def _padded(x: Array, padding: Any, lhs_dilation: Any) -> Array:
    """(N, C, *padded spatial): the canonical input dilated and zero-padded, in one copy."""
    n, c, *extents = x.shape
    dilated = [(e - 1) * d + 1 if e else 0 for e, d in zip(extents, lhs_dilation, strict=True)]
    full = [d + lo + hi for d, (lo, hi) in zip(dilated, padding, strict=True)]
    buffer = np.zeros((n, c, *full), x.dtype)
    window = tuple(
        slice(lo, lo + d, s) for d, (lo, _), s in zip(dilated, padding, lhs_dilation, strict=True)
    )
    buffer[(slice(None), slice(None), *window)] = x
    return buffer


def _copy_by_batch(target: Array, source: Array) -> None:
    """``target[...] = source`` (cast as needed), split over the leading axis across cores."""
    if source.size < rt.PARALLEL_MIN or target.shape[0] < 2:
        np.copyto(target, source, casting="unsafe")
        return
    step = -(-target.shape[0] // rt.THREADS)
    rt.run_parallel(
        [
            partial(np.copyto, target[low : low + step], source[low : low + step], casting="unsafe")
            for low in range(0, target.shape[0], step)
        ]
    )


def conv_general(plan: cv.OperationPlan, options: Any, a: Array, b: Array) -> Array:
    """N-d grouped cross-correlation (no kernel flip), XLA-style, through im2col and BLAS.

    Per group and image the windows become a ``(C_g * taps, positions)`` matrix, and one BLAS
    product with the ``(O_g, C_g * taps)`` weights lands in the channels-first result directly.
    """
    if options is None:
        options = _DEFAULT_CONV
    x, w = _acc(plan, a), _acc(plan, b)
    perm_x, perm_w, perm_out = conv_layouts(options, x.ndim)
    if w.ndim != x.ndim:
        conv_output_shape(x.shape, w.shape, options)  # refuses with the shapes
    x, w = np.transpose(x, perm_x), np.transpose(w, perm_w)
    canonical = conv_output_shape(x.shape, w.shape, options)
    n_sp = x.ndim - 2
    strides, padding, lhs_dil, rhs_dil = _spatial(options, n_sp)
    groups = options.feature_group_count
    n, o = canonical[0], canonical[1]
    out_sp = canonical[2:]
    per_in, per_out = w.shape[1], o // groups
    taps = w.shape[2:]
    # The output in its published layout, and the canonical (N, O, *spatial) view of it.
    inverse = tuple(int(i) for i in np.argsort(perm_out))
    published = tuple(canonical[i] for i in inverse)
    out_dtype = plan.outputs[0].numpy
    out = rt.empty(published, out_dtype, math.prod(published))
    result = np.transpose(out, perm_out)
    positions = math.prod(out_sp)
    if out.size == 0:
        return out
    if per_in == 0 or math.prod(taps) == 0:
        out.fill(0)
        return out
    padded = _padded(x, padding, lhs_dil)
    p_strides = padded.strides  # (N, C, *spatial) in bytes
    depth = per_in * math.prod(taps)
    # Windows: (N, C_g, *taps, *out spatial) strided over the padded buffer, no copy.
    windows_shape = (n, per_in, *taps, *out_sp)
    windows_strides = (
        p_strides[0],
        p_strides[1],
        *(p_strides[2 + i] * rhs_dil[i] for i in range(n_sp)),
        *(p_strides[2 + i] * strides[i] for i in range(n_sp)),
    )
    direct = result.flags.c_contiguous and out_dtype == x.dtype
    work = result.reshape(n, o, positions) if direct else rt.scratch((n, o, positions), x.dtype)
    # One image at a time: its column matrix stays in cache between the copy and the product.
    columns = rt.scratch((depth, positions), x.dtype)
    for g in range(groups):
        base = padded[:, g * per_in : (g + 1) * per_in]
        windows = np.lib.stride_tricks.as_strided(
            base, windows_shape, windows_strides, writeable=False
        )
        matrix = w[g * per_out : (g + 1) * per_out].reshape(per_out, depth)
        for image in range(n):
            np.copyto(columns.reshape(windows_shape[1:]), windows[image])
            np.matmul(matrix, columns, out=work[image, g * per_out : (g + 1) * per_out])
    del windows, base
    rt.recycle(columns)
    if not direct:
        _copy_by_batch(result, work.reshape(n, o, *out_sp))
        rt.recycle(work)
    return out


_DEFAULT_CONV = cv.OperationExecutionOptions("conv_general")

CONTRACTION_KERNELS = {"matmul": matmul, "conv_general": conv_general}
"""Contraction names -> kernel(plan, options, input, other / weight)."""
