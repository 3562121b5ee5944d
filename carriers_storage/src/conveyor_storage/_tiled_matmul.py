"""Direct matmul of two 2-D tiled operands: a blocked GEMM within the residency budget.

It keeps chunks of a row panel of B (or a column panel of A, whichever reads fewer tile bytes)
and streams the other operand's tiles past it, so the held operand is read once and the
streamed one once per chunk. An operand may be a transposed tiled tensor (``x.T``, the Gram
matrix ``x.T @ x``): its tiles are read as the carrier stores them and transposed in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import conveyor as cv
from conveyor.sdk import progress_active, report_progress
from conveyor_storage._streaming import _operand, _prefetched, _result, _Session
from conveyor_storage._tiles import Coord, TileMap

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["plan_gemm", "run_matmul", "tensor_grids"]


def _held(a: TiledEvictable, b: TiledEvictable, holder: TiledEvictable, extent: int) -> int:
    """How many tiles of one panel of ``holder`` fit beside the other operand's two streamed
    tiles (its current one and the prefetched next one) under the budget plus work space."""
    budget = holder.max_resident_bytes
    if budget is None:
        return extent
    if a is b:  # one budget: the panel plus two streamed tiles
        return max(0, min(extent, budget // holder.tile_bytes - 1))
    return max(0, min(extent, budget // holder.tile_bytes + 1))


def plan_gemm(
    a: TiledEvictable,
    b: TiledEvictable,
    grids: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[bool, int]:
    """``(hold_b, chunk)``: which operand's panels to keep, chosen for the fewest tile bytes read.

    Holding chunks of a row panel of B reads B once and A once per chunk; holding chunks of a
    column panel of A reads A once and B once per chunk. ``grids`` are the operands' tile grids
    as the tensors see them (transposed for ``x.T``); by default the carriers' own.
    """
    ga, gb = grids or (a._grid.grid_shape, b._grid.grid_shape)
    (gm, gk), gn = ga, gb[1]
    cb, ca = _held(a, b, b, gn), _held(a, b, a, gm)

    def cost(chunk: int, held: int, held_bytes: int, streamed: int, streamed_bytes: int) -> float:
        if chunk < 1:
            return float("inf")
        return gk * (held * held_bytes + -(-held // chunk) * streamed * streamed_bytes)

    by_b = cost(cb, gn, b.tile_bytes, gm, a.tile_bytes)
    by_a = cost(ca, gm, a.tile_bytes, gn, b.tile_bytes)
    return (True, cb) if by_b <= by_a else (False, ca)


def tensor_grids(amap: TileMap, a: TiledEvictable, bmap: TileMap, b: TiledEvictable) -> Any:
    """``((grid, tile) of A, (grid, tile) of B)`` as the operand tensors see them."""
    return (
        (amap.tensor_shape(a._grid.grid_shape), amap.tensor_shape(a._grid.tile_shape)),
        (bmap.tensor_shape(b._grid.grid_shape), bmap.tensor_shape(b._grid.tile_shape)),
    )


def run_matmul(invocation: cv.ResolvedInvocation, hold_b: bool, chunk: int) -> cv.Tensor:
    """The blocked GEMM: panels of the held operand, tiles of the other streamed past them."""
    plan = invocation.plan
    assert plan is not None  # matmul is dtype-planned
    x, y = invocation.operands
    (a, amap), (b, bmap) = _operand(x), _operand(y)
    accumulator = plan.operands[0].convert_to
    assert accumulator is not None  # operands convert to the accumulator
    ((gm, gk), (tm, _)), ((_, gn), (_, tn)) = tensor_grids(amap, a, bmap, b)
    c = np.zeros((x.shape[0], y.shape[1]), accumulator.numpy)
    session = _Session("matmul", [a, b])
    # (holder, its map, streamed operand, its map, panel extent, streamed extent)
    held, hmap, streamed, smap = (b, bmap, a, amap) if hold_b else (a, amap, b, bmap)
    extent, other = (gn, gm) if hold_b else (gm, gn)
    counts = {id(streamed): 2, id(held): chunk} if a is not b else {id(a): chunk + 2}

    def panel_tile(kk: int, p: int) -> Coord:
        return (kk, p) if hold_b else (p, kk)

    def job(coord: Coord) -> Callable[[], Any]:
        def run() -> Any:
            values, hold = session.load(streamed, smap, smap.carrier_coord(coord))
            return (coord, values), lambda: session.give(streamed, hold)

        return run

    session.begin(counts)
    steps, total = 0, gk * -(-extent // max(chunk, 1))
    try:
        for kk in range(gk):
            for p0 in range(0, extent, chunk):
                ps = range(p0, min(extent, p0 + chunk))
                # The panel is one contiguous copy (one large GEMM per streamed tile): it counts
                # as held tiles even where the source tile is resident.
                taken = 0
                try:
                    parts = []
                    for q in ps:
                        tile = hmap.carrier_coord(panel_tile(kk, q))
                        values, _ = session.load(held, hmap, tile, count=True)
                        taken += held.tile_bytes
                        parts.append(values.astype(accumulator.numpy, copy=False))
                    panel = np.concatenate(parts, axis=1 if hold_b else 0)
                    del parts
                    span = tn if hold_b else tm
                    block = slice(p0 * span, p0 * span + len(ps) * span)
                    coords = [(q, kk) if hold_b else (kk, q) for q in range(other)]
                    jobs = [job(coord) for coord in coords]
                    for (coord, values), release in _prefetched(jobs, True, "matmul"):
                        try:
                            tile = values.astype(accumulator.numpy, copy=False)
                            with np.errstate(all="ignore"):
                                if hold_b:
                                    i = coord[0]
                                    c[i * tm : (i + 1) * tm, block] += tile @ panel
                                else:
                                    j = coord[1]
                                    c[block, j * tn : (j + 1) * tn] += panel @ tile
                        finally:
                            release()
                    del panel
                finally:
                    session.give(held, taken)
                steps += 1
                if progress_active():
                    report_progress(steps, total, "matmul panels")
    finally:
        session.end()
    spec = invocation.results[0]
    out = _result(a, spec)
    with np.errstate(all="ignore"):
        out.carrier.import_span(spec.layout, c.astype(spec.dtype.numpy, copy=False))
    return out
