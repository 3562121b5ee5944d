"""Storage of a DaskCarrier: its slots as one chunked dask array, lazy until something reads it.

A handle keeps ``base``, a dask array whose row-major flattening is the carrier's slots: data
stored on the cluster (values sent from this process, persisted results) or, for an
operation's result, the lazy graph that computes it (``stored`` tells which). ``settle``
decides when a result is computed before it is read: in eager mode always, else only once its
graph grows past the layer bound. A kernel's result keeps the shape the kernel computed, so
the next kernel reads it with its natural chunks and no rechunking; data that arrived flat is
reshaped once, on first use, and kept that way. A tensor's layout (views: permutations,
broadcasts, offsets) is turned back into dask slicing and transposes of ``base``; only irregular
strides fall back to integer indexing. Values never pass through the client except when they
are read. On Dask's local schedulers
(``CONVEYOR_DASK_SCHEDULER=threads``) the same graphs run in this process.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import CONCRETE_DTYPES
from conveyor_dask import _cluster

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "DaskStorage",
    "Distributed",
    "chunk_bytes",
    "chunks_for",
    "compute",
    "fresh_name",
    "logical",
    "owned",
    "persist",
    "scatter",
    "settle",
]

_Array = np.ndarray[Any, Any]
# Storable dtypes: everything NumPy holds natively (bfloat16 comes from ml_dtypes, which the
# worker-side NumPy kernels of dask do not all accept).
_STORABLE: Final = frozenset(d for d in CONCRETE_DTYPES if d is not cv.bfloat16)


class Distributed:
    """Storage handle: ``base`` (a dask array), its dtype, and its chunk limit in bytes.

    Mutable on purpose: writes and kernel results replace ``base`` with a new array, and
    ``DaskCarrier.persist`` replaces a lazy ``base`` with its computed values (the same values).
    A fresh allocation holds no array at all until something reads it (``base`` is then a lazy
    ``dask.array.zeros``): kernel results replace it at once, so they never pay for the zeros.
    ``origin`` names the operation whose result ``base`` is, so a failure found when it is
    computed names that operation; ``stored`` is true once ``base`` holds data rather than a
    graph still to compute. ``reread``, for values read from a file, makes a fresh graph of
    the same reads (see ``values``); replacing ``base`` drops it.
    """

    __slots__ = (
        "__weakref__",
        "_base",
        "dtype",
        "limit",
        "origin",
        "reread",
        "session",
        "size",
        "stored",
    )

    def __init__(
        self,
        base: da.Array | None,
        size: int,
        dtype: cv.DType,
        limit: int,
        session: Any,
        *,
        origin: str = "move",
        stored: bool = True,
        reread: Callable[[], da.Array] | None = None,
    ) -> None:
        self._base = base
        self.size = size
        self.dtype = dtype
        self.limit = limit
        self.session: _cluster._AnySession = session
        self.origin = origin
        self.stored = stored
        self.reread = reread

    @property
    def base(self) -> da.Array:
        if self._base is None:
            import dask.array as da

            chunks = chunks_for((self.size,), self.dtype.numpy, self.limit)
            self._base = da.zeros((self.size,), dtype=self.dtype.numpy, chunks=chunks)
        return self._base

    @base.setter
    def base(self, value: da.Array) -> None:
        self._base = value
        self.reread = None

    def values(self) -> da.Array:
        """The array an operation builds on: ``base``, or for file data a fresh read of it.

        Each consumer of file data gets reads of its own (a new graph name), so dask fuses
        them into that consumer and reads each chunk again rather than hold it in memory for
        another consumer: ``(x - x.mean(0))`` streams the file twice instead of keeping all of
        ``x`` between the two passes (reading from a file costs a copy; holding it, memory the
        size of the data).
        """
        return self.reread() if self.reread is not None else self.base

    def drop(self) -> None:
        """Forget the array (its futures), so the workers free its blocks; storage is now empty."""
        self._base = None
        self.reread = None
        self.size = 0

    @property
    def chunks(self) -> tuple[int, ...]:
        """The largest chunk's shape."""
        return tuple(int(c) for c in self.base.chunksize)


def chunks_for(shape: tuple[int, ...], dtype: Any, limit: int) -> tuple[tuple[int, ...], ...]:
    """Dask's automatic chunks for ``shape`` under a byte ``limit`` (squarish blocks)."""
    from dask.array.core import normalize_chunks

    if 0 in shape:  # dask's automatic chunking divides by the size; an empty array is one chunk
        return tuple((n,) for n in shape)
    found: tuple[tuple[int, ...], ...] = normalize_chunks(
        "auto", shape, limit=max(limit, 1), dtype=np.dtype(dtype)
    )
    return found


def chunk_bytes(shape: tuple[int, ...], dtype: cv.DType, session: Any) -> int:
    """The chunk byte limit for an array of ``shape`` and ``dtype`` on ``session``'s cluster."""
    return _cluster.chunk_limit(math.prod(shape) * np.dtype(dtype.numpy).itemsize, session)


# Graph names carry a random tag (other clients may share the scheduler), the process id (a
# forked child keeps the tag and the count) and a count.
_TAG: Final = os.urandom(6).hex()
_COUNT: Final = itertools.count()
# Values up to this many bytes travel inside the graph that stores them, submitted without
# waiting (the next kernel's wait covers them); larger ones are scattered to the workers.
_INLINE_BYTES: Final = 1 << 20


def fresh_name(prefix: str) -> str:
    """A unique graph name.

    Naming a layer skips dask's tokenizing of its arguments (a pickle and a hash per call);
    uniqueness is right because every call publishes a fresh result. A counter is cheaper than
    a UUID per call and as unique within the scheduler.
    """
    return f"{prefix}-{_TAG}-{os.getpid():x}-{next(_COUNT)}"


def scatter(values: _Array, dtype: cv.DType, session: Any) -> tuple[da.Array, int]:
    """``values`` cut into chunks on the workers, as one dask array.

    Small values ride in the graph, so storing them costs no round trip of its own (and a
    worker lost later can recompute them); larger ones go straight to the workers.
    """
    import dask.array as da

    limit = chunk_bytes(values.shape, dtype, session)
    chunks = chunks_for(values.shape, dtype.numpy, limit)
    if values.size == 0:
        return da.zeros(values.shape, dtype=dtype.numpy, chunks=chunks), limit
    if session.local:
        # The chunks are slices of one copy in this process's memory (a copy: ``values`` may
        # be a view of memory its owner writes later).
        return da.from_array(np.array(values), chunks=chunks, name=fresh_name("values")), limit
    if values.nbytes <= _INLINE_BYTES:
        inline = da.from_array(np.array(values), chunks=chunks, name=fresh_name("values"))
        (array,) = persist("move", [inline], session, wait=False)
        return array, limit
    starts = [list(itertools.accumulate(c, initial=0)) for c in chunks]
    grid = list(itertools.product(*(range(len(c)) for c in chunks)))
    blocks = [
        np.ascontiguousarray(
            values[tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, index, strict=True))]
        )
        for index in grid
    ]
    session.check("move")
    futures = session.client.scatter(blocks, hash=False)
    # One layer of futures, as a persisted array holds: ``da.block`` over ``from_delayed``
    # parts made a layer per chunk and more to join them, which counted toward the layer
    # bound (a 256-chunk tensor would have persisted every result built on it).
    from dask.highlevelgraph import HighLevelGraph

    name = fresh_name("values")
    layer = {(name, *index): future for index, future in zip(grid, futures, strict=True)}
    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    return da.Array(graph, name, chunks=chunks, dtype=dtype.numpy), limit


def persist(
    operation: str,
    arrays: list[da.Array],
    session: Any,
    *,
    wait: bool = True,
    reading: bool = False,
) -> list[da.Array]:
    """``arrays`` computed and kept on the workers; raises what the computation raised.

    ``wait=False`` only submits the work (for moves of blocks, which cannot fail as a kernel
    can, and for results persisted past the layer bound): whatever reads the result waits for
    it. On a local scheduler the work is done before this returns, whatever ``wait`` says.
    ``reading``: the computation is of lazy results asked for now (see ``_cluster.wait``).
    """
    arrays = [_owning(a) for a in arrays]
    if session.local:
        import dask

        with _local_progress(operation):
            return list(dask.persist(*arrays, scheduler=session.address))
    import distributed

    session.check(operation)
    try:
        done = list(session.client.persist(arrays))
    except OSError as exc:
        raise _cluster.scheduler_gone(operation, session.address, str(exc)) from exc
    if wait:
        with session.client.as_current():
            _cluster.wait(operation, distributed.futures_of(done), session, reading=reading)
    return done


def settle(operation: str, arrays: list[da.Array], session: Any) -> tuple[list[da.Array], bool]:
    """``arrays`` as a result keeps them, and whether they are stored (computed) now.

    Lazy by default: the graphs are kept as they are, and computed when read. In eager mode
    (``CONVEYOR_DASK_EAGER=1``) they are computed and waited for here, so a task's error
    surfaces at the call. A graph past the layer bound (``CONVEYOR_DASK_MAX_LAYERS``) is
    persisted without waiting, so a long chain or a training loop does not build an ever
    larger graph to optimise and recompute at every read.
    """
    if _cluster.eager():
        return persist(operation, arrays, session), True
    bound = _cluster.max_layers()
    if bound and any(len(a.dask.layers) > bound for a in arrays):
        return persist(operation, arrays, session, wait=False), True
    return arrays, False


def compute(operation: str, array: da.Array, session: Any) -> _Array:
    """``array``'s values on the client (the only place values leave the cluster).

    ``operation`` names the operation whose result is read, so a failure found only now (a
    task's error, a lost worker) names the call that caused it.
    """
    if session.local:
        import dask

        with _local_progress(operation):
            (found,) = dask.compute(array, scheduler=session.address)
        return owned(np.asarray(found))
    session.check(operation)
    try:
        future = session.client.compute(array)
    except OSError as exc:
        raise _cluster.scheduler_gone(operation, session.address, str(exc)) from exc
    with session.client.as_current():
        _cluster.wait(operation, [future], session, reading=True)
    return owned(np.asarray(future.result()))


def _local_progress(operation: str) -> Any:
    """A ``cv.progress`` bridge for a local-scheduler computation, or nothing to do."""
    from conveyor.sdk import progress_active

    if not progress_active():
        return contextlib.nullcontext()
    from conveyor_dask._progress import LocalBridge

    return LocalBridge(f"{operation} on DaskCarrier")


def owned(block: _Array) -> _Array:
    """``block``, copied if it is a view of a mapped file (a chunk read from a FileBacked file).

    Such views cost no copy while a graph streams them, but a value that is kept or handed
    out must not follow later writes to the file, nor keep the mapping open.
    """
    base: Any = block
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return np.array(block)
        base = getattr(base, "base", None)
    return block


def _owning(array: da.Array) -> da.Array:
    """``array`` with every block that views a mapped file copied (see ``owned``)."""
    return array.map_blocks(owned, dtype=array.dtype, meta=array._meta, name=fresh_name("own"))


def _flat(handle: Distributed) -> da.Array:
    return handle.base.reshape(-1) if handle.base.ndim != 1 else handle.base


def _contiguous_block(layout: cv.Layout) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """For a layout that permutes and broadcasts a contiguous run of slots: (order, extents).

    Axes of extent 1 or stride 0 are left out; ``order`` lists the other axes from the
    slowest-moving stride to stride 1, ``extents`` their extents in that order.
    """
    axes = [a for a, (n, s) in enumerate(zip(layout.shape, layout.strides, strict=True)) if n > 1]
    moving = sorted((a for a in axes if layout.strides[a] != 0), key=lambda a: -layout.strides[a])
    expected = 1
    for a in reversed(moving):
        if layout.strides[a] != expected:
            return None
        expected *= layout.shape[a]
    return tuple(moving), tuple(layout.shape[a] for a in moving)


def logical(handle: Distributed, layout: cv.Layout) -> da.Array:
    """The values under ``layout`` as a dask array of ``layout.shape`` (lazy, no compute)."""
    import dask.array as da

    base = handle.values()
    if layout.shape == base.shape and layout == cv.Layout.contiguous(base.shape):
        return base
    if layout.size == 0:
        return da.zeros(layout.shape, dtype=handle.dtype.numpy)
    if layout == cv.Layout.contiguous(layout.shape) and layout.size == handle.size:
        if base.ndim <= 1 and len(layout.shape) > 1:
            # Data that arrived flat: keep it in this shape with squarish chunks from now on.
            # Stored data is moved into that shape on the workers, not waited for: moving
            # stored blocks cannot fail the way a kernel can, and whatever reads it waits anyway
            # (a lost worker is reported there). A lazy graph stays lazy.
            chunks = chunks_for(layout.shape, handle.dtype.numpy, handle.limit)
            shaped = base.reshape(layout.shape).rechunk(chunks)
            if handle.stored:
                (shaped,) = persist("reshape", [shaped], handle.session, wait=False)
            handle.base = shaped
            return shaped
        return base.reshape(layout.shape)
    transposed = _as_transpose(layout, base.shape)
    if transposed is not None:
        return base.transpose(transposed)
    block = _contiguous_block(layout)
    flat = _flat(handle)
    if block is None:  # irregular strides: gather the slots one by one
        return flat[_slot_indices(layout).reshape(-1)].reshape(layout.shape)
    order, extents = block
    values = flat[layout.offset : layout.offset + math.prod(extents)].reshape(extents)
    # Put the moving axes back in their order, then add the extent-1 and stride-0 axes.
    values = values.transpose(tuple(int(i) for i in np.argsort(order))) if order else values
    present = sorted(order)
    index = tuple(slice(None) if a in present else None for a in range(len(layout.shape)))
    return da.broadcast_to(values[index], layout.shape)


def _as_transpose(layout: cv.Layout, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The axis order that makes ``layout`` a transpose of a contiguous ``shape``, if one does."""
    if layout.offset or len(shape) != len(layout.shape) or len(shape) < 2 or 1 in shape:
        return None
    strides = cv.Layout.contiguous(shape).strides
    where = {s: i for i, s in enumerate(strides)}
    perm = tuple(where.get(s, -1) for s in layout.strides)
    if sorted(perm) != list(range(len(shape))):
        return None
    if any(layout.shape[j] != shape[p] for j, p in enumerate(perm)):
        return None
    return perm


def _slot_indices(layout: cv.Layout) -> _Array:
    positions = np.full(layout.shape, layout.offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(layout.shape, layout.strides, strict=True)):
        shape = [1] * len(layout.shape)
        shape[axis] = n
        positions = positions + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return positions


class DaskStorage(cv.StorageProvider):
    """Storage provider: a lazily zero-filled dask array per carrier, replaced on every write."""

    # An index out of range is found by the gather task when the values are computed.
    deferred_values = True

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return dtype in _STORABLE

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return size * np.dtype(dtype.numpy).itemsize

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Distributed:
        if options:
            msg = f"allocate on DaskCarrier: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        session = _cluster.session()
        return Distributed(None, size, dtype, chunk_bytes((size,), dtype, session), session)

    def release(self, handle: Distributed) -> None:
        handle.drop()

    def read(self, handle: Distributed, index: int) -> Any:
        return compute(handle.origin, _flat(handle)[index], handle.session).item()

    def write(self, handle: Distributed, index: int, value: Any) -> None:
        flat = _flat(handle).copy()
        flat[index] = np.asarray(value).astype(handle.dtype.numpy)
        _store(handle, "write", flat)

    def export_span(self, handle: Distributed, layout: cv.Layout, dtype: cv.DType) -> _Array:
        return compute(handle.origin, logical(handle, layout), handle.session)

    def import_span(
        self, handle: Distributed, layout: cv.Layout, dtype: cv.DType, values: _Array
    ) -> None:
        values = np.asarray(values, dtype.numpy)
        if layout == cv.Layout.contiguous(layout.shape) and layout.size == handle.size:
            handle.base, handle.limit = scatter(values, dtype, handle.session)
            handle.origin, handle.stored = "move", True
            return
        flat = _flat(handle).copy()
        flat[_slot_indices(layout).reshape(-1)] = values.reshape(-1)
        _store(handle, "import_span", flat)


def _store(handle: Distributed, operation: str, array: da.Array) -> None:
    """``array`` as ``handle``'s new slots, settled like a kernel's result.

    ``origin`` stays: the values still come from the operation that made them, changed here.
    """
    (handle.base,), handle.stored = settle(operation, [array], handle.session)
