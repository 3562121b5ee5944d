"""Array API sorting functions, on the planned ``sort`` (stable, NaN last ascending)."""

from __future__ import annotations

from conveyor.lib import composed as C

__all__ = ["argsort", "sort"]

argsort = C.argsort
sort = C.sort
