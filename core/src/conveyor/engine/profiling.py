"""Profiling: per-thread operation records and process-wide computation observers.

The hot path reads one module global (``active``): while no profiler is open and no observer is
registered it is zero and operations are not even timed, so profiling costs nothing when off.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any, final

import attrs

__all__ = ["OperationRecord", "Profiler", "add_observer", "profile"]

# Open profilers (all threads) + registered observers. Read by Operation on every call.
active = 0

_local = threading.local()
_observers: list[Callable[[OperationRecord], None]] = []
_lock = threading.Lock()


@final
@attrs.frozen
class OperationRecord:
    """One dispatched operation execution: name, exact dispatch carrier class, duration, success."""

    operation: str | None
    carrier: type | None
    duration: float
    success: bool


@final
class Profiler:
    """Collects an ``OperationRecord`` for every operation run in this thread while open.

    Profilers nest; every open profiler of the thread receives each record.
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: list[OperationRecord] = []

    def __enter__(self) -> Profiler:
        global active
        stack = _thread_profilers()
        stack.append(self)
        with _lock:
            active += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global active
        _thread_profilers().remove(self)
        with _lock:
            active -= 1

    def summary(self) -> dict[tuple[str | None, str], tuple[int, float]]:
        """(operation, carrier name) -> (count, total seconds)."""
        out: dict[tuple[str | None, str], tuple[int, float]] = {}
        for r in self.records:
            key = (r.operation, r.carrier.__name__ if r.carrier else "?")
            count, total = out.get(key, (0, 0.0))
            out[key] = (count + 1, total + r.duration)
        return out


def profile() -> Profiler:
    """A profiler context: ``with cv.profile() as prof: ...; prof.records``."""
    return Profiler()


def _thread_profilers() -> list[Profiler]:
    stack: list[Profiler] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def add_observer(callback: Callable[[OperationRecord], None]) -> Callable[[], None]:
    """Call ``callback(record)`` after every operation in every thread; returns a remover.

    An observer that raises is reported with a warning and never breaks the operation.
    """
    global active
    if not callable(callback):
        msg = f"add_observer expects a callable, got {callback!r}"
        raise TypeError(msg)
    with _lock:
        _observers.append(callback)
        active += 1

    def remove() -> None:
        global active
        with _lock:
            if callback in _observers:
                _observers.remove(callback)
                active -= 1

    return remove


def record(operation: str | None, carrier: type | None, duration: float, success: bool) -> None:
    """Deliver one record to this thread's profilers and to every observer."""
    rec = OperationRecord(operation, carrier, duration, success)
    for profiler in getattr(_local, "stack", ()):
        profiler.records.append(rec)
    for callback in tuple(_observers):
        try:
            callback(rec)
        except Exception as exc:  # an observer must never break computation
            _warn_observer(callback, exc)


def _warn_observer(callback: Any, exc: Exception) -> None:
    from conveyor.types.warnings import ConveyorWarning

    msg = f"operation observer {callback!r} raised {exc!r}; the operation itself succeeded"
    warnings.warn(msg, ConveyorWarning, stacklevel=3)
