"""The metal plugin off macOS: unavailable with its reason, and nothing heavy imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import conveyor as cv
from conveyor.plugins import PluginHost
from conveyor_metal import Metal
from conveyor_metal._platform import REASON, unavailable_reason

pytestmark = pytest.mark.skipif(
    unavailable_reason() is None, reason="checks the plugin where Metal cannot run"
)


class TestUnavailablePlugin:
    """Off macOS arm64 the plugin is ``unavailable`` (never ``broken``) with the reason."""

    def test_host_lists_metal_unavailable_with_reason(self) -> None:
        host = PluginHost(allow=["metal", "generic"], strict=True)
        (record,) = [r for r in host.plugins() if r.name == "metal"]
        assert record.state.value == "unavailable"
        assert REASON in (record.error or "")
        assert "metal" not in host.carriers()

    def test_conveyor_plugins_command_shows_unavailable(self) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "conveyor.cli", "plugins", "--json"],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        (row,) = [r for r in json.loads(done.stdout)["plugins"] if r["name"] == "metal"]
        assert row["state"] == "unavailable"
        assert REASON in row["error"]

    def test_allocate_off_macos_raises_runtime_error_with_reason(self) -> None:
        with pytest.raises(RuntimeError, match=f"allocate on Metal: {REASON}"):
            Metal.allocate(4, cv.float32)


_BLOCKER = textwrap.dedent(
    """
    import sys

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "tilelang", "tvm"):
                raise ImportError(f"blocked import of {name}")
            return None

    sys.meta_path.insert(0, Blocker())
    import conveyor as cv
    import conveyor_metal
    x = cv.tensor([1.0, 2.0], carrier="cpu")
    assert (x + x).numpy().tolist() == [2.0, 4.0]
    states = {r.name: r.state.value for r in cv.plugins.host().plugins()}
    assert states["metal"] == "unavailable", states
    heavy = [m for m in sys.modules if m.split(".")[0] in ("torch", "tilelang", "tvm")]
    assert not heavy, heavy
    print("clean")
    """
)


class TestLazyImports:
    """Importing conveyor (and conveyor_metal) or computing on CPU imports no torch/tilelang."""

    def test_cpu_work_with_import_blocker_imports_nothing_heavy(self) -> None:
        done = subprocess.run(
            [sys.executable, "-c", _BLOCKER], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "clean"
