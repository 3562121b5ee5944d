"""Projection and scatter: exchanging selected tiles with ordinary compact compute tensors.

``project(tensor, selection)`` gathers the selected tiles, in selection order, into one dense
tensor on the compute class; the gather is the result's single autograd node, and its
backward scatter-adds the cotangent into a fresh full-shaped TiledEvictable whose untouched
tiles are implicit zeros. ``scatter`` writes a compact tensor back into a fresh copy of a
template. Both move whole tile spans only.
"""

from __future__ import annotations

import contextvars
import threading
from typing import TYPE_CHECKING, Any, Final, Literal, final

import numpy as np

import conveyor as cv
from conveyor.sdk import as_dispatched, progress_active, report_progress
from conveyor_storage._tiles import Coord, TileMap, TileSelection
from conveyor_storage._transitions import claim

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["AwaitProjection", "project", "scatter"]

_REDUCTIONS: Final = ("replace", "add")


def _tiled(what: str, x: object) -> tuple[TiledEvictable, TileMap]:
    from conveyor_storage.tiled_evictable import TiledEvictable

    if not (type(x) is cv.Tensor and type(x.carrier) is TiledEvictable):
        shown = type(x.carrier).__name__ if type(x) is cv.Tensor else type(x).__name__
        msg = (
            f"{what}: expected a Tensor backed by TiledEvictable, got {shown}; pass the tiled "
            "tensor"
        )
        raise TypeError(msg)
    carrier: TiledEvictable = x.carrier
    return carrier, carrier.footprint(x.layout, what)


def _selection(what: str, carrier: TiledEvictable, selection: object) -> TileSelection:
    if not isinstance(selection, TileSelection):
        msg = f"{what} on TiledEvictable: selection must be a TileSelection, got {selection!r}"
        raise TypeError(msg)
    if len(selection.per_axis) != len(carrier.grid_shape):
        msg = (
            f"{what} on TiledEvictable: the selection has {len(selection.per_axis)} axes, the "
            f"grid {carrier.grid_shape} has {len(carrier.grid_shape)}"
        )
        raise ValueError(msg)
    for _, coord in selection.coords():
        carrier._grid.check_coord(what, coord)
    return selection


def _compact_box(layout: cv.Layout, tile: tuple[int, ...], position: Coord) -> cv.Layout:
    """The slots of the tile at ``position`` of a compact tensor with ``layout``."""
    offset = layout.offset + sum(
        p * t * s for p, t, s in zip(position, tile, layout.strides, strict=True)
    )
    return cv.Layout(tile, layout.strides, offset)


@final
class AwaitProjection:
    """A projection in flight; ``wait()`` returns the compact tensor (or raises its error)."""

    __slots__ = ("_error", "_event", "_result")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._result: cv.Tensor | None = None
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<AwaitProjection {'done' if self.done else 'pending'}>"

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> cv.Tensor:
        """The compact tensor once gathered.

        Raises:
            TimeoutError: the gather did not finish within ``timeout`` seconds.
        """
        if not self._event.wait(timeout):
            msg = f"project on TiledEvictable: not finished after {timeout} s; wait again"
            raise TimeoutError(msg)
        if self._error is not None:
            raise self._error
        assert self._result is not None  # set before the event
        return self._result


class _Gather(cv.Operation):
    """The visible node of a projection: gathers tiles; backward scatter-adds the cotangent."""

    def __init__(self, selection: TileSelection, mapping: TileMap) -> None:
        self.selection, self.mapping = selection, mapping

    def _forward(self, *inputs: Any, options: Any) -> cv.Tensor:
        (x,) = inputs
        carrier: TiledEvictable = x.carrier
        tile = carrier.tile_shape
        shape = tuple(n * t for n, t in zip(self.selection.shape, tile, strict=True))
        out = carrier._new_tile(int(np.prod(shape)), x.dtype)
        pairs = list(self.selection.coords())
        tiles = self.selection.tiles()
        with carrier._lock:
            claim(carrier, "project", tiles, materialize=False)  # lazy tiles compute on read
        try:
            for done, (position, coord) in enumerate(pairs, 1):
                values = self.mapping.view(carrier._values(coord, "project"))
                out.import_span(_compact_box(cv.Layout(shape), tile, position), values)
                if progress_active():
                    report_progress(done, len(pairs), "project tiles")
            carrier._policy.touched(tiles)
        except BaseException:
            out.release()
            raise
        finally:
            with carrier._lock:
                carrier._busy.difference_update(tiles.coords)
        return cv.Tensor(out, cv.Layout(shape))

    def backward(self, gradient: Any) -> tuple[cv.Tensor | None, ...]:
        (x,) = self.saved_inputs
        carrier: TiledEvictable = x.carrier
        zeros = carrier._fresh_like()
        return (scatter(gradient, cv.Tensor(zeros, cv.Layout(x.shape)), self.selection, "add"),)


def project(tensor: cv.Tensor, selection: TileSelection) -> AwaitProjection:
    """Gather ``selection``'s tiles of ``tensor`` into a compact dense compute tensor.

    The gather runs on a background thread; ``wait()`` returns an ordinary tensor on the
    compute class, whose operations dispatch there. Its tiles are busy until it finishes.

    Raises:
        TypeError: ``tensor`` is not on TiledEvictable, or ``selection`` not a TileSelection.
        ValueError: the selection's rank differs, or the layout breaks tiles.
        IndexError: a selected tile is outside the grid.
    """
    carrier, mapping = _tiled("project", tensor)
    selection = _selection("project", carrier, selection)
    # A projection is not a dispatch name: the node is stamped the way dispatch_op stamps one.
    op = as_dispatched(_Gather(selection, mapping), "project", carrier)
    handle = AwaitProjection()
    grad = cv.is_grad_enabled()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            with cv.set_grad_enabled(grad):
                handle._result = op.forward(tensor)  # type: ignore[assignment]  # one Tensor
        except BaseException as exc:  # handed to wait()
            handle._error = exc
        handle._event.set()

    threading.Thread(target=context.run, args=(work,), name="conveyor-project", daemon=True).start()
    return handle


def scatter(
    compact: cv.Tensor,
    template: cv.Tensor,
    selection: TileSelection,
    reduction: Literal["replace", "add"] = "replace",
) -> cv.Tensor:
    """A fresh full-shaped tiled tensor: ``template`` with ``compact``'s tiles written in.

    ``reduction="add"`` adds them instead (a tile selected twice receives both). Tiles outside
    the selection keep the template's value (implicit tiles stay implicit).

    Raises:
        TypeError: a wrong operand kind, or the dtypes differ.
        ValueError: ``reduction`` is unknown, or ``compact``'s shape is not the selection's.
    """
    carrier, mapping = _tiled("scatter", template)
    selection = _selection("scatter", carrier, selection)
    if reduction not in _REDUCTIONS:
        msg = f"scatter on TiledEvictable: reduction must be 'replace' or 'add', got {reduction!r}"
        raise ValueError(msg)
    if type(compact) is not cv.Tensor:
        msg = f"scatter on TiledEvictable: compact must be a Tensor, got {type(compact).__name__}"
        raise TypeError(msg)
    tile = carrier.tile_shape
    shape = tuple(n * t for n, t in zip(selection.shape, tile, strict=True))
    if compact.shape != shape:
        msg = (
            f"scatter on TiledEvictable: compact has shape {compact.shape}, the selection needs "
            f"{shape}"
        )
        raise ValueError(msg)
    if compact.dtype is not template.dtype:
        msg = (
            f"scatter on TiledEvictable: compact is {compact.dtype.name}, the template "
            f"{template.dtype.name}; cast compact first"
        )
        raise TypeError(msg)
    incoming: dict[Coord, list[Coord]] = {}
    for position, coord in selection.coords():
        incoming.setdefault(coord, []).append(position)
    result = carrier._fresh_like()
    try:
        coords = list(carrier._grid.coords())
        for done, coord in enumerate(coords, 1):
            positions = incoming.get(coord)
            if positions is None or reduction == "add":
                # Copied under the lock, so an eviction on another thread cannot release the
                # template's tile mid-read.
                with carrier._lock:
                    implicit = carrier._implicit.get(coord) if positions is None else None
                    if implicit is None:
                        value = np.array(mapping.view(carrier._values(coord, "scatter")))
                if implicit is not None:
                    result._implicit[coord] = implicit
                    continue
            if positions is not None:
                for position in positions:
                    piece = compact.carrier.export_span(
                        _compact_box(compact.layout, tile, position)
                    )
                    value = piece.copy() if reduction == "replace" else value + piece
            result._put(coord, value)
            if progress_active():
                report_progress(done, len(coords), "scatter tiles")
    except BaseException:
        result.release()
        raise
    return cv.Tensor(result, cv.Layout(carrier.shape))
