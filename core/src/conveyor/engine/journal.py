"""Registration journal: what a plugin registered while it loaded, so it can be withdrawn.

A plugin's import may call public registration functions (``register_move_route``,
``register_kernel_pack``, ``register_carrier_definition``, ``define_operation``) directly
instead of contributing through hooks. If the plugin then ends broken, those registrations must
go too: a plugin contributes everything or nothing. Each registration function asks the journal
first (``admit``) and records how to undo itself (``record``); the plugin host opens a journal
around each plugin's load and replays the undos when the plugin breaks.

Only registrations the plugin's own code makes are journaled: one made by the top-level code of a
module of another package (a distribution the plugin imported first) belongs to that module,
which stays imported whatever becomes of the plugin.

A journal is per thread, because the host imports each plugin on a helper thread that it may
abandon (an import that does not finish in time). Abandoning closes the journal: what it holds is
withdrawn at once, and whatever that thread still tries to register is refused, so a plugin
marked broken can never register anything late.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import final

__all__: list[str] = []

_Undo = Callable[[], None]
_local = threading.local()
#: Code objects of the host's frames that run a plugin's import or hooks: walking out from a
#: registration, reaching one of them before any module's top level means the plugin made it.
_BOUNDARY: set[CodeType] = set()


def boundary(code: CodeType) -> None:
    """Declare ``code`` (a host function running plugin code) as a journal boundary."""
    _BOUNDARY.add(code)


@final
class Journal:
    """The undos of one plugin load; shared by the loading thread and its import thread."""

    __slots__ = ("_closed", "_entries", "_lock", "package")

    def __init__(self, package: str | None = None) -> None:
        #: The plugin's top-level package; ``None`` attributes every registration to it.
        self.package = package
        self._entries: list[_Undo] = []
        self._lock = threading.Lock()
        #: Why the journal was closed (its plugin abandoned), or ``None`` while it is open.
        self._closed: str | None = None

    @property
    def entries(self) -> tuple[_Undo, ...]:
        with self._lock:
            return tuple(self._entries)

    def owns(self, frame: FrameType | None) -> bool:
        """Whether the registration whose caller is ``frame`` is the plugin's own."""
        while frame is not None:
            code = frame.f_code
            if code in _BOUNDARY:
                return True
            if code.co_name == "<module>":
                module = str(frame.f_globals.get("__name__", ""))
                return self.package is None or module.partition(".")[0] == self.package
            frame = frame.f_back
        return True

    def admit(self, what: str) -> None:
        """Raise ``RuntimeError`` if this journal's plugin was abandoned."""
        reason = self._closed
        if reason is not None:
            msg = f"{what}: refused, {reason}"
            raise RuntimeError(msg)

    def add(self, undo: _Undo, what: str) -> None:
        """Keep ``undo``; if the plugin was abandoned meanwhile, undo at once and refuse."""
        with self._lock:
            if self._closed is None:
                self._entries.append(undo)
                return
        undo()
        self.admit(what)

    def close(self, reason: str) -> None:
        """Abandon the plugin: withdraw what it registered and refuse what it still tries."""
        with self._lock:
            self._closed = reason
            entries, self._entries = self._entries, []
        undo(entries, reason)


def current() -> Journal | None:
    found: Journal | None = getattr(_local, "journal", None)
    return found


def admit(what: str) -> None:
    """Refuse a registration from a plugin thread the host abandoned (``RuntimeError``)."""
    journal = current()
    if journal is not None and journal.owns(sys._getframe(1)):
        journal.admit(what)


def record(undo: _Undo, what: str = "registration") -> None:
    """Note how to undo a registration that just succeeded (ignored outside a plugin load)."""
    journal = current()
    if journal is not None and journal.owns(sys._getframe(1)):
        journal.add(undo, what)


@contextmanager
def journal(into: Journal | None = None) -> Iterator[Journal]:
    """Collect this thread's registrations into ``into`` (a new journal by default)."""
    previous = current()
    entries = Journal() if into is None else into
    _local.journal = entries
    try:
        yield entries
    finally:
        _local.journal = previous


def undo(entries: tuple[_Undo, ...] | list[_Undo], reason: str | None = None) -> None:
    """Withdraw the journaled registrations, newest first; ``reason`` (why the plugin broke,
    naming it) is what a withdrawal that must leave a refusal behind says (``reason()``)."""
    previous = getattr(_withdrawing, "reason", None)
    _withdrawing.reason = reason
    try:
        for entry in reversed(entries):
            entry()
    finally:
        _withdrawing.reason = previous


def reason() -> str | None:
    """Why the registrations being withdrawn on this thread go, while ``undo`` runs."""
    found: str | None = getattr(_withdrawing, "reason", None)
    return found


_withdrawing = threading.local()
