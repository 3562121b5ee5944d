"""Registration journal: what a plugin registered while it loaded, so it can be withdrawn.

A plugin's import may call public registration functions (``register_move_route``,
``register_kernel_pack``) directly instead of contributing through hooks. If the plugin then
ends broken, those registrations must go too: a plugin contributes everything or nothing. Each
registration function records how to undo itself; the plugin host opens a journal around each
plugin's load (in the loading thread only) and replays the undos when the plugin breaks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__: list[str] = []

_Undo = Callable[[], None]
_local = threading.local()


def record(undo: _Undo) -> None:
    """Note how to undo a registration that just succeeded (ignored outside a plugin load)."""
    journal: list[_Undo] | None = getattr(_local, "journal", None)
    if journal is not None:
        journal.append(undo)


@contextmanager
def journal() -> Iterator[list[_Undo]]:
    """Collect this thread's registrations until the block ends; yields the undo list."""
    previous = getattr(_local, "journal", None)
    entries: list[_Undo] = []
    _local.journal = entries
    try:
        yield entries
    finally:
        _local.journal = previous


def undo(entries: tuple[_Undo, ...] | list[_Undo]) -> None:
    """Withdraw the journaled registrations, newest first."""
    for entry in reversed(entries):
        entry()
