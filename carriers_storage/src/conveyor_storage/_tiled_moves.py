"""Move routes into and out of TiledEvictable, tile by tile.

Into tiles (``cv.move(x, "tiled", tile_shape=..., max_resident_bytes=..., directory=...)``):
from a compute tensor each tile's box is exported and stored, resident while the budget has
room and written to a fresh file secondary beyond it; from a FileBacked tensor the file is
copied whole (the bulk file route, no tile passes through memory) and adopted as the
secondary, so every tile starts in the secondary. Out of tiles (to CPU or Generic) each tile is
read under the carrier's lock and written into its box of the dense result: the move holds one
tile besides the result, never a second full copy.
"""

from __future__ import annotations

import math
from typing import Any, Final

import conveyor as cv
from conveyor_storage._tiles import Coord
from conveyor_storage.file_backed import FileBacked
from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["from_tiled", "tiling", "to_tiled"]

#: The default tile of a move: whole rows (axis 0 split only), at most this many bytes.
DEFAULT_TILE_BYTES: Final = 16 << 20
_OPTIONS: Final = frozenset({"tile_shape", "max_resident_bytes", "directory"})


def tiling(shape: tuple[int, ...], itemsize: int, tile_shape: object = None) -> tuple[int, ...]:
    """The tile shape of a move: ``tile_shape`` when given (it must divide ``shape``), else
    whole rows, as many as divide ``shape[0]`` within ``DEFAULT_TILE_BYTES``."""
    if tile_shape is not None:
        if not (
            isinstance(tile_shape, tuple)
            and len(tile_shape) == len(shape)
            and all(type(t) is int and t >= 1 for t in tile_shape)
        ):
            msg = (
                f"move to TiledEvictable: tile_shape must be a tuple of {len(shape)} positive "
                f"ints, got {tile_shape!r}"
            )
            raise TypeError(msg)
        if any(n % t for n, t in zip(shape, tile_shape, strict=True)):
            msg = (
                f"move to TiledEvictable: tile_shape {tile_shape} does not divide the shape "
                f"{shape}; give extents that divide each axis"
            )
            raise ValueError(msg)
        return tile_shape
    if not shape or shape[0] == 0:
        return tuple(max(n, 1) for n in shape)
    row = math.prod(shape[1:]) * itemsize
    fit = max(1, DEFAULT_TILE_BYTES // max(row, 1))
    rows = max(d for d in range(1, min(fit, shape[0]) + 1) if shape[0] % d == 0)
    return (rows, *shape[1:])


def _region_layout(
    layout: cv.Layout, origin: tuple[int, ...], extent: tuple[int, ...]
) -> cv.Layout:
    offset = layout.offset + sum(o * s for o, s in zip(origin, layout.strides, strict=True))
    return cv.Layout(extent, layout.strides, offset)


def to_tiled(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    """A fresh TiledEvictable holding ``source``'s values (the move route into tiles)."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        msg = (
            f"move to TiledEvictable: unexpected option(s) {', '.join(unknown)}; give "
            f"{', '.join(sorted(_OPTIONS))}"
        )
        raise TypeError(msg)
    assert destination is TiledEvictable  # registered for this class only
    shape, dtype = source.shape, source.dtype
    tile = tiling(shape, dtype.itemsize, options.get("tile_shape"))
    grid = tuple(n // t for n, t in zip(shape, tile, strict=True))
    budget = options.get("max_resident_bytes")
    directory = options.get("directory")
    from conveyor_generic import CPU  # public class only; FileBacked data computes on CPU

    if type(source.carrier) is FileBacked:
        secondary = cv.move(source, FileBacked, directory=directory).carrier
        return _tensor(
            TiledEvictable(CPU.allocate(0, dtype), secondary, grid, tile, max_resident_bytes=budget)
        )
    tiled = TiledEvictable(
        type(source.carrier).allocate(0, dtype),
        FileBacked.allocate(0, dtype, directory=directory),
        grid,
        tile,
        max_resident_bytes=budget,
    )
    try:
        for coord in tiled._grid.coords():
            box = _region_layout(source.layout, tiled._grid.origin(coord), tile)
            tiled._put(coord, source.carrier.export_span(box))
    except BaseException:
        tiled.release()
        raise
    return _tensor(tiled)


def _tensor(tiled: TiledEvictable) -> cv.Tensor:
    return cv.Tensor(tiled, cv.Layout(tiled.shape))


def from_tiled(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    """A dense ``destination`` tensor of a tiled tensor's values, filled one tile at a time."""
    if options:
        msg = (
            f"move from TiledEvictable to {destination.__name__}: unexpected option(s) "
            f"{', '.join(sorted(options))}"
        )
        raise TypeError(msg)
    carrier: TiledEvictable = source.carrier  # type: ignore[assignment]  # registered source
    mapping = carrier.footprint(source.layout, "move")
    out = destination.allocate(source.size, source.dtype)
    dense = cv.Layout(source.shape)
    tile = mapping.tensor_shape(carrier._grid.tile_shape)
    coords: list[Coord] = list(carrier._grid.coords())
    try:
        for coord in coords:
            origin = tuple(c * t for c, t in zip(mapping.tensor_coord(coord), tile, strict=True))
            with carrier._lock:  # an eviction on another thread cannot release it mid-read
                values = mapping.view(carrier._values(coord, "move"))
                out.import_span(_region_layout(dense, origin, tile), values)
    except BaseException:
        out.release()
        raise
    return cv.Tensor(out, dense)
