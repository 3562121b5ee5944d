"""``matmul`` as a threadgroup-tiled TileLang kernel: simdgroup matrices for floats.

One threadgroup computes one ``TILE_M x TILE_N`` tile of one batch entry's product. Per step
of ``TILE_K`` along the contracted axis, its threads stage an A tile and a B tile into
threadgroup memory (read through each operand's own strides, zero past the edges, converted
to the accumulator dtype), then multiply-accumulate from there:

- floating plans on Metal: ``T.gemm``, which TileLang 0.1.15 lowers to 8x8 simdgroup
  matrices. Its ``simdgroup_store`` has no bounds check, so the accumulator goes to a
  threadgroup tile first and only the in-range part is written out;
- integer plans on Metal (simdgroup matrices are float/half only), and every plan on the C
  target (which has no simdgroup lowering): each thread accumulates its share of the tile
  from the staged tiles in a ``TILE_K`` loop. Same tiles, staging and k-loop; the two staged
  tiles share one allocation (the C target accepts no more than one).

``tiled`` is that kernel for any addressing (``conv_general`` reuses it as an implicit
GEMM). For matmul, addresses come from ``meta``: ``[A offset, A row stride, A k stride,
B offset, B k stride, B column stride, batch extents, A batch strides, B batch strides]``, so
transposed and broadcast operands are read in place and one kernel serves every shape of its
class (the number of batch axes after merging). The result is a contiguous ``(batch, M, N)``
buffer. The sizes ``batch``, ``M``, ``N`` and ``K`` are scalar kernel arguments.
(No ``from __future__ import annotations`` here: TileLang evaluates the signature annotations.)
"""

from collections.abc import Callable
from typing import Any, Final

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import AccumulatingKey, target, walk

__all__ = [
    "THREADS",
    "TILE_M",
    "TILE_N",
    "MatmulClass",
    "build",
    "meta_layout",
    "tiled",
]

TILE_M: Final = 64
TILE_N: Final = 64
TILE_K: Final = 32
#: Four simdgroups of 32 threads; ``T.gemm`` gives each a 32x32 quarter of the tile.
THREADS: Final = 128


@attrs.frozen
class MatmulClass:
    """The layout class of a matmul: how many batch axes remain after merging."""

    batch: int


def meta_layout(layout_class: MatmulClass) -> dict[str, int]:
    """Where each part of the meta buffer starts, and its total size."""
    r = layout_class.batch
    return {"shape": 6, "a_strides": 6 + r, "b_strides": 6 + 2 * r, "size": 6 + 3 * r}


def build(key: AccumulatingKey, layout_class: MatmulClass) -> Any:
    """The ``prim_func`` of a matmul kernel for the current dialect (``_tile.dialect``)."""
    parts = meta_layout(layout_class)
    rank = layout_class.batch

    def a_at(meta: Any, z: Any, row: Any, k: Any) -> tuple[Any, Any]:
        at = meta[0] + walk(meta, parts["shape"], parts["a_strides"], rank, z)
        return None, at + row * meta[1] + k * meta[2]

    def b_at(meta: Any, z: Any, k: Any, col: Any) -> tuple[Any, Any]:
        at = meta[3] + walk(meta, parts["shape"], parts["b_strides"], rank, z)
        return None, at + k * meta[4] + col * meta[5]

    def y_at(meta: Any, z: Any, row: Any, col: Any, m: Any, n: Any) -> Any:
        return (z * m + row) * n + col

    function = tiled(key, parts["size"], a_at, b_at, y_at)
    return function.with_attr("global_symbol", symbol(key, layout_class))


Address = Callable[..., Any]


def tiled(key: Any, meta_size: int, a_at: Address, b_at: Address, y_at: Address) -> Any:
    """A tiled ``Y[z] = A[z] @ B[z]`` kernel over ``batch x M x N`` with contraction ``K``.

    ``a_at(meta, z, row, k)`` and ``b_at(meta, z, k, col)`` give ``(condition, index)``: the
    element's index in its flat buffer and an extra in-range condition (``None``: none beyond
    ``row < M``, ``k < K``, ``col < N``); ``y_at(meta, z, row, col, M, N)`` the flat index of a
    result entry. ``batch``, ``M``, ``N`` and ``K`` are scalar arguments of the kernel.
    """
    simdgroup = target() == "metal" and key.accumulate.startswith("float")
    return (_simdgroup if simdgroup else _looped)(key, meta_size, _readers(key, a_at, b_at), y_at)


def _T() -> Any:
    import tilelang.language as T

    return T


def _readers(key: Any, a_at: Address, b_at: Address) -> tuple[Address, Address]:
    """``a(A, meta, z, row, k, M, K)`` and ``b(B, meta, z, k, col, K, N)``: guarded reads."""
    T = _T()
    acc = key.accumulate

    def guarded(buffer: Any, place: tuple[Any, Any], inside: Any) -> Any:
        condition, index = place
        if condition is not None:
            inside = T.And(inside, condition)
        return T.if_then_else(inside, T.cast(buffer[index], acc), T.cast(0, acc))

    def a(A: Any, meta: Any, z: Any, row: Any, k: Any, M: Any, K: Any) -> Any:
        return guarded(A, a_at(meta, z, row, k), T.And(row < M, k < K))

    def b(B: Any, meta: Any, z: Any, k: Any, col: Any, K: Any, N: Any) -> Any:
        return guarded(B, b_at(meta, z, k, col), T.And(k < K, col < N))

    return a, b


def _simdgroup(key: Any, m: int, readers: tuple[Address, Address], y_at: Address) -> Any:
    T = _T()
    read_a, read_b = readers
    na, nb, ny = T.dynamic("na"), T.dynamic("nb"), T.dynamic("ny")
    d, acc, out = key.stored, key.accumulate, key.output

    @T.prim_func
    def gemm(
        A: T.Tensor((na,), d),
        B: T.Tensor((nb,), d),
        Y: T.Tensor((ny,), out),
        meta: T.Tensor((m,), "int32"),
        batch: T.int32,
        M: T.int32,
        N: T.int32,
        K: T.int32,
    ):
        with T.Kernel(T.ceildiv(N, TILE_N), T.ceildiv(M, TILE_M), batch, threads=THREADS) as (
            bx,
            by,
            bz,
        ):
            As = T.alloc_shared((TILE_M, TILE_K), acc)
            Bs = T.alloc_shared((TILE_K, TILE_N), acc)
            Cs = T.alloc_shared((TILE_M, TILE_N), acc)
            C = T.alloc_fragment((TILE_M, TILE_N), acc)
            T.clear(C)
            for k in T.serial(T.ceildiv(K, TILE_K)):
                for i, j in T.Parallel(TILE_M, TILE_K):
                    As[i, j] = read_a(A, meta, bz, by * TILE_M + i, k * TILE_K + j, M, K)
                for i, j in T.Parallel(TILE_K, TILE_N):
                    Bs[i, j] = read_b(B, meta, bz, k * TILE_K + i, bx * TILE_N + j, K, N)
                T.gemm(As, Bs, C)
            # TileLang may place Cs over As and Bs, and does not see simdgroup_store as a
            # threadgroup write: both barriers are explicit.
            T.sync_threads()
            T.copy(C, Cs)
            T.sync_threads()
            for i, j in T.Parallel(TILE_M, TILE_N):
                if T.And(by * TILE_M + i < M, bx * TILE_N + j < N):
                    at = y_at(meta, bz, by * TILE_M + i, bx * TILE_N + j, M, N)
                    Y[at] = T.cast(Cs[i, j], out)

    return gemm


def _looped(key: Any, m: int, readers: tuple[Address, Address], y_at: Address) -> Any:
    T = _T()
    read_a, read_b = readers
    na, nb, ny = T.dynamic("na"), T.dynamic("nb"), T.dynamic("ny")
    d, acc, out = key.stored, key.accumulate, key.output
    b0 = TILE_M * TILE_K  # where the B tile starts in the one staging allocation

    @T.prim_func
    def gemm(
        A: T.Tensor((na,), d),
        B: T.Tensor((nb,), d),
        Y: T.Tensor((ny,), out),
        meta: T.Tensor((m,), "int32"),
        batch: T.int32,
        M: T.int32,
        N: T.int32,
        K: T.int32,
    ):
        with T.Kernel(T.ceildiv(N, TILE_N), T.ceildiv(M, TILE_M), batch, threads=THREADS) as (
            bx,
            by,
            bz,
        ):
            S = T.alloc_shared((b0 + TILE_K * TILE_N,), acc)
            C = T.alloc_fragment((TILE_M, TILE_N), acc)
            for i, j in T.Parallel(TILE_M, TILE_N):
                C[i, j] = T.cast(0, acc)  # the C target cannot lower T.clear of a fragment
            for k in T.serial(T.ceildiv(K, TILE_K)):
                for i, j in T.Parallel(TILE_M, TILE_K):
                    S[i * TILE_K + j] = read_a(A, meta, bz, by * TILE_M + i, k * TILE_K + j, M, K)
                for i, j in T.Parallel(TILE_K, TILE_N):
                    S[b0 + i * TILE_N + j] = read_b(
                        B, meta, bz, k * TILE_K + i, bx * TILE_N + j, K, N
                    )
                for i, j in T.Parallel(TILE_M, TILE_N):
                    for t in T.serial(TILE_K):
                        C[i, j] = C[i, j] + S[i * TILE_K + t] * S[b0 + t * TILE_N + j]
            for i, j in T.Parallel(TILE_M, TILE_N):
                if T.And(by * TILE_M + i < M, bx * TILE_N + j < N):
                    at = y_at(meta, bz, by * TILE_M + i, bx * TILE_N + j, M, N)
                    Y[at] = T.cast(C[i, j], out)

    return gemm
