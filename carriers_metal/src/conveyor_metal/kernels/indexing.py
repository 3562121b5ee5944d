"""``gather``, ``scatter`` and ``scatter_add`` as TileLang kernels: one thread per output element.

``gather``: thread ``i`` walks the (merged) index shape, reads the index entry through its
strides and the input at that position with the indexed coordinate replaced, so strided and
broadcast input, index and ``src`` are read in place.

``scatter`` / ``scatter_add``: thread ``o`` owns output element ``o``. The index entries that
can address it share its coordinates off the indexed axis, so the thread walks that one lane
of the index (``K`` entries along the axis) in order, keeping the last matching ``src`` value
(``scatter``: the last write in row-major index order wins) or adding every match to the input
value (``scatter_add``, in index order, so float sums round exactly as the reference's). No
two threads write one element, so no atomics are needed: TileLang 0.1.15 lowers Metal's
``T.atomic_add`` for 32-bit integers only ("Metal scalar atomic add supports int32 and
uint32, got float32"). The cost is ``K`` reads per output element.

Meta layouts (int32, ``r`` = rank of the layout class), as ``gather_meta`` / ``scatter_meta``
describe them. (No ``from __future__ import annotations`` here: TileLang evaluates the
signature annotations.)
"""

from typing import Any

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import BLOCK, walk

__all__ = ["IndexClass", "IndexKey", "build", "gather_meta", "scatter_meta"]


@attrs.frozen
class IndexKey:
    """What an indexing kernel computes: the name, the value dtype and the index dtype."""

    family: str
    name: str
    stored: str
    index: str


@attrs.frozen
class IndexClass:
    """The layout class of an indexing call: the rank its threads walk (after merging)."""

    rank: int


def gather_meta(rank: int) -> dict[str, int]:
    """Where each part of gather's meta starts.

    ``shape``: the index shape; ``index``: its offset then strides; ``input``: offset then
    strides with the indexed axis' stride set to 0; ``step``: the indexed axis' input stride.
    """
    parts = {"shape": 0, "index": rank, "input": 2 * rank + 1, "step": 3 * rank + 2}
    parts["size"] = parts["step"] + 1
    return parts


def scatter_meta(rank: int) -> dict[str, int]:
    """Where each part of scatter's meta starts.

    ``shape``: the input (= output) shape; ``bound``: the index extents, the indexed axis'
    entry being the input's extent (never limiting); ``input``, ``index``, ``src``: offset then
    strides (index and src with the indexed axis' stride 0); then ``inner`` (elements per step
    of the indexed axis in the output), ``extent`` (its extent), ``lane`` (``K``, the index
    extent along it) and the index and src strides along it.
    """
    parts = {"shape": 0, "bound": rank, "input": 2 * rank}
    parts["index"] = parts["input"] + rank + 1
    parts["src"] = parts["index"] + rank + 1
    tail = parts["src"] + rank + 1
    for j, name in enumerate(("inner", "extent", "lane", "index_step", "src_step")):
        parts[name] = tail + j
    parts["size"] = tail + 5
    return parts


def _T() -> Any:
    import tilelang.language as T

    return T


def build(key: IndexKey, layout_class: IndexClass) -> Any:
    """The ``prim_func`` of an indexing kernel."""
    function = _gather(key, layout_class) if key.name == "gather" else _scatter(key, layout_class)
    return function.with_attr("global_symbol", symbol(key, layout_class))


def _gather(key: IndexKey, layout_class: IndexClass) -> Any:
    T = _T()
    r = layout_class.rank
    parts = gather_meta(r)
    n, nx, ni = T.dynamic("n"), T.dynamic("nx"), T.dynamic("ni")
    d, di, m = key.stored, key.index, parts["size"]

    def source(Index: Any, meta: Any, i: Any) -> Any:
        at = meta[parts["index"]] + walk(meta, parts["shape"], parts["index"] + 1, r, i)
        base = meta[parts["input"]] + walk(meta, parts["shape"], parts["input"] + 1, r, i)
        return base + T.cast(Index[at], "int32") * meta[parts["step"]]

    @T.prim_func
    def gather(
        X: T.Tensor((nx,), d),
        Index: T.Tensor((ni,), di),
        Y: T.Tensor((n,), d),
        meta: T.Tensor((m,), "int32"),
    ):
        with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
            for t in T.Parallel(BLOCK):
                if bx * BLOCK + t < n:
                    Y[bx * BLOCK + t] = X[source(Index, meta, bx * BLOCK + t)]

    return gather


def _coordinates(meta: Any, shape_at: int, rank: int, i: Any) -> list[Any]:
    """The row-major coordinates of flat index ``i`` over ``rank`` extents read from meta."""
    T = _T()
    coords: list[Any] = []
    rest = i
    for axis in reversed(range(1, rank)):
        coords.append(T.truncmod(rest, meta[shape_at + axis]))
        rest = T.truncdiv(rest, meta[shape_at + axis])
    return [rest, *reversed(coords)] if rank else []


def _scatter(key: IndexKey, layout_class: IndexClass) -> Any:
    T = _T()
    r = layout_class.rank
    p = scatter_meta(r)
    n, nx, ni, ns = T.dynamic("n"), T.dynamic("nx"), T.dynamic("ni"), T.dynamic("ns")
    d, di, m = key.stored, key.index, p["size"]
    adding = key.name == "scatter_add"

    def dot(meta: Any, coords: list[Any], at: int) -> Any:
        total = meta[at]
        for axis, c in enumerate(coords):
            total = total + c * meta[at + 1 + axis]
        return total

    def lane(meta: Any, coords: list[Any]) -> Any:
        """``K``, or 0 where the element lies past the index on a non-indexed axis."""
        if not coords:
            return meta[p["lane"]]
        inside = [c < meta[p["bound"] + axis] for axis, c in enumerate(coords)]
        ok = inside[0]
        for more in inside[1:]:
            ok = T.And(ok, more)
        return T.if_then_else(ok, meta[p["lane"]], 0)

    def combine(old: Any, new: Any) -> Any:
        return old + new if adding else new

    def target(meta: Any, o: Any) -> Any:
        return T.truncmod(T.truncdiv(o, meta[p["inner"]]), meta[p["extent"]])

    @T.prim_func
    def scatter(
        X: T.Tensor((nx,), d),
        Index: T.Tensor((ni,), di),
        S: T.Tensor((ns,), d),
        Y: T.Tensor((n,), d),
        meta: T.Tensor((m,), "int32"),
    ):
        with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
            value = T.alloc_local((1,), d)
            for t in T.Parallel(BLOCK):
                if bx * BLOCK + t < n:
                    coords = _coordinates(meta, p["shape"], r, bx * BLOCK + t)
                    value[0] = X[dot(meta, coords, p["input"])]
                    for k in T.serial(lane(meta, coords)):
                        at = dot(meta, coords, p["index"]) + k * meta[p["index_step"]]
                        if T.cast(Index[at], "int32") == target(meta, bx * BLOCK + t):
                            read = dot(meta, coords, p["src"]) + k * meta[p["src_step"]]
                            value[0] = combine(value[0], S[read])
                    Y[bx * BLOCK + t] = value[0]

    return scatter
