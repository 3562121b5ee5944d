"""Pointwise kernels: one thread per output element, operands read through their layout class.

``pointwise(key, layout_class)`` builds the TileLang ``prim_func`` of a pointwise kernel with
one to three operand buffers. Each operand is read in its stored dtype, converted to its plan
``convert_to`` dtype and handed to the family's ``body``, whose value is stored in the output
dtype. TileLang builds a ``prim_func`` from the function's source, so each arity has its own
literal signature below. (No ``from __future__ import annotations`` here: TileLang evaluates
the signature annotations, which name local variables.)
"""

import hashlib
from collections.abc import Callable
from typing import Any

import attrs

from conveyor_metal.kernels._tile import BLOCK, LayoutClass, load, offset, storage, store

__all__ = ["PointwiseKey", "pointwise", "symbol"]

Body = Callable[[list[Any]], Any]


@attrs.frozen
class PointwiseKey:
    """What a pointwise kernel computes: the cache key beside the layout class.

    ``stored``: the TileLang dtype of each operand buffer; ``convert``: the dtype each is
    converted to before the body runs; ``params``: option values baked into the body
    (``alpha``, ``negative_slope``, ``approximate``).
    """

    family: str
    name: str
    stored: tuple[str, ...]
    convert: tuple[str, ...]
    compute: str
    output: str
    params: tuple[Any, ...] = ()


def symbol(key: Any, layout_class: Any) -> str:
    """A C-identifier kernel name unique to (key, layout class), readable in profiles."""
    digest = hashlib.sha256(repr((key, layout_class)).encode()).hexdigest()[:12]
    return f"cv_{key.name}_{digest}"


def pointwise(key: PointwiseKey, layout_class: LayoutClass, body: Body) -> Any:
    """The ``prim_func`` of a pointwise kernel (arity ``len(key.stored)``)."""
    import tilelang.language as T

    m = layout_class.meta_size
    n = T.dynamic("n")
    sizes = [T.dynamic(f"n{j}") for j in range(len(key.stored))]
    out = storage(key.output)

    def read(buffer: Any, meta: Any, slot: int, i: Any) -> Any:
        element = buffer[offset(meta, layout_class, slot, i)]
        return load(element, key.stored[slot], key.convert[slot])

    def value(buffers: list[Any], meta: Any, i: Any) -> Any:
        return store(body([read(b, meta, j, i) for j, b in enumerate(buffers)]), key.output)

    if len(key.stored) == 1:
        (d0,), (n0,) = map(storage, key.stored), sizes

        @T.prim_func
        def unary(X0: T.Tensor((n0,), d0), Y: T.Tensor((n,), out), meta: T.Tensor((m,), "int32")):
            with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
                for t in T.Parallel(BLOCK):
                    if bx * BLOCK + t < n:
                        Y[bx * BLOCK + t] = value([X0], meta, bx * BLOCK + t)

        function = unary
    elif len(key.stored) == 2:
        (d0, d1), (n0, n1) = map(storage, key.stored), sizes

        @T.prim_func
        def binary(
            X0: T.Tensor((n0,), d0),
            X1: T.Tensor((n1,), d1),
            Y: T.Tensor((n,), out),
            meta: T.Tensor((m,), "int32"),
        ):
            with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
                for t in T.Parallel(BLOCK):
                    if bx * BLOCK + t < n:
                        Y[bx * BLOCK + t] = value([X0, X1], meta, bx * BLOCK + t)

        function = binary
    else:
        (d0, d1, d2), (n0, n1, n2) = map(storage, key.stored), sizes

        @T.prim_func
        def ternary(
            X0: T.Tensor((n0,), d0),
            X1: T.Tensor((n1,), d1),
            X2: T.Tensor((n2,), d2),
            Y: T.Tensor((n,), out),
            meta: T.Tensor((m,), "int32"),
        ):
            with T.Kernel(T.ceildiv(n, BLOCK), threads=BLOCK) as bx:
                for t in T.Parallel(BLOCK):
                    if bx * BLOCK + t < n:
                        Y[bx * BLOCK + t] = value([X0, X1, X2], meta, bx * BLOCK + t)

        function = ternary
    return function.with_attr("global_symbol", symbol(key, layout_class))
