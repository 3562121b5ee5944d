"""Process-wide state a plugin's load must leave as it found it: standard streams, timers, signals.

Some changes a plugin can make while it is imported do not fail at once but kill the host later:
a closed ``sys.stdout`` turns the next ``print`` into ``ValueError``, and ``signal.alarm(5)``
ends the process five seconds on (SIGALRM's default action). The host records this state
before each plugin loads (``ProcessState``) and afterwards puts back whatever changed; the
plugin is then ``broken``, its message naming each change, because a plugin that needs such
things must do them when it is first used, where the program can see them.

Checked: ``sys.stdin`` / ``sys.stdout`` / ``sys.stderr`` replaced or closed (a closed stream
over a file descriptor is reopened over the same descriptor), interval timers armed
(``signal.alarm``, ``signal.setitimer``: real, virtual and profiling), and Python-level signal
handlers replaced (possible only on the main thread). Not checked (documented in
``docs/reliability.md``): the working directory, the umask, environment variables, resource
limits, the recursion limit, ``atexit`` functions, file descriptors and threads.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import IO, Any, Final, final

__all__: list[str] = []

_STREAMS: Final = ("stdin", "stdout", "stderr")
#: How far a timer armed before the load may drift from "its value then, minus the time the
#: load took" before it counts as changed (timer and clock are read at slightly different times).
_SLACK_S: Final = 0.25
_TIMERS: Final = tuple(
    (getattr(signal, name), name, alarm)
    for name, alarm in (
        ("ITIMER_REAL", "SIGALRM"),
        ("ITIMER_VIRTUAL", "SIGVTALRM"),
        ("ITIMER_PROF", "SIGPROF"),
    )
    if hasattr(signal, name)
)
#: The signal numbers, as plain ints: ``valid_signals()`` builds an enum member for each on every
#: call, and two snapshots per plugin load made that a visible part of discovery.
_SIGNALS: Final = tuple(sorted(int(number) for number in signal.valid_signals()))


def _closed(stream: Any) -> bool:
    try:
        return bool(stream.closed)
    except Exception:  # an odd object standing in for a stream: treat it as open
        return False


def _descriptor(stream: Any) -> int | None:
    try:
        fd = stream.fileno()
    except Exception:  # no descriptor (io.StringIO, a capture object)
        return None
    return fd if isinstance(fd, int) else None


def _reopen(stream: Any, fd: int, name: str) -> IO[Any] | None:
    """A new text stream over ``fd`` like the closed ``stream``, or ``None`` if fd is gone."""
    try:
        os.fstat(fd)
        return open(  # replaces sys.<name> for the rest of the process
            fd,
            "r" if name == "stdin" else "w",
            buffering=1 if getattr(stream, "line_buffering", False) else -1,
            encoding=getattr(stream, "encoding", None),
            errors=getattr(stream, "errors", None),
            closefd=False,
        )
    except (OSError, ValueError, TypeError, LookupError):  # fd gone, or odd stream attributes
        return None


@final
class ProcessState:
    """The checked process-wide state at one moment (taken before a plugin loads)."""

    __slots__ = ("_handlers", "_streams", "_taken", "_timers")

    def __init__(self) -> None:
        self._taken = time.monotonic()
        # name -> (object, was closed, its descriptor)
        self._streams = {
            name: (stream, _closed(stream), _descriptor(stream))
            for name in _STREAMS
            for stream in (getattr(sys, name, None),)
        }
        self._timers = {which: signal.getitimer(which) for which, _, _ in _TIMERS}
        self._handlers = {number: signal.getsignal(number) for number in _SIGNALS}

    def restore(self) -> list[str]:
        """Put back what changed since; one phrase per change (``[]`` when nothing did)."""
        return [*self._restore_streams(), *self._restore_timers(), *self._restore_handlers()]

    def _restore_streams(self) -> list[str]:
        found: list[str] = []
        for name, (stream, was_closed, fd) in self._streams.items():
            current = getattr(sys, name, None)
            if current is not stream:
                setattr(sys, name, stream)
                found.append(f"sys.{name} was replaced (restored)")
            if was_closed or not _closed(stream):
                continue
            reopened = _reopen(stream, fd, name) if fd is not None else None
            if reopened is None:
                found.append(f"sys.{name} was closed (it could not be reopened)")
            else:
                setattr(sys, name, reopened)
                found.append(f"sys.{name} was closed (reopened over descriptor {fd})")
        return found

    def _restore_timers(self) -> list[str]:
        found: list[str] = []
        elapsed = time.monotonic() - self._taken
        for which, timer, alarm in _TIMERS:
            before, interval = self._timers[which]
            after, after_interval = signal.getitimer(which)
            # What the timer would read had nobody touched it (time passes during the load).
            expected = max(before - elapsed, 0.0) if before else 0.0
            untouched = after == 0 if before == 0 else abs(after - expected) <= _SLACK_S
            if untouched and after_interval == interval:
                continue
            signal.setitimer(which, expected, interval)
            how = "signal.alarm" if timer == "ITIMER_REAL" else "signal.setitimer"
            found.append(f"{how} armed a {alarm} timer ({timer}; disarmed)")
        return found

    def _restore_handlers(self) -> list[str]:
        changed = [
            number
            for number, handler in self._handlers.items()
            if signal.getsignal(number) is not handler
        ]
        if not changed:
            return []
        names = ", ".join(signal.Signals(n).name for n in changed)
        if threading.current_thread() is not threading.main_thread():
            return [f"the handlers of {names} were replaced (not restored: off the main thread)"]
        for number in changed:
            signal.signal(number, self._handlers[number])
        return [f"the handlers of {names} were replaced (restored)"]
