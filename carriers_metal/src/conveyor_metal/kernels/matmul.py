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

Addresses come from ``meta``: ``[A offset, A row stride, A k stride, B offset, B k stride,
B column stride, K, batch extents, A batch strides, B batch strides]``, so transposed and
broadcast operands are read in place and one kernel serves every shape of its class (the
number of batch axes after merging). The result is a contiguous ``(batch, M, N)`` buffer.
(No ``from __future__ import annotations`` here: TileLang evaluates the signature annotations.)
"""

from typing import Any, Final

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import target, walk

__all__ = ["THREADS", "TILE_M", "TILE_N", "MatmulClass", "MatmulKey", "build", "meta_layout"]

TILE_M: Final = 64
TILE_N: Final = 64
TILE_K: Final = 32
#: Four simdgroups of 32 threads; ``T.gemm`` gives each a 32x32 quarter of the tile.
THREADS: Final = 128


@attrs.frozen
class MatmulKey:
    """What a matmul kernel computes: the operands' stored, accumulator and output dtypes."""

    family: str
    name: str
    stored: str
    accumulate: str
    output: str


@attrs.frozen
class MatmulClass:
    """The layout class of a matmul: how many batch axes remain after merging."""

    batch: int


def meta_layout(layout_class: MatmulClass) -> dict[str, int]:
    """Where each part of the meta buffer starts, and its total size."""
    r = layout_class.batch
    return {"k": 6, "shape": 7, "a_strides": 7 + r, "b_strides": 7 + 2 * r, "size": 7 + 3 * r}


def build(key: MatmulKey, layout_class: MatmulClass) -> Any:
    """The ``prim_func`` of a matmul kernel for the current dialect (``_tile.dialect``)."""
    simdgroup = target() == "metal" and key.accumulate.startswith("float")
    function = _simdgroup(key, layout_class) if simdgroup else _looped(key, layout_class)
    return function.with_attr("global_symbol", symbol(key, layout_class))


def _T() -> Any:
    import tilelang.language as T

    return T


def _readers(layout_class: MatmulClass, acc: str) -> tuple[Any, Any]:
    """``a(A, meta, batch, row, k)`` and ``b(B, meta, batch, k, col)``: guarded staged reads."""
    T = _T()
    parts = meta_layout(layout_class)
    rank = layout_class.batch

    def a(A: Any, meta: Any, M: Any, z: Any, row: Any, k: Any) -> Any:
        at = meta[0] + walk(meta, parts["shape"], parts["a_strides"], rank, z)
        inside = T.And(row < M, k < meta[parts["k"]])
        value = A[at + row * meta[1] + k * meta[2]]
        return T.if_then_else(inside, T.cast(value, acc), T.cast(0, acc))

    def b(B: Any, meta: Any, N: Any, z: Any, k: Any, col: Any) -> Any:
        at = meta[3] + walk(meta, parts["shape"], parts["b_strides"], rank, z)
        inside = T.And(k < meta[parts["k"]], col < N)
        value = B[at + k * meta[4] + col * meta[5]]
        return T.if_then_else(inside, T.cast(value, acc), T.cast(0, acc))

    return a, b


def _simdgroup(key: MatmulKey, layout_class: MatmulClass) -> Any:
    T = _T()
    read_a, read_b = _readers(layout_class, key.accumulate)
    nx, ny = T.dynamic("nx"), T.dynamic("ny")
    batch, M, N = T.dynamic("batch"), T.dynamic("M"), T.dynamic("N")
    d, acc, out, m = key.stored, key.accumulate, key.output, meta_layout(layout_class)["size"]
    kk = meta_layout(layout_class)["k"]

    @T.prim_func
    def matmul(
        A: T.Tensor((nx,), d),
        B: T.Tensor((ny,), d),
        Y: T.Tensor((batch, M, N), out),
        meta: T.Tensor((m,), "int32"),
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
            for k in T.serial(T.ceildiv(meta[kk], TILE_K)):
                for i, j in T.Parallel(TILE_M, TILE_K):
                    As[i, j] = read_a(A, meta, M, bz, by * TILE_M + i, k * TILE_K + j)
                for i, j in T.Parallel(TILE_K, TILE_N):
                    Bs[i, j] = read_b(B, meta, N, bz, k * TILE_K + i, bx * TILE_N + j)
                T.gemm(As, Bs, C)
            # TileLang may place Cs over As and Bs, and does not see simdgroup_store as a
            # threadgroup write: both barriers are explicit.
            T.sync_threads()
            T.copy(C, Cs)
            T.sync_threads()
            for i, j in T.Parallel(TILE_M, TILE_N):
                if T.And(by * TILE_M + i < M, bx * TILE_N + j < N):
                    Y[bz, by * TILE_M + i, bx * TILE_N + j] = T.cast(Cs[i, j], out)

    return matmul


def _looped(key: MatmulKey, layout_class: MatmulClass) -> Any:
    T = _T()
    read_a, read_b = _readers(layout_class, key.accumulate)
    nx, ny = T.dynamic("nx"), T.dynamic("ny")
    batch, M, N = T.dynamic("batch"), T.dynamic("M"), T.dynamic("N")
    d, acc, out, m = key.stored, key.accumulate, key.output, meta_layout(layout_class)["size"]
    kk = meta_layout(layout_class)["k"]
    b0 = TILE_M * TILE_K  # where the B tile starts in the one staging allocation

    @T.prim_func
    def matmul(
        A: T.Tensor((nx,), d),
        B: T.Tensor((ny,), d),
        Y: T.Tensor((batch, M, N), out),
        meta: T.Tensor((m,), "int32"),
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
            for k in T.serial(T.ceildiv(meta[kk], TILE_K)):
                for i, j in T.Parallel(TILE_M, TILE_K):
                    S[i * TILE_K + j] = read_a(A, meta, M, bz, by * TILE_M + i, k * TILE_K + j)
                for i, j in T.Parallel(TILE_K, TILE_N):
                    S[b0 + i * TILE_N + j] = read_b(B, meta, N, bz, k * TILE_K + i, bx * TILE_N + j)
                for i, j in T.Parallel(TILE_M, TILE_N):
                    for t in T.serial(TILE_K):
                        C[i, j] = C[i, j] + S[i * TILE_K + t] * S[b0 + t * TILE_N + j]
            for i, j in T.Parallel(TILE_M, TILE_N):
                if T.And(by * TILE_M + i < M, bx * TILE_N + j < N):
                    Y[bz, by * TILE_M + i, bx * TILE_N + j] = T.cast(C[i, j], out)

    return matmul
