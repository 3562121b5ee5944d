"""The composite provider of TiledEvictable: which direct calls stream, checked before work.

``prepare`` refuses before any work: tile footprints (``ValueError``), budgets too small for
one step (``ValueError``), and shapes or operand kinds it does not stream (``Unsupported``,
whose reason names what to do instead: project, or move the dense operand onto the tiling).
It then hands back the streaming work of ``_tiled_elementwise``, ``_tiled_reductions`` or
``_tiled_matmul``; ``permute`` (``x.T``) is an alias of the same tiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import conveyor as cv
from conveyor_storage._streaming import _operand, _Session
from conveyor_storage._tiled_elementwise import ELEMENTWISE, run_elementwise
from conveyor_storage._tiled_matmul import panel_depth, plan_gemm, run_matmul, tensor_grids
from conveyor_storage._tiled_reductions import REDUCTIONS, run_reduction
from conveyor_storage._tiles import VIEWS, TileMap

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["composite_provider", "prepare"]


def _move_hint(x: cv.Tensor, like: TiledEvictable) -> str:
    return (
        f"cv.move(tensor, 'tiled', tile_shape={like.tile_shape}) puts a tensor of shape "
        f"{x.shape} on the same tiling"
    )


def _refuse_dense(
    outer: TiledEvictable, invocation: cv.ResolvedInvocation, dense: list[cv.Tensor]
) -> cv.Unsupported | None:
    """Why the dense companions cannot stream beside the tiles, or ``None`` when they can."""
    primary = outer.tier_classes[0]
    for x in dense:
        if type(x.carrier) is not primary:
            return cv.Unsupported(
                f"a dense operand lives on {type(x.carrier).__name__}, the tiles compute on "
                f"{primary.__name__}; move it first with cv.move(tensor, {primary.__name__})"
            )
    if dense and invocation.operation not in ELEMENTWISE:  # matmul: the only such binary name
        a, b = invocation.operands
        (x,) = dense
        other = b if x is a else a
        carrier, mapping = _operand(other)
        tile = mapping.tensor_shape(carrier.tile_shape)
        fits = (x.shape[0], tile[0]) if x is a else (tile[1], x.shape[1])
        return cv.Unsupported(
            f"matmul takes two tiled operands; cv.move(tensor, 'tiled', tile_shape={fits}) "
            f"tiles the dense one to match, or project the tiles with "
            f"conveyor_storage.project(tensor, selection).wait()"
        )
    return None


def prepare(
    carrier: cv.Carrier, invocation: cv.ResolvedInvocation
) -> cv.PreparedComposite | cv.Unsupported:
    """Check a direct call completely, then hand back the streaming work (or decline it)."""
    outer: TiledEvictable = carrier  # type: ignore[assignment]  # the provider of this class
    name = invocation.operation
    tensors = [x for x in invocation.operands if type(x) is cv.Tensor]
    tiled = [x for x in tensors if type(x.carrier) is type(outer)]
    dense = [x for x in tensors if type(x.carrier) is not type(outer)]
    found = [_operand(x) for x in tiled]  # footprint refusals (ValueError) come first
    if name in VIEWS:
        (x,) = tiled
        spec = invocation.results[0]
        return cv.PreparedComposite(lambda: cv.ProviderResult(cv.Tensor(x.carrier, spec.layout)))
    classes = {c.tier_classes[0] for c, _ in found}
    if len(classes) > 1:
        return cv.Unsupported(
            "the operands' tiles live on different compute classes; project them onto one"
        )
    refused = _refuse_dense(outer, invocation, dense)
    if refused is not None:
        return refused
    if name == "matmul":
        return _prepare_matmul(invocation, found)
    if any(m.transposed for _, m in found):
        return cv.Unsupported(
            f"a transposed tiled operand streams only into matmul; give {name} the tensor in "
            f"its stored axis order, or move it with cv.move(tensor, 'cpu') when it fits in memory"
        )
    if name in REDUCTIONS:
        _Session(name, [found[0][0]]).room({id(found[0][0]): 1}, "one tile")
        return cv.PreparedComposite(lambda: cv.ProviderResult(run_reduction(invocation)))
    grids = {(c._grid.grid_shape, c._grid.tile_shape) for c, _ in found}
    shape = invocation.results[0].shape
    if len(grids) > 1 or any(x.shape != shape for x in tiled):
        wider = next((x for x in tiled if x.shape != shape), tiled[0])
        return cv.Unsupported(
            "direct elementwise operations take tiled operands of one shape and one tiling, "
            f"broadcasting only dense operands; {_move_hint(wider, found[0][0])}, or project "
            "the tiles into compact tensors first"
        )
    session = _Session(name, [c for c, _ in found])
    held: dict[int, int] = {}
    for c, _ in found:
        held[id(c)] = held.get(id(c), 0) + 1
    session.room(held, "one step")
    return cv.PreparedComposite(lambda: cv.ProviderResult(run_elementwise(outer, invocation)))


def _prepare_matmul(
    invocation: cv.ResolvedInvocation, found: list[tuple[TiledEvictable, TileMap]]
) -> cv.PreparedComposite | cv.Unsupported:
    (a, amap), (b, bmap) = found
    x, y = invocation.operands
    (ga, ta), (gb, tb) = tensor_grids(amap, a, bmap, b)
    if x.ndim != 2 or y.ndim != 2 or ta[1] != tb[0]:
        return cv.Unsupported(
            "direct matmul takes two 2-D tiled operands whose inner tile extents match; "
            "project the tiles into compact tensors for other shapes"
        )
    hold_b, chunk = plan_gemm(a, b, (ga, gb))
    if chunk < 1 and ga[0] and gb[1]:
        msg = (
            f"matmul on TiledEvictable: max_resident_bytes={b.max_resident_bytes} holds no "
            f"panel tile beside two streamed tiles; raise the budget"
        )
        raise ValueError(msg)
    chunk = max(chunk, 1)
    depth = panel_depth(a, b, hold_b, chunk, ga[1])
    return cv.PreparedComposite(
        lambda: cv.ProviderResult(run_matmul(invocation, hold_b, chunk, depth))
    )


def composite_provider(names: frozenset[str]) -> cv.CompositeProvider:
    """The composite of TiledEvictable: the compute classes' plans for ``names``, streamed, and
    dense tensors of those classes accepted beside the tiles."""
    try:
        from conveyor_generic import CPU, Generic  # public classes only
    except ImportError:
        compute: tuple[type[cv.Carrier], ...] = ()
    else:
        compute = (CPU, Generic)

    def plans(name: str) -> list[cv.OperationCapability]:
        # By rule: the compute classes' records of one name, built when it is first queried.
        found = {cap for cls in compute for cap in cv.declared_capabilities(cls).of(name)}
        return sorted(found, key=repr)

    return cv.CompositeProvider(
        capabilities=cv.CapabilitySet.by_rule(names | VIEWS, plans),
        result_carriers=compute,
        prepare=prepare,
        companions=compute,
    )
