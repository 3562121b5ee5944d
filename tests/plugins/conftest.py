"""Fixtures for plugin-host tests: throwaway plugin distributions and an isolated host per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.plugins import set_default_host

from .environment import PluginEnvironment


@pytest.fixture(autouse=True)
def _isolated_default_host() -> Iterator[None]:
    """Every test starts and ends with no default host, so none leaks between tests."""
    previous = set_default_host(None)
    yield
    set_default_host(previous)


@pytest.fixture
def plugin_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginEnvironment]:
    """An empty throwaway plugin environment; its modules are forgotten afterwards."""
    env = PluginEnvironment(tmp_path, monkeypatch)
    yield env
    for module in [m for m in sys.modules if m.startswith(env.prefix)]:
        del sys.modules[module]
