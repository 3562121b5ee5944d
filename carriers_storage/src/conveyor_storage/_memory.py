"""How much memory this process may still take, for refusing bookkeeping that cannot fit."""

from __future__ import annotations

import os

__all__ = ["available_bytes", "mib"]


def available_bytes() -> int | None:
    """Memory available now (Linux ``MemAvailable``), else physical memory, else ``None``."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def mib(size: int) -> str:
    """``size`` bytes in MiB, for messages."""
    return f"{size / 2**20:,.0f} MiB"
