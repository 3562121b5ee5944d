"""Grad mode and autograd nodes: the low layer every operation consults on every call.

Grad mode is per thread (``no_grad`` and friends); ``attach`` makes an operation the autograd
node of its results. The backward engine that walks those nodes is ``conveyor.engine.autograd``, a
higher layer (it computes with the public functions), so nothing here imports it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier
    from conveyor.engine.operation import Operation, OperationResult
    from conveyor.engine.tensor import Tensor

__all__ = [
    "attach",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "note_saved",
    "saved_for_backward",
    "set_grad_enabled",
]


class _GradMode(threading.local):
    """Per-thread grad mode; the class attribute is every new thread's default."""

    enabled = True


_state = _GradMode()


def is_grad_enabled() -> bool:
    """Whether operations in this thread record autograd state (default: yes)."""
    return _state.enabled


class set_grad_enabled:
    """Set grad mode for this thread; also usable as a context manager that restores it."""

    def __init__(self, mode: bool) -> None:
        self._previous = is_grad_enabled()
        _state.enabled = bool(mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self._previous


@contextmanager
def _grad_mode(mode: bool) -> Iterator[None]:
    previous = is_grad_enabled()
    _state.enabled = mode
    try:
        yield
    finally:
        _state.enabled = previous


class _Off:
    """``no_grad`` for the engine's own use: one fresh instance per ``with``, two calls."""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        self._previous = _state.enabled
        _state.enabled = False

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self._previous


def no_grad() -> Any:
    """Context manager (and decorator) that turns autograd recording off in this thread."""
    return _grad_mode(False)


def enable_grad() -> Any:
    """Context manager (and decorator) that turns autograd recording on in this thread."""
    return _grad_mode(True)


# Each guarded carrier holds, in its ``_saved_by`` attribute, weak references to the operations
# that saved one of its tensors for backward: neither a graph nor a carrier is kept alive by
# being listed, and noting a save is a dict insertion (no weak-dictionary machinery per call).
# Read by exports (``Tensor.__dlpack__``), which must not hand out writable memory a backward
# pass still depends on. Dead references are dropped when a dict doubles past ``_PRUNE_FROM``.
# Keyed by a process-wide counter, not held in a set: an operation often reuses the address of
# the one just freed, and weak references hash by their referent's address, so a set of them
# degenerates into one collision chain (measured: ~2 us per tracked call at 64 entries).
_savers_lock = threading.Lock()
_PRUNE_FROM = 64
_save_ids = itertools.count()


def note_saved(op: Operation, tensors: Iterable[Tensor]) -> None:
    """Record that ``op`` saved ``tensors`` for backward (their carriers are now guarded)."""
    ref = weakref.ref(op)
    for t in tensors:
        carrier = t._carrier
        refs: dict[int, weakref.ref[Operation]] | None = getattr(carrier, "_saved_by", None)
        if refs is None:
            with _savers_lock:
                refs = carrier.__dict__.setdefault("_saved_by", {})
        refs[next(_save_ids)] = ref
        n = len(refs)
        if n >= _PRUNE_FROM and n & (n - 1) == 0:
            # Only dead entries are removed, so a concurrent insertion is never lost.
            for key in [k for k, r in list(refs.items()) if r() is None]:
                refs.pop(key, None)


def saved_for_backward(carrier: Carrier) -> bool:
    """Whether a live graph saved a tensor of ``carrier`` and has not released it yet."""
    refs: dict[int, weakref.ref[Operation]] | None = getattr(carrier, "_saved_by", None)
    if not refs:
        return False
    for ref in list(refs.values()):
        op = ref()
        if op is not None and op._saved is not None:
            return True
    return False


def attach(op: Operation, result: OperationResult) -> None:
    """Make ``op`` the autograd node of every differentiable output in ``result``."""
    if type(result) is tuple:
        op._n_outputs = len(result)
        for index, out in enumerate(result):
            if out._dtype.is_differentiable:
                out._grad_fn = op
                out._output_index = index
                out._requires_grad = True
    elif result._dtype.is_differentiable:  # type: ignore[union-attr]  # a single Tensor
        result._grad_fn = op  # type: ignore[union-attr]
        result._requires_grad = True  # type: ignore[union-attr]
