"""Suite-wide guards: a clean environment before the run, and clean global state around each test.

Conveyor reads ``CONVEYOR_*`` variables (plugin allow/block lists, strict mode, preferences), so a
variable left in the developer's shell would silently change what the tests exercise; the suite
refuses to start instead. Grad mode, profilers, observers and the default plugin host are process
or thread state that a failing test could leave behind; the autouse fixture puts them back.
Under pytest-xdist (``make test`` runs one worker per core), tests sharing a fixture wider than
one test run on one worker, so that fixture is still built once (a Dask cluster, a fresh venv,
kit runs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import plugins
from conveyor.engine import autograd, profiling


def _conveyor_variables() -> list[str]:
    return sorted(name for name in os.environ if name.upper().startswith("CONVEYOR_"))


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run while any ``CONVEYOR_*`` variable is set: it would change plugin loading.

    ``COLUMNS`` and ``LINES`` are dropped: tables fit ``COLUMNS`` (tests that check fitting set
    it themselves), and xdist workers get ``COLUMNS=80`` where a serial run has none.
    """
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    found = _conveyor_variables()
    if found:
        msg = (
            f"the Conveyor test suite refuses to start while CONVEYOR_* environment variables "
            f"are set: {', '.join(found)}; unset them (they change which plugins load)"
        )
        raise pytest.UsageError(msg)


# Folders whose conftest builds a session fixture (the Dask cluster, the Metal engines).
_SESSION_FOLDERS = ("tests/dask/", "tests/metal/")


def _unit(nodeid: str) -> str:
    """The tests that run on one xdist worker: a session folder, else the test's file."""
    path = nodeid.split("::", 1)[0]
    return next((folder for folder in _SESSION_FOLDERS if path.startswith(folder)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N``, hand out whole units (``_unit``) in the workers' order.

    Every module, class or session fixture is then built once, as in a serial run. (xdist's
    ``loadgroup`` cannot do this on pytest 9: it renames node ids, which pytest no longer reads.)
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class _UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems sets
    return _UnitScheduling(config, log)


@pytest.hookimpl(trylast=True)  # after pytest's own fixture-scope reordering
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, run first the units whose tests share a wider-scoped suite fixture.

    Those are the long ones (kit runs, fresh venvs, the Dask cluster, the demo): started first,
    none of them is left running alone at the end. The sort is stable, so each unit keeps its
    order. Fixtures of plugins (pytest's own, hypothesis) do not count: they are cheap.
    """
    if not hasattr(config, "workerinput"):
        return
    heavy = {
        _unit(item.nodeid)
        for item in items
        if isinstance(item, pytest.Function)
        and any(
            d.scope != "function" and d.baseid
            for defs in item._fixtureinfo.name2fixturedefs.values()
            for d in defs
        )
    }
    items.sort(key=lambda item: _unit(item.nodeid) not in heavy)


@pytest.fixture(autouse=True)
def _restore_global_state() -> Iterator[None]:
    """Restore grad mode, open profilers and the default plugin host after every test.

    Observers are left alone: a plugin host installs its plugins' observers when it scans and
    owns their removal; tests remove their own observers with the remover they get.
    """
    host = plugins.set_default_host(None)
    plugins.set_default_host(host)
    yield
    autograd.set_grad_enabled(True)
    profiling._local.__dict__.pop("stack", None)  # profilers a failed test left open
    with profiling._lock:
        profiling.active = len(profiling._observers)
    plugins.set_default_host(host)
