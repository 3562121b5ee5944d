"""Moves of DaskCarrier: CPU and Generic both ways, FileBacked in, and Dask to Dask.

Into Dask, values are cut into chunks and sent to the workers directly; out of Dask they are
computed and gathered once. From a FileBacked tensor no value passes through this process:
each task opens the file on its worker and reads only its own chunk, so a file larger than any
worker's memory moves (and reduces) chunk by chunk. Workers on other machines need the file on
a filesystem they share with this one.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

import conveyor as cv
from conveyor.sdk import span_copy
from conveyor_dask import _cluster, _storage

__all__ = ["FromFile", "IntoDask", "OutOfDask", "WithinDask"]


def _wrap(destination: type[cv.Carrier], base: Any, dtype: cv.DType, limit: int) -> cv.Tensor:
    size = math.prod(base.shape)
    handle = _storage.Distributed(base, size, dtype, limit, _cluster.session())
    carrier = cv.adopt_storage(destination, handle, handle.size, dtype)
    return cv.Tensor(carrier, cv.Layout(tuple(base.shape)))


class IntoDask(cv.TransferProvider):
    """A NumPy-exporting tensor (CPU, Generic) scattered to the workers in chunks."""

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        if options:
            msg = f"move to {destination.__name__}: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        values = np.asarray(source.carrier.export_span(source.layout))
        base, limit = _storage.scatter(values, source.dtype, _cluster.session())
        return _wrap(destination, base, source.dtype, limit)


class OutOfDask(cv.TransferProvider):
    """A Dask tensor computed and copied into a fresh tensor of another carrier."""

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        return span_copy(source, destination, **options)


class WithinDask(cv.TransferProvider):
    """A contiguous copy made on the workers (values never reach this process)."""

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        handle: _storage.Distributed = cv.storage_handle(source.carrier)
        values = _storage.logical(handle, source.layout)
        (base,) = _storage.persist("move", [values.copy()], handle.session)
        return _wrap(destination, base, source.dtype, handle.limit)


def _read_block(
    path: str, dtype: str, size: int, layout: tuple[Any, ...], block: tuple[slice, ...]
) -> np.ndarray[Any, Any]:
    """One chunk of a file-backed tensor, read on the worker that runs the task."""
    shape, strides, offset = layout
    if size == 0:
        return np.zeros(tuple(s.stop - s.start for s in block), dtype)
    mapped = np.memmap(path, dtype=dtype, mode="r", shape=(size,))
    item = mapped.itemsize
    view = np.lib.stride_tricks.as_strided(
        mapped[offset:], shape=shape, strides=tuple(s * item for s in strides), writeable=False
    )
    return np.array(view[block])


class FromFile(cv.TransferProvider):
    """A FileBacked tensor read by the workers, each task its own chunk of the file."""

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        import dask
        import dask.array as da

        if options:
            msg = f"move to {destination.__name__}: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        session = _cluster.session()
        layout, dtype = source.layout, source.dtype
        limit = _storage.chunk_bytes(layout.shape, dtype, session)
        chunks = _storage.chunks_for(layout.shape, dtype.numpy, limit)
        path = source.carrier.path  # type: ignore[attr-defined]  # FileBacked's public path
        spec = (layout.shape, layout.strides, layout.offset)
        name = np.dtype(dtype.numpy).str
        starts = [list(itertools.accumulate(c, initial=0)) for c in chunks]
        grid = list(itertools.product(*(range(len(c)) for c in chunks)))
        parts = np.empty(tuple(len(c) for c in chunks), dtype=object)
        read = dask.delayed(_read_block, pure=True)
        for index in grid:
            block = tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, index, strict=True))
            shape = tuple(b.stop - b.start for b in block)
            task = read(path, name, source.carrier.size, spec, block)
            parts[index] = da.from_delayed(task, shape=shape, dtype=dtype.numpy)
        values = da.block(parts.tolist()) if layout.shape else parts[()]
        (base,) = _storage.persist("move", [values], session)
        return _wrap(destination, base, dtype, limit)
