"""Array API indexing functions, through ``gather``."""

from __future__ import annotations

from conveyor.lib import composed as C

__all__ = ["take", "take_along_axis"]

take = C.take
take_along_axis = C.take_along_axis
