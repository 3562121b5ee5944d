"""A pytest plugin that breaks TiledEvictable in a conformance-kit subprocess (``-p``).

Two defects a tiled carrier could ship: ``add`` is off by one on every tile, and ``cumsum``
joins the direct names (so it is advertised, yet no provider runs it).
"""

from __future__ import annotations

from typing import Any

import conveyor as cv
from conveyor_storage import _tiled_elementwise, tiled_evictable

_run_tile = _tiled_elementwise.run_tile


def _off_by_one(probe: Any, name: str, args: list[Any], options: Any) -> cv.Tensor:
    tile = _run_tile(probe, name, args, options)
    return _run_tile(probe, "add", [tile, 1], None) if name == "add" else tile


_tiled_elementwise.run_tile = _off_by_one  # type: ignore[assignment]
tiled_evictable.DIRECT_OPERATIONS = tiled_evictable.DIRECT_OPERATIONS | {"cumsum"}  # type: ignore[misc]
