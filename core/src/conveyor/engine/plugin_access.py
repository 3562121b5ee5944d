"""Plugin access: how the engine reads the plugin host, which sits above it.

``conveyor.plugins`` imports the engine (it checks contributed carriers, definitions, packs and
routes against it), so the engine never imports the host. Yet a carrier named by a string
(``carrier="cpu"``), a move, and the first use of a definition-backed class read what plugins
contributed. The engine therefore declares here, as a typed protocol, the little it reads, and
the package root (``conveyor/__init__.py``) connects the functions that reach the real host
once, at import: the default host is imported (with pluggy) only when it is first needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__ = ["Contributions", "connect", "default_host", "scanned_host"]


class Contributions(Protocol):
    """What the engine reads of a plugin host (``conveyor.plugins.PluginHost`` implements it)."""

    def carrier(self, name: str) -> type[Carrier]:
        """The carrier class registered as ``name``."""
        ...

    def move_routes(self) -> tuple[object, ...]:
        """Move routes the loaded plugins contributed."""
        ...

    def kernel_packs(self) -> tuple[object, ...]:
        """Kernel packs the loaded plugins contributed."""
        ...

    def operation_definitions(self) -> tuple[object, ...]:
        """Operation definitions the loaded plugins contributed."""
        ...


def _not_connected() -> Contributions:
    msg = "the plugin host is not connected to the engine; import conveyor (the package) first"
    raise RuntimeError(msg)


def _none() -> Contributions | None:
    return None


_default: Callable[[], Contributions] = _not_connected
_scanned: Callable[[], Contributions | None] = _none


def connect(
    *, default: Callable[[], Contributions], scanned: Callable[[], Contributions | None]
) -> None:
    """Give the engine its way to the plugin host (the package root calls this once).

    Args:
        default: returns the default host, scanning the installed plugins on first need.
        scanned: returns the default host only if it has already scanned, else ``None``; a
            first observation made while plugins load must not start a scan from inside one.
    """
    global _default, _scanned
    _default, _scanned = default, scanned


def default_host() -> Contributions:
    """The default plugin host (scanned on first need)."""
    return _default()


def scanned_host() -> Contributions | None:
    """The default plugin host if it has already scanned, else ``None`` (no scan is started)."""
    return _scanned()
