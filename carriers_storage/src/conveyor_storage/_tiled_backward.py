"""Backward of the direct operations: the central VJP, applied tile by tile within the budget.

The central rule of each direct name is local: an elementwise gradient at a tile needs only
that tile of each saved operand and of the cotangent, and a matmul gradient is a sum over
tile products. So the backward runs the central rule (``conveyor.sdk.vjp``) on one tile
(or one tile pair) at a time, loading saved tiles the way the forward streams them, and
assembles the dense compute-class gradients. ``add`` and ``reduce_sum`` read no saved values,
and the rules of ``reduce_prod`` / ``reduce_max`` / ``reduce_min`` read the input only through
direct operations, so those rules run once on the saved tensors themselves. Gradient math
stays central.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import DefinitionOperation, progress_active, report_progress, vjp
from conveyor_storage._streaming import Hold, _operand, _Session
from conveyor_storage._tiled_elementwise import ELEMENTWISE, companion_piece
from conveyor_storage._tiled_matmul import tensor_grids
from conveyor_storage._tiles import VIEWS

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["TiledOperation"]

# Rules run once on the saved tensors themselves: add and reduce_sum read no saved values; the
# product and extrema rules read the tiled input only through direct operations (compare,
# select, reduce), which stream it within the budget.
_WHOLE: Final = frozenset({"add", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min"})


def _rule(op: DefinitionOperation, saved: tuple[Any, ...], gradient: Any) -> tuple[Any, ...]:
    """The central rule of ``op``'s name on one piece of its saved inputs and cotangent."""
    return vjp(op, gradient, saved)


def _tile_tensor(carrier: TiledEvictable, values: Any, like: cv.Tensor) -> cv.Tensor:
    """One saved tile as a compute tensor (one tile of work space), wanting grad like ``like``."""
    tile = carrier._new_tile(values.size, like.dtype)
    tile.import_span(cv.Layout(values.shape), np.asarray(values, order="C"))  # keeps 0-d
    out = cv.Tensor(tile, cv.Layout(values.shape))
    out.requires_grad = like.requires_grad
    return out


def _load_tile(
    session: Any,
    owner: TiledEvictable,
    tiles: Any,
    coord: Any,
    carrier: TiledEvictable,
    like: cv.Tensor,
) -> cv.Tensor:
    """A saved tile of ``owner`` copied into work space; its resident copy is given back at once."""
    values, hold = session.load(owner, tiles, coord)
    try:
        return _tile_tensor(carrier, values, like)
    finally:
        session.give(owner, hold)


class _Gradients:
    """Dense gradient buffers per tensor input, allocated at the first tile that gives one."""

    def __init__(self, saved: tuple[Any, ...]) -> None:
        self.tensors = [x for x in saved if type(x) is cv.Tensor]
        self.buffers: list[Any] = [None] * len(self.tensors)

    def add(self, k: int, region: tuple[slice, ...], part: cv.Tensor | None) -> None:
        if part is None:
            return
        values = np.asarray(part.numpy())
        if self.buffers[k] is None:
            self.buffers[k] = np.zeros(self.tensors[k].shape, values.dtype)
        shape = np.shape(self.buffers[k][region])
        if values.shape != shape:  # a broadcast companion: sum its cotangent back
            values = values.sum(axis=tuple(range(values.ndim - len(shape))))
            ones = tuple(j for j, n in enumerate(shape) if n == 1 and values.shape[j] != 1)
            values = values.sum(axis=ones, keepdims=True)
        self.buffers[k][region] += values  # indexed again: a 0-d region gives no view

    def results(self, carrier: TiledEvictable, wants: list[bool]) -> tuple[cv.Tensor | None, ...]:
        out: list[cv.Tensor | None] = []
        for x, buffer, wanted in zip(self.tensors, self.buffers, wants, strict=True):
            if not wanted:
                out.append(None)
                continue
            if buffer is None:  # an empty grid: no tile gave a gradient
                buffer = np.zeros(x.shape, x.dtype.numpy)
            dense = carrier._new_tile(buffer.size, cv.dtype(buffer.dtype))
            dense.import_span(cv.Layout(buffer.shape), buffer)
            out.append(cv.Tensor(dense, cv.Layout(buffer.shape)))
        return tuple(out)


def _elementwise(op: DefinitionOperation, saved: tuple[Any, ...], gradient: Any) -> Any:
    """The central rule per tile; a dense companion operand takes the piece the tile meets,
    and its gradient pieces are summed into its own shape."""
    outer = type(op._dispatch_carrier)
    tiled = [
        _operand(x) if type(x) is cv.Tensor and type(x.carrier) is outer else None for x in saved
    ]
    carrier = next(t[0] for t in tiled if t is not None)
    grid, session = carrier._grid, _Session("backward", [t[0] for t in tiled if t])
    counts: dict[int, int] = {}
    for t in tiled:
        if t is not None:
            counts[id(t[0])] = counts.get(id(t[0]), 0) + 1
    session.room(counts, "one tile step")
    grads = _Gradients(saved)
    wants = [x.requires_grad for x in grads.tensors]
    session.begin(counts)
    try:
        coords = list(grid.coords())
        for done, coord in enumerate(coords, 1):
            region = grid.region(coord)
            taken: list[tuple[TiledEvictable, Hold]] = []
            try:
                inputs = []
                for x, t in zip(saved, tiled, strict=True):
                    if t is None:
                        inputs.append(_piece(x, gradient.shape, region))
                        continue
                    values, hold = session.load(t[0], t[1], coord)
                    taken.append((t[0], hold))
                    inputs.append(_tile_tensor(carrier, values, x))
                parts = _rule(op, tuple(inputs), gradient[region])
            finally:
                for owner, hold in taken:
                    session.give(owner, hold)
            for k, (x, part) in enumerate(zip(grads.tensors, parts, strict=True)):
                own = (
                    region
                    if type(x.carrier) is outer
                    else companion_piece(x, gradient.shape, region)
                )
                grads.add(k, own, part)
            if progress_active():
                report_progress(done, len(coords), "backward")
    finally:
        session.end()
    return grads.results(carrier, wants)


def _piece(x: Any, shape: tuple[int, ...], region: tuple[slice, ...]) -> Any:
    """A dense companion's piece for one tile (a fresh tensor wanting grad like ``x``); other
    operands (scalars, ``None``) as they are."""
    if type(x) is not cv.Tensor:
        return x
    piece = x[companion_piece(x, shape, region)]
    out = cv.move(piece, type(x.carrier))  # its own leaf: the rule's gradient stops here
    out.requires_grad = x.requires_grad
    return out


def _matmul(op: DefinitionOperation, saved: tuple[Any, ...], gradient: Any) -> Any:
    """dA[i,k] = sum_j dC[i,j] B[k,j]^T and dB[k,j] = sum_i A[i,k]^T dC[i,j]: the central rule on
    each (A[i,k], B[k,j], dC[i,j]); each B tile is loaded once and A tiles stream past it."""
    x, y = saved
    (a, amap), (b, bmap) = _operand(x), _operand(y)
    ((gm, gk), (tm, tk)), ((_, gn), (_, tn)) = tensor_grids(amap, a, bmap, b)
    session = _Session("backward", [a, b])
    counts = {id(a): 2} if a is b else {id(a): 1, id(b): 1}
    session.room(counts, "one tile pair")
    grads = _Gradients(saved)
    wants = [x.requires_grad, y.requires_grad]
    session.begin(counts)
    steps, total = 0, gk * gn
    try:
        for kk in range(gk):
            for j in range(gn):
                b_tile = _load_tile(session, b, bmap, bmap.carrier_coord((kk, j)), a, y)
                for i in range(gm):
                    a_tile = _load_tile(session, a, amap, amap.carrier_coord((i, kk)), a, x)
                    g = gradient[i * tm : (i + 1) * tm, j * tn : (j + 1) * tn]
                    ga, gb = _rule(op, (a_tile, b_tile), g)
                    grads.add(0, _block(i, tm, kk, tk), ga)
                    grads.add(1, _block(kk, tk, j, tn), gb)
                steps += 1
                if progress_active():
                    report_progress(steps, total, "backward")
    finally:
        session.end()
    return grads.results(a, wants)


def _block(r: int, rows: int, c: int, cols: int) -> tuple[slice, slice]:
    return slice(r * rows, (r + 1) * rows), slice(c * cols, (c + 1) * cols)


_TILEWISE: Final[dict[str, Callable[[DefinitionOperation, tuple[Any, ...], Any], Any]]] = {
    **dict.fromkeys(ELEMENTWISE - _WHOLE, _elementwise),
    "matmul": _matmul,
}


class TiledOperation(DefinitionOperation):
    """A direct operation of a TiledEvictable: its backward runs the central rule per tile."""

    def backward(self, gradient: Any) -> tuple[cv.Tensor | None, ...]:
        name = self._operation_name
        if name in VIEWS:  # the view's central gradient: the cotangent permuted back
            return super().backward(gradient)
        saved = super(DefinitionOperation, self).saved_inputs  # the outer tensors, not lowered
        with cv.no_grad():
            if name in _WHOLE:
                return _rule(self, saved, gradient)
            assert isinstance(name, str)  # dispatched under a direct name
            grads: tuple[cv.Tensor | None, ...] = _TILEWISE[name](self, saved, gradient)
        return grads
