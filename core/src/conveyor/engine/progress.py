"""Progress: how long operations report how far they got, to whoever is listening.

``with cv.progress(callback):`` makes ``callback(done, total, label)`` active in this thread (and
in tasks copied from its context) until the block ends; blocks nest, and every active callback
hears every report. Long work (out-of-core operations, residency transitions, projections)
calls ``report`` as it goes. With no callback active, ``active()`` is a single context-variable
read, so the work pays nothing for being observable.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["ProgressCallback", "active", "progress", "report"]

#: ``callback(done, total, label)``: ``done`` of ``total`` units (tiles, bytes) of ``label``.
ProgressCallback = Callable[[int, int, str], None]

# Immutable tuples, so a nested block never changes what an enclosing one (or another thread
# that copied the context) sees.
_CALLBACKS: Final[contextvars.ContextVar[tuple[ProgressCallback, ...]]] = contextvars.ContextVar(
    "conveyor_progress", default=()
)


@contextmanager
def progress(callback: ProgressCallback) -> Iterator[None]:
    """Report the progress of long operations in this block to ``callback(done, total, label)``.

    Example: ``with cv.progress(lambda done, total, label: print(label, done, total)): ...``.
    A callback runs in the thread doing the work; exceptions it raises propagate there.

    Raises:
        TypeError: ``callback`` is not callable.
    """
    if not callable(callback):
        msg = f"progress: callback must be callable, got {callback!r} ({type(callback).__name__})"
        raise TypeError(msg)
    token = _CALLBACKS.set((*_CALLBACKS.get(), callback))
    try:
        yield
    finally:
        _CALLBACKS.reset(token)


def active() -> tuple[ProgressCallback, ...]:
    """The callbacks active here; empty (and cheap) when nobody listens."""
    return _CALLBACKS.get()


def report(done: int, total: int, label: str) -> None:
    """Tell every active callback that ``done`` of ``total`` units of ``label`` are finished."""
    for callback in _CALLBACKS.get():
        callback(done, total, label)
