"""``conveyor.plugins._namespace``: which changes of the conveyor namespace count, and undoing them.

The scenarios with real plugins are in ``test_reliability.py::TestNamespaceGuard``.
"""

from __future__ import annotations

import types

import pytest

import conveyor as cv
from conveyor.engine import functional, profiling
from conveyor.plugins import _namespace


class TestSnapshot:
    def test_replaced_function_is_a_change_and_undo_restores_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        original = functional.sub
        monkeypatch.setattr(functional, "sub", original)  # put back whatever happens
        snapshot = _namespace.Snapshot()
        functional.sub = lambda *a, **k: None

        changes = snapshot.changes()

        assert [c.qualified for c in changes] == ["conveyor.engine.functional.sub"]
        assert all(c.replaced for c in changes)
        assert _namespace.undo(changes) == ["conveyor.engine.functional.sub"]
        assert functional.sub is original

    def test_submodule_bindings_and_plain_state_are_not_changes(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Importing a submodule rebinds its parent's attribute (even over a function, as the
        deprecated ``conveyor.move`` path does), and profiling counts in a module int."""
        monkeypatch.setattr(cv, "move", cv.move)
        monkeypatch.setattr(profiling, "active", profiling.active)
        snapshot = _namespace.Snapshot()
        cv.move = types.ModuleType("conveyor.move")  # type: ignore[assignment]  # as import does
        profiling.active += 1

        assert snapshot.changes() == ()

    def test_swapped_values_are_changes_and_a_reinsertion_of_the_same_object_is_none(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The unchanged case is decided by object identity in key order; every other case
        (two values swapped, a name deleted and bound again to its own object, which moves it
        to the end of the dictionary) is compared name by name."""
        monkeypatch.setattr(functional, "sin", functional.sin)
        monkeypatch.setattr(functional, "cos", functional.cos)
        sin, cos = functional.sin, functional.cos
        snapshot = _namespace.Snapshot()
        functional.sin, functional.cos = cos, sin
        assert sorted(c.qualified for c in snapshot.changes()) == [
            "conveyor.engine.functional.cos",
            "conveyor.engine.functional.sin",
        ]
        functional.sin, functional.cos = sin, cos
        assert snapshot.changes() == ()

        del functional.sin
        functional.sin = sin
        assert snapshot.changes() == ()

    def test_undo_leaves_an_attribute_changed_again_since(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Only what still holds the plugin's value is put back (a later plugin's stays)."""
        monkeypatch.setattr(cv, "exp", cv.exp)
        snapshot = _namespace.Snapshot()
        cv.exp = lambda x: x
        changes = snapshot.changes()
        later = lambda x: x  # noqa: E731  # a second, different replacement
        cv.exp = later

        assert _namespace.undo(changes) == []
        assert cv.exp is later
