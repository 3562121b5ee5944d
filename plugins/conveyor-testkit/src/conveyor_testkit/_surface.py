"""Direct surfaces: composites that run some calls on their full tensor and refuse the rest.

A tiled composite (``--conveyor-carrier=tiled[:PRIMARY/SECONDARY]``) runs a few names directly on
its full logical tensor, returns dense tensors of its compute class, and refuses every other
call before any work, telling the user to project tiles first. The kit checks exactly that
surface: the cases inside it against Generic, the cases outside it for a refusal, and the
composite's own contract (tile footprints, projection and scatter, residency, the budget) in
``test_surface``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor import plugins
from conveyor.sdk import OperationPlan
from conveyor_testkit._inputs import Case

__all__ = ["Surface", "tile_shape_for", "tiled_surface"]

TILED: Final = "tiled"
DEFAULT_TIERS: Final = ("cpu", "file")


@dataclass(frozen=True)
class Surface:
    """What the kit knows about a composite with a direct surface.

    ``results``: the class results (and so cotangents) live on. ``refuses(plan, case)``: why the
    case is outside the direct surface, ``None`` inside it. ``hint``: words every refusal
    message contains. ``build(values, dtype, budget_tiles=None, tile=None)``: a tensor of the
    composite with mixed tile residency. ``writable(tensor)``: makes its tiles writable in place.
    ``api``: the composite's own functions (``project``, ``scatter``, ``TileSelection``,
    ``facet``) its contract checks use.
    """

    results: type[cv.Carrier]
    tiers: tuple[type[cv.Carrier], type[cv.Carrier]]
    refuses: Callable[[OperationPlan, Case], str | None]
    hint: str
    build: Callable[..., cv.Tensor]
    writable: Callable[[cv.Tensor], None]
    api: dict[str, Any]


def tile_shape_for(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A tile per axis that cuts each extent into several tiles where it can: its largest
    proper divisor (the extent itself when prime, 1 when empty)."""
    return tuple(
        1 if n == 0 else next((d for d in range(n // 2, 0, -1) if n % d == 0 and d > 1), n)
        for n in shape
    )


def _refuses(plan: OperationPlan, case: Case) -> str | None:
    """The direct surface's shape rules (operand dtypes are the capability gate's business)."""
    shapes = [np.shape(v) for v in case.operands if isinstance(v, np.ndarray)]
    if plan.operation == "matmul":
        if any(len(s) != 2 for s in shapes):
            return "direct matmul takes two 2-D operands"
        return None
    if plan.operation.startswith("reduce_") or plan.operation in ("argmax", "argmin"):
        return None
    if len(set(shapes)) > 1:
        return "direct elementwise operations take operands of one shape (no broadcasting)"
    return None


def tier_classes(name: str, composite: str) -> tuple[type[cv.Carrier], type[cv.Carrier]]:
    """The tier classes a ``composite[:PRIMARY/SECONDARY]`` target names (default cpu/file).

    Raises:
        ValueError: a tier names no registered carrier, or the spec is not ``PRIMARY/SECONDARY``.
    """
    spec = name.partition(":")[2].strip()
    tiers = tuple(spec.split("/")) if spec else DEFAULT_TIERS
    if len(tiers) != 2 or not all(tiers):
        msg = f"a composite is named {composite}:PRIMARY/SECONDARY (e.g. {composite}:cpu/file)"
        raise ValueError(msg)
    host = plugins.host()
    return host.carrier(tiers[0]), host.carrier(tiers[1])


def tiled_surface(
    name: str,
) -> tuple[type[cv.Carrier], Surface]:
    """``tiled[:PRIMARY/SECONDARY]``: TiledEvictable over the two tier classes.

    Every kit tensor is tiled by ``tile_shape_for`` and left with mixed residency: the tiles
    are written into the primary, every other one evicted to the secondary, and one evicted
    and promoted again (a clean primary tile).

    Raises:
        ValueError: a tier names no registered carrier, or the spec is not ``PRIMARY/SECONDARY``.
    """
    import conveyor_storage as storage  # only a tiled target needs the tiled carrier's API

    cls = plugins.host().carrier(TILED)
    primary, secondary = tier_classes(name, TILED)

    def facet(x: cv.Tensor) -> Any:
        return x.carrier.require_facet(storage.TiledResidencyFacet)

    def build(
        values: Any,
        dtype: cv.DType,
        budget_tiles: int | None = None,
        tile: tuple[int, ...] | None = None,
    ) -> cv.Tensor:
        array = np.asarray(values, dtype.numpy)
        tile = tile_shape_for(array.shape) if tile is None else tile
        grid = tuple(n // t for n, t in zip(array.shape, tile, strict=True))
        itemsize = np.dtype(dtype.numpy).itemsize
        budget = None if budget_tiles is None else budget_tiles * int(np.prod(tile)) * itemsize
        inner = cv.tensor(np.ascontiguousarray(array).reshape(-1), dtype=dtype, carrier=primary)
        composite: Any = cls  # TiledEvictable; the kit only knows it by name
        tiled = composite(
            inner.carrier,
            secondary.allocate(0, dtype),
            grid,
            tile,
            max_resident_bytes=budget,
        )
        x = cv.Tensor(tiled, cv.Layout(array.shape))
        resident = sorted(tiled.primary_tiles)
        if len(resident) > 1:
            facet(x).evict(resident[::2])
            facet(x).promote(resident[:1])
        return x

    def writable(x: cv.Tensor) -> None:
        tiled: Any = x.carrier
        facet(x).promote(tiled.valid_tiles)

    surface = Surface(
        results=primary,
        tiers=(primary, secondary),
        refuses=_refuses,
        hint="project",
        build=build,
        writable=writable,
        api={
            "project": storage.project,
            "scatter": storage.scatter,
            "TileSelection": storage.TileSelection,
            "facet": facet,
        },
    )
    return cls, surface
