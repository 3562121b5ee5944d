"""The public ``conveyor`` namespace across a plugin load: what the plugin changed, and undoing it.

A plugin's module runs arbitrary code when it is imported. One that assigns ``conveyor.add = f``
(or ``conveyor.engine.functional.add``, which Tensor's operators call) and then raises is
listed ``broken``, yet without this it would still change the arithmetic of every program where
it is merely installed. So the host takes a snapshot of the guarded attributes before each
plugin loads and compares afterwards (``Snapshot.changes``). A plugin that ends in any state but
``loaded`` has its changes undone; one that loads keeps them, with a warning, and they are
undone if it breaks later.

Guarded: every public attribute of ``conveyor`` itself, of each module that defines one of the
functions or classes ``conveyor`` exports (``conveyor.engine.functional``,
``conveyor.lib.composed.manipulation``, ...), and every attribute of ``Tensor`` (its operators
are dunders). Left out on purpose: private names, submodule bindings (importing a submodule
binds it on its parent) and plain numbers and strings (module state such as the profiler's
``active`` count, changed legitimately by any code that profiles).
"""

from __future__ import annotations

import sys
from operator import is_
from types import ModuleType
from typing import Final, final

__all__: list[str] = []

_MISSING: Final = object()
#: Values that are a module's own state or constants, never behaviour (see the docstring).
_STATE_TYPES: Final = bool | int | float | str | bytes


_targets: list[tuple[object, str]] | None = None


def _guarded() -> list[tuple[object, str]]:
    """The guarded objects and how messages name them, ``conveyor`` first.

    Computed once: they are module and class objects, which stay the same objects for the
    life of the process (a refresh re-imports nothing).
    """
    global _targets
    if _targets is not None:
        return _targets
    root = sys.modules.get("conveyor")
    if root is None or "__all__" not in vars(root):
        return []  # not imported yet (or still importing): nothing to guard, nothing cached
    found: dict[int, tuple[object, str]] = {id(root): (root, "conveyor")}
    for name in vars(root).get("__all__", ()):
        # vars(), not getattr: getattr would import the lazily loaded submodules.
        value = vars(root).get(name)
        module_name = getattr(value, "__module__", None)
        if isinstance(module_name, str) and module_name.startswith("conveyor."):
            module = sys.modules.get(module_name)
            if module is not None:
                found.setdefault(id(module), (module, module_name))
        if name == "Tensor" and isinstance(value, type):
            found.setdefault(id(value), (value, "conveyor.Tensor"))
    _targets = list(found.values())
    return _targets


def _guards(target: object, name: str, old: object, new: object) -> bool:
    """Whether a change of ``target.name`` from ``old`` to ``new`` counts (see the docstring).

    A change to or from a module is a submodule binding: importing the deprecated
    ``conveyor.move`` path rebinds ``conveyor.move`` from the function to that (callable) module.
    """
    if isinstance(target, type):
        return True  # every attribute of Tensor: the operators are dunders
    return (
        not name.startswith("_")
        and not isinstance(old, ModuleType | _STATE_TYPES)
        and not isinstance(new, ModuleType | _STATE_TYPES)
    )


@final
class Change:
    """One guarded attribute a plugin changed: its value before and after (or ``_MISSING``)."""

    __slots__ = ("after", "before", "label", "name", "target")

    def __init__(
        self, target: object, label: str, name: str, before: object, after: object
    ) -> None:
        self.target = target
        self.label = label
        self.name = name
        self.before = before
        self.after = after

    def __repr__(self) -> str:
        return f"<Change {self.qualified}>"

    @property
    def qualified(self) -> str:
        return f"{self.label}.{self.name}"

    @property
    def replaced(self) -> bool:
        """The plugin replaced or deleted an existing attribute (not only added one)."""
        return self.before is not _MISSING

    def undo(self) -> bool:
        """Put the old value back, unless something else changed the attribute since."""
        current = vars(self.target).get(self.name, _MISSING)
        if current is not self.after:
            return False
        if self.before is _MISSING:
            delattr(self.target, self.name)
        else:
            setattr(self.target, self.name, self.before)
        return True


@final
class Snapshot:
    """The guarded objects' attributes at one moment (taken before a plugin loads).

    A snapshot copies each namespace dictionary as it is (a C-level copy, about a thousand
    entries in all); only the entries that differ later are looked at closely.
    """

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values = [(target, label, dict(vars(target))) for target, label in _guarded()]

    def changes(self) -> tuple[Change, ...]:
        """Every guarded attribute whose value is not the snapshot's (compared by identity)."""
        found: list[Change] = []
        for target, label, before in self._values:
            after = vars(target)
            # The common case, nothing changed, decided in C: the same key and value objects in
            # the same order (`is` only: a plugin's key or value must never run its __eq__).
            if (
                len(after) == len(before)
                and all(map(is_, before, after))
                and all(map(is_, before.values(), after.values()))
            ):
                continue
            names = [n for n, old in before.items() if after.get(n, _MISSING) is not old]
            names += [n for n in after if n not in before]
            for name in sorted(names):
                old, new = before.get(name, _MISSING), after.get(name, _MISSING)
                if _guards(target, name, old, new):
                    found.append(Change(target, label, name, old, new))
        return tuple(found)


def undo(changes: tuple[Change, ...]) -> list[str]:
    """Undo ``changes`` (newest last, so in reverse); the names actually restored."""
    return [change.qualified for change in reversed(changes) if change.undo()][::-1]


def names(changes: tuple[Change, ...]) -> str:
    """``conveyor.add, conveyor.engine.functional.add`` (at most eight, then a count)."""
    listed = [change.qualified for change in changes]
    if len(listed) > 8:
        listed = [*listed[:8], f"{len(listed) - 8} more"]
    return ", ".join(listed)
