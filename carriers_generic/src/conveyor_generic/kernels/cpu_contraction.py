"""CPU kernels: ``matmul`` through BLAS and ``conv_general`` as im2col + BLAS products.

``matmul`` hands the operands (converted to the accumulator dtype only when they differ) to
``np.matmul`` with ``out=`` a fresh aligned buffer, so float32 / float64 / complex products run
in the multithreaded BLAS NumPy links.

``conv_general`` is lowered by shape. A 1x1 kernel without padding on one image multiplies
the weights with the image where it lies. Any other kernel copies the input once into a
zero-filled, dilated and padded buffer (none is needed without padding or dilation), takes
every window as a strided view (no copy) and, for a chunk of images at a time and group by
group, lays the windows out as one ``(channels * taps, images * positions)`` matrix (the
im2col copy) that one BLAS product with the ``(outputs, channels * taps)`` weights turns into
every image's result. Work buffers come from the runtime pool.
Gradients are convolutions too (the central VJP), so they take the same lowerings.
Contraction order differs from the reference's tap-by-tap sum, so floating results agree
within a summation tolerance.
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
    if all(d == 1 for d in lhs_dilation) and not any(lo or hi for lo, hi in padding):
        return x  # nothing to insert: the windows are views of the input itself
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
    """N-d grouped cross-correlation (no kernel flip), XLA-style, lowered by shape onto BLAS.

    A 1x1 kernel without padding on one image is a matmul of the weights with the image as it
    lies (no copy unless strided). Any other kernel is im2col over a chunk of images: the
    windows become one ``(C_g * taps, images * positions)`` matrix, and one BLAS product per
    chunk and group with the ``(O_g, C_g * taps)`` weights gives every image's result at once.
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
    per_in = w.shape[1]
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
    direct = result.flags.c_contiguous and out_dtype == x.dtype
    work = result.reshape(n, o, positions) if direct else rt.scratch((n, o, positions), x.dtype)
    pointwise = all(k == 1 for k in taps) and all(d == 1 for d in lhs_dil)
    if pointwise and n == 1 and not any(lo or hi for lo, hi in padding):
        _pointwise(x, w, strides, groups, work)
    else:
        _im2col(x, w, strides, padding, lhs_dil, rhs_dil, groups, out_sp, work)
    if not direct:
        _copy_by_batch(result, work.reshape(n, o, *out_sp))
        rt.recycle(work)
    return out


def _pointwise(x: Array, w: Array, strides: Any, groups: int, work: Array) -> None:
    """A 1x1 kernel on one image: per group, ``(O_g, C_g) @ (C_g, positions)`` in place.

    Only for a single image: with several, one product over all of them (``_im2col``, whose
    copy is then a transpose) beat one product per image, 52 ms against 186 ms on 8x256x56x56
    to 64 channels under load 10 (torch 57.6 ms).
    """
    n, c = x.shape[:2]
    sub = x[(slice(None), slice(None), *(slice(None, None, s) for s in strides))]
    images = sub.reshape(n, c, -1)  # a view when contiguous, else one copy
    per_in, per_out = c // groups, work.shape[1] // groups
    for g in range(groups):
        matrix = w[g * per_out : (g + 1) * per_out].reshape(per_out, per_in)
        np.matmul(
            matrix,
            images[:, g * per_in : (g + 1) * per_in],
            out=work[:, g * per_out : (g + 1) * per_out],
        )


# Bytes of one im2col matrix: a chunk of images shares one BLAS product. On a quiet 2-core
# machine 8 MiB chunks were 12% faster (16.8 against 19.1 ms on the bench's 3x3 case), but with
# busy cores OpenBLAS' per-call thread hand-off dominates: under load 5-14 eight per-image
# products took 257 ms and one 43 ms (torch 42.7 ms), and with three spinning processes beside
# it 8 MiB took 133-508 ms where 64 MiB took 85-144. The robust choice wins.
_COLUMN_BYTES = 64 << 20


def _im2col(
    x: Array,
    w: Array,
    strides: Any,
    padding: Any,
    lhs_dil: Any,
    rhs_dil: Any,
    groups: int,
    out_sp: tuple[int, ...],
    work: Array,
) -> None:
    """Windows of a chunk of images as one ``(C_g * taps, images * positions)`` matrix, times
    the ``(O_g, C_g * taps)`` weights; the chunk's products land in ``work`` (N, O, positions)."""
    n = x.shape[0]
    n_sp = len(out_sp)
    per_in, per_out = w.shape[1], work.shape[1] // groups
    taps = w.shape[2:]
    positions = math.prod(out_sp)
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
    chunk = max(1, min(n, _COLUMN_BYTES // max(1, depth * positions * x.itemsize)))
    columns = rt.scratch((depth, chunk * positions), x.dtype)
    products = rt.scratch((per_out, chunk * positions), x.dtype) if chunk > 1 else None
    for g in range(groups):
        base = padded[:, g * per_in : (g + 1) * per_in]
        windows = np.lib.stride_tricks.as_strided(
            base, windows_shape, windows_strides, writeable=False
        )
        matrix = w[g * per_out : (g + 1) * per_out].reshape(per_out, depth)
        for low in range(0, n, chunk):
            count = min(chunk, n - low)
            target = work[low : low + count, g * per_out : (g + 1) * per_out]
            _chunk_product(matrix, windows[low : low + count], columns, products, target)
        del windows, base, target
    rt.recycle(columns)  # no view of it outlives the loop: the pool takes it back
    if products is not None:
        rt.recycle(products)


def _chunk_product(
    matrix: Array, windows: Array, columns: Array, products: Array | None, target: Array
) -> None:
    """One chunk's windows copied into ``columns``, times ``matrix``, into ``target``.

    A function of its own so its views of the work buffers die with it: a view still alive
    would keep the buffers from the pool, and a fresh 7 MiB mapping costs 5 ms of page faults
    (a 3x3 convolution of 8 images took 23 ms that way, 16 ms with its buffers pooled).
    """
    count, depth = windows.shape[0], columns.shape[0]
    positions = target.shape[2]
    cols = columns[:, : count * positions]
    # Image by image: NumPy copies each image's windows with long inner loops, where one copy
    # of the chunk with its batch axis moved took ten times as long.
    lanes = cols.reshape(depth, count, positions)
    for i in range(count):
        np.copyto(lanes[:, i].reshape(windows.shape[1:]), windows[i])
    if products is None:  # one image: the product lands in the result directly
        np.matmul(matrix, cols, out=target[0])
        return
    block = products[:, : count * positions]
    np.matmul(matrix, cols, out=block)
    np.copyto(target.transpose(1, 0, 2), block.reshape(matrix.shape[0], count, positions))


_DEFAULT_CONV = cv.OperationExecutionOptions("conv_general")

CONTRACTION_KERNELS = {"matmul": matmul, "conv_general": conv_general}
"""Contraction names -> kernel(plan, options, input, other / weight)."""
