"""Direct matmul of two 2-D tiled operands: a blocked GEMM within the residency budget.

It keeps chunks of a row panel of B (or a column panel of A, whichever reads fewer tile bytes)
and streams the other operand's tiles past it, so the held operand is read once and the
streamed one once per chunk. The budget left beside a chunk makes the panel deeper along the
inner axis (several tile rows of B at once), so each product is larger and the result is
updated fewer times. An operand may be a transposed tiled tensor (``x.T``, the Gram
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

__all__ = ["panel_depth", "plan_gemm", "run_matmul", "tensor_grids"]


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


def panel_depth(a: TiledEvictable, b: TiledEvictable, hold_b: bool, chunk: int, gk: int) -> int:
    """How many steps of the inner axis one panel spans: the budget left beside ``chunk``
    panel tiles per step, so the GEMMs grow along the inner axis too (fewer, larger products
    and fewer passes over the result).

    A deeper panel streams groups of ``depth`` tiles, concatenated on the prefetch thread:
    three groups' worth at once (the one multiplying, the next one loading and its copy).
    """
    held, streamed = (b, a) if hold_b else (a, b)

    def cap(carrier: TiledEvictable) -> int:  # tiles under the budget plus work space
        budget = carrier.max_resident_bytes
        return gk * (chunk + 3) if budget is None else budget // carrier.tile_bytes + 1

    # One budget holds panel and groups together; two budgets hold one each.
    shared = cap(a) // (chunk + 3)
    depth = shared if a is b else min(cap(held) // chunk, cap(streamed) // 3)
    return max(1, min(gk, depth))


def _counts(
    a: TiledEvictable, b: TiledEvictable, hold_b: bool, chunk: int, depth: int
) -> dict[int, int]:
    """Tiles held at once per carrier: the panel, and the streamed groups."""
    held, streamed = (b, a) if hold_b else (a, b)
    groups = 2 if depth == 1 else 3 * depth
    if a is b:
        return {id(a): chunk * depth + groups}
    return {id(held): chunk * depth, id(streamed): groups}


def run_matmul(
    invocation: cv.ResolvedInvocation, hold_b: bool, chunk: int, depth: int = 1
) -> cv.Tensor:
    """The blocked GEMM: panels of the held operand (``chunk`` tiles wide, ``depth`` deep),
    groups of the other's tiles streamed past them."""
    plan = invocation.plan
    assert plan is not None  # matmul is dtype-planned
    x, y = invocation.operands
    (a, amap), (b, bmap) = _operand(x), _operand(y)
    for operand in (a, b):  # panels read tiles more than once: compute lazy ones once, stored
        operand.materialize()
    accumulator = plan.operands[0].convert_to
    assert accumulator is not None  # operands convert to the accumulator
    ((gm, gk), (tm, _)), ((_, gn), (_, tn)) = tensor_grids(amap, a, bmap, b)
    c = np.zeros((x.shape[0], y.shape[1]), accumulator.numpy)
    session = _Session("matmul", [a, b])
    held, hmap, streamed, smap = (b, bmap, a, amap) if hold_b else (a, amap, b, bmap)
    extent, other = (gn, gm) if hold_b else (gm, gn)

    def held_tile(kk: int, p: int) -> Coord:
        """Panel tile ``p`` of inner step ``kk``: B[kk, p] when B is held, else A[p, kk]."""
        return (kk, p) if hold_b else (p, kk)

    def group(ks: range, q: int) -> Callable[[], Any]:
        def run() -> Any:
            coords = [(q, kk) if hold_b else (kk, q) for kk in ks]
            loaded = [session.load(streamed, smap, smap.carrier_coord(co)) for co in coords]
            if len(loaded) == 1:
                ((values, hold),) = loaded
                return (q, values), lambda: session.give(streamed, hold)
            nbytes = streamed.tile_bytes * len(loaded)
            streamed._ledger.take(nbytes, "matmul")  # the concatenated copy
            try:
                values = np.concatenate([v for v, _ in loaded], axis=1 if hold_b else 0)
            except BaseException:
                session.give(streamed, nbytes)
                raise
            finally:
                for _, hold in loaded:
                    session.give(streamed, hold)
            return (q, values), lambda: session.give(streamed, nbytes)

        return run

    session.begin(_counts(a, b, hold_b, chunk, depth))
    steps, total = 0, -(-gk // depth) * -(-extent // max(chunk, 1))
    try:
        for k0 in range(0, gk, depth):
            ks = range(k0, min(gk, k0 + depth))
            for p0 in range(0, extent, chunk):
                ps = range(p0, min(extent, p0 + chunk))
                # The panel is one contiguous copy (one large GEMM per streamed group): it
                # counts as held tiles even where the source tile is resident.
                taken = 0
                try:
                    rows = []
                    for kk in ks:
                        row = []
                        for pp in ps:
                            coord = hmap.carrier_coord(held_tile(kk, pp))
                            values, _ = session.load(held, hmap, coord, count=True)
                            taken += held.tile_bytes
                            row.append(values.astype(accumulator.numpy, copy=False))
                        rows.append(row)
                    # hold_b: kk down, p across; hold_a: p down, kk across.
                    grid = rows if hold_b else [list(r) for r in zip(*rows, strict=True)]
                    panel = np.block(grid)
                    del rows, grid
                    span = tn if hold_b else tm
                    block = slice(p0 * span, p0 * span + len(ps) * span)
                    jobs = [group(ks, q) for q in range(other)]
                    for (q, values), release in _prefetched(jobs, True, "matmul"):
                        try:
                            tile = values.astype(accumulator.numpy, copy=False)
                            with np.errstate(all="ignore"):
                                if hold_b:
                                    c[q * tm : (q + 1) * tm, block] += tile @ panel
                                else:
                                    c[block, q * tn : (q + 1) * tn] += panel @ tile
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
