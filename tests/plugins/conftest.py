"""Fixtures for plugin-host tests: throwaway plugin distributions and an isolated host per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.engine import profiling
from conveyor.plugins import set_default_host

from .environment import PluginEnvironment


@pytest.fixture(autouse=True)
def _isolated_default_host() -> Iterator[None]:
    """Every test starts and ends with no default host, so none leaks between tests.

    Observers a test's plugins registered go too: a plugin host left behind keeps its
    observers in the profiler, and a later test in the same worker (the CPU call budgets of
    ``tests/generic/test_hot_path.py``) would count their calls."""
    previous = set_default_host(None)
    observers = list(profiling._observers)
    yield
    set_default_host(previous)
    profiling._observers[:] = observers


@pytest.fixture
def plugin_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginEnvironment]:
    """An empty throwaway plugin environment; its modules are forgotten afterwards."""
    env = PluginEnvironment(tmp_path, monkeypatch)
    yield env
    for module in [m for m in sys.modules if m.startswith(env.prefix)]:
        del sys.modules[module]
