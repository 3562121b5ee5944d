"""``map_tiles``: an elementwise chain kept out of core, computed tile by tile as it is read.

Direct operations return dense results (the tiled contract), so each step of a chain such as
``(x - m) ** 2`` is a whole dense copy. ``map_tiles(fn, *tiled)`` instead returns a *lazy*
TiledEvictable with the first operand's tiling and budget: its tile ``c`` is ``fn`` of tile
``c`` of each operand, computed when something reads it. A direct reduction of it
(``map_tiles(fn, x).sum()``, ``.mean(0)``) streams the operands' tiles through ``fn`` into its
accumulator, with no intermediate tiles stored anywhere; with ``rowwise=True`` the stream
reads row chunks of the tiles (as a direct reduction of a stored tensor does) and calls ``fn``
on each chunk. Whatever needs the tiles stored (a residency request, a write, ``matmul``)
materialises it first: one pass of ``fn``, the tiles past the budget written to a temporary
file, which is what ``map_tiles`` did eagerly before (and still does with ``lazy=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import conveyor as cv
from conveyor_storage._streaming import (
    Recipe,
    Step,
    _operand,
    _prefetched,
    _Session,
    check_result,
    chunkable,
    steps,
)

if TYPE_CHECKING:
    from conveyor_storage._tiles import TileMap
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["map_tiles", "materialize"]


def _sources(tensors: tuple[Any, ...]) -> list[tuple[TiledEvictable, TileMap]]:
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


def map_tiles(
    fn: Callable[..., cv.Tensor],
    *tensors: cv.Tensor,
    rowwise: bool = False,
    lazy: bool = True,
) -> cv.Tensor:
    """A TiledEvictable whose tile ``c`` is ``fn(tile c of each tensor)``, computed when read.

    ``fn`` receives compute tensors of the primary class, one per operand, each of the tile
    shape (with ``rowwise``, of a row chunk of a tile), and returns one tensor of that shape
    and of one dtype for every call; it runs without autograd (the result does not require
    grad). Its arguments are the operands' resident tiles as they are, or buffers reused for
    the next call: read them, never write into them, and keep nothing of them past the call.

    ``rowwise=True`` declares that row ``i`` (first axis) of ``fn``'s result depends only on
    row ``i`` of its operands (every elementwise chain, a dense row vector broadcast against
    the rows): streams may then call ``fn`` on row chunks of at most 2 MiB, read straight
    into reused buffers, so that the chunk stays in cache from the read through ``fn`` to the
    reduction. A ``fn`` that mixes rows (``t - t.mean(0)``) must leave it ``False``.

    The result is lazy (``tile_state`` is ``"lazy"``): a direct reduction of it streams the
    operands through ``fn`` within the first operand's budget and stores nothing; an
    elementwise direct operation, ``numpy()``, a move and ``project`` compute the tiles they
    read (again at every read: ``fn`` runs once per read of a tile); a residency request, a
    write, a discard and ``matmul`` first materialise it (``carrier.materialize()``: every
    tile computed once and stored, resident within the budget and in a temporary file past
    it). The operands must not change while the result is lazy: reading it after an operand
    was written or released raises ``RuntimeError``. ``lazy=False`` materialises at once.

    ``fn`` runs once here, on the first tile (or chunk), to check what it returns and learn
    the dtype; an error it raises on a later tile surfaces where that tile is read.

    Raises:
        TypeError: an operand is not a TiledEvictable tensor, or ``fn`` returns something
            other than a tensor of its operands' shape on the primary class.
        ValueError: the operands' tilings differ, or a budget cannot hold a step.
    """
    found = _sources(tensors)
    first = found[0][0]
    probe = _Session("map_tiles", [c for c, _ in found])
    per_step: dict[int, int] = {}
    for c, _ in found:
        per_step[id(c)] = per_step.get(id(c), 0) + 1
    probe.room(per_step, "one step")
    recipe = Recipe(fn, tensors, found, rowwise)
    dtype = _probe(probe, first, recipe, per_step)
    result = first._lazy_like(dtype, recipe)
    if not lazy:
        try:
            materialize(result)
        except BaseException:
            result.release()
            raise
    return cv.Tensor(result, cv.Layout(result.shape))


def _probe(
    session: _Session, first: TiledEvictable, recipe: Recipe, per_step: dict[int, int]
) -> cv.DType:
    """``fn`` on the first step a stream would take: checks its result, returns its dtype."""
    grid = first._grid
    if not grid.count:
        return first._dt
    chunked = recipe.rowwise and chunkable(recipe.sources)
    step = steps(grid, first.tile_bytes, chunked, lazy=True)[0]
    session.begin(per_step)
    holds: list[Any] = []
    try:
        args = []
        for source, mapping in recipe.sources:
            values, hold = session.load(source, mapping, step.coord, step.rows)
            holds.append((source, hold))
            args.append(
                session._argument(source, mapping, step.coord, step.rows, values, hold, holds)
            )
        shape = tuple(args[0].shape)
        with cv.no_grad():
            out = recipe.fn(*args)
        check_result(out, first, shape, None)
        return out.dtype
    finally:
        for owner, hold in holds:
            session.give(owner, hold)
        session.end()


def materialize(lazy: TiledEvictable) -> None:
    """Compute every tile of a lazy result and store it in place (the caller holds its lock).

    All or nothing: if ``fn`` or a store fails, the tiles stored so far are dropped and the
    tensor stays lazy.
    """
    recipe = lazy._recipe
    assert recipe is not None  # only lazy tensors materialise
    session = _Session("materialize", [lazy])
    held, ahead = session.ahead({id(lazy): 1})
    identity = lazy.footprint(cv.Layout(lazy.shape), "materialize")
    stored: list[Any] = []

    def job(step: Step) -> Callable[[], Any]:
        def run() -> Any:
            # Uncharged: fn's tile is copied into its stored tile at once, which is charged.
            values, hold = session._load_lazy(
                lazy, recipe, identity, step.coord, None, True, charge=False
            )
            return (step, values), lambda: session.give(lazy, hold)

        return run

    session.begin(held)
    try:
        jobs = [job(Step(coord, None)) for coord in lazy._grid.coords()]
        for (step, values), release in _prefetched(jobs, ahead, "materialize"):
            try:
                tile = session.finish(values)
                lazy._put(step.coord, tile)  # copies: the tile carrier imports the values
                stored.append(step.coord)
                del tile
            finally:
                release()
    except BaseException:
        for coord in stored:  # the tensor stays lazy: drop what was stored
            tile = lazy._resident.pop(coord, None)
            if tile is not None:
                tile.release()
                lazy._ledger.give(lazy.tile_bytes)
            lazy._current.discard(coord)
        raise
    finally:
        session.end()
    lazy._recipe = None
