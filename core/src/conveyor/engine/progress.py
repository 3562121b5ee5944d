"""Progress: how long operations report how far they got, to whoever is listening.

``with cv.progress(callback):`` makes ``callback(done, total, label)`` active in this thread (and
in tasks copied from its context) until the block ends; blocks nest, and every active callback
hears every report. ``with cv.progress("bar"):`` is the built-in callback: a tqdm progress bar
per label (tqdm is imported only then; ``pip install tqdm``). Long work (out-of-core
operations, residency transitions, projections) calls ``report`` as it goes. With no callback
active, ``active()`` is a single context-variable read, so the work pays nothing for being
observable.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

__all__ = ["ProgressCallback", "active", "progress", "report"]

#: ``callback(done, total, label)``: ``done`` of ``total`` units (tiles, bytes) of ``label``.
ProgressCallback = Callable[[int, int, str], None]

# Immutable tuples, so a nested block never changes what an enclosing one (or another thread
# that copied the context) sees.
_CALLBACKS: Final[contextvars.ContextVar[tuple[ProgressCallback, ...]]] = contextvars.ContextVar(
    "conveyor_progress", default=()
)


class _Bars:
    """The ``"bar"`` callback: one tqdm bar per label, moved to each report's ``done``.

    Mutable (it holds the open bars); one instance serves one ``progress("bar")`` block.
    """

    def __init__(self) -> None:
        from tqdm.auto import tqdm  # only where a bar is asked for

        self._tqdm = tqdm
        self._bars: dict[str, Any] = {}

    def __call__(self, done: int, total: int, label: str) -> None:
        bar = self._bars.get(label)
        if bar is None or bar.total != total:
            if bar is not None:
                bar.close()
            bar = self._bars[label] = self._tqdm(total=total, desc=label, leave=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self._bars[label]

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


@contextmanager
def progress(callback: ProgressCallback | str) -> Iterator[None]:
    """Report the progress of long operations in this block to ``callback(done, total, label)``.

    Example: ``with cv.progress(lambda done, total, label: print(label, done, total)): ...``.
    ``"bar"`` shows a tqdm progress bar per label instead. A callback runs in the thread doing
    the work; exceptions it raises propagate there.

    Raises:
        TypeError: ``callback`` is neither callable nor ``"bar"``.
        ModuleNotFoundError: ``"bar"`` without tqdm installed (``pip install tqdm``).
    """
    bars = None
    if callback == "bar":
        bars = _Bars()
        callback = bars
    if not callable(callback):
        msg = (
            f"progress: callback must be callable or 'bar', got {callback!r} "
            f"({type(callback).__name__})"
        )
        raise TypeError(msg)
    token = _CALLBACKS.set((*_CALLBACKS.get(), callback))
    try:
        yield
    finally:
        _CALLBACKS.reset(token)
        if bars is not None:
            bars.close()


def active() -> tuple[ProgressCallback, ...]:
    """The callbacks active here; empty (and cheap) when nobody listens."""
    return _CALLBACKS.get()


def report(done: int, total: int, label: str) -> None:
    """Tell every active callback that ``done`` of ``total`` units of ``label`` are finished."""
    for callback in _CALLBACKS.get():
        callback(done, total, label)
