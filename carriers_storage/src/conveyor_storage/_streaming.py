"""Streaming plumbing of a TiledEvictable's direct operations, tile by tile under the budget.

A ``_Session`` is what one direct operation (or its backward) holds: it checks the budget
before work, marks the operands' tiles busy, lets the residency policy free the room streaming
needs, and loads tiles (a FileBacked secondary's tiles into buffers it reuses) while counting
their bytes in the carrier's ledger. ``_prefetched`` runs the next load on a background thread
while the caller computes (disk and compute overlap). The operations themselves live in
``_tiled_elementwise``, ``_tiled_reductions`` and ``_tiled_matmul``; ``_direct`` prepares them.
Tiles move only as whole spans.

A lazy TiledEvictable (``map_tiles``' result) has a ``Recipe``: its tile (or row chunk) ``c`` is
``fn`` of chunk ``c`` of each source. A session over it also holds its sources (budget checks,
busy marks), and ``load`` reads the source chunks into reused compute tiles of the primary
class (a FileBacked chunk is read straight into one, no copy) and returns a ``_Pending``
that ``finish`` turns into values by calling ``fn`` on the calling thread: the next chunk is
read on the prefetch thread meanwhile, and ``fn``'s results die before its next call, so the
compute class's buffer pool hands the same memory back every step.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

import conveyor as cv
from conveyor.sdk import progress_active, report_progress
from conveyor_storage._spans import aligned_bytes
from conveyor_storage._tiles import Coord, Grid, TileMap, TileSet
from conveyor_storage._transitions import checked_plan, claim, write_back
from conveyor_storage.file_backed import FileBacked

if TYPE_CHECKING:
    from concurrent.futures import Future

    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = [
    "READ_CHUNK_BYTES",
    "Hold",
    "Recipe",
    "Step",
    "chunkable",
    "step_region",
    "steps",
]  # and the underscore helpers the operation modules share

_Array = np.ndarray[Any, Any]
Rows = tuple[int, int] | None
#: Tiles in a FileBacked secondary stream in row chunks of at most this many bytes, read on the
#: prefetch thread into reused buffers: measured (docs/decisions.md) against whole-tile reads,
#: the chunks stay in cache while they are reduced, so a warm read is not a second memory pass.
READ_CHUNK_BYTES: Final = 4 << 20
#: Chunks of a stream through a lazy ``map_tiles`` result are at most this large: ``fn``'s
#: results and temporaries stay in cache beside the chunks read ahead (1 GiB variance pass in
#: fresh processes, load 1-2: median 0.35 s with 2 MiB chunks against 0.39 s with 4 MiB).
LAZY_CHUNK_BYTES: Final = 2 << 20


def _operand(x: cv.Tensor) -> tuple[TiledEvictable, TileMap]:
    carrier: TiledEvictable = x.carrier  # type: ignore[assignment]  # bound on TiledEvictable
    return carrier, carrier.footprint(x.layout, "direct operation")


class Recipe:
    """How a lazy TiledEvictable computes its tiles: ``fn`` of the same tile of each source.

    ``rowwise`` says ``fn`` maps each row (first-axis index) of its operands to the same row of
    its result, so it may be called on row chunks of a tile. The sources' versions are
    recorded: a source written since would give other values than ``map_tiles`` promised.
    """

    __slots__ = ("fn", "rowwise", "sources", "tensors", "versions")

    def __init__(
        self,
        fn: Callable[..., cv.Tensor],
        tensors: tuple[cv.Tensor, ...],
        sources: list[tuple[TiledEvictable, TileMap]],
        rowwise: bool,
    ) -> None:
        self.fn, self.tensors, self.sources, self.rowwise = fn, tensors, sources, rowwise
        self.versions = [c.version for c, _ in sources]

    def check(self, what: str) -> None:
        """Refuse to compute from sources released or written since ``map_tiles``."""
        for (source, _), version in zip(self.sources, self.versions, strict=True):
            if source.released or source.version != version:
                happened = "released" if source.released else "written"
                msg = (
                    f"{what} on TiledEvictable: an operand of this lazy map_tiles result was "
                    f"{happened} after map_tiles, and the lazy tiles are computed from the "
                    f"operands when they are read; call .carrier.materialize() on the result "
                    f"(or map_tiles(..., lazy=False)) before changing its operands"
                )
                raise RuntimeError(msg)

    def call(self, like: TiledEvictable, args: Sequence[cv.Tensor], shape: tuple[int, ...]) -> Any:
        """``fn(*args)`` without autograd, checked to be a ``shape`` tensor of ``like``'s
        primary class and dtype."""
        with cv.no_grad():
            out = self.fn(*args)
        check_result(out, like, shape, like._dt)
        return out

    def tile(self, like: TiledEvictable, coord: Coord, what: str) -> _Array:
        """Tile ``coord`` computed whole, outside any session (a copy: for reads of the whole
        tensor, projections and moves)."""
        self.check(what)
        args = []
        for source, mapping in self.sources:
            values = mapping.view(source._values(coord, what))
            tile = source._new_tile(int(values.size), source._dt)
            tile.import_span(cv.Layout(tuple(values.shape)), np.ascontiguousarray(values))
            args.append(cv.Tensor(tile, cv.Layout(tuple(values.shape))))
        out = self.call(like, args, like._grid.tile_shape)
        return np.array(out.carrier.export_span(out.layout))


def check_result(
    out: object, like: TiledEvictable, shape: tuple[int, ...], dtype: cv.DType | None
) -> None:
    """Refuse a ``map_tiles`` result that is not a ``shape`` tensor of the primary class (of
    ``dtype``, unless ``None``)."""
    primary = like.tier_classes[0]
    if not (type(out) is cv.Tensor and type(out.carrier) is primary):
        shown = type(out.carrier).__name__ if type(out) is cv.Tensor else type(out).__name__
        msg = f"map_tiles: fn must return a {primary.__name__} tensor, got {shown}"
        raise TypeError(msg)
    if out.shape != shape:
        msg = (
            f"map_tiles: fn returned shape {out.shape} for operands of shape {shape}; return "
            "one value per element of its operands"
        )
        raise TypeError(msg)
    if dtype is not None and out.dtype is not dtype:
        msg = (
            f"map_tiles: fn returned {out.dtype.name} for one tile and {dtype.name} for the "
            "first; return one dtype for every tile"
        )
        raise TypeError(msg)


class _Pending:
    """A lazy tile (or chunk) whose source chunks are loaded and whose ``fn`` has not run yet."""

    __slots__ = ("args", "carrier", "mapping", "out", "shape")

    def __init__(
        self,
        carrier: TiledEvictable,
        mapping: TileMap,
        args: list[cv.Tensor],
        shape: tuple[int, ...],
    ) -> None:
        self.carrier, self.mapping, self.args, self.shape = carrier, mapping, args, shape
        self.out: Any = None


class _Shared:
    """A DLPack producer of a compute tensor's memory as it is (a writable NumPy alias)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: cv.Tensor) -> None:
        self.tensor = tensor

    def __dlpack__(self, **_: Any) -> Any:
        return self.tensor.__dlpack__()  # legacy capsule: the memory as is

    def __dlpack_device__(self) -> Any:
        return self.tensor.__dlpack_device__()


#: A reusable read buffer: bytes, and the compute tile that shows them to a lazy tile's ``fn``
#: (``shared``: the bytes are that tile's memory; else they are copied into it).
_Buffer = tuple[_Array, cv.Carrier, bool]
#: Read buffers kept between operations (at most this many): a stream hands its chunk buffers
#: to the next one (a column mean's to the lazy pass after it), so a pipeline faults in fresh
#: memory for its buffers once, not per operation. At most 6 chunks of 4 MiB stay allocated.
SPARE_BUFFERS: Final = 6
_spare: dict[Hashable, list[_Buffer]] = {}
_spare_lock = threading.Lock()


def _key(buffer: _Buffer) -> Hashable:
    return (buffer[0].size, type(buffer[1]), buffer[1].dtype)


def _new_buffer(carrier: TiledEvictable, size: int) -> _Buffer:
    """A new read buffer of ``size`` bytes: a compute tile of ``carrier``'s primary class and
    its own memory where the class shares it through DLPack (CPU does), else beside it."""
    count = size // carrier._dt.itemsize
    tile = carrier._new_tile(count, carrier._dt)
    try:
        alias = np.from_dlpack(_Shared(cv.Tensor(tile, cv.Layout((count,)))))
        if alias.flags.writeable and alias.nbytes == size and alias.flags.c_contiguous:
            return alias.view(np.uint8), tile, True
    except (BufferError, TypeError, ValueError, RuntimeError):
        pass
    return aligned_bytes(size, 4096), tile, False


class _Session:
    """The carriers one direct operation reads: budget checks, busy marks, loads with bytes."""

    def __init__(self, name: str, carriers: Sequence[TiledEvictable]) -> None:
        self.name = name
        every: dict[int, TiledEvictable] = {}

        def add(carrier: TiledEvictable) -> None:  # a lazy carrier's sources are read too
            if id(carrier) not in every:
                every[id(carrier)] = carrier
                if carrier._recipe is not None:
                    for source, _ in carrier._recipe.sources:
                        add(source)

        for carrier in carriers:
            add(carrier)
        self.carriers = list(every.values())
        # Read buffers no tile uses now, by size and tile kind (list ops are atomic).
        self._free: dict[Hashable, list[_Buffer]] = {}
        self._made: list[_Buffer] = []  # every buffer this session took: spared or released

    def _expand(self, held: dict[int, int]) -> dict[int, int]:
        """``held`` with each lazy carrier's count added to its sources (what its steps read)."""
        by_id = {id(c): c for c in self.carriers}
        out: dict[int, int] = {}

        def give(carrier: TiledEvictable, count: int) -> None:
            out[id(carrier)] = out.get(id(carrier), 0) + count
            if carrier._recipe is not None:
                for source, _ in carrier._recipe.sources:
                    give(source, count)

        for key, count in held.items():
            if key in by_id:
                give(by_id[key], count)
            else:
                out[key] = out.get(key, 0) + count
        return out

    def room(self, held: dict[int, int], what: str) -> None:
        """Refuse (before work) unless each carrier can hold ``held[id]`` tiles at once."""
        held = self._expand(held)
        for carrier in self.carriers:
            tiles = held.get(id(carrier), 0)
            budget = carrier.max_resident_bytes
            if budget is not None and tiles * carrier.tile_bytes > budget + carrier.tile_bytes:
                msg = (
                    f"{self.name} on TiledEvictable: {what} needs {tiles} tiles of "
                    f"{carrier.tile_bytes} bytes at once, more than max_resident_bytes={budget} "
                    f"plus one tile of work space; raise the budget or use smaller tiles"
                )
                raise ValueError(msg)

    def fits(self, held: dict[int, int]) -> bool:
        """Whether each carrier can hold ``held[id]`` tiles at once (budget plus work space)."""
        held = self._expand(held)
        return all(
            c.max_resident_bytes is None
            or held.get(id(c), 0) * c.tile_bytes <= c.max_resident_bytes + c.tile_bytes
            for c in self.carriers
        )

    def ahead(self, per_step: dict[int, int], most: int = 1) -> tuple[dict[int, int], int]:
        """What the steps hold with up to ``most`` of them read ahead (as many as the budget
        allows), and how many that is (0: no prefetching)."""
        for depth in range(most, 0, -1):
            held = {k: (depth + 1) * v for k, v in per_step.items()}
            if self.fits(held):
                return held, depth
        return per_step, 0

    def begin(self, held: dict[int, int]) -> None:
        """Mark every tile busy and let each policy free the room streaming needs."""
        claimed: list[TiledEvictable] = []
        held = self._expand(held)
        try:
            for carrier in self.carriers:
                everything = TileSet(carrier._grid.coords())
                with carrier._lock:
                    claim(carrier, self.name, everything, materialize=False)
                claimed.append(carrier)
                room = max(0, held.get(id(carrier), 0) - 1) * carrier.tile_bytes
                plan = checked_plan(
                    carrier,
                    carrier._plan(TileSet(()), "stream", room),
                    TileSet(()),
                    "stream",
                )
                if len(plan.evict):
                    write_back(carrier, plan.evict, "evict")
                budget = carrier.max_resident_bytes
                if budget is not None and carrier.resident_bytes + room > budget:
                    # The policy kept too much: evict oldest-first until streaming fits.
                    extra = list(carrier._resident_set())
                    while extra and carrier.resident_bytes + room > budget:
                        write_back(carrier, TileSet([extra.pop(0)]), "evict")
        except BaseException:
            self.end(claimed)
            raise

    def end(self, carriers: Sequence[TiledEvictable] | None = None) -> None:
        for carrier in self.carriers if carriers is None else carriers:
            with carrier._lock:
                carrier._busy.difference_update(TileSet(carrier._grid.coords()).coords)
        if carriers is None:
            self._spare_buffers()

    def _spare_buffers(self) -> None:
        """Keep the free buffers for the next stream (up to ``SPARE_BUFFERS``); release the
        compute tiles of the rest."""
        free = [b for found in self._free.values() for b in found]
        made, self._made, self._free = self._made, [], {}
        kept: set[int] = set()
        with _spare_lock:
            room = SPARE_BUFFERS - sum(len(found) for found in _spare.values())
            for buffer in free[: max(0, room)]:
                _spare.setdefault(_key(buffer), []).append(buffer)
                kept.add(id(buffer))
        for buffer in made:
            if id(buffer) not in kept:
                buffer[1].release()

    def load(
        self,
        carrier: TiledEvictable,
        mapping: TileMap,
        coord: Coord,
        rows: Rows = None,
        *,
        count: bool = False,
        pending: bool = False,
    ) -> tuple[Any, Hold]:
        """Tile ``coord`` (or rows ``rows`` of it) as the tensor sees it, and what it holds
        until ``give``.

        ``count`` charges a tile the caller copies even when it is resident or implicit. A
        tile read from a FileBacked secondary lands in a buffer the session reuses, so
        streaming faults in no fresh memory per tile; ``rows`` (only for a tensor seeing the
        tiles in canonical order) reads just that part of the tile's first axis. A lazy
        carrier's tile is computed here, or with ``pending`` returned as a ``_Pending`` for
        ``finish`` (on the caller's thread). A secondary tile is read into a buffer behind a
        compute tile (``hold.buffer[1]``), which a lazy tile hands to its ``fn`` as it is.
        """
        recipe = carrier._recipe
        if recipe is not None:
            return self._load_lazy(carrier, recipe, mapping, coord, rows, pending)
        shape, size = _part(carrier, rows)
        nbytes = 0
        if count or (coord not in carrier._resident and coord not in carrier._implicit):
            carrier._ledger.take(size, self.name)
            nbytes = size
        buffer: _Buffer | None = None
        try:
            if nbytes and not count:
                buffer = self._read_reused(carrier, coord, rows, size)
            if buffer is not None:
                values = buffer[0].view(carrier._dt.numpy).reshape(shape)
            elif rows is None:
                values = carrier._values(coord, self.name)
            else:
                values = _rows_of(carrier, coord, rows, shape, self.name)
            values = mapping.view(values)
        except BaseException:
            carrier._ledger.give(nbytes)
            if buffer is not None:
                self._put_back(buffer)
            raise
        return values, Hold(nbytes, buffer)

    def _load_lazy(
        self,
        carrier: TiledEvictable,
        recipe: Recipe,
        mapping: TileMap,
        coord: Coord,
        rows: Rows,
        pending: bool,
        *,
        charge: bool = True,
    ) -> tuple[Any, Hold]:
        """Load the source chunks of a lazy tile into compute tensors; charge its result
        (unless the caller stores it at once and charges the stored tile instead)."""
        recipe.check(self.name)
        shape, size = _part(carrier, rows)
        held: list[tuple[TiledEvictable, Hold]] = []
        args: list[cv.Tensor] = []
        taken = 0
        try:
            for source, smap in recipe.sources:
                values, hold = self.load(source, smap, coord, rows)
                held.append((source, hold))
                args.append(self._argument(source, smap, coord, rows, values, hold, held))
            if charge:
                carrier._ledger.take(size, self.name)  # the result fn makes
                taken = size
            found = _Pending(carrier, mapping, args, tuple(shape))
            hold = Hold(taken, None, tuple(held), found)
            if pending:
                return found, hold
            return self.finish(found), hold
        except BaseException:
            carrier._ledger.give(taken)
            for owner, inner in held:
                self.give(owner, inner)
            raise

    def _argument(
        self,
        source: TiledEvictable,
        mapping: TileMap,
        coord: Coord,
        rows: Rows,
        values: _Array,
        hold: Hold,
        held: list[tuple[TiledEvictable, Hold]],
    ) -> cv.Tensor:
        """The compute tensor ``fn`` receives for one source chunk: the buffer's own tile, a
        resident tile as it is, or (else) a reused tile the values are copied into."""
        shape = tuple(values.shape)
        buffer = hold.buffer
        if buffer is not None and mapping.identity:  # read from the file into its tile
            if not buffer[2]:
                buffer[1].import_span(cv.Layout(shape), values)
            return cv.Tensor(buffer[1], cv.Layout(shape))
        tile = source._resident.get(coord)
        if tile is not None and mapping.identity:
            whole = cv.Layout(source._grid.tile_shape)
            first = 0 if rows is None else rows[0] * whole.strides[0]
            return cv.Tensor(tile, cv.Layout(shape, whole.strides, first))
        copy = self._buffer(source, int(values.size) * source._dt.itemsize)
        held.append((source, Hold(0, copy)))
        if copy[2]:
            np.copyto(copy[0].view(source._dt.numpy).reshape(shape), values)
        else:
            copy[1].import_span(cv.Layout(shape), np.ascontiguousarray(values))
        return cv.Tensor(copy[1], cv.Layout(shape))

    def finish(self, values: Any) -> Any:
        """Values as loaded; a ``_Pending`` lazy chunk is computed now, on this thread."""
        if type(values) is not _Pending:
            return values
        found: _Pending = values
        if found.out is None:
            recipe = found.carrier._recipe
            if recipe is None:  # materialised meanwhile: the stored tile is the value
                msg = f"{self.name} on TiledEvictable: the lazy tensor changed mid-stream"
                raise RuntimeError(msg)
            found.out = recipe.call(found.carrier, found.args, found.shape)
        out = found.out
        return found.mapping.view(out.carrier.export_span(out.layout))

    def _buffer(self, carrier: TiledEvictable, size: int) -> _Buffer:
        """A buffer of ``size`` bytes with a compute tile of ``carrier``'s primary class behind
        it: a free one of this session, one a finished stream spared, else a new one."""
        key = (size, carrier.tier_classes[0], carrier._dt)
        try:
            return self._free.get(key, []).pop()
        except IndexError:
            pass
        with _spare_lock:
            spared = _spare.get(key)
            if spared:
                buffer = spared.pop()
                self._made.append(buffer)
                return buffer
        made = _new_buffer(carrier, size)
        self._made.append(made)
        return made

    def _put_back(self, buffer: _Buffer) -> None:
        self._free.setdefault(_key(buffer), []).append(buffer)

    def _read_reused(
        self, carrier: TiledEvictable, coord: Coord, rows: Rows, size: int
    ) -> _Buffer | None:
        """Secondary tile ``coord`` (its ``rows``) read into a reused buffer, where the
        secondary is a FileBacked and the tile's box is one contiguous byte range; else
        ``None``."""
        secondary = carrier._owned["secondary"]
        box = carrier._grid.box(coord)
        if (
            type(secondary) is not FileBacked
            or coord not in carrier._current
            or coord in carrier._resident
            or not box.is_contiguous
        ):
            return None
        buffer = self._buffer(carrier, size)
        offset = box.offset * carrier._dt.itemsize
        if rows is not None:
            offset += rows[0] * (carrier.tile_bytes // _first_extent(carrier._grid))
        try:
            secondary._pread(self.name, buffer[0], offset)
        except BaseException:
            self._put_back(buffer)
            raise
        return buffer

    def give(self, carrier: TiledEvictable, hold: Hold | int) -> None:
        """Return what one load (or ``count`` bytes of held tiles) took."""
        if isinstance(hold, int):
            carrier._ledger.give(hold)
            return
        carrier._ledger.give(hold.nbytes)
        if hold.pending is not None:  # fn's result dies here, before fn runs again
            hold.pending.out = None
            hold.pending.args = []
        for owner, inner in hold.inner:
            self.give(owner, inner)
        if hold.buffer is not None:
            self._put_back(hold.buffer)


def _part(carrier: TiledEvictable, rows: Rows) -> tuple[tuple[int, ...], int]:
    """The shape and bytes of a whole tile (``rows`` None) or of its rows ``[r0, r1)``."""
    grid = carrier._grid
    if rows is None:
        return grid.tile_shape, carrier.tile_bytes
    shape = (rows[1] - rows[0], *grid.tile_shape[1:])
    return shape, carrier.tile_bytes * shape[0] // _first_extent(grid)


def _first_extent(grid: Grid) -> int:
    """The tile's extent along its first axis (rows are counted along it)."""
    return grid.tile_shape[0] if grid.tile_shape else 1


def _rows_of(
    carrier: TiledEvictable, coord: Coord, rows: tuple[int, int], shape: tuple[int, ...], what: str
) -> _Array:
    """Rows of a resident or implicit tile, exporting only those rows."""
    tile = carrier._resident.get(coord)
    if tile is not None:
        strides = cv.Layout(carrier._grid.tile_shape).strides
        return tile.export_span(cv.Layout(shape, strides, rows[0] * strides[0]))
    return carrier._values(coord, what)[rows[0] : rows[1]]


class Step(NamedTuple):
    """One streaming step: tile ``coord``, or only rows ``rows`` of its first axis."""

    coord: Coord
    rows: Rows


def chunkable(found: Sequence[tuple[TiledEvictable, TileMap]]) -> bool:
    """Whether a step may read only rows of a tile: every operand sees its tiles in canonical
    order, each tile spans whole trailing axes (one contiguous byte range), the secondaries
    are files (another storage would read the whole tile for every chunk), and a lazy
    operand's ``fn`` is row-wise over chunkable sources."""
    return all(
        m.identity
        and c._grid.tile_shape[1:] == c._grid.shape[1:]
        and (c._owned["secondary"] is None or type(c._owned["secondary"]) is FileBacked)
        and (c._recipe is None or (c._recipe.rowwise and chunkable(c._recipe.sources)))
        for c, m in found
    )


def steps(grid: Grid, tile_bytes: int, chunked: bool, lazy: bool = False) -> list[Step]:
    """Every tile in row-major order, cut into row chunks of at most ``READ_CHUNK_BYTES``
    (``LAZY_CHUNK_BYTES`` when ``lazy``: a lazy operand's fn runs on each chunk) where
    ``chunked`` (the operands see their tiles in canonical order)."""
    rows = _first_extent(grid)
    limit = min(READ_CHUNK_BYTES, LAZY_CHUNK_BYTES) if lazy else READ_CHUNK_BYTES
    if not chunked or not grid.tile_shape or tile_bytes <= limit or rows < 2:
        return [Step(c, None) for c in grid.coords()]
    per = max(1, limit // (tile_bytes // rows))
    return [Step(c, (r, min(rows, r + per))) for c in grid.coords() for r in range(0, rows, per)]


def step_region(grid: Grid, step: Step) -> tuple[slice, ...]:
    """The logical region one step covers."""
    region = grid.region(step.coord)
    if step.rows is None:
        return region
    first = region[0].start
    return (slice(first + step.rows[0], first + step.rows[1]), *region[1:])


class Hold(NamedTuple):
    """What one tile load holds: ledger bytes, the reused read buffer (if any), and for a lazy
    tile its sources' holds and the pending chunk (whose ``fn`` result it keeps alive)."""

    nbytes: int
    buffer: _Buffer | None
    inner: tuple[tuple[TiledEvictable, Hold], ...] = ()
    pending: _Pending | None = None


def _prefetched(jobs: list[Callable[[], Any]], ahead: int, label: str) -> Iterator[Any]:
    """Run ``jobs`` in order, the next ``ahead`` of them on background threads while the
    caller works (``ahead`` 0 or ``False``: all on the caller's thread).

    ``job()`` returns ``(value, release)``; values not consumed (an early exit) are released.
    """
    total = len(jobs)
    if not ahead:
        for done, job in enumerate(jobs, 1):
            yield job()
            if progress_active():
                report_progress(done, total, label)
        return
    # Loaded by the first prefetching stream, not by every discovery of the storage carriers.
    from concurrent.futures import ThreadPoolExecutor

    def submit(job: Callable[[], Any]) -> Future[Any]:
        # In a copy of the caller's context: a lazy tile's fn sees its no_grad and profilers.
        return pool.submit(contextvars.copy_context().run, job)

    from collections import deque

    depth = int(ahead)
    with ThreadPoolExecutor(depth, thread_name_prefix="conveyor-prefetch") as pool:
        futures: deque[Future[Any]] = deque(submit(job) for job in jobs[:depth])
        try:
            for done in range(1, total + 1):
                result = futures.popleft().result()
                if done + depth <= total:
                    futures.append(submit(jobs[done + depth - 1]))
                yield result
                if progress_active():
                    report_progress(done, total, label)
        finally:
            for future in futures:
                try:
                    _, release = future.result()
                    release()
                except Exception:  # a failed prefetch holds nothing
                    pass


def _result(like: TiledEvictable, spec: cv.ResultSpec) -> cv.Tensor:
    carrier = like._new_tile(spec.layout.size, spec.dtype)
    return cv.Tensor(carrier, spec.layout)


def _box(shape: tuple[int, ...], origin: tuple[int, ...], extent: tuple[int, ...]) -> cv.Layout:
    strides = cv.Layout(shape).strides
    offset = sum(o * s for o, s in zip(origin, strides, strict=True))
    return cv.Layout(extent, strides, offset)
