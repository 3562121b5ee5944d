"""Importing a plugin's entry point with a time limit, so one hanging import blocks nothing else.

The import runs on a daemon helper thread while the loading thread waits up to the host's import
timeout. A hung import holds only its own module's import lock, so the rest of the scan (and every
other import) goes on; the helper thread is abandoned, never killed. Abandoning closes the
plugin's registration journal (``conveyor.engine.journal``): what it registered is withdrawn and
anything it registers if it finishes late is refused. While the abandoned import is still
running, a later scan reports its module as still importing instead of waiting on its lock.

A scan that starts while its own thread executes a module's import (module-level code that
creates a tensor) imports the plugins in that thread, without a time limit, as before: that
thread holds the import locks of the modules it is importing, and a plugin importing one of them
from a helper thread would wait for the scan that waits for it.
"""

from __future__ import annotations

import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, final

from conveyor.engine import journal as _journal

if TYPE_CHECKING:  # importlib.metadata costs ~30 ms at import; only a scan needs it
    from importlib.metadata import EntryPoint

__all__: list[str] = []

_local = threading.local()
# The longest the waiting thread goes without running pending signal handlers (see _wait).
_WAIT_SLICE_S = 0.1
#: Module name -> (abandoned import thread, when it was abandoned); pruned when a thread ends.
_abandoned: dict[str, tuple[threading.Thread, float]] = {}
_abandoned_lock = threading.Lock()


class ImportTimeout(Exception):
    """The import did not finish in time (or an earlier abandoned import of it still runs)."""


def in_plugin_import() -> bool:
    """Whether the calling thread is a helper thread importing a plugin."""
    return bool(getattr(_local, "importing", False))


@final
class _Attempt:
    """One import on its helper thread; ``done`` is set once it returned or raised."""

    __slots__ = ("done", "entry_point", "error", "journal", "result")

    def __init__(self, entry_point: EntryPoint, journal: _journal.Journal) -> None:
        self.entry_point = entry_point
        self.journal = journal
        self.done = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        _local.importing = True
        with _journal.journal(self.journal):
            try:
                self.result = self.entry_point.load()
            # Every kind: the loading thread turns it into the plugin's state.
            except BaseException as exc:
                self.error = exc
        self.done.set()


_journal.boundary(_Attempt.run.__code__)


def _still_running(module: str) -> float | None:
    """Seconds since an import of ``module`` was abandoned, if that import still runs."""
    with _abandoned_lock:
        found = _abandoned.get(module)
        if found is None:
            return None
        thread, since = found
        if not thread.is_alive():
            del _abandoned[module]
            return None
    return time.monotonic() - since


def load_entry_point(entry_point: EntryPoint, timeout: float, abandon: str) -> object:
    """``entry_point.load()`` on a helper thread, waiting at most ``timeout`` seconds.

    ``abandon`` is the message a timeout raises, and the reason the journal of the calling
    thread gives for refusing late registrations.

    Raises:
        ImportTimeout: the import did not finish in time, or an abandoned import of the same
            module is still running (importing it again would wait on its lock).
        KeyboardInterrupt: the wait was interrupted; the import is abandoned first.
        BaseException: whatever the import raised.
    """
    if _inside_an_import():
        return entry_point.load()
    module = entry_point.module
    age = _still_running(module)
    if age is not None:
        msg = f"{abandon} (module {module!r} is still importing, abandoned {age:.1f} s ago)"
        raise ImportTimeout(msg)
    journal = _journal.current() or _journal.Journal()
    attempt = _Attempt(entry_point, journal)
    thread = threading.Thread(
        target=attempt.run, name=f"conveyor plugin import {entry_point.value}", daemon=True
    )
    thread.start()
    try:
        finished = _wait(attempt.done, timeout)
    except KeyboardInterrupt:
        _abandon(module, thread, journal, "the import was interrupted (KeyboardInterrupt)")
        raise
    if not finished:
        _abandon(module, thread, journal, abandon)
        error = ImportTimeout(abandon)
        frame = sys._current_frames().get(thread.ident or -1)
        if frame is not None:  # where it hangs, for the record's traceback
            import traceback  # only a timeout needs it

            stack = "".join(traceback.format_stack(frame))
            error.add_note(f"the import thread was at:\n{stack}")
        raise error
    if attempt.error is not None:
        raise attempt.error
    return attempt.result


def _wait(done: threading.Event, timeout: float) -> bool:
    """``done.wait(timeout)`` in short slices, so a Ctrl-C is raised within one slice.

    The kernel may deliver a process-wide SIGINT to any thread (the hanging import's, say);
    Python runs the handler on the main thread only when that thread's wait returns, so one
    long wait would sit out the whole timeout before raising ``KeyboardInterrupt``.
    """
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return done.is_set()
        if done.wait(min(remaining, _WAIT_SLICE_S)):
            return True


def _inside_an_import() -> bool:
    """Whether the calling thread is executing a module import (holds import locks)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _abandon(module: str, thread: threading.Thread, journal: _journal.Journal, why: str) -> None:
    with _abandoned_lock:
        _abandoned[module] = (thread, time.monotonic())
    journal.close(f"the plugin host abandoned this plugin: {why}")
