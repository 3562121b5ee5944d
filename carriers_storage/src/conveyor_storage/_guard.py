"""IOGuard: counts I/O in flight on one descriptor so that closing it waits for that I/O.

A descriptor number is reused by the next ``open`` in the process as soon as it is closed, so a
``pread`` / ``pwrite`` that started before another thread closed it, or that read the number
just before, would reach an unrelated file. Every transfer therefore runs inside ``guard.use()``
and the owner closes the descriptor through ``guard.close(...)``: closing marks the guard shut
(new transfers are refused), waits until the transfers in flight have finished, and only then
closes the descriptor. The guard admits any number of concurrent transfers (they share the
descriptor safely); only closing is exclusive, like the writer side of a reader/writer lock.

A thread closing while it is itself inside ``use`` (a caller releasing the carrier inside its
own ``descriptor()`` block) cannot wait for itself: the guard then waits for the other threads,
and the descriptor is closed when that thread's last transfer ends.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import final

__all__ = ["IOGuard"]


@final
class IOGuard:
    """In-flight transfer count and shut flag of one descriptor (see the module docstring).

    Args:
        refusal: builds the error raised for a transfer started after ``close``, given the
            name of the operation (``"read"``, ``"import_span"``...).
    """

    __slots__ = ("_busy", "_changed", "_deferred", "_mine", "_refusal", "_shut")

    def __init__(self, refusal: Callable[[str], Exception]) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._busy = 0
        self._shut = False
        self._refusal = refusal
        self._mine = threading.local()  # ``depth``: this thread's transfers in flight
        self._deferred: int | None = None  # closed when the last transfer ends

    @property
    def shut(self) -> bool:
        """Whether ``close`` was called (the descriptor is closed or about to be)."""
        return self._shut

    @contextlib.contextmanager
    def use(self, what: str) -> Iterator[None]:
        """Hold the descriptor open for one transfer; refused once ``close`` was called."""
        with self._changed:
            if self._shut:
                raise self._refusal(what)
            self._busy += 1
        mine = self._mine
        mine.depth = getattr(mine, "depth", 0) + 1
        try:
            yield
        finally:
            mine.depth -= 1
            deferred = None
            with self._changed:
                self._busy -= 1
                self._changed.notify_all()
                if not self._busy:
                    deferred, self._deferred = self._deferred, None
            if deferred is not None:
                _close_quietly(deferred)

    def close(self, fd: int) -> None:
        """Refuse new transfers, wait for those in flight, then close ``fd``. Idempotent.

        Called from inside ``use`` on this guard, it waits for the other threads only and
        leaves closing to the end of the calling thread's last transfer.
        """
        mine = getattr(self._mine, "depth", 0)
        with self._changed:
            if self._shut:
                return
            self._shut = True
            self._changed.wait_for(lambda: self._busy == mine)
            if mine:
                self._deferred = fd
                return
        _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
