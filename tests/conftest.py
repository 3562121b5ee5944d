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

import pytest

from conveyor import autograd, plugins, profiling


def _conveyor_variables() -> list[str]:
    return sorted(name for name in os.environ if name.upper().startswith("CONVEYOR_"))


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run while any ``CONVEYOR_*`` variable is set: it would change plugin loading."""
    found = _conveyor_variables()
    if found:
        msg = (
            f"the Conveyor test suite refuses to start while CONVEYOR_* environment variables "
            f"are set: {', '.join(found)}; unset them (they change which plugins load)"
        )
        raise pytest.UsageError(msg)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put each test using a wider-scoped suite fixture in one ``xdist_group``.

    A session fixture groups the folder of the conftest defining it, any narrower one the test's
    file. Fixtures of plugins (pytest's own, hypothesis) are left out: they are cheap.
    """
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        scopes = {
            d.scope: d.baseid
            for defs in info.name2fixturedefs.values()
            for d in defs
            if d.scope != "function" and d.baseid
        }
        if scopes:
            group = scopes["session"] if "session" in scopes else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


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
