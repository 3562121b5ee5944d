"""Demo step: a float32 tensor several times larger than a memory budget, computed by streaming."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conveyor import plugins

__all__ = ["stream_reduce_and_scale"]


def stream_reduce_and_scale(
    size: int, budget: int, directory: Path, bar: Callable[..., Any]
) -> dict[str, Any]:
    """Fill a tiled tensor on disk, then reduce and multiply it tile by tile within ``budget``."""
    try:
        plugins.host().carrier("tiled")
    except (ValueError, plugins.PluginError):
        return {
            "skipped": "the 'tiled' carrier (TiledEvictable) is not installed",
            "fix": "pip install conveyor-storage",
        }
    return {
        "skipped": "TiledEvictable is registered but the demo step is not written yet",
        "fix": "-",
    }
