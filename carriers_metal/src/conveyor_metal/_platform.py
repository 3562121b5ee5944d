"""Whether this machine can run Metal kernels, decided without importing torch or tilelang.

Plugin discovery runs whenever a carrier is looked up by name, so the check must stay cheap:
it reads the platform and asks the import system whether the packages are installed, and only
``Metal`` itself (first construction) imports torch to ask whether MPS is present.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from typing import Final

__all__ = ["REASON", "unavailable_reason"]

#: The one reason shown by ``conveyor plugins`` wherever Metal cannot run.
REASON: Final = "needs macOS arm64 with MPS"


def unavailable_reason() -> str | None:
    """Why Metal cannot run here (``REASON`` plus detail), or ``None`` where it may."""
    if sys.platform != "darwin" or platform.machine() != "arm64":
        return f"{REASON} (this is {sys.platform} {platform.machine()})"
    missing = [name for name in ("torch", "tilelang") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{REASON} and {' and '.join(missing)}: pip install 'conveyor[metal]'"
    return None
