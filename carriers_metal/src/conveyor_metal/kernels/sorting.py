"""``sort`` and ``topk`` as a bitonic sorting network over (value, position) pairs.

Each row (one lane of the sorted axis) is padded to a power of two ``width``; padding slots
hold position ``-1`` and rank after every real element. Pairs are compared by value in the
requested order, then by position, which is a strict total order: the network's result is
therefore the stable sort the reference computes, NaN ranked above every number (last
ascending, first descending) and ``-0.0`` tied with ``0.0``.

Only positions move; values are read through the input's strides whenever two slots are
compared, so the input is never copied. Two kernels serve every row length:

- ``local``: one threadgroup holds a ``TILE`` of positions in threadgroup memory. With
  ``stage == 0`` it sorts its tile from the identity (every bitonic stage up to the tile, or
  the row, whichever is shorter); with ``stage == k`` it loads the tile from the position
  scratch ``P`` and runs the last ``log2(TILE)`` steps of global stage ``k``. With ``final``
  it writes the values and int64 positions of the first ``kout`` slots (``topk`` keeps a
  prefix) instead of the scratch.
- ``step``: one compare-exchange step ``(stage, j)`` with ``j >= TILE`` over the scratch in
  global memory, one thread per pair.

The stage parameters are dynamic scalars, so one pair of kernels serves every length and
stage. Rows are addressed through ``meta``: ``[kept extents, kept strides, input offset,
stride of the sorted axis]``.
(No ``from __future__ import annotations`` here: TileLang evaluates the signature annotations.)
"""

import math
from typing import Any, Final

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import BLOCK, walk

__all__ = ["TILE", "SortClass", "SortKey", "build", "meta_layout"]

#: Slots of one threadgroup's tile: two per thread, so every thread compares one pair a step.
TILE: Final = 2 * BLOCK
_LOG_TILE: Final = int(math.log2(TILE))


@attrs.frozen
class SortKey:
    """A sorting kernel: its role (``"sort_local"`` or ``"sort_step"``) and the stored dtype."""

    family: str
    name: str
    stored: str


@attrs.frozen
class SortClass:
    """The layout class of a sort: how many kept axes remain after merging."""

    kept: int


def meta_layout(layout_class: SortClass) -> dict[str, int]:
    """Where each part of the meta buffer starts, and its total size."""
    k = layout_class.kept
    return {
        "kept_shape": 0,
        "kept_strides": k,
        "offset": 2 * k,
        "stride": 2 * k + 1,
        "size": 2 * k + 2,
    }


def _T() -> Any:
    import tilelang.language as T

    return T


def build(key: SortKey, layout_class: SortClass) -> Any:
    """The ``prim_func`` of a sorting kernel."""
    function = _local(key, layout_class) if key.name == "sort_local" else _step(key, layout_class)
    return function.with_attr("global_symbol", symbol(key, layout_class))


def _ordering(key: SortKey, layout_class: SortClass) -> tuple[str, Any, Any, Any]:
    """``(compare dtype, base, value, before)``: how a kernel ranks two positions of a row.

    ``before(first, second, v_first, v_second, descending)`` is whether ``first``'s pair ranks
    before ``second``'s; the values are read once into local variables by the caller (small
    expressions keep TileLang's lowering fast).
    """
    T = _T()
    parts = meta_layout(layout_class)
    floating = key.stored.startswith("float")
    compare = "float32" if floating else "int32"

    def base(meta: Any, r: Any) -> Any:
        kept = walk(meta, parts["kept_shape"], parts["kept_strides"], layout_class.kept, r)
        return meta[parts["offset"]] + kept

    def value(X: Any, meta: Any, start: Any, p: Any) -> Any:
        # Padding (-1) reads the row's first element; ``before`` never looks at that value.
        return X[start + T.max(p, 0) * meta[parts["stride"]]]

    def before(a: Any, b: Any, va: Any, vb: Any, descending: Any) -> Any:
        up, down, tie = va < vb, va > vb, va == vb
        if floating:
            a_nan, b_nan = T.isnan(va), T.isnan(vb)
            up = T.And(T.Not(a_nan), T.Or(b_nan, up))
            down = T.Or(T.And(a_nan, T.Not(b_nan)), down)
            tie = T.Or(tie, T.And(a_nan, b_nan))
        wins = T.Or(T.Select(descending != 0, down, up), T.And(tie, a < b))
        return T.And(a >= 0, T.Or(b < 0, wins))

    return compare, base, value, before


def _local(key: SortKey, layout_class: SortClass) -> Any:
    T = _T()
    compare, base, value, before = _ordering(key, layout_class)
    nx, rows, width, kout = (
        T.dynamic("nx"),
        T.dynamic("rows"),
        T.dynamic("width"),
        T.dynamic("kout"),
    )
    d, m = key.stored, meta_layout(layout_class)["size"]

    @T.prim_func
    def local(
        X: T.Tensor((nx,), d),
        P: T.Tensor((rows, width), "int32"),
        Y: T.Tensor((rows, kout), d),
        J: T.Tensor((rows, kout), "int64"),
        meta: T.Tensor((m,), "int32"),
        length: T.int32,
        descending: T.int32,
        stage: T.int32,
        final: T.int32,
    ):
        with T.Kernel(T.ceildiv(width, TILE), rows, threads=BLOCK) as (bx, by):
            S = T.alloc_shared((TILE,), "int32")
            start = T.alloc_var("int32")
            a = T.alloc_var("int32")
            b = T.alloc_var("int32")
            va = T.alloc_var(compare)
            vb = T.alloc_var(compare)
            i = T.alloc_var("int32")
            j = T.alloc_var("int32")
            up = T.alloc_var("int32")
            lo = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            live = T.alloc_var("bool")
            span = T.min(width, TILE)  # width is a power of two
            for t in T.Parallel(BLOCK):
                start = base(meta, by)
                for h in T.unroll(2):
                    if h * BLOCK + t < span:
                        if stage == 0:
                            S[h * BLOCK + t] = T.Select(
                                bx * TILE + h * BLOCK + t < length, bx * TILE + h * BLOCK + t, -1
                            )
                        else:
                            S[h * BLOCK + t] = P[by, bx * TILE + h * BLOCK + t]
            # Stage 2 << s, step j = 1 << (s - q). A merge (stage > 0) runs only the last
            # stage's steps, those of ``j < TILE``, with its own stage size.
            for s in T.serial(_LOG_TILE):
                for q in T.serial(s + 1):
                    for t in T.Parallel(BLOCK):
                        # Pair t: slots i and i + j. An ascending run (bit ``stage`` of i
                        # clear) swaps when the upper slot ranks first; a descending one
                        # when the lower does. Idle pairs compare padding: never a swap.
                        j = 1 << (s - q)
                        i = 2 * t - T.bitwise_and(t, j - 1)
                        up = T.bitwise_and(bx * TILE + i, T.Select(stage == 0, 2 << s, stage))
                        lo = S[i]
                        hi = S[i + j]
                        live = T.And(
                            2 * t < span, T.Select(stage == 0, (2 << s) <= span, s == _LOG_TILE - 1)
                        )
                        a = T.Select(live, T.Select(up == 0, hi, lo), -1)
                        b = T.Select(live, T.Select(up == 0, lo, hi), -1)
                        va = T.cast(value(X, meta, start, a), compare)
                        vb = T.cast(value(X, meta, start, b), compare)
                        if before(a, b, va, vb, descending):
                            S[i] = hi
                            S[i + j] = lo
            for t in T.Parallel(BLOCK):
                for h in T.unroll(2):
                    if h * BLOCK + t < span:
                        if final != 0:
                            if bx * TILE + h * BLOCK + t < kout:
                                Y[by, bx * TILE + h * BLOCK + t] = value(
                                    X, meta, start, S[h * BLOCK + t]
                                )
                                J[by, bx * TILE + h * BLOCK + t] = T.cast(S[h * BLOCK + t], "int64")
                        else:
                            P[by, bx * TILE + h * BLOCK + t] = S[h * BLOCK + t]

    return local


def _step(key: SortKey, layout_class: SortClass) -> Any:
    T = _T()
    compare, base, value, before = _ordering(key, layout_class)
    nx, rows, width = T.dynamic("nx"), T.dynamic("rows"), T.dynamic("width")
    d, m = key.stored, meta_layout(layout_class)["size"]

    @T.prim_func
    def step(
        X: T.Tensor((nx,), d),
        P: T.Tensor((rows, width), "int32"),
        meta: T.Tensor((m,), "int32"),
        descending: T.int32,
        stage: T.int32,
        j: T.int32,
    ):
        with T.Kernel(T.ceildiv(width, TILE), rows, threads=BLOCK) as (bx, by):
            start = T.alloc_var("int32")
            i = T.alloc_var("int32")
            a = T.alloc_var("int32")
            b = T.alloc_var("int32")
            va = T.alloc_var(compare)
            vb = T.alloc_var(compare)
            for t in T.Parallel(BLOCK):
                start = base(meta, by)
                # Pair p = bx * BLOCK + t: its lower slot i has bit j clear.
                i = 2 * (bx * BLOCK + t) - T.bitwise_and(bx * BLOCK + t, j - 1)
                a = T.Select(T.bitwise_and(i, stage) == 0, P[by, i + j], P[by, i])
                b = T.Select(T.bitwise_and(i, stage) == 0, P[by, i], P[by, i + j])
                va = T.cast(value(X, meta, start, a), compare)
                vb = T.cast(value(X, meta, start, b), compare)
                if before(a, b, va, vb, descending):
                    P[by, i + j] = T.Select(T.bitwise_and(i, stage) == 0, b, a)
                    P[by, i] = T.Select(T.bitwise_and(i, stage) == 0, a, b)

    return step
