"""Suite-wide guards: a clean environment before the run, and clean global state around each test.

Conveyor reads ``CONVEYOR_*`` variables (plugin allow/block lists, strict mode, preferences), so a
variable left in the developer's shell would silently change what the tests exercise; the suite
refuses to start instead. Grad mode, profilers, observers and the default plugin host are process
or thread state that a failing test could leave behind; the autouse fixture puts them back.
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
