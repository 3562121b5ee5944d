"""Streaming plumbing of a TiledEvictable's direct operations, tile by tile under the budget.

A ``_Session`` is what one direct operation (or its backward) holds: it checks the budget
before work, marks the operands' tiles busy, lets the residency policy free the room streaming
needs, and loads tiles (a FileBacked secondary's tiles into buffers it reuses) while counting
their bytes in the carrier's ledger. ``_prefetched`` runs the next load on a background thread
while the caller computes (disk and compute overlap). The operations themselves live in
``_tiled_elementwise``, ``_tiled_reductions`` and ``_tiled_matmul``; ``_direct`` prepares them.
Tiles move only as whole spans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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


def _operand(x: cv.Tensor) -> tuple[TiledEvictable, TileMap]:
    carrier: TiledEvictable = x.carrier  # type: ignore[assignment]  # bound on TiledEvictable
    return carrier, carrier.footprint(x.layout, "direct operation")


class _Session:
    """The carriers one direct operation reads: budget checks, busy marks, loads with bytes."""

    def __init__(self, name: str, carriers: Sequence[TiledEvictable]) -> None:
        self.name = name
        self.carriers = list({id(c): c for c in carriers}.values())
        self._free: list[_Array] = []  # read buffers no tile uses now (list ops are atomic)

    def room(self, held: dict[int, int], what: str) -> None:
        """Refuse (before work) unless each carrier can hold ``held[id]`` tiles at once."""
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
        return all(
            c.max_resident_bytes is None
            or held.get(id(c), 0) * c.tile_bytes <= c.max_resident_bytes + c.tile_bytes
            for c in self.carriers
        )

    def ahead(self, per_step: dict[int, int]) -> tuple[dict[int, int], bool]:
        """What one step holds with prefetching when the budget allows it, else without."""
        doubled = {k: 2 * v for k, v in per_step.items()}
        return (doubled, True) if self.fits(doubled) else (per_step, False)

    def begin(self, held: dict[int, int]) -> None:
        """Mark every tile busy and let each policy free the room streaming needs."""
        claimed: list[TiledEvictable] = []
        try:
            for carrier in self.carriers:
                everything = TileSet(carrier._grid.coords())
                with carrier._lock:
                    claim(carrier, self.name, everything)
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

    def load(
        self,
        carrier: TiledEvictable,
        mapping: TileMap,
        coord: Coord,
        rows: Rows = None,
        *,
        count: bool = False,
    ) -> tuple[_Array, Hold]:
        """Tile ``coord`` (or rows ``rows`` of it) as the tensor sees it, and what it holds
        until ``give``.

        ``count`` charges a tile the caller copies even when it is resident or implicit. A
        tile read from a FileBacked secondary lands in a buffer the session reuses, so
        streaming faults in no fresh memory per tile; ``rows`` (only for a tensor seeing the
        tiles in canonical order) reads just that part of the tile's first axis.
        """
        grid = carrier._grid
        shape = grid.tile_shape if rows is None else (rows[1] - rows[0], *grid.tile_shape[1:])
        size = (
            carrier.tile_bytes
            if rows is None
            else carrier.tile_bytes * shape[0] // _first_extent(grid)
        )
        nbytes = 0
        if count or (coord not in carrier._resident and coord not in carrier._implicit):
            carrier._ledger.take(size, self.name)
            nbytes = size
        buffer = None
        try:
            if nbytes and not count:
                buffer = self._read_reused(carrier, coord, rows, size)
            if buffer is not None:
                values = buffer.view(carrier._dt.numpy).reshape(shape)
            elif rows is None:
                values = carrier._values(coord, self.name)
            else:
                values = _rows_of(carrier, coord, rows, shape, self.name)
            values = mapping.view(values)
        except BaseException:
            carrier._ledger.give(nbytes)
            if buffer is not None:
                self._free.append(buffer)
            raise
        return values, Hold(nbytes, buffer)

    def _read_reused(
        self, carrier: TiledEvictable, coord: Coord, rows: Rows, size: int
    ) -> _Array | None:
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
        try:
            buffer = self._free.pop()
        except IndexError:
            buffer = aligned_bytes(size, 4096)
        if buffer.size != size:
            buffer = aligned_bytes(size, 4096)
        offset = box.offset * carrier._dt.itemsize
        if rows is not None:
            offset += rows[0] * (carrier.tile_bytes // _first_extent(carrier._grid))
        try:
            secondary._pread(self.name, buffer, offset)
        except BaseException:
            self._free.append(buffer)
            raise
        return buffer

    def give(self, carrier: TiledEvictable, hold: Hold | int) -> None:
        """Return what one load (or ``count`` bytes of held tiles) took."""
        if isinstance(hold, int):
            carrier._ledger.give(hold)
            return
        carrier._ledger.give(hold.nbytes)
        if hold.buffer is not None:
            self._free.append(hold.buffer)


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
    order, each tile spans whole trailing axes (one contiguous byte range), and the
    secondaries are files (another storage would read the whole tile for every chunk)."""
    return all(
        m.identity
        and c._grid.tile_shape[1:] == c._grid.shape[1:]
        and (c._owned["secondary"] is None or type(c._owned["secondary"]) is FileBacked)
        for c, m in found
    )


def steps(grid: Grid, tile_bytes: int, chunked: bool) -> list[Step]:
    """Every tile in row-major order, cut into row chunks of at most ``READ_CHUNK_BYTES``
    where ``chunked`` (the operands see their tiles in canonical order)."""
    rows = _first_extent(grid)
    if not chunked or not grid.tile_shape or tile_bytes <= READ_CHUNK_BYTES or rows < 2:
        return [Step(c, None) for c in grid.coords()]
    per = max(1, READ_CHUNK_BYTES // (tile_bytes // rows))
    return [Step(c, (r, min(rows, r + per))) for c in grid.coords() for r in range(0, rows, per)]


def step_region(grid: Grid, step: Step) -> tuple[slice, ...]:
    """The logical region one step covers."""
    region = grid.region(step.coord)
    if step.rows is None:
        return region
    first = region[0].start
    return (slice(first + step.rows[0], first + step.rows[1]), *region[1:])


class Hold(NamedTuple):
    """What one tile load holds: ledger bytes, and the reused read buffer (if any)."""

    nbytes: int
    buffer: _Array | None


def _prefetched(jobs: list[Callable[[], Any]], ahead: bool, label: str) -> Iterator[Any]:
    """Run ``jobs`` in order, the next one on a background thread while the caller works.

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

    with ThreadPoolExecutor(1, thread_name_prefix="conveyor-prefetch") as pool:
        future: Future[Any] | None = pool.submit(jobs[0]) if jobs else None
        try:
            for done in range(1, total + 1):
                assert future is not None  # one future per job
                result = future.result()
                future = pool.submit(jobs[done]) if done < total else None
                yield result
                if progress_active():
                    report_progress(done, total, label)
        finally:
            if future is not None:
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
