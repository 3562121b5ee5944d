"""Direct reductions of a TiledEvictable: partial results per tile, combined in the plan dtype.

``reduce_sum`` / ``reduce_prod`` reduce each tile in the plan's accumulator dtype (float16 sums
in float32, narrow integers in 64 bits) and combine the partials in it, rounding once at the
end as the plan says; ``reduce_max`` / ``reduce_min`` combine with NaN-propagating maximum /
minimum (exact in any order); ``argmax`` / ``argmin`` keep each position's best value and
global index, the earliest on ties and the first NaN, as NumPy and the reference carrier do.
Every partial has the result's kept shape with the tile's span on the axes not reduced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import normalize_axes
from conveyor_storage._streaming import (
    Step,
    _operand,
    _prefetched,
    _result,
    _Session,
    chunkable,
    step_region,
    steps,
)
from conveyor_storage._tiles import Coord

__all__ = ["REDUCTIONS", "run_reduction"]

_Array = np.ndarray[Any, Any]
_FOLD: Final[dict[str, tuple[Callable[..., _Array], Callable[..., _Array]]]] = {
    "reduce_sum": (np.sum, np.add),
    "reduce_prod": (np.prod, np.multiply),
    "reduce_max": (np.max, np.maximum),
    "reduce_min": (np.min, np.minimum),
}
_ARG: Final = {"argmax": (np.argmax, np.greater), "argmin": (np.argmin, np.less)}
REDUCTIONS: Final = frozenset(_FOLD) | frozenset(_ARG)
#: How many steps a reduction reads ahead (each on its own thread) when the budget allows.
#: One: two reading threads measured worse under load (the 1 GiB variance pipeline in fresh
#: processes at load 5-6, 6 runs each: median 0.53 s with one, 0.62 s with two), and within
#: the noise when the machine was quieter.
REDUCTION_AHEAD: Final = 1


def _identity(name: str, dtype: np.dtype[Any]) -> Any:
    """The value every partial improves on: 0, 1, or the lowest / highest of the dtype."""
    if name in ("reduce_sum", "reduce_prod"):
        return 0 if name == "reduce_sum" else 1
    low = name == "reduce_max"
    if dtype.kind == "b":
        return not low
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if low else info.max
    return -np.inf if low else np.inf


def _axes(invocation: cv.ResolvedInvocation, ndim: int) -> tuple[int, ...]:
    options = invocation.options or cv.OperationExecutionOptions(invocation.operation)
    return tuple(normalize_axes(options.axis, ndim)) if ndim else ()


def run_reduction(invocation: cv.ResolvedInvocation) -> cv.Tensor:
    """Stream every tile, reducing it over the plan's axes, and combine the partials."""
    name = invocation.operation
    plan = invocation.plan
    assert plan is not None  # every reduction is dtype-planned
    (x,) = invocation.operands
    carrier, mapping = _operand(x)
    axes = _axes(invocation, x.ndim)
    compute = plan.operands[0].convert_to or x.dtype
    kept = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
    grid = carrier._grid
    session = _Session(name, [carrier])

    def job(step: Step) -> Callable[[], Any]:
        def run() -> Any:
            values, hold = session.load(carrier, mapping, step.coord, step.rows, pending=True)
            return (step, values), lambda: session.give(carrier, hold)

        return run

    fold = _Fold(name, kept, compute.numpy) if name in _FOLD else _ArgFold(name, kept, x.shape)
    held, ahead = session.ahead({id(carrier): 1}, REDUCTION_AHEAD)
    session.begin(held)
    try:
        chunked = chunkable([(carrier, mapping)])
        lazy = carrier._recipe is not None
        jobs = [job(step) for step in steps(grid, carrier.tile_bytes, chunked, lazy)]
        for (step, loaded), release in _prefetched(jobs, ahead, name):
            try:
                covered = step_region(grid, step)
                region = tuple(slice(0, 1) if k in axes else r for k, r in enumerate(covered))
                origin = tuple(r.start for r in covered)
                values = session.finish(loaded)  # a lazy chunk's fn runs here
                with np.errstate(all="ignore"):
                    fold.add(values.astype(compute.numpy, copy=False), axes, region, origin)
            finally:
                # Nothing may keep fn's result past release: its buffer then goes back to the
                # compute class's pool for the next chunk instead of fresh memory.
                values = None
                release()
    finally:
        session.end()
    spec = invocation.results[0]
    out = _result(carrier, spec)
    with np.errstate(all="ignore"):
        values = fold.total.astype(spec.dtype.numpy, copy=False).reshape(spec.shape)
    out.carrier.import_span(spec.layout, values)
    return out


class _Fold:
    """A sum, product, maximum or minimum: an associative combine of per-tile partials."""

    def __init__(self, name: str, kept: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.combine: Any = _FOLD[name][1]  # a ufunc: its reduce is the np.sum / np.max
        self.typed = name in ("reduce_sum", "reduce_prod")
        self.dtype = dtype
        self.total = np.full(kept, _identity(name, dtype), dtype)

    def add(
        self, values: _Array, axes: tuple[int, ...], region: tuple[slice, ...], _: Coord
    ) -> None:
        # Sums and products accumulate in the plan's dtype; maxima and minima in the values'.
        # The ufunc's own reduce and an in-place combine: a stream calls this once per chunk.
        combine = self.combine
        if self.typed:
            part = combine.reduce(values, axis=axes, dtype=self.dtype, keepdims=True)
        else:
            part = combine.reduce(values, axis=axes, keepdims=True)
        where: tuple[Any, ...] = (*region, Ellipsis)  # a view even of a 0-d total
        view = self.total[where]
        combine(view, part, out=view)


class _ArgFold:
    """``argmax`` / ``argmin``: the best value and its global index per kept position."""

    def __init__(self, name: str, kept: tuple[int, ...], shape: tuple[int, ...]) -> None:
        self.arg, self.better = _ARG[name]
        self.shape, self.kept = shape, kept
        self.best: _Array | None = None  # allocated at the first tile, in its dtype
        self.seen = np.zeros(kept, bool)
        self.total = np.zeros(kept, np.int64)

    def add(
        self, values: _Array, axes: tuple[int, ...], region: tuple[slice, ...], origin: Coord
    ) -> None:
        value: _Array
        index: _Array
        if len(axes) == len(self.shape):  # axis=None: over the flattened tensor
            at = np.unravel_index(int(self.arg(values)), values.shape)
            value = np.asarray(values[at]).reshape(self.kept)
            flat = np.ravel_multi_index(
                tuple(int(o + i) for o, i in zip(origin, at, strict=True)), self.shape
            )
            index = np.full(self.kept, flat, np.int64)
        else:
            (axis,) = axes
            local: _Array = np.expand_dims(self.arg(values, axis=axis), axis)
            value = np.take_along_axis(values, local, axis)
            index = local.astype(np.int64) + origin[axis]
        if self.best is None:
            self.best = np.zeros(self.kept, values.dtype)
        # A view even of a 0-d array (the region () alone would give a scalar).
        view: tuple[Any, ...] = (*region, Ellipsis)
        best, seen, held = self.best[view], self.seen[view], self.total[view]
        nan, best_nan = value != value, best != best  # NaN is the only value unequal to itself
        tie = (value == best) | (nan & best_nan)
        # A NaN beats every number (NumPy reports the first NaN); then the strict order; on a
        # tie the smaller global index (tiles do not visit flat indices in order).
        wins = ~seen | (nan & ~best_nan) | (self.better(value, best) & ~best_nan)
        wins |= tie & (index < held)
        best[wins], held[wins], seen[wins] = value[wins], index[wins], True
