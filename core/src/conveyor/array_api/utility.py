"""Array API utility functions."""

from __future__ import annotations

from conveyor.lib import composed as C

__all__ = ["all", "any", "diff"]

all = C.all  # the standard's name
any = C.any  # the standard's name
diff = C.diff
