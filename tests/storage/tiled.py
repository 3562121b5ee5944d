"""Builders for the TiledEvictable tests: tiled tensors with every kind of tile residency.

``build`` starts from implicit zeros and writes tile values through the public contract
(promote, import_span, evict), so a grid ends up with secondary, clean primary, dirty primary
and implicit tiles, exactly as a user's workload would leave it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_storage import BlockDevice, FileBacked, TiledEvictable, TiledResidencyFacet

PRIMARIES = (CPU, Generic)
SECONDARIES = ("file", "block")

Build = Callable[..., cv.Tensor]


def secondary_factory(kind: str, tmp_path: Path) -> Callable[[cv.DType], cv.Carrier]:
    """An empty secondary of ``kind`` placed under ``tmp_path``."""
    if kind == "file":
        return lambda dtype: FileBacked.allocate(0, dtype, directory=str(tmp_path))
    device = BlockDevice.create_image(
        tmp_path / f"tiles-{len(list(tmp_path.iterdir()))}.img", 64 << 20
    )
    return lambda dtype: device.allocate(0, dtype)


def facet(x: cv.Tensor) -> TiledResidencyFacet:
    return x.carrier.require_facet(TiledResidencyFacet)


def tile_box(tiled: TiledEvictable, coord: tuple[int, ...]) -> cv.Layout:
    strides = cv.Layout(tiled.shape).strides
    base = sum(c * t * s for c, t, s in zip(coord, tiled.tile_shape, strides, strict=True))
    return cv.Layout(tiled.tile_shape, strides, base)


def build(
    values: np.ndarray[Any, Any],
    tile_shape: tuple[int, ...],
    *,
    primary: type[cv.Carrier],
    secondary: Callable[[cv.DType], cv.Carrier],
    dtype: cv.DType,
    implicit: Iterable[tuple[int, ...]] = (),
    budget_tiles: int | None = None,
    requires_grad: bool = False,
) -> tuple[cv.Tensor, np.ndarray[Any, Any]]:
    """A tiled tensor of ``values`` (zeros in ``implicit`` tiles) and the value it holds.

    Tiles are written one by one; the LRU policy pushes older ones to the secondary, the last
    written stay dirty in the primary, one is evicted and promoted again (clean primary).
    """
    grid = tuple(n // t for n, t in zip(values.shape, tile_shape, strict=True))
    tile_bytes = int(np.prod(tile_shape)) * dtype.itemsize
    budget = None if budget_tiles is None else budget_tiles * tile_bytes
    tiled = TiledEvictable(
        primary.allocate(0, dtype), secondary(dtype), grid, tile_shape, max_resident_bytes=budget
    )
    x = cv.Tensor(tiled, cv.Layout(tiled.shape))
    res = facet(x)
    expected = np.array(values, dtype=dtype.numpy)
    skip = set(implicit)
    written = []
    for coord in tiled._grid.coords():
        region = tiled._grid.region(coord)
        if coord in skip:
            expected[region] = 0
            continue
        res.promote([coord])
        tiled.import_span(tile_box(tiled, coord), np.ascontiguousarray(expected[region]))
        written.append(coord)
    if budget is None and len(written) > 2:
        res.evict(written[: len(written) // 2])  # secondary tiles
    if len(written) > 1:
        res.evict([written[-2]])
        res.promote([written[-2]])  # a clean primary tile
    if requires_grad:
        x.requires_grad = True
    return x, expected
