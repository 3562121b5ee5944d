"""``map_tiles``: an elementwise chain kept out of core, one tile at a time into fresh tiles.

Direct operations return dense results (the tiled contract), so each step of a chain such as
``(x - m) ** 2`` is a whole dense copy. ``map_tiles(fn, *tiled)`` instead calls ``fn`` on one
tile of each operand at a time (ordinary compute tensors of the primary class) and stores each
result tile in a fresh TiledEvictable with the first operand's tiling and budget: resident
while that budget has room, written to its own temporary file beyond it. Its cost is that
write (and the read of the written tiles by whatever consumes the result), against the
memory of a dense intermediate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import conveyor as cv
from conveyor_storage._streaming import Step, _operand, _prefetched, _Session
from conveyor_storage._tiled_elementwise import _WorkTiles

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["map_tiles"]


def _sources(tensors: tuple[Any, ...]) -> list[tuple[TiledEvictable, Any]]:
    from conveyor_storage.tiled_evictable import TiledEvictable

    if not tensors:
        msg = "map_tiles: give at least one TiledEvictable tensor"
        raise TypeError(msg)
    found = []
    for x in tensors:
        if not (type(x) is cv.Tensor and type(x.carrier) is TiledEvictable):
            shown = type(x.carrier).__name__ if type(x) is cv.Tensor else type(x).__name__
            msg = (
                f"map_tiles: every operand must be a TiledEvictable tensor, got {shown}; close "
                "over dense tensors in fn, or move them with cv.move(tensor, 'tiled', "
                "tile_shape=...)"
            )
            raise TypeError(msg)
        found.append(_operand(x))
    tilings = {(c.grid_shape, c.tile_shape) for c, _ in found}
    if len(tilings) > 1 or any(m.transposed for _, m in found):
        msg = (
            "map_tiles: the operands need one tiling in their stored axis order, got "
            f"{sorted(tilings)}; move one with cv.move(tensor, 'tiled', tile_shape=...)"
        )
        raise ValueError(msg)
    return found


def map_tiles(fn: Callable[..., cv.Tensor], *tensors: cv.Tensor) -> cv.Tensor:
    """A fresh TiledEvictable whose tile ``c`` is ``fn(tile c of each tensor)``.

    ``fn`` receives compute tensors of the primary class, one per operand, each of the tile
    shape (a resident tile is passed as it is: read it, never write into it), and returns one
    tensor of that shape; it runs without
    autograd (the result does not require grad), in row-major tile order, while the next
    tiles are read on a background thread. The result has the first operand's tiling,
    residency budget and tier classes, and ``fn``'s dtype; its tiles past the budget are
    written to a fresh temporary file. Memory: the operands' streaming (their budgets plus a
    tile of work space each) and the result's own budget.

    Raises:
        TypeError: an operand is not a TiledEvictable tensor, or ``fn`` returns something
            other than a tensor of the tile shape on the primary class.
        ValueError: the operands' tilings differ, or a budget cannot hold a step.
    """
    found = _sources(tensors)
    first = found[0][0]
    session = _Session("map_tiles", [c for c, _ in found])
    per_step: dict[int, int] = {}
    for c, _ in found:
        per_step[id(c)] = per_step.get(id(c), 0) + 1
    session.room(per_step, "one step")
    held, ahead = session.ahead(per_step)
    grid = first._grid
    work = _WorkTiles()
    result: TiledEvictable | None = None

    def job(step: Step) -> Callable[[], Any]:
        def run() -> Any:
            loaded = [(c, m, *session.load(c, m, step.coord)) for c, m in found]

            def release() -> None:
                for carrier, _, _, hold in loaded:
                    session.give(carrier, hold)

            return (step, loaded), release

        return run

    session.begin(held)
    try:
        jobs = [job(Step(coord, None)) for coord in grid.coords()]
        for (step, loaded), release in _prefetched(jobs, ahead, "map_tiles"):
            try:
                args = [
                    work.tensor(k, c, m, step, values) for k, (c, m, values, _) in enumerate(loaded)
                ]
                with cv.no_grad():
                    out = fn(*args)
                _check(out, first)
                if result is None:
                    result = first._fresh_like(out.dtype)
                result._put(step.coord, out.carrier.export_span(out.layout))
            finally:
                release()
        if result is None:  # an empty grid: no tile told the dtype
            result = first._fresh_like()
    except BaseException:
        if result is not None:
            result.release()
        raise
    finally:
        work.release()
        session.end()
    return cv.Tensor(result, cv.Layout(result.shape))


def _check(out: object, like: TiledEvictable) -> None:
    primary = like.tier_classes[0]
    if not (type(out) is cv.Tensor and type(out.carrier) is primary):
        shown = type(out.carrier).__name__ if type(out) is cv.Tensor else type(out).__name__
        msg = f"map_tiles: fn must return a {primary.__name__} tensor, got {shown}"
        raise TypeError(msg)
    if out.shape != like.tile_shape:
        msg = (
            f"map_tiles: fn returned shape {out.shape}, a tile is {like.tile_shape}; return "
            "one value per element of its tile"
        )
        raise TypeError(msg)
