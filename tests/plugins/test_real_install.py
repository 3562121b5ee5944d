"""Real installs: throw-away plugin distributions pip-installed into a fresh virtual environment.

One virtual environment serves the whole module (building and installing is the slow part). It
has no pip of its own: a ``.pth`` file makes the outer environment's packages (conveyor, numpy,
pluggy, setuptools) importable, and the outer pip installs into it with ``--python``. Every check
then runs ``conveyor`` in a subprocess of that environment, exactly as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from .fresh_venv import fresh_venv

pytestmark = pytest.mark.slow

_GOOD = """
import conveyor as cv
from conveyor.engine.carrier import Carrier
from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


class RealGood(Carrier):
    \"\"\"A list-backed sibling carrier: enough storage to be used by name.\"\"\"

    @classmethod
    def _allocate(cls, size, dtype, **kwargs):
        carrier = cls()
        carrier._slots = [0.0] * size
        carrier._dt = dtype
        return carrier

    def _storage_size(self):
        return len(self._slots)

    def _storage_dtype(self):
        return self._dt

    def _read(self, index):
        return self._slots[index]

    def _write(self, index, value):
        self._slots[index] = value


@hookimpl
def conveyor_carriers():
    return {"cvt_real_good": RealGood}
"""

_CLASH = """
from conveyor.engine.carrier import Carrier
from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


class {cls}(Carrier):
    pass


@hookimpl
def conveyor_carriers():
    return {{"cvt_real_clash": {cls}}}
"""

# distribution -> (entry point name, module source)
_DISTRIBUTIONS: Mapping[str, tuple[str, str]] = {
    "cvt-real-good": ("cvt_real_good", _GOOD),
    "cvt-real-broken": (
        "cvt_real_broken",
        'CONVEYOR_PLUGIN_API = "1.0"\nraise ImportError("cvt_real_broken needs libmissing")\n',
    ),
    "cvt-real-unavailable": (
        "cvt_real_unavailable",
        "from conveyor.plugins import PluginUnavailable\n"
        'CONVEYOR_PLUGIN_API = "1.0"\n'
        'raise PluginUnavailable("cvt_real_unavailable needs an accelerator")\n',
    ),
    "cvt-real-future": ("cvt_real_future", 'CONVEYOR_PLUGIN_API = "2.0"\n'),
    "cvt-real-clash-a": ("cvt_real_clash_a", _CLASH.format(cls="ClashA")),
    "cvt-real-clash-b": ("cvt_real_clash_b", _CLASH.format(cls="ClashB")),
}


def _write_distribution(root: Path, distribution: str, entry: str, source: str) -> Path:
    folder = root / distribution
    folder.mkdir()
    module = f"{entry}_plugin"
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{distribution}"
            version = "0.3.0"

            [project.entry-points."conveyor.plugins"]
            {entry} = "{module}"

            [tool.setuptools]
            py-modules = ["{module}"]
            """
        )
    )
    return folder


class _Environment:
    """The throw-away virtual environment and how to run Python in it."""

    def __init__(self, python: Path) -> None:
        self.python = python

    def run(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the environment's Python with a clean environment plus ``env``."""
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("CONVEYOR_") and k != "PYTHONPATH"
        }
        clean.update(env or {})
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=clean, timeout=120
        )

    def plugins(self, **env: str) -> dict[str, dict[str, Any]]:
        """``conveyor plugins --json`` in the environment, keyed by plugin name."""
        done = self.run("-m", "conveyor.cli", "plugins", "--json", env=env)
        assert done.returncode == 0, done.stderr
        return {p["name"]: p for p in json.loads(done.stdout)["plugins"]}


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> _Environment:
    """A fresh venv with every throw-away distribution installed by pip."""
    root = tmp_path_factory.mktemp("real-install")
    sources = root / "src"
    sources.mkdir()
    folders = [
        _write_distribution(sources, dist, entry, source)
        for dist, (entry, source) in _DISTRIBUTIONS.items()
    ]
    python = fresh_venv(root, folders)
    return _Environment(python)


@pytest.fixture(scope="module")
def listing(environment: _Environment) -> dict[str, dict[str, Any]]:
    """The default listing of the environment, computed once."""
    return environment.plugins()


class TestRealInstall:
    def test_installed_plugin_is_discovered_and_listed(
        self, listing: dict[str, dict[str, Any]]
    ) -> None:
        """`conveyor plugins --json` lists the installed distribution as loaded."""
        good = listing["cvt_real_good"]
        assert good["state"] == "loaded"
        assert (good["distribution"], good["version"]) == ("cvt-real-good", "0.3.0")
        assert good["carriers"] == ["cvt_real_good"]
        assert good["entry_point"] == "cvt_real_good_plugin"

    def test_installed_carrier_is_usable_by_name(self, environment: _Environment) -> None:
        """The default host finds the carrier by name and it stores data."""
        code = (
            "import conveyor as cv, conveyor.plugins as p\n"
            "cls = p.host().carrier(' CVT_Real_Good ')\n"
            "c = cls.allocate(3, cv.float32)\n"
            "c.write(1, 2.5)\n"
            "print(cls.__module__, cls.__name__, c.size, c.read(1))\n"
        )
        done = environment.run("-c", code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["cvt_real_good_plugin", "RealGood", "3", "2.5"]

    def test_installed_plugin_is_blockable(self, environment: _Environment) -> None:
        """CONVEYOR_DISABLE_PLUGINS disables it, and its module is never imported."""
        listing = environment.plugins(CONVEYOR_DISABLE_PLUGINS="cvt-real-good")
        assert listing["cvt_real_good"]["state"] == "disabled"
        assert "CONVEYOR_DISABLE_PLUGINS='cvt-real-good'" in listing["cvt_real_good"]["error"]
        code = (
            "import sys, conveyor.plugins as p\n"
            "p.host().plugins()\n"
            "print('cvt_real_good_plugin' in sys.modules)\n"
        )
        done = environment.run("-c", code, env={"CONVEYOR_DISABLE_PLUGINS": "cvt_real_good"})
        assert done.stdout.strip() == "False", done.stderr

    def test_empty_allow_list_loads_nothing(self, environment: _Environment) -> None:
        """CONVEYOR_PLUGINS= (empty) disables every plugin."""
        listing = environment.plugins(CONVEYOR_PLUGINS="")
        assert {p["state"] for p in listing.values()} == {"disabled"}

    def test_plugin_whose_import_raises_is_broken(self, listing: dict[str, dict[str, Any]]) -> None:
        """The import error is listed with its traceback; the others still load."""
        broken = listing["cvt_real_broken"]
        assert broken["state"] == "broken"
        assert "cvt_real_broken needs libmissing" in broken["error"]
        assert "ImportError: cvt_real_broken needs libmissing" in broken["traceback"]
        assert listing["cvt_real_good"]["state"] == "loaded"

    def test_plugin_raising_unavailable(self, listing: dict[str, dict[str, Any]]) -> None:
        """PluginUnavailable at import gives the unavailable state with the plugin's reason."""
        record = listing["cvt_real_unavailable"]
        assert record["state"] == "unavailable"
        assert record["error"].endswith("cvt_real_unavailable needs an accelerator")

    def test_plugin_with_incompatible_api(self, listing: dict[str, dict[str, Any]]) -> None:
        """API 2.0 is refused with the versions this core loads."""
        record = listing["cvt_real_future"]
        assert record["state"] == "incompatible"
        assert record["api_version"] == "2.0"
        assert "loads plugins declaring 1.0" in record["error"]

    def test_two_distributions_claiming_one_name(
        self, environment: _Environment, listing: dict[str, dict[str, Any]]
    ) -> None:
        """Both are loaded and carry the conflict; the first name wins unless preferred."""
        a, b = listing["cvt_real_clash_a"], listing["cvt_real_clash_b"]
        assert a["state"] == b["state"] == "loaded"
        assert a["conflicts"] == b["conflicts"] and len(a["conflicts"]) == 1
        code = "import conveyor.plugins as p\nprint(p.host().carrier('cvt_real_clash').__name__)\n"
        done = environment.run("-c", code)
        assert done.stdout.strip() == "ClashA"
        assert "PluginConflictWarning: carrier name 'cvt_real_clash'" in done.stderr
        preferred = environment.run(
            "-c", code, env={"CONVEYOR_PREFER": "cvt_real_clash=cvt-real-clash-b"}
        )
        assert preferred.stdout.strip() == "ClashB"

    def test_exit_status_follows_strict_mode(self, environment: _Environment) -> None:
        """`conveyor plugins` exits 0 with a broken plugin, 1 when strict mode is on."""
        lenient = environment.run("-m", "conveyor.cli", "plugins")
        assert lenient.returncode == 0
        assert "cvt_real_broken" in lenient.stdout
        strict = environment.run(
            "-m", "conveyor.cli", "plugins", env={"CONVEYOR_STRICT_PLUGINS": "1"}
        )
        assert strict.returncode == 1
        assert "cvt_real_broken" in strict.stdout

    def test_doctor_runs_in_the_environment(self, environment: _Environment) -> None:
        """`conveyor doctor` reports the broken plugin with the way to block it, status 1."""
        done = environment.run("-m", "conveyor.cli", "doctor")
        assert done.returncode == 1, done.stderr  # problems found
        assert "fix: fix or block it with CONVEYOR_DISABLE_PLUGINS=cvt_real_broken" in done.stdout
