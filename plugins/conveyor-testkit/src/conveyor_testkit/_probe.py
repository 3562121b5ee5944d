"""Allocation probe: records every allocation and implementation entry during a refused call.

The dispatch contract says a refusal happens before any result allocation, compilation or kernel
entry. The probe wraps, for the duration of one call, the places where work starts: the carrier
class's ``allocate`` and ``_allocate`` hooks, every other carrier class's ``allocate``, the
``allocate`` of a definition's storage provider and the operation's own ``_forward`` hook (a
definition-free carrier publishes results only from inside ``_forward``). Anything recorded
while a refused call ran is a violation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import conveyor as cv
from conveyor.sdk import carrier_definition

__all__ = ["record_work"]


def _counting(events: list[str], label: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        events.append(label)
        return original(*args, **kwargs)

    return wrapper


def _class_hook(
    events: list[str], label: str, original: Callable[..., Any]
) -> classmethod[Any, Any, Any]:
    counting = _counting(events, label, original)

    def hook(cls: type, *args: Any, **kwargs: Any) -> Any:
        return counting(*args, **kwargs)

    return classmethod(hook)


@contextlib.contextmanager
def record_work(cls: type[cv.Carrier], operation: cv.Operation | None) -> Iterator[list[str]]:
    """Record allocations on ``cls`` and entry into ``operation``'s ``_forward`` while active."""
    events: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for attr in ("allocate", "_allocate"):
            label = f"{cls.__name__}.{attr}"
            patch.setattr(cls, attr, _class_hook(events, label, getattr(cls, attr)))
        # Any other carrier class allocating counts too (a scratch buffer on CPU is still work).
        base = cv.Carrier.__dict__["allocate"].__func__

        def foreign(other: type, *args: Any, **kwargs: Any) -> Any:
            if other is not cls:
                events.append(f"{other.__name__}.allocate (another carrier class)")
            return base(other, *args, **kwargs)

        patch.setattr(cv.Carrier, "allocate", classmethod(foreign))
        storage = getattr(carrier_definition(cls), "storage", None)
        if storage is not None and callable(getattr(storage, "allocate", None)):
            label = f"{type(storage).__name__}.allocate (storage provider)"
            try:
                patch.setattr(storage, "allocate", _counting(events, label, storage.allocate))
            except (AttributeError, TypeError):  # a frozen or slotted provider: patch its class
                method = type(storage).allocate
                patch.setattr(type(storage), "allocate", _counting(events, label, method))
        if operation is not None:
            label = f"{type(operation).__name__}._forward (implementation entry)"
            wrapped = _counting(events, label, operation._forward)
            with contextlib.suppress(AttributeError, TypeError):  # a slotted operation
                patch.setattr(operation, "_forward", wrapped)
        yield events
