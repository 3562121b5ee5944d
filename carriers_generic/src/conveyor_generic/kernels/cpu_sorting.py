"""CPU kernels: stable ``sort`` and ``topk`` returning values and int64 indices.

NumPy's stable argsort is a merge sort, an order of magnitude slower than its SIMD quicksort.
For dtypes of at most 32 bits each element becomes one unique 64-bit key, ``order-preserving
value bits << 32 | position in the lane``, and the keys go through the quicksort: equal values
are ordered by position, so the unstable sort yields the stable order, and the positions are
read back from the low bits. The value bits rank NaN above +inf and ``-0.0`` equal to ``0.0``
(as the reference's float64 comparison does); descending order inverts them, keeping ties in
position order. Values are gathered from the input, so signed zeros and NaN payloads survive.
Wider dtypes use the reference's stable argsort.

A long 1-D input is sorted on every core: the packed keys are written into the result buffer,
partitioned in place into one value range per core, and each range sorted by its own core.

``topk`` of a long 1-D input keeps only candidates: each core partitions its half of the keys
around that half's k-th key and keeps every element at least as good; the few candidates are
then ordered exactly as above.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels._common import (
    KernelValueError,
    is_bfloat16,
    lane_axes,
    reduced_axes,
)
from conveyor_generic.kernels.reductions import sort_indices

__all__ = ["SORTING_KERNELS", "order_keys"]

Array = rt.Array

_U32 = np.dtype(np.uint32)
_NEG_INF_KEY = 0x007FFFFF  # the key of -inf; NaNs with the sign bit set fall below it
_POS_INF_KEY = 0xFF800000  # the key of +inf; NaNs without it fall above
_LOW = np.uint64(0xFFFFFFFF)
# On a little-endian machine the high half of a uint64 is the second uint32 of its pair.
_LITTLE = sys.byteorder == "little"
_SHIFT = np.uint64(32)


def _packable(x: Array, extent: int) -> bool:
    return (x.dtype.itemsize <= 4 and x.dtype.kind in "biuf") or is_bfloat16(x.dtype)


def _keys_into(out: Array, x: Array) -> None:
    """Order-preserving uint32 keys of ``x`` (bool, integers of <= 32 bits, floats) into ``out``."""
    kind = x.dtype.kind
    if kind == "b" or kind == "u":
        np.copyto(out, x, casting="unsafe")
        return
    if kind == "i":
        np.add(x, np.int64(1) << (8 * x.dtype.itemsize - 1), out=out, casting="unsafe")
        return
    # Floats: widen half precision exactly, send -0.0 to +0.0 (adding 0.0 does), then flip the
    # order of negatives: bits ^ (sign ? 0xFFFFFFFF : 0x80000000).
    values = x if x.dtype == np.float32 else x.astype(np.float32)
    np.add(values, np.float32(0.0), out=out.view(np.float32))
    flip = np.right_shift(out.view(np.int32), 31)  # 0, or -1 for negatives
    np.bitwise_or(flip, np.int32(-(1 << 31)), out=flip)
    np.bitwise_xor(out, flip.view(_U32), out=out)
    # NaN keys fall outside [key(-inf), key(+inf)]; send every NaN to the top, all equal.
    if out.size and (out.min() < _NEG_INF_KEY or out.max() > _POS_INF_KEY):
        np.copyto(out, np.uint32(0xFFFFFFFF), where=np.isnan(values))


def order_keys(x: Array, descending: bool) -> Array:
    """uint32 keys whose ascending order is the requested order of ``x`` (same shape)."""
    keys = np.empty(x.shape, _U32)
    with rt.quiet():
        if x.size >= rt.PARALLEL_MIN and x.flags.c_contiguous:
            rt.chunked(_keys_into, keys, (x,))
        else:
            _keys_into(keys, x)
    if descending:
        np.invert(keys, out=keys)
    return keys


def _packed_order(x: Array, axis: int, descending: bool) -> Array:
    """The stable sorting permutation of ``x`` along ``axis`` (int64) through packed keys."""
    lanes = np.moveaxis(x, axis, -1)
    keys = order_keys(lanes, descending)
    extent = lanes.shape[-1]
    packed = keys.astype(np.uint64)
    np.left_shift(packed, _SHIFT, out=packed)
    np.bitwise_or(packed, np.arange(extent, dtype=np.uint64), out=packed)
    packed.sort(axis=-1)
    np.bitwise_and(packed, _LOW, out=packed)
    return np.moveaxis(packed.view(np.int64), -1, axis)


def _bucket_sort(x: Array, descending: bool, parts: int) -> Array:
    """The stable order of the long 1-D ``x``, as sorted packed keys in the published indices.

    Every core writes its share of the packed keys (value bits high, position low) straight
    into the int64 result buffer; one partition at ``parts - 1`` equally spaced ranks then
    splits the keys into value ranges in place (NumPy's SIMD selection), and each core sorts
    one range. Keys are unique, so the sorted ranges are the sorted whole. Nothing else of the
    input's size is allocated: on the reference machine fresh memory page-faults, and the
    earlier masks, compressed buckets and position arrays cost more than the sorts.
    """
    n = x.size
    indices = rt.empty((n,), np.dtype(np.int64), n)  # the published indices, filled in place
    packed = indices.view(np.uint64)
    step = -(-n // parts)
    spans = [(low, min(low + step, n)) for low in range(0, n, step)]
    rt.run_parallel([partial(_pack, x, packed, low, high, descending) for low, high in spans])
    ranks = [n * j // parts for j in range(1, parts)]
    packed.partition(ranks)
    bounds = list(zip([0, *ranks], [*ranks, n], strict=True))
    rt.run_parallel([packed[low:high].sort for low, high in bounds])
    return indices


def _pack(x: Array, packed: Array, low: int, high: int, descending: bool) -> None:
    """``packed[low:high] = key(x) << 32 | position`` for one core's span."""
    part = packed[low:high]
    if _LITTLE:  # the two halves of each uint64, written in place
        halves = part.view(_U32)
        keys = halves[1::2]
        _keys_into(keys, x[low:high])
        if descending:
            np.invert(keys, out=keys)
        np.copyto(halves[0::2], np.arange(low, high, dtype=_U32))
        return
    keys = np.empty(high - low, _U32)
    _keys_into(keys, x[low:high])
    if descending:
        np.invert(keys, out=keys)
    np.copyto(part, keys)
    np.left_shift(part, _SHIFT, out=part)
    np.bitwise_or(part, np.arange(low, high, dtype=np.uint64), out=part)


def _values_from_keys(values: Array, keys: Array, dtype: np.dtype[Any]) -> None:
    """Invert ``_keys_into``: the values whose order keys are ``keys`` (uint32), into ``values``.

    Exact for every value except ``-0.0`` (keyed as ``0.0``) and NaN payloads (keyed as one
    NaN); ``_unpack`` restores those from the input.
    """
    kind = dtype.kind
    if kind in "bu":
        np.copyto(values, keys, casting="unsafe")
    elif kind == "i":
        wide = keys.astype(np.int64)
        np.subtract(wide, np.int64(1) << (8 * dtype.itemsize - 1), out=wide)
        np.copyto(values, wide, casting="unsafe")
    else:
        flip = np.right_shift(keys, 31)
        np.bitwise_xor(flip, np.uint32(1), out=flip)
        np.multiply(flip, np.uint32(0x7FFFFFFF), out=flip)
        np.bitwise_or(flip, np.uint32(0x80000000), out=flip)
        np.bitwise_xor(flip, keys, out=flip)
        np.copyto(values, flip.view(np.float32), casting="unsafe")


def _unpack(x: Array, indices: Array, descending: bool, plan: cv.OperationPlan) -> Array:
    """Split the sorted packed keys held in ``indices``: values out, positions left in place."""
    n = indices.size
    packed = indices.view(np.uint64)
    values = rt.empty((n,), plan.outputs[0].numpy, n)
    # Ranges of keys whose value bits were canonicalised: read those values from the input.
    special: list[tuple[int, int]] = []
    if x.dtype.kind not in "biu":
        for key in (0xFFFFFFFF, 0x80000000):
            key = ~key & 0xFFFFFFFF if descending else key
            low = int(np.searchsorted(packed, np.uint64(key) << _SHIFT))
            high = (
                n
                if key == 0xFFFFFFFF
                else int(np.searchsorted(packed, np.uint64(key + 1) << _SHIFT))
            )
            if high > low:
                special.append((low, high))

    def unpack(low: int, high: int) -> None:
        part = packed[low:high]
        if _LITTLE:
            keys = part.view(_U32)[1::2]
            if descending:
                keys = np.invert(keys)
        else:
            keys = np.right_shift(part, _SHIFT).astype(_U32)
            if descending:
                np.invert(keys, out=keys)
        _values_from_keys(values[low:high], keys, x.dtype)
        np.bitwise_and(part, _LOW, out=part)

    step = -(-n // rt.THREADS)
    rt.run_parallel([partial(unpack, low, min(low + step, n)) for low in range(0, n, step)])
    for low, high in special:
        np.take(x, indices[low:high], out=values[low:high])
    return values


def _bucketed(x: Array) -> bool:
    """Whether the 1-D ``x`` is sorted by ``_bucket_sort`` (long, packable, several cores)."""
    parts = min(rt.THREADS, 8)
    return (
        parts > 1
        and x.size >= max(rt.PARALLEL_MIN, 64 * parts)
        and x.size < 1 << 32
        and _packable(x, x.size)
    )


def _order(x: Array, axis: int, descending: bool) -> Array:
    if _packable(x, x.shape[axis]) and x.shape[axis] < 1 << 32:
        return _packed_order(x, axis, descending)
    return sort_indices(x, axis, descending)


def _publish(x: Array, order: Array, axis: int, plan: cv.OperationPlan) -> tuple[Array, Array]:
    values = rt.empty(order.shape, plan.outputs[0].numpy, order.size)
    indices = rt.empty(order.shape, np.dtype(np.int64), order.size)
    np.copyto(indices, order)
    if x.ndim == 1:
        rt.chunked(lambda target, index: np.take(x, index, out=target), values, (indices,))
    else:
        np.copyto(values, np.take_along_axis(x, indices, axis=axis))
    return values, indices


def _scalar_case(plan: cv.OperationPlan, x: Array, axis: Any, k: int | None) -> Any:
    reduced_axes(axis, 0)  # validates 0 / -1
    if k is not None and k > 1:
        msg = f"k={k} is larger than the 1 element of a 0-d input; pass k <= 1"
        raise KernelValueError(msg)
    size = 0 if k == 0 else 1
    shape = (0,) if k == 0 else ()
    values = rt.empty(shape, plan.outputs[0].numpy, size)
    indices = rt.empty(shape, np.dtype(np.int64), size)
    if size:
        values[()] = x
        indices[()] = 0
    return values, indices


def sort(plan: cv.OperationPlan, options: Any, x: Array) -> tuple[Array, Array]:
    """(values, int64 indices) sorted stably along ``axis``; ``stable=False`` is stable too."""
    axis = -1 if options is None else options.axis
    descending = False if options is None else options.descending
    if x.ndim == 0:
        result: tuple[Array, Array] = _scalar_case(plan, x, axis, None)
        return result
    axis = lane_axes(axis, x.ndim)
    if x.ndim == 1 and _bucketed(x):
        indices = _bucket_sort(x, descending, min(rt.THREADS, 8))
        return _unpack(x, indices, descending, plan), indices
    return _publish(x, _order(x, axis, descending), axis, plan)


def _candidates(x: Array, k: int, offset: int, largest: bool) -> Array:
    """Positions (ascending, plus ``offset``) of every element of ``x`` that can be in its top k.

    Partitioning puts NaN last, i.e. ranks it largest, as the required order does.
    """
    n = x.size
    if k >= n:
        return np.arange(offset, offset + n)
    if largest:
        threshold = np.partition(x, n - k)[n - k]
        if threshold != threshold:  # the k largest are all NaN
            mask = np.isnan(x)
        else:
            mask = np.less(x, threshold)
            np.logical_not(mask, out=mask)  # >= threshold, or NaN
    else:
        threshold = np.partition(x, k - 1)[k - 1]
        if threshold != threshold:  # fewer than k numbers: every element qualifies
            return np.arange(offset, offset + n)
        mask = np.less_equal(x, threshold)
    return np.flatnonzero(mask) + offset


def _top_positions(x: Array, k: int, largest: bool) -> Array:
    """Positions of the k best elements of the 1-D ``x``, best first, ties by position."""
    if x.dtype == np.bool_:
        x = x.view(np.uint8)
    elif is_bfloat16(x.dtype):
        x = x.astype(np.float32)  # exact; NumPy cannot partition bfloat16
    parts = rt.THREADS if x.size >= rt.PARALLEL_MIN else 1
    step = -(-x.size // parts)
    found: list[Array] = [np.empty(0, np.int64)] * parts
    tasks = []
    for i in range(parts):
        low = i * step

        def task(i: int = i, low: int = low) -> None:
            found[i] = _candidates(x[low : low + step], k, low, largest)

        tasks.append(task)
    rt.run_parallel(tasks)
    positions = np.concatenate(found)  # ascending: halves in order, each ascending
    order = sort_indices(x[positions], 0, largest)
    best: Array = positions[order[:k]]
    return best


def topk(plan: cv.OperationPlan, options: Any, x: Array) -> tuple[Array, Array]:
    """The ``k`` largest (or smallest) along ``axis``, best first; ties go to the lower index."""
    k = options.k
    axis = options.axis
    if x.ndim == 0:
        result: tuple[Array, Array] = _scalar_case(plan, x, axis, k)
        return result
    axis = lane_axes(axis, x.ndim)
    extent = x.shape[axis]
    if k > extent:
        msg = (
            f"k={k} is larger than axis {axis} of extent {extent} (shape {x.shape}); "
            f"pass k <= {extent}"
        )
        raise KernelValueError(msg)
    if x.ndim == 1 and 0 < k < extent:
        return _publish(x, _top_positions(x, k, options.largest), axis, plan)
    order = _order(x, axis, options.largest)
    return _publish(x, np.take(order, np.arange(k), axis=axis), axis, plan)


SORTING_KERNELS = {"sort": sort, "topk": topk}
"""Sorting names -> kernel(plan, options, input) returning (values, indices)."""
