"""Tile geometry of a TiledEvictable: coordinates, tile sets, selections and footprints.

The carrier's slots are its logical tensor in row-major order; tile ``c`` owns the slots of the
box ``c * tile_shape .. (c + 1) * tile_shape``. A tensor on the carrier must map every tile box
onto exactly one tile's slots (it may reorder slots inside a tile, never across tiles). The
check reads the layout's strides once and each tile's base slot once: O(tiles), not O(slots).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any, Final, Literal, final

import attrs
import numpy as np

import conveyor as cv

__all__ = [
    "VIEWS",
    "Coord",
    "Grid",
    "TileMap",
    "TileSelection",
    "TileSet",
    "TileState",
    "check_tiers",
]

Coord = tuple[int, ...]
Residency = Literal["primary", "secondary", "implicit", "invalid", "lazy"]
RESIDENCIES: Final = ("primary", "secondary", "implicit", "invalid", "lazy")
#: The view names a tiled tensor takes directly: an axis permutation keeps whole tiles (x.T).
VIEWS: Final = frozenset({"permute"})


def _coords(values: Iterable[Iterable[int]]) -> frozenset[Coord]:
    return frozenset(tuple(int(i) for i in c) for c in values)


@final
@attrs.frozen
class TileSet:
    """An immutable set of tile coordinates; iterates in row-major order."""

    coords: frozenset[Coord] = attrs.field(converter=_coords)

    def __iter__(self) -> Iterator[Coord]:
        return iter(sorted(self.coords))

    def __len__(self) -> int:
        return len(self.coords)

    def __contains__(self, coord: object) -> bool:
        return coord in self.coords

    def __or__(self, other: TileSet) -> TileSet:
        return TileSet(self.coords | other.coords)

    def __and__(self, other: TileSet) -> TileSet:
        return TileSet(self.coords & other.coords)

    def __sub__(self, other: TileSet) -> TileSet:
        return TileSet(self.coords - other.coords)

    def __repr__(self) -> str:
        return f"TileSet({sorted(self.coords)!r})"


def _axes(values: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(i) for i in axis) for axis in values)


@final
@attrs.frozen
class TileSelection:
    """An ordered Cartesian product of tile coordinates, one list per axis.

    ``TileSelection(((0, 2), (1,)))`` selects tiles ``(0, 1)`` and ``(2, 1)``; a projection
    gathers them, in this order, into a compact tensor of ``len(axis) * tile`` per axis.
    """

    per_axis: tuple[tuple[int, ...], ...] = attrs.field(converter=_axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """The selection's grid: how many tiles it takes on each axis."""
        return tuple(len(axis) for axis in self.per_axis)

    def coords(self) -> Iterator[tuple[Coord, Coord]]:
        """``(position in the selection, tile coordinate)`` pairs, row-major."""
        for position in itertools.product(*(range(len(a)) for a in self.per_axis)):
            yield position, tuple(a[i] for a, i in zip(self.per_axis, position, strict=True))

    def tiles(self) -> TileSet:
        return TileSet(c for _, c in self.coords())


@final
@attrs.frozen
class TileState:
    """Where one tile's value lives (``residency``) and whether its secondary copy is stale."""

    residency: Residency
    dirty: bool


@final
class TileMap:
    """How a compatible tensor sees the tiles: an axis permutation and flips of each tile array,
    and (for a transposed tensor) which carrier axis each tensor axis walks.

    ``axes[j]`` is the carrier axis behind tensor axis ``j``: the identity for a tensor of the
    carrier's shape, a permutation for ``x.T`` or ``permute``. Tensor tile ``c`` is carrier tile
    ``carrier_coord(c)``.
    """

    __slots__ = ("axes", "flips", "perm")

    def __init__(
        self, perm: tuple[int, ...], flips: tuple[int, ...], axes: tuple[int, ...] | None = None
    ) -> None:
        self.perm, self.flips = perm, flips
        self.axes = tuple(range(len(perm))) if axes is None else axes

    @property
    def identity(self) -> bool:
        """Whether the tensor sees every tile exactly in the carrier's canonical order."""
        return not self.flips and self.perm == tuple(range(len(self.perm)))

    @property
    def transposed(self) -> bool:
        return self.axes != tuple(range(len(self.axes)))

    def carrier_coord(self, coord: Coord) -> Coord:
        """The carrier tile behind the tensor's tile ``coord``."""
        if not self.transposed:
            return coord
        out = [0] * len(coord)
        for j, k in enumerate(self.axes):
            out[k] = coord[j]
        return tuple(out)

    def tensor_coord(self, coord: Coord) -> Coord:
        """The tensor's tile coordinate of carrier tile ``coord`` (the inverse of the above)."""
        return self.tensor_shape(coord)

    def tensor_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A carrier-space shape (grid or tile) in the tensor's axis order."""
        return tuple(shape[k] for k in self.axes)

    def view(self, tile: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The tensor's view of a tile array in the carrier's canonical order (no copy)."""
        out = tile if self.perm == tuple(range(tile.ndim)) else tile.transpose(self.perm)
        return np.flip(out, self.flips) if self.flips else out

    def canonical(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The inverse of ``view``: tensor-ordered tile values in canonical order."""
        out = np.flip(values, self.flips) if self.flips else values
        inverse = tuple(int(i) for i in np.argsort(self.perm))
        return out if inverse == tuple(range(values.ndim)) else out.transpose(inverse)


@final
class Grid:
    """The tile geometry: grid and tile shapes, tile bytes, boxes in slot space, footprints."""

    __slots__ = ("count", "grid_shape", "shape", "strides", "tile_shape", "tile_size")

    def __init__(self, grid_shape: tuple[int, ...], tile_shape: tuple[int, ...]) -> None:
        self.grid_shape, self.tile_shape = grid_shape, tile_shape
        self.shape = tuple(g * t for g, t in zip(grid_shape, tile_shape, strict=True))
        self.strides = cv.Layout(self.shape).strides
        self.tile_size = math.prod(tile_shape)
        self.count = math.prod(grid_shape)

    def coords(self) -> Iterator[Coord]:
        return itertools.product(*(range(g) for g in self.grid_shape))

    def check_coord(self, what: str, coord: object) -> Coord:
        """``coord`` as a tuple of ints inside the grid, else the refusal."""
        if not (isinstance(coord, tuple) and all(isinstance(i, int) for i in coord)):
            msg = f"{what} on TiledEvictable: a tile coordinate is a tuple of ints, got {coord!r}"
            raise TypeError(msg)
        if len(coord) != len(self.grid_shape) or not all(
            0 <= i < g for i, g in zip(coord, self.grid_shape, strict=True)
        ):
            msg = (
                f"{what} on TiledEvictable: tile {coord!r} is outside the grid "
                f"{self.grid_shape}; use coordinates in range"
            )
            raise IndexError(msg)
        return coord

    def tile_set(self, what: str, tiles: Iterable[Coord] | TileSet) -> TileSet:
        found = tiles if isinstance(tiles, TileSet) else TileSet(tiles)
        for coord in found.coords:
            self.check_coord(what, coord)
        return found

    def base(self, coord: Coord) -> int:
        """The first slot of tile ``coord``."""
        return sum(c * t * s for c, t, s in zip(coord, self.tile_shape, self.strides, strict=True))

    def box(self, coord: Coord) -> cv.Layout:
        """Tile ``coord``'s slots as a layout over the full-extent buffer."""
        return cv.Layout(self.tile_shape, self.strides, self.base(coord))

    def origin(self, coord: Coord) -> tuple[int, ...]:
        """The logical index of the tile's first element."""
        return tuple(c * t for c, t in zip(coord, self.tile_shape, strict=True))

    def region(self, coord: Coord) -> tuple[slice, ...]:
        """The tile's box as slices of the logical tensor."""
        return tuple(
            slice(o, o + t) for o, t in zip(self.origin(coord), self.tile_shape, strict=True)
        )

    def split(self, layout: cv.Layout) -> dict[Coord, tuple[Any, tuple[Any, ...]]]:
        """For each tile ``layout`` touches: which of its elements, and where in the tile.

        Vectorised over the layout's elements (a write through the storage contract).
        """
        slots = np.asarray(
            layout.offset
            + sum(
                (np.arange(n) * s).reshape((-1,) + (1,) * (layout.ndim - k - 1))
                for k, (n, s) in enumerate(zip(layout.shape, layout.strides, strict=True))
            )
        ).reshape(-1)
        logical = np.unravel_index(slots, self.shape)
        tiles = np.stack([i // t for i, t in zip(logical, self.tile_shape, strict=True)], -1)
        found = {}
        for row in np.unique(tiles.reshape(-1, len(self.shape)), axis=0):
            mask = np.all(tiles == row, axis=-1)
            inner = tuple(i[mask] % t for i, t in zip(logical, self.tile_shape, strict=True))
            found[tuple(int(c) for c in row)] = (mask, inner)
        return found

    def footprint(self, layout: cv.Layout, what: str) -> TileMap:
        """How a tensor with ``layout`` sees each tile, or ``ValueError`` when it breaks tiles.

        O(ndim) on the strides, then O(1) per tile on its base slot: every tile box must map
        onto exactly its own tile's slots. A pure axis permutation of the full layout (``x.T``)
        maps whole tiles too: tensor tile ``c`` is a carrier tile with its coordinates permuted.
        """
        where = f"{what} on TiledEvictable"
        transposed = _transposed_map(self, layout)
        if transposed is not None:
            return transposed
        if layout.shape != self.shape:
            msg = (
                f"{where}: a tensor of shape {layout.shape} does not cover the tiled shape "
                f"{self.shape}; direct operations take the full logical tensor (project for "
                f"a part)"
            )
            raise ValueError(msg)
        ndim = len(self.shape)
        live = [k for k in range(ndim) if self.tile_shape[k] > 1]
        wanted = sorted((self.strides[k], self.tile_shape[k]) for k in live)
        got = sorted((abs(layout.strides[k]), self.tile_shape[k]) for k in live)
        perm = list(range(ndim))
        by_stride = {self.strides[k]: k for k in live}
        for k in live:
            perm[by_stride.get(abs(layout.strides[k]), k)] = k
        flips = tuple(k for k in live if layout.strides[k] < 0)
        ok = wanted == got
        # Axes of unit tile extent still select which tile a box lands in: check every base.
        low = [(t - 1) * s for t, s in zip(self.tile_shape, layout.strides, strict=True) if s < 0]
        shift = layout.offset + sum(low)
        for coord in self.coords() if ok else ():
            start = shift + sum(
                c * t * s for c, t, s in zip(coord, self.tile_shape, layout.strides, strict=True)
            )
            if start != self.base(coord):
                ok = False
                break
        if not ok:
            msg = (
                f"{where}: the tensor's layout {layout!r} spans, aliases, omits or remaps "
                f"tiles {self.tile_shape}; use the carrier's full layout or project the tiles "
                f"you need"
            )
            raise ValueError(msg)
        return TileMap(_perm(perm), flips)


def _transposed_map(grid: Grid, layout: cv.Layout) -> TileMap | None:
    """The map of a pure axis permutation of the carrier's full layout (``x.T``), else ``None``."""
    ndim = len(grid.shape)
    if layout.offset or layout.ndim != ndim:
        return None
    axes: list[int] = []
    for n, s in zip(layout.shape, layout.strides, strict=True):
        found = [
            k
            for k in range(ndim)
            if k not in axes and grid.shape[k] == n and (grid.strides[k] == s or n == 1)
        ]
        if not found:
            return None
        axes.append(found[0])
    order = tuple(axes)
    return None if order == tuple(range(ndim)) else TileMap(order, (), order)


def _perm(perm: list[int]) -> tuple[int, ...]:
    """The transpose that turns a canonical tile array into the tensor's axis order.

    ``perm[j]`` is the tensor axis that walks canonical tile axis ``j``.
    """
    out = [0] * len(perm)
    for canonical_axis, tensor_axis in enumerate(perm):
        out[tensor_axis] = canonical_axis
    return tuple(out)


def check_tiers(primary: object, secondary: object, grid: Grid, tile: tuple[int, ...]) -> None:
    """Refuse tiers a TiledEvictable cannot own: wrong kind, size, dtype, or one object twice."""
    full = math.prod(grid.shape)
    for label, tier in (("primary", primary), ("secondary", secondary)):
        if not isinstance(tier, cv.Carrier):
            msg = f"TiledEvictable: {label} must be a Carrier instance, got {tier!r}"
            raise TypeError(msg)
        if tier.released:
            msg = f"TiledEvictable: the {label} {type(tier).__name__} was already released"
            raise ValueError(msg)
        if tier.size not in (0, full):
            msg = (
                f"TiledEvictable: the {label} holds {tier.size} slots; give 0 or the full "
                f"extent of {full}"
            )
            raise ValueError(msg)
    assert isinstance(primary, cv.Carrier) and isinstance(secondary, cv.Carrier)
    if primary is secondary:
        msg = "TiledEvictable: primary and secondary must be two different carriers"
        raise ValueError(msg)
    if primary.dtype is not secondary.dtype:
        msg = (
            f"TiledEvictable: the tiers store different dtypes ({primary.dtype.name} and "
            f"{secondary.dtype.name}); allocate both with one dtype"
        )
        raise TypeError(msg)
    if len(grid.grid_shape) != len(tile) or 0 in tile:
        msg = (
            f"TiledEvictable: grid_shape {grid.grid_shape} and tile_shape {tile} need the "
            f"same rank and tile extents >= 1"
        )
        raise ValueError(msg)
