"""Moves of DaskCarrier: CPU and Generic both ways, FileBacked in, and Dask to Dask.

Into Dask, values are cut into chunks and sent to the workers directly; out of Dask they are
computed and gathered once. From a FileBacked tensor no value passes through this process and
nothing is read at the move: each task opens the file where it runs and reads only its own
chunk when the values are computed, so a file larger than any worker's memory (or, on the
local schedulers, than this machine's) streams through a pipeline chunk by chunk. Workers on
other machines need the file on a filesystem they share with this one.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import conveyor as cv
from conveyor.sdk import span_copy
from conveyor_dask import _cluster, _storage

__all__ = ["FromFile", "IntoDask", "OutOfDask", "WithinDask"]


def _wrap(
    destination: type[cv.Carrier],
    base: Any,
    dtype: cv.DType,
    limit: int,
    *,
    stored: bool = True,
    reread: Any = None,
) -> cv.Tensor:
    size = math.prod(base.shape)
    session = _cluster.session()
    handle = _storage.Distributed(base, size, dtype, limit, session, stored=stored, reread=reread)
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
    """A contiguous copy made on the workers (values never reach this process).

    Lazy like an operation: dask arrays never change, so the graph of the source's values is
    already an independent copy (a later write to the source replaces its array, not this).
    """

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        handle: _storage.Distributed = cv.storage_handle(source.carrier)
        values = _storage.logical(handle, source.layout)
        (base,), stored = _storage.settle("move", [values], handle.session)
        return _wrap(destination, base, source.dtype, handle.limit, stored=stored)


def _read_block(
    path: str, dtype: str, size: int, layout: tuple[Any, ...], block: tuple[slice, ...]
) -> np.ndarray[Any, Any]:
    """One chunk of a file-backed tensor, read by the task that computes it.

    A read-only view of a mapping of the file, not a copy: the task reading it pages it in
    from the page cache (or the disk) as NumPy does with a memmap, with no copy of its own. A
    view that outlives the computation would follow the file, so whatever keeps values
    (``_storage.persist``, ``_storage.compute``) copies such blocks (``_storage.owned``); the
    mapping closes when the last view of it dies.
    """
    shape, strides, offset = layout
    if size == 0:
        return np.zeros(tuple(s.stop - s.start for s in block), dtype)
    mapped = np.memmap(path, dtype=dtype, mode="r", shape=(size,))
    item = mapped.itemsize
    view = np.lib.stride_tricks.as_strided(
        mapped[offset:], shape=shape, strides=tuple(s * item for s in strides), writeable=False
    )
    found: np.ndarray[Any, Any] = view[block]
    return found


class _FileChunks:
    """A file-backed tensor's values as an array-like that reads a chunk when sliced.

    ``dask.array.from_array`` slices it once per chunk, inside the task that needs the chunk,
    so nothing is read before a value is needed, each task opens the file itself (on a worker,
    or in this process on a local scheduler), and the graph is one layer that dask fuses with
    the operations reading it.
    """

    __slots__ = ("dtype", "keep", "layout", "ndim", "path", "shape", "size")

    def __init__(
        self, path: str, dtype: np.dtype[Any], size: int, layout: cv.Layout, keep: Any = None
    ) -> None:
        # The FileBacked carrier, kept alive (so its file is not deleted) while a graph in
        # this process may still read it; not pickled: a worker needs only the path.
        self.keep = keep
        self.path = path
        self.dtype = dtype
        self.size = size
        self.layout = (layout.shape, layout.strides, layout.offset)
        self.shape = layout.shape
        self.ndim = len(layout.shape)

    def __getitem__(self, block: tuple[slice, ...]) -> np.ndarray[Any, Any]:
        return _read_block(self.path, self.dtype.str, self.size, self.layout, block)

    def __reduce__(self) -> tuple[Any, ...]:  # slots: pickled by its constructor's arguments
        shape, strides, offset = self.layout
        return (_FileChunks, (self.path, self.dtype, self.size, cv.Layout(shape, strides, offset)))


class FromFile(cv.TransferProvider):
    """A FileBacked tensor as lazy chunk reads: each task reads its own chunk of the file.

    Nothing is read or stored by the move: the values are read when something computes them
    (and read again if a worker holding them is lost), so writing to the file before then
    changes what is read.
    """

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        if options:
            msg = f"move to {destination.__name__}: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        session = _cluster.session()
        layout, dtype = source.layout, source.dtype
        limit = _storage.chunk_bytes(layout.shape, dtype, session)
        chunks = _storage.chunks_for(layout.shape, dtype.numpy, limit)
        path = source.carrier.path  # type: ignore[attr-defined]  # FileBacked's public path
        carrier = source.carrier
        chunked = _FileChunks(path, np.dtype(dtype.numpy), carrier.size, layout, carrier)
        reread = functools.partial(_reads, chunked, chunks)
        (base,), stored = _storage.settle("move", [reread()], session)
        return _wrap(destination, base, dtype, limit, stored=stored, reread=reread)


def _reads(chunked: _FileChunks, chunks: Any) -> Any:
    """A fresh graph reading ``chunked`` chunk by chunk (a new name: see ``Distributed.values``)."""
    import dask.array as da

    return da.from_array(
        chunked,
        chunks=chunks,
        name=_storage.fresh_name("file"),
        inline_array=True,  # each task carries the (small) reader: no shared key to lose
        meta=np.empty((0,) * chunked.ndim, chunked.dtype),
    )
