"""Late binding of pieces a lower layer uses but a higher layer owns (no import back up).

A lower module names the pieces it needs (``binder(globals(), names)``); the module that owns
each piece binds it there when it loads. ``import conveyor`` loads every owner, so the names
are bound before any user code runs, and the lower module never imports the higher one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["binder"]


def binder(namespace: dict[str, Any], names: Iterable[str]) -> Callable[[str, object], None]:
    """A function binding each of ``names`` (only those) in ``namespace``, a module's globals."""
    allowed = frozenset(names)
    module = namespace.get("__name__", "?")

    def bind(name: str, value: object) -> None:
        if name not in allowed:
            msg = f"{module}: {name!r} is not a bindable name ({', '.join(sorted(allowed))})"
            raise ValueError(msg)
        namespace[name] = value

    return bind
