"""Span helpers shared by the storage carriers: byte order, aligned buffers, strided views, chunks.

Everything here works through the public carrier contract (``allocate``, ``export_span``,
``import_span``), so the same helpers serve every carrier a storage route or an ``Evictable``
composes, including carriers from other distributions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np

import conveyor as cv

__all__ = [
    "CHUNK_BYTES",
    "aligned_bytes",
    "chunks",
    "copy_range",
    "copy_whole",
    "sibling_allocator",
    "storage_numpy",
    "strided",
]

#: Bulk copies move at most this many bytes per step: large enough that per-call overhead is
#: noise, small enough that a temporary export stays in cache and bounds extra memory.
CHUNK_BYTES: Final = 8 << 20

Allocator = Callable[[int, cv.DType], cv.Carrier]


def storage_numpy(dtype: cv.DType) -> np.dtype[Any]:
    """The NumPy dtype of ``dtype``'s raw little-endian storage (bfloat16: its 2-byte pattern)."""
    found = dtype.numpy
    if found.kind in "biufc" and found.itemsize > 1:
        return found.newbyteorder("<")
    return found


def aligned_bytes(nbytes: int, alignment: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A writable uint8 buffer of ``nbytes`` whose first byte sits on an ``alignment`` boundary."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes]


def strided(
    flat: np.ndarray[Any, Any], layout: cv.Layout, base: int = 0, *, writeable: bool = False
) -> np.ndarray[Any, Any]:
    """The elements of ``layout`` as a view of ``flat``, whose element 0 is buffer slot ``base``."""
    start = layout.offset - base
    if layout.is_contiguous:
        out = flat[start : start + layout.size].reshape(layout.shape)
    else:
        item = flat.itemsize
        out = np.lib.stride_tricks.as_strided(
            flat[start:] if layout.size else flat[:0],
            shape=layout.shape,
            strides=tuple(s * item for s in layout.strides),
            writeable=writeable,
        )
    if not writeable:
        out = out.view()
        out.flags.writeable = False
    return out


def chunks(size: int, itemsize: int) -> Iterator[tuple[int, int]]:
    """``(start, count)`` element ranges covering ``[0, size)`` in steps of ``CHUNK_BYTES``."""
    step = max(1, CHUNK_BYTES // max(itemsize, 1))
    for start in range(0, size, step):
        yield start, min(step, size - start)


def copy_range(
    source: cv.Carrier, start: int, destination: cv.Carrier, at: int, count: int
) -> None:
    """Copy ``count`` contiguous slots from ``source[start:]`` into ``destination[at:]``.

    Chunked span copies; a source offering ``_read_chunks`` (the block carrier) streams through
    one reused aligned buffer instead of exporting a fresh array per chunk.
    """
    reader = getattr(source, "_read_chunks", None)
    if callable(reader):
        for first, values in reader(start, count):
            destination.import_span(cv.Layout((values.size,), None, at + first - start), values)
        return
    for first, n in chunks(count, source.dtype.itemsize):
        values = source.export_span(cv.Layout((n,), None, start + first))
        destination.import_span(cv.Layout((n,), None, at + first), values)


def copy_whole(source: cv.Carrier, destination: cv.Carrier) -> None:
    """Copy every slot of ``source`` into ``destination`` (same size and dtype)."""
    copy_range(source, 0, destination, 0, source.size)


def sibling_allocator(carrier: cv.Carrier, *, overwrite: bool = False) -> Allocator:
    """How to allocate another carrier of ``carrier``'s kind and placement (``allocate_like``).

    With ``overwrite`` a carrier of this distribution offering ``_allocate_like_for_overwrite``
    may skip zeroing: the caller writes every slot.
    """
    if overwrite:
        like = getattr(carrier, "_allocate_like_for_overwrite", None)
        if callable(like):
            return like  # type: ignore[no-any-return]  # duck-typed optional hook
    return carrier.allocate_like
