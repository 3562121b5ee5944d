"""Reductions, arg-reductions and ``cumsum`` as threadgroup-parallel TileLang kernels.

One threadgroup reduces one output row. Each of its ``BLOCK`` threads folds a strided share of
the row into threadgroup memory, then a tree halves the live slots ``log2(BLOCK)`` times
(TileLang places the barriers; ``T.reduce_sum`` has no Metal lowering in 0.1.15, so the tree
is written out). Arg-reductions carry candidate indices through the same tree; ties keep
the lower index and the first NaN wins, as the reference does. ``cumsum`` scans a row in
chunks of ``BLOCK``: a Hillis-Steele scan in threadgroup memory per chunk, plus the running
carry of the chunks before it.

Rows and reduced elements are addressed through ``meta``: ``[kept extents, kept strides,
reduced extents, reduced strides, input offset, reduced count]``, so one kernel serves every
shape of its layout class (kept rank, reduced rank). ``cumsum`` writes a contiguous
(rows, scanned axis) result; the caller views it back in the input's axis order.
(No ``from __future__ import annotations`` here: TileLang evaluates the signature annotations.)
"""

import math
from typing import Any

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import BLOCK, AccumulatingKey, walk

__all__ = ["ReductionClass", "build", "meta_layout"]

_STEPS = int(math.log2(BLOCK))


@attrs.frozen
class ReductionClass:
    """The layout class of a reduction: how many kept and reduced axes remain after merging."""

    kept: int
    reduced: int


def meta_layout(layout_class: ReductionClass) -> dict[str, int]:
    """Where each part of the meta buffer starts, and its total size."""
    k, r = layout_class.kept, layout_class.reduced
    parts = {"kept_shape": 0, "kept_strides": k, "red_shape": 2 * k, "red_strides": 2 * k + r}
    parts["offset"] = 2 * k + 2 * r
    parts["count"] = parts["offset"] + 1
    parts["size"] = parts["count"] + 1
    return parts


def _T() -> Any:
    import tilelang.language as T

    return T


def _init(name: str, dtype: str) -> Any:
    T = _T()
    if name in ("reduce_sum", "cumsum"):
        return T.cast(0, dtype)
    if name == "reduce_prod":
        return T.cast(1, dtype)
    low = name in ("reduce_max", "argmax")
    if dtype == "bool":
        return T.cast(not low, dtype)
    if dtype.startswith(("float", "bfloat")):
        return T.cast(-math.inf if low else math.inf, dtype)
    return T.min_value(dtype) if low else T.max_value(dtype)


def _combine(name: str, dtype: str, a: Any, b: Any) -> Any:
    T = _T()
    if name in ("reduce_sum", "cumsum"):
        return T.Or(a, b) if dtype == "bool" else a + b
    if name == "reduce_prod":
        return T.And(a, b) if dtype == "bool" else a * b
    if dtype == "bool":
        return T.Or(a, b) if name == "reduce_max" else T.And(a, b)
    picked = T.max(a, b) if name == "reduce_max" else T.min(a, b)
    if dtype.startswith(("float", "bfloat")):
        return T.if_then_else(T.Or(T.isnan(a), T.isnan(b)), a + b, picked)
    return picked


def _better(name: str, dtype: str, a: Any, ia: Any, b: Any, ib: Any) -> Any:
    """Whether (a, ia) beats (b, ib): the larger (argmax) value, NaN first, ties to the lower."""
    T = _T()
    if dtype == "bool":
        wins = T.And(a, T.Not(b)) if name == "argmax" else T.And(T.Not(a), b)
        same = a == b
    else:
        wins = a > b if name == "argmax" else a < b
        same = a == b
        if dtype.startswith(("float", "bfloat")):
            a_nan, b_nan = T.isnan(a), T.isnan(b)
            wins = T.Or(T.And(a_nan, T.Not(b_nan)), T.And(T.Not(b_nan), wins))
            same = T.Or(same, T.And(a_nan, b_nan))
    return T.Or(wins, T.And(same, ia < ib))


def build(key: AccumulatingKey, layout_class: ReductionClass) -> Any:
    """The ``prim_func`` of a reduction, arg-reduction or scan kernel."""
    if key.name in ("argmax", "argmin"):
        function = _arg(key, layout_class)
    elif key.name == "cumsum":
        function = _scan(key, layout_class)
    else:
        function = _reduce(key, layout_class)
    return function.with_attr("global_symbol", symbol(key, layout_class))


def _addresses(layout_class: ReductionClass) -> tuple[Any, Any, dict[str, int]]:
    parts = meta_layout(layout_class)

    def row(meta: Any, r: Any) -> Any:
        start = meta[parts["offset"]]
        return start + walk(meta, parts["kept_shape"], parts["kept_strides"], layout_class.kept, r)

    def column(meta: Any, c: Any) -> Any:
        return walk(meta, parts["red_shape"], parts["red_strides"], layout_class.reduced, c)

    return row, column, parts


def _reduce(key: AccumulatingKey, layout_class: ReductionClass) -> Any:
    T = _T()
    row, column, parts = _addresses(layout_class)
    nx, rows = T.dynamic("nx"), T.dynamic("rows")
    d, acc, out, m, count = key.stored, key.accumulate, key.output, parts["size"], parts["count"]
    name = key.name

    @T.prim_func
    def reduce(X: T.Tensor((nx,), d), Y: T.Tensor((rows,), out), meta: T.Tensor((m,), "int32")):
        with T.Kernel(rows, threads=BLOCK) as bx:
            S = T.alloc_shared((BLOCK,), acc)
            for t in T.Parallel(BLOCK):
                S[t] = _init(name, acc)
                for k in T.serial(T.ceildiv(meta[count], BLOCK)):
                    if k * BLOCK + t < meta[count]:
                        value = T.cast(X[row(meta, bx) + column(meta, k * BLOCK + t)], acc)
                        S[t] = _combine(name, acc, S[t], value)
            for s in T.unroll(_STEPS):
                for t in T.Parallel(BLOCK):
                    if t < (BLOCK // 2) >> s:
                        S[t] = _combine(name, acc, S[t], S[t + ((BLOCK // 2) >> s)])
            for t in T.Parallel(1):
                Y[bx] = T.cast(S[0], out)

    return reduce


def _arg(key: AccumulatingKey, layout_class: ReductionClass) -> Any:
    """Arg-reduction: the tree carries candidate indices only and re-reads their values.

    One threadgroup allocation (the C target accepts no more than one): ``-1`` marks a slot
    with no candidate, which loses to any real one.
    """
    T = _T()
    row, column, parts = _addresses(layout_class)
    nx, rows = T.dynamic("nx"), T.dynamic("rows")
    d, acc, out, m, count = key.stored, key.accumulate, key.output, parts["size"], parts["count"]
    name = key.name

    def value(X: Any, meta: Any, bx: Any, c: Any) -> Any:
        return T.cast(X[row(meta, bx) + column(meta, c)], acc)

    def beats(X: Any, meta: Any, bx: Any, a: Any, b: Any) -> Any:
        if_real = _better(name, acc, value(X, meta, bx, a), a, value(X, meta, bx, b), b)
        return T.And(a >= 0, T.Or(b < 0, if_real))

    @T.prim_func
    def arg(X: T.Tensor((nx,), d), Y: T.Tensor((rows,), out), meta: T.Tensor((m,), "int32")):
        with T.Kernel(rows, threads=BLOCK) as bx:
            idx = T.alloc_shared((BLOCK,), "int32")
            for t in T.Parallel(BLOCK):
                idx[t] = -1
                for k in T.serial(T.ceildiv(meta[count], BLOCK)):
                    if k * BLOCK + t < meta[count]:
                        if beats(X, meta, bx, k * BLOCK + t, idx[t]):
                            idx[t] = k * BLOCK + t
            for s in T.unroll(_STEPS):
                for t in T.Parallel(BLOCK):
                    if t < (BLOCK // 2) >> s:
                        if beats(X, meta, bx, idx[t + ((BLOCK // 2) >> s)], idx[t]):
                            idx[t] = idx[t + ((BLOCK // 2) >> s)]
            for t in T.Parallel(1):
                Y[bx] = T.cast(idx[0], out)

    return arg


def _scan(key: AccumulatingKey, layout_class: ReductionClass) -> Any:
    T = _T()
    row, column, parts = _addresses(layout_class)
    nx, rows, cols = T.dynamic("nx"), T.dynamic("rows"), T.dynamic("cols")
    d, acc, out, m, count = key.stored, key.accumulate, key.output, parts["size"], parts["count"]
    name = key.name

    @T.prim_func
    def scan(
        X: T.Tensor((nx,), d),
        Y: T.Tensor((rows, cols), out),
        meta: T.Tensor((m,), "int32"),
    ):
        with T.Kernel(rows, threads=BLOCK) as bx:
            # One threadgroup allocation (the C target accepts no more than one): the chunk in
            # [0, BLOCK), the scan's scratch in [BLOCK, 2 BLOCK), the running carry at 2 BLOCK.
            S = T.alloc_shared((2 * BLOCK + 1,), acc)
            for t in T.Parallel(1):
                S[2 * BLOCK] = _init(name, acc)
            for k in T.serial(T.ceildiv(meta[count], BLOCK)):
                for t in T.Parallel(BLOCK):
                    S[t] = _init(name, acc)
                    if k * BLOCK + t < meta[count]:
                        S[t] = T.cast(X[row(meta, bx) + column(meta, k * BLOCK + t)], acc)
                for s in T.unroll(_STEPS):
                    for t in T.Parallel(BLOCK):
                        S[BLOCK + t] = S[t]
                        if t >= (1 << s):
                            S[BLOCK + t] = _combine(name, acc, S[t], S[t - (1 << s)])
                    for t in T.Parallel(BLOCK):
                        S[t] = S[BLOCK + t]
                for t in T.Parallel(BLOCK):
                    if k * BLOCK + t < cols:
                        total = _combine(name, acc, S[2 * BLOCK], S[t])
                        Y[bx, k * BLOCK + t] = T.cast(total, out)
                for t in T.Parallel(1):
                    S[2 * BLOCK] = _combine(name, acc, S[2 * BLOCK], S[BLOCK - 1])

    return scan
