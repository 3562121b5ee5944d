"""Direct elementwise operations of a TiledEvictable: every tile through the primary's kernel.

Each tile step hands the primary carrier class its own operation for the name (a fresh
dispatch, run lowered: no autograd node) on one tile of every tiled operand, the Python scalars
as given and the matching piece of each dense companion operand, then copies the tile result
into its box of the dense result. The primary's kernels and plans decide the values (float32
stays float32 on CPU), so a tiled call means exactly what the same call on the primary means.

A resident tile seen in canonical order is passed as it is (its tile carrier, no copy); other
tiles are copied into a work tile of the primary class that the operation reuses. A dense
companion (a column-mean vector beside a tiled matrix) is passed as a view of the piece one
tile meets: whole along the axes it broadcasts, the tile's span along the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

import conveyor as cv
from conveyor_storage._streaming import (
    Step,
    _box,
    _operand,
    _prefetched,
    _result,
    _Session,
    chunkable,
    step_region,
    steps,
)
from conveyor_storage._tiles import TileMap

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["ELEMENTWISE", "companion_piece", "run_elementwise", "run_tile"]

#: Every planned name whose result is the broadcast of its operands, computed element by element.
ELEMENTWISE: Final = frozenset(
    [
        "add",
        "sub",
        "mul",
        "elementwise_mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "rem",
        "eq",
        "ne",
        "lt",
        "le",
        "neg",
        "abs",
        "sign",
        "recip",
        "sqrt",
        "rsqrt",
        "exp",
        "exp2",
        "log",
        "log2",
        "sin",
        "cos",
        "erf",
        "floor",
        "ceil",
        "round",
        "logical_not",
        "relu",
        "sigmoid",
        "tanh",
        "gelu",
        "silu",
        "softplus",
        "elu",
        "leaky_relu",
        "tan",
        "sinh",
        "cosh",
        "asin",
        "acos",
        "atan",
        "asinh",
        "acosh",
        "atanh",
        "expm1",
        "log1p",
        "clamp",
        "select",
    ]
)


def companion_piece(x: cv.Tensor, result_shape: tuple[int, ...], region: tuple[slice, ...]) -> Any:
    """The slices of dense ``x`` (broadcast to ``result_shape``) that the tile ``region`` meets:
    the whole extent-1 axes it broadcasts along, the region's span of the others."""
    pad = len(result_shape) - x.ndim
    return tuple(slice(0, 1) if n == 1 else region[pad + j] for j, n in enumerate(x.shape))


def _piece_tensor(x: cv.Tensor, pieces: tuple[slice, ...]) -> cv.Tensor:
    """A view of ``x`` over ``pieces`` (same carrier, no copy)."""
    layout = x.layout
    offset = layout.offset + sum(p.start * s for p, s in zip(pieces, layout.strides, strict=True))
    extent = tuple(p.stop - p.start for p in pieces)
    return cv.Tensor(x.carrier, cv.Layout(extent, layout.strides, offset))


def run_tile(
    probe: cv.Carrier, name: str, args: list[Any], options: cv.OperationExecutionOptions | None
) -> cv.Tensor:
    """One tile step: the primary's own operation for ``name``, lowered (no autograd node)."""
    with cv.no_grad():
        result = cv.execute_lowered(probe.dispatch_op(name), *args, options=options)
    assert type(result) is cv.Tensor  # elementwise names have one result
    return result


class _WorkTiles:
    """Primary-class tensors of one tile for the operands not passed as they are, reused."""

    def __init__(self) -> None:
        self._tiles: dict[int, cv.Carrier] = {}

    def tensor(
        self, slot: int, carrier: TiledEvictable, mapping: TileMap, step: Step, values: Any
    ) -> cv.Tensor:
        tile = carrier._resident.get(step.coord)
        if tile is not None and mapping.identity:
            whole = cv.Layout(carrier._grid.tile_shape)
            first = 0 if step.rows is None else step.rows[0] * whole.strides[0]
            return cv.Tensor(tile, cv.Layout(tuple(values.shape), whole.strides, first))
        work = self._tiles.get(slot)
        if work is None:
            work = self._tiles[slot] = carrier._new_tile(carrier._grid.tile_size, carrier._dt)
        shape = tuple(values.shape)
        work.import_span(cv.Layout(shape), np.ascontiguousarray(values))
        return cv.Tensor(work, cv.Layout(shape))

    def release(self) -> None:
        for tile in self._tiles.values():
            tile.release()
        self._tiles.clear()


def run_elementwise(outer: cv.Carrier, invocation: cv.ResolvedInvocation) -> cv.Tensor:
    """Stream every tile of the tiled operands (those on ``outer``'s class) through the
    primary's kernel into the dense result."""
    name, operands = invocation.operation, invocation.operands
    tiled = {
        k: _operand(x)
        for k, x in enumerate(operands)
        if type(x) is cv.Tensor and type(x.carrier) is type(outer)
    }
    dense = [k for k, x in enumerate(operands) if type(x) is cv.Tensor and k not in tiled]
    first = next(iter(tiled.values()))[0]
    session = _Session(name, [c for c, _ in tiled.values()])
    per_step: dict[int, int] = {}
    for c, _ in tiled.values():
        per_step[id(c)] = per_step.get(id(c), 0) + 1
    held, ahead = session.ahead(per_step)
    spec = invocation.results[0]
    out = _result(first, spec)
    grid = first._grid
    work = _WorkTiles()

    def job(step: Step) -> Callable[[], Any]:
        def run() -> Any:
            loaded = {
                k: (c, m, *session.load(c, m, step.coord, step.rows, pending=True))
                for k, (c, m) in tiled.items()
            }

            def release() -> None:
                for carrier, _, _, hold in loaded.values():
                    session.give(carrier, hold)

            return (step, loaded), release

        return run

    session.begin(held)
    try:
        chunked = chunkable(list(tiled.values()))
        lazy = any(c._recipe is not None for c, _ in tiled.values())
        jobs = [job(step) for step in steps(grid, first.tile_bytes, chunked, lazy)]
        for (step, loaded), release in _prefetched(jobs, ahead, name):
            try:
                region = step_region(grid, step)
                args = list(operands)
                for k, (carrier, mapping, values, _) in loaded.items():
                    args[k] = work.tensor(k, carrier, mapping, step, session.finish(values))
                for k in dense:
                    args[k] = _piece_tensor(
                        operands[k], companion_piece(operands[k], spec.shape, region)
                    )
                tile = run_tile(out.carrier, name, args, invocation.options)
                try:
                    box = _box(
                        spec.shape,
                        tuple(r.start for r in region),
                        tuple(r.stop - r.start for r in region),
                    )
                    out.carrier.import_span(box, tile.carrier.export_span(tile.layout))
                finally:
                    tile.carrier.release()
            finally:
                release()
    except BaseException:
        out.carrier.release()
        raise
    finally:
        work.release()
        session.end()
    return out
