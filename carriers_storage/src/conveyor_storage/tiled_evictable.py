"""TiledEvictable: a tensor larger than memory, cut into tiles that are resident one by one.

The carrier's slots are its logical tensor (``grid[i] * tile[i]`` on each axis) in row-major
order. Every tile has its own residency: ``primary`` (a tile-sized carrier of the compute class
holds it), ``secondary`` (the full-extent storage carrier holds its current value), ``implicit``
(a known constant, nothing stored), ``invalid`` (its value was discarded) or ``lazy`` (a
``map_tiles`` result not materialised: computed from its operands' tiles when read); a primary
tile is ``dirty`` when the secondary's copy is stale. At most ``max_resident_bytes`` of primary
tiles exist at once; the residency policy (LRU by default) chooses what leaves when room is
needed.

Transitions are all-or-nothing: copies happen first, outside the lock, and the new state is
published only once every copy succeeded. A dirty tile is written into its own region of the
secondary, so a crash mid-eviction never touches a committed tile. A clean tile whose secondary
copy is current is evicted by dropping its primary: no bytes move.

Direct operations (every elementwise name and activation, every reduction, ``matmul`` with a
transposed operand, ``permute``) run on the full logical tensor through the composite provider
in ``conveyor_storage._direct``, tile by tile, beside dense operands of the compute class that
broadcast along whole tiles; ``project`` / ``scatter`` exchange tiles with ordinary compute
tensors (``conveyor_storage._projection``).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Hashable, Iterable
from typing import Any, Final, Self, final

import numpy as np

import conveyor as cv
from conveyor_storage import _memory, _private_dir
from conveyor_storage._residency import (
    Ledger,
    LRUPolicy,
    ResidencyPolicy,
    ResidencyView,
    planner,
)
from conveyor_storage._spans import Allocator, sibling_allocator
from conveyor_storage._streaming import Recipe
from conveyor_storage._tile_journal import TileJournal, torn_tiles
from conveyor_storage._tiled_backward import TiledOperation
from conveyor_storage._tiled_elementwise import ELEMENTWISE
from conveyor_storage._tiled_reductions import REDUCTIONS
from conveyor_storage._tiles import (
    VIEWS,
    Coord,
    Grid,
    TileMap,
    TileSet,
    TileState,
    check_tiers,
)
from conveyor_storage._transitions import TiledResidencyFacet, claim
from conveyor_storage.file_backed import FileBacked

__all__ = ["DIRECT_OPERATIONS", "TiledEvictable"]

#: The direct surface: these names run on the full logical tensor; anything else needs project.
DIRECT_OPERATIONS: Final = ELEMENTWISE | REDUCTIONS | {"matmul"}


def _shape(what: str, value: object) -> tuple[int, ...]:
    if not (isinstance(value, tuple) and all(type(i) is int and i >= 0 for i in value)):
        msg = f"TiledEvictable: {what} must be a tuple of non-negative ints, got {value!r}"
        raise TypeError(msg)
    return value


# Measured on CPython 3.12: about 180 bytes a tile at rest, 820 while an operation streams them.
BOOKKEEPING_BYTES_PER_TILE: Final = 1024


def _check_bookkeeping(grid: Grid) -> None:
    """Refuse a grid whose per-tile bookkeeping would not fit in the memory available now."""
    need = grid.count * BOOKKEEPING_BYTES_PER_TILE
    available = _memory.available_bytes()
    if available is not None and need > available:
        msg = (
            f"TiledEvictable: a grid of {grid.count:,} tiles needs about {_memory.mib(need)} "
            f"of per-tile bookkeeping ({BOOKKEEPING_BYTES_PER_TILE} bytes a tile), more than "
            f"the {_memory.mib(available)} available; use larger tiles, for at most "
            f"{available // BOOKKEEPING_BYTES_PER_TILE:,} tiles"
        )
        raise ValueError(msg)


def _release_all(owned: dict[str, Any]) -> None:
    """Finalizer: release every tile carrier and the secondary the hierarchy still owns."""
    for tile in list(owned["tiles"].values()):
        tile.release()
    secondary = owned.get("secondary")
    if secondary is not None:
        secondary.release()
    journal: TileJournal | None = owned.get("journal")
    if journal is not None:
        journal.close(data_kept=os.path.exists(owned["journal_of"]))


def _kept_file(secondary: cv.Carrier) -> str | None:
    """The path of a FileBacked secondary that outlives the process (torn tiles matter), else
    ``None`` (a private temporary file, or storage of another kind)."""
    if type(secondary) is not FileBacked or not secondary.mutable:
        return None
    path = secondary.path
    return None if _private_dir.holds(path) else path


@final
class TiledEvictable(cv.DependentCarrier):
    """Tiles of one logical tensor with independent residency under a byte budget.

    Args:
        primary: a compute carrier (e.g. CPU) of 0 slots, or of the full extent holding the
            initial value; it sets the class resident tiles and results use.
        secondary: a storage carrier (FileBacked, BlockDeviceCarrier) of 0 slots (allocated
            beside it at the first eviction), or of the full extent holding the initial value
            when ``primary`` is empty.
        grid_shape, tile_shape: tiles per axis and the extent of one tile.
        residency_policy: a ``ResidencyPolicy`` instance (default: a fresh LRU policy).
        max_resident_bytes: the most bytes of primary tiles at once (``None``: no limit); at
            least one tile.

    The hierarchy owns both carriers. With both empty every tile is implicit zero.

    Raises:
        TypeError: a tier is not a Carrier, the dtypes differ, a shape is not a tuple of ints.
        ValueError: a tier size is neither 0 nor the full extent, the shapes' ranks differ, a
            tile extent is 0, the budget cannot hold one tile, or the grid's per-tile
            bookkeeping would not fit in the memory available (the message gives the tile count).
    """

    def __init__(
        self,
        primary: cv.Carrier,
        secondary: cv.Carrier,
        grid_shape: tuple[int, ...],
        tile_shape: tuple[int, ...],
        *,
        residency_policy: ResidencyPolicy | None = None,
        max_resident_bytes: int | None = None,
    ) -> None:
        super().__init__()
        grid = Grid(_shape("grid_shape", grid_shape), _shape("tile_shape", tile_shape))
        check_tiers(primary, secondary, grid, tile_shape)
        _check_bookkeeping(grid)
        if residency_policy is None:
            residency_policy = LRUPolicy()
        if not isinstance(residency_policy, ResidencyPolicy):
            msg = (
                "TiledEvictable: residency_policy must be a ResidencyPolicy, got "
                f"{residency_policy!r}"
            )
            raise TypeError(msg)
        tile_bytes = grid.tile_size * primary.dtype.itemsize
        if max_resident_bytes is not None and (
            type(max_resident_bytes) is not int or max_resident_bytes < tile_bytes
        ):
            msg = (
                f"TiledEvictable: max_resident_bytes={max_resident_bytes!r} cannot hold one "
                f"tile of {tile_bytes} bytes; give at least {tile_bytes} or None"
            )
            raise ValueError(msg)
        self._grid, self._dt, self._size = grid, primary.dtype, math.prod(grid.shape)
        self._tile_bytes, self._budget = tile_bytes, max_resident_bytes
        self._classes = (type(primary), type(secondary))
        self._new_tile: Allocator = sibling_allocator(primary)
        self._new_secondary: Allocator = sibling_allocator(secondary, overwrite=False)
        self._owned: dict[str, Any] = {"tiles": {}, "secondary": None}
        self._resident: dict[Coord, cv.Carrier] = self._owned["tiles"]
        self._current: set[Coord] = set()  # tiles whose secondary copy is their value
        self._implicit: dict[Coord, Any] = {}
        self._invalid: set[Coord] = set()
        self._torn: frozenset[Coord] = frozenset()  # invalid: a killed process was writing them
        self._busy: set[Coord] = set()  # tiles with a transition or operation in flight
        self._recipe: Recipe | None = None  # a lazy map_tiles result: how its tiles compute
        self._lock = threading.RLock()
        self._ledger = Ledger(
            None if max_resident_bytes is None else max_resident_bytes + tile_bytes
        )
        self._policy = residency_policy
        self._plan = planner(residency_policy)
        residency_policy.bind(
            ResidencyView(
                resident=self._resident_set, tile_bytes=tile_bytes, budget=max_resident_bytes
            )
        )
        self._finalizer = weakref.finalize(self, _release_all, self._owned)
        self._adopt_initial(primary, secondary)

    def _adopt_initial(self, primary: cv.Carrier, secondary: cv.Carrier) -> None:
        """Take the initial value from a full primary (tiles past the budget go to the
        secondary), else a full secondary, else implicit zeros."""
        coords = list(self._grid.coords())
        if secondary.size:
            self._owned["secondary"] = secondary
        else:
            secondary.release()
        if not primary.size:
            primary.release()
            if secondary.size:
                path = secondary.path if type(secondary) is FileBacked else None
                self._torn = torn_tiles(path, self._grid) if path is not None else frozenset()
                self._invalid.update(self._torn)
                self._current.update(c for c in coords if c not in self._torn)
            else:
                self._implicit.update(dict.fromkeys(coords, 0))
            return
        try:
            for coord in coords:
                self._put(coord, primary.export_span(self._grid.box(coord)))
        finally:
            primary.release()

    def _put(self, coord: Coord, values: Any) -> None:
        """Store a new value for tile ``coord``: resident while the budget has room, else
        straight into the secondary (only for tiles nobody else can see yet)."""
        if self._budget is None or self._ledger.used + self._tile_bytes <= self._budget:
            tile = self._fresh_tile(values)
            self._ledger.take(self._tile_bytes, "TiledEvictable")
            self._resident[coord] = tile
            self._current.discard(coord)
        else:
            self._write_secondary(self._secondary_for("TiledEvictable"), coord, values)
            self._current.add(coord)
        self._implicit.pop(coord, None)

    def _fresh_like(self, dtype: cv.DType | None = None) -> TiledEvictable:
        """A new implicit-zero hierarchy with this one's tiling, classes, placement and budget
        (of ``dtype``, by default this one's)."""
        dtype = self._dt if dtype is None else dtype
        fresh = object.__new__(TiledEvictable)
        empty_secondary = self._new_secondary(0, dtype)
        TiledEvictable.__init__(
            fresh,
            self._new_tile(0, dtype),
            empty_secondary,
            self._grid.grid_shape,
            self._grid.tile_shape,
            max_resident_bytes=self._budget,
        )
        fresh._new_secondary = self._new_secondary
        return fresh

    def _lazy_like(self, dtype: cv.DType, recipe: Recipe) -> TiledEvictable:
        """A lazy hierarchy with this one's tiling, classes, placement and budget: every tile
        is ``recipe``'s until ``materialize``."""
        lazy = self._fresh_like(dtype)
        lazy._implicit.clear()
        lazy._recipe = recipe
        return lazy

    def materialize(self) -> None:
        """Compute a lazy ``map_tiles`` result's tiles now and store them like any tiles
        (resident within the budget, the rest in a temporary file secondary); it then no
        longer reads its operands. Nothing happens for a tensor that is not lazy.

        Every residency request, write and discard on a lazy tensor (and a ``matmul``, which
        reads tiles more than once) calls this first. Cost: one pass of ``fn`` over the
        operands, and the writes of the tiles past the budget.

        Raises:
            RuntimeError: an operand was released or written since ``map_tiles``, or a tile
                is busy with an operation in flight; whatever ``fn`` raises.
        """
        with self._lock:
            if self._recipe is None:
                return
            from conveyor_storage._map_tiles import materialize

            materialize(self)

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Self:
        """Implicit-zero tiles over ``size`` slots.

        Keywords: ``tile_shape`` (default ``(size,)``), ``grid_shape`` (default one tile),
        ``primary`` / ``secondary`` (classes or names, default ``"cpu"`` / ``"file"``) and
        ``max_resident_bytes``.
        """
        known = {"grid_shape", "tile_shape", "primary", "secondary", "max_resident_bytes"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            msg = f"allocate on TiledEvictable: unexpected argument(s) {', '.join(unknown)}"
            raise TypeError(msg)
        tile_shape = kwargs.get("tile_shape") or (size,)
        grid_shape = kwargs.get("grid_shape") or tuple(1 for _ in tile_shape)
        max_resident_bytes = kwargs.get("max_resident_bytes")
        classes = [
            cv.plugins.host().carrier(c) if isinstance(c, str) else c
            for c in (kwargs.get("primary", "cpu"), kwargs.get("secondary", "file"))
        ]
        tiled = cls(
            classes[0].allocate(0, dtype),
            classes[1].allocate(0, dtype),
            grid_shape,
            tile_shape,
            max_resident_bytes=max_resident_bytes,
        )
        if tiled.size != size:
            tiled.release()
            msg = (
                f"allocate on TiledEvictable: grid_shape x tile_shape holds {tiled.size} slots, "
                f"not {size}"
            )
            raise ValueError(msg)
        return tiled

    # -- tile states ----------------------------------------------------------------------------

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return self._grid.grid_shape

    @property
    def tile_shape(self) -> tuple[int, ...]:
        return self._grid.tile_shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape: ``grid_shape[i] * tile_shape[i]``."""
        return self._grid.shape

    @property
    def tile_bytes(self) -> int:
        return self._tile_bytes

    @property
    def max_resident_bytes(self) -> int | None:
        return self._budget

    @property
    def resident_bytes(self) -> int:
        """Bytes of tiles in the primary now, plus tiles an operation is streaming."""
        return self._ledger.used

    @property
    def peak_resident_bytes(self) -> int:
        """The most ``resident_bytes`` seen at any transition since construction."""
        return self._ledger.peak

    @property
    def tier_classes(self) -> tuple[type[cv.Carrier], type[cv.Carrier]]:
        return self._classes

    @property
    def secondary(self) -> cv.Carrier | None:
        """The full-extent secondary, or ``None`` before the first eviction needed one."""
        secondary: cv.Carrier | None = self._owned["secondary"]
        return secondary

    def tile_state(self, coord: Coord) -> TileState:
        """The residency of tile ``coord`` and whether its secondary copy is stale."""
        coord = self._grid.check_coord("tile_state", coord)
        with self._lock:
            if self._recipe is not None:
                return TileState("lazy", False)
            if coord in self._resident:
                return TileState("primary", coord not in self._current)
            if coord in self._current:
                return TileState("secondary", False)
            if coord in self._implicit:
                return TileState("implicit", False)
            return TileState("invalid", False)

    def _resident_set(self) -> TileSet:
        """A snapshot of the resident tiles, taken under the lock.

        Building it iterates ``_resident`` in Python code, so a transition committing on
        another thread would otherwise change the dict mid-iteration (``RuntimeError``).
        """
        with self._lock:
            return TileSet(self._resident)

    @property
    def primary_tiles(self) -> TileSet:
        return self._resident_set()

    @property
    def secondary_tiles(self) -> TileSet:
        """Tiles whose current value is in the secondary (resident clean tiles too)."""
        with self._lock:
            return TileSet(self._current)

    @property
    def valid_tiles(self) -> TileSet:
        with self._lock:
            return TileSet(c for c in self._grid.coords() if c not in self._invalid)

    @property
    def dirty_tiles(self) -> TileSet:
        with self._lock:
            return TileSet(c for c in self._resident if c not in self._current)

    # -- tile data --------------------------------------------------------------------------------

    def _fresh_tile(self, values: Any) -> cv.Carrier:
        tile = self._new_tile(self._grid.tile_size, self._dt)
        try:
            if type(tile) is not self._classes[0]:
                msg = f"TiledEvictable: the primary allocator returned {type(tile).__name__}"
                raise TypeError(msg)
            if values is not None:
                tile.import_span(cv.Layout(self._grid.tile_shape), np.asarray(values))
        except BaseException:
            tile.release()
            raise
        return tile

    def _secondary_for(self, what: str) -> cv.Carrier:
        """The full-extent secondary, allocated beside the given one at its first use."""
        secondary: cv.Carrier | None = self._owned["secondary"]
        if secondary is None:
            secondary = self._new_secondary(self._size, self._dt)
            if type(secondary) is not self._classes[1]:
                secondary.release()
                msg = (
                    f"{what} on TiledEvictable: the secondary allocator returned "
                    f"{type(secondary).__name__}"
                )
                raise TypeError(msg)
            self._owned["secondary"] = secondary
        if "journal" not in self._owned:
            path = _kept_file(secondary)
            self._owned["journal"] = None if path is None else TileJournal(path, self._grid)
            self._owned["journal_of"] = path
        return secondary

    def _write_secondary(self, secondary: cv.Carrier, coord: Coord, values: Any) -> None:
        """Write tile ``coord`` into the secondary, marked in its journal while in flight."""
        journal: TileJournal | None = self._owned["journal"]
        if journal is not None:
            journal.writing(coord)
        secondary.import_span(self._grid.box(coord), values)
        if journal is not None:
            journal.written(coord)

    def _values(self, coord: Coord, what: str) -> np.ndarray[Any, Any]:
        """Tile ``coord``'s value in canonical tile order (a view or copy; never changes state)."""
        recipe = self._recipe
        if recipe is not None:
            return recipe.tile(self, coord, what)
        tile = self._resident.get(coord)
        if tile is not None:
            return tile.export_span(cv.Layout(self._grid.tile_shape))
        if coord in self._current:
            return self._owned["secondary"].export_span(self._grid.box(coord))  # type: ignore[no-any-return]  # a Carrier
        if coord in self._implicit:
            value = np.array(self._implicit[coord], self._dt.numpy)
            return np.broadcast_to(value, self._grid.tile_shape)
        if coord in self._torn:
            msg = (
                f"{what} on TiledEvictable: tile {coord} is torn (a process died while writing "
                "it back to the secondary, so it holds neither its old nor its new value); "
                "scatter or write it first"
            )
            raise RuntimeError(msg)
        msg = (
            f"{what} on TiledEvictable: tile {coord} is invalid (its value was discarded); "
            "scatter or write it first"
        )
        raise RuntimeError(msg)

    def footprint(self, layout: cv.Layout, what: str) -> TileMap:
        """How a tensor with ``layout`` sees the tiles; ``ValueError`` if it breaks them."""
        return self._grid.footprint(layout, what)

    def discard(self, tiles: Iterable[Coord]) -> None:
        """Forget ``tiles``' values (they become invalid): their primaries are released."""
        with self._lock:
            found = claim(self, "discard", tiles)
            try:
                for coord in found:
                    tile = self._resident.pop(coord, None)
                    if tile is not None:
                        tile.release()
                        self._ledger.give(self._tile_bytes)
                    self._current.discard(coord)
                    self._implicit.pop(coord, None)
                    self._invalid.add(coord)
                self._mark_written()
            finally:
                self._busy.difference_update(found.coords)

    def flush(self) -> None:
        """Make the secondary's committed tiles durable (``fsync`` where the storage offers it)."""
        secondary = self._owned["secondary"]
        flush = getattr(secondary, "flush", None)
        if callable(flush):
            flush()
        journal: TileJournal | None = self._owned.get("journal")
        if journal is not None:
            journal.sync()

    # -- storage hooks: the whole logical tensor, slot by slot or span by span --------------------

    def _storage_size(self) -> int:
        return self._size

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _storage_mutable(self) -> bool:
        return True

    def _dense(self) -> np.ndarray[Any, Any]:
        """Every tile's value, copied under the lock: an eviction committing on another thread
        would otherwise release a resident tile between finding it and reading it."""
        out = np.empty(self._grid.shape, self._dt.numpy)
        with self._lock:
            for coord in self._grid.coords():
                out[self._grid.region(coord)] = self._values(coord, "export_span")
        return out

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        """Assembles the whole tensor (O(size) memory: for small tensors and tests)."""
        from conveyor_storage._spans import strided

        return strided(self._dense().reshape(-1), layout).copy()

    def _read(self, index: int) -> Any:
        logical = np.unravel_index(index, self._grid.shape)
        coord = tuple(int(i) // t for i, t in zip(logical, self._grid.tile_shape, strict=True))
        inner = tuple(int(i) % t for i, t in zip(logical, self._grid.tile_shape, strict=True))
        with self._lock:  # as in _dense
            return self._values(coord, "read")[inner].item()

    def _write(self, index: int, value: Any) -> None:
        flat = np.array([value], self._dt.numpy)
        self._import(cv.Layout((1,), None, index), flat)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        """Writes into resident tiles only (they become dirty); promote the others first.

        Runs under the lock and refuses tiles with a transition or operation in flight: an
        eviction copies a tile outside the lock, so a write landing after its copy would be
        acknowledged and then dropped with the primary.
        """
        touched = self._grid.split(layout)
        with self._lock:
            found = claim(self, "import_span", touched)
            try:
                self._write_resident(touched, np.asarray(values).reshape(-1))
            finally:
                self._busy.difference_update(found.coords)

    def _write_resident(self, touched: dict[Coord, Any], flat: np.ndarray[Any, Any]) -> None:
        missing = sorted(c for c in touched if c not in self._resident)
        if missing:
            msg = (
                f"import_span on TiledEvictable: tiles {missing} are not resident; promote them "
                "before writing"
            )
            raise RuntimeError(msg)
        box = cv.Layout(self._grid.tile_shape)
        before: dict[Coord, np.ndarray[Any, Any]] = {}
        after: dict[Coord, np.ndarray[Any, Any]] = {}
        for coord, (mask, inner) in touched.items():  # every new value first, so nothing is torn
            before[coord] = np.array(self._resident[coord].export_span(box))
            after[coord] = before[coord].copy()
            after[coord][inner] = flat[mask]
        written: list[Coord] = []
        try:
            for coord, values in after.items():
                self._resident[coord].import_span(box, values)
                written.append(coord)
        except BaseException:
            for coord in written:  # all or nothing: the tiles already written get their values back
                self._resident[coord].import_span(box, before[coord])
            raise
        self._current.difference_update(after)

    def _release(self) -> None:
        with self._lock:
            self._ledger.give(len(self._resident) * self._tile_bytes)
            self._finalizer()
            self._resident.clear()
            self._owned["secondary"] = None
            self._recipe = None

    # -- capabilities and dispatch ---------------------------------------------------------------

    def _compute_operation_capabilities(self) -> Iterable[cv.OperationCapability]:
        """The compute class's plans for the direct surface."""
        return tuple(
            cap
            for cap in cv.declared_capabilities(self._classes[0])
            if cap.operation in DIRECT_OPERATIONS
        )

    def _capability_key(self) -> Hashable | None:
        """The set depends on the compute class alone, so every tiled tensor over it shares
        one frozen set; computed per instance, it cost each new tensor's first call ~20 ms."""
        return self._classes[:1]

    def dispatch_op(self, operation_name: str) -> cv.Operation:
        """A fresh definition-backed operation for a direct name; other names need ``project``."""
        if (
            isinstance(operation_name, str)
            and operation_name not in DIRECT_OPERATIONS
            and operation_name not in VIEWS
        ):
            self._check_alive(operation_name)
            msg = (
                f"{operation_name} on TiledEvictable: not in the direct surface (elementwise "
                f"names, reductions, matmul and permute; see "
                f"conveyor_storage.tiled_evictable.DIRECT_OPERATIONS); project the tiles you "
                f"need with conveyor_storage.project(tensor, selection).wait() and run it on "
                f"the compact compute tensor, or move the whole tensor with "
                f"cv.move(tensor, 'cpu') when it fits in memory"
            )
            raise NotImplementedError(msg)
        op: cv.Operation = super().dispatch_op(operation_name)
        return op

    def _pickle_refusal(self) -> str:
        return (
            "a TiledEvictable tensor's tiles live in this process's memory and its secondary "
            "tier (an open file or device); pickle tensor.numpy() instead, which reads every tile"
        )

    def __repr__(self) -> str:
        primary, secondary = self._classes
        state = (
            "released"
            if self.released
            else "lazy"
            if self._recipe is not None
            else f"{len(self._resident)}/{self._grid.count} resident"
        )
        return (
            f"<TiledEvictable {primary.__name__}/{secondary.__name__} grid={self._grid.grid_shape} "
            f"tile={self._grid.tile_shape} dtype={self._dt.name} {state}>"
        )


def _register() -> None:
    """Make TiledEvictable definition-backed (streaming composite, residency facet), then close."""
    from conveyor_storage._direct import composite_provider

    definition = cv.CarrierDefinition(
        storage=None,
        composite=composite_provider(DIRECT_OPERATIONS),
        facets=(TiledResidencyFacet,),
        operation_class=TiledOperation,  # its backward streams the tiles
    )
    cv.register_carrier_definition(TiledEvictable, definition)
    cv.closed_carrier(TiledEvictable)


_register()
