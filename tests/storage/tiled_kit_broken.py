"""A pytest plugin that breaks TiledEvictable in a conformance-kit subprocess (``-p``).

Two defects a tiled carrier could ship: ``add`` is off by one on every tile, and ``neg`` joins
the direct names (so it is advertised, yet no provider runs it).
"""

from __future__ import annotations

import numpy as np

from conveyor_storage import _streaming, tiled_evictable

_streaming._ELEMENTWISE["add"] = lambda x, y: np.add(np.add(x, y), 1)
tiled_evictable.DIRECT_OPERATIONS = tiled_evictable.DIRECT_OPERATIONS | {"neg"}  # type: ignore[misc]
