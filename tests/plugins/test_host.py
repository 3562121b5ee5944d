"""The host's query API, the default host, and the public surface of ``conveyor.plugins``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pluggy
import pytest

import conveyor.plugins
from conveyor.plugins import (
    PLUGIN_API_VERSION,
    PluginConflictWarning,
    PluginError,
    PluginHost,
    PluginRecord,
    PluginState,
    PluginUnavailable,
    host,
    set_default_host,
)
from conveyor.types.warnings import ConveyorWarning

from .environment import PluginEnvironment


class TestCarrierLookup:
    def test_name_is_canonicalised(self, plugin_env: PluginEnvironment) -> None:
        """Lookup ignores case and surrounding space."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
        h = plugin_env.host()
        assert h.carrier("  ALPHA ") is h.carrier("alpha")

    def test_unknown_name_lists_known_names(self, plugin_env: PluginEnvironment) -> None:
        """An unknown name is a ValueError listing what is registered."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha", "beta": "Beta"})
        with pytest.raises(ValueError) as info:
            plugin_env.host().carrier("gpu")
        assert str(info.value) == (
            "unknown carrier 'gpu'; known carriers: 'alpha', 'beta'; install the distribution "
            "that provides it"
        )

    def test_unknown_name_points_at_plugins_that_did_not_load(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """When some plugin failed, the message says which and to run `conveyor plugins`."""
        plugin_env.plugin("bad", "raise ValueError('x')")
        plugin_env.plugin("gpu", "raise PluginUnavailable('no')")
        with pytest.raises(ValueError) as info:
            plugin_env.host().carrier("metal")
        assert str(info.value) == (
            "unknown carrier 'metal'; known carriers: none; 2 plugin(s) did not load: "
            "bad (broken), gpu (unavailable); run `conveyor plugins`"
        )

    def test_non_string_name_is_a_type_error(self, plugin_env: PluginEnvironment) -> None:
        """Names are strings; a class or number is refused with its type."""
        with pytest.raises(TypeError, match=r"got 3 \(int\)"):
            plugin_env.host().carrier(3)  # type: ignore[arg-type]  # deliberately wrong

    def test_carriers_mapping_is_read_only_and_sorted(self, plugin_env: PluginEnvironment) -> None:
        """The registry cannot be changed through the returned mapping."""
        plugin_env.plugin("p", carriers={"zed": "Zed", "abc": "Abc"})
        carriers = plugin_env.host().carriers()
        assert list(carriers) == ["abc", "zed"]
        with pytest.raises(TypeError):
            carriers["new"] = object  # type: ignore[index]  # deliberately wrong

    def test_provider_names_the_plugin(self, plugin_env: PluginEnvironment) -> None:
        """provider() gives the record of the plugin that registered the name."""
        plugin_env.plugin("p", distribution="cvt-prov", carriers={"abc": "Abc"})
        record = plugin_env.host().provider("ABC")
        assert (record.name, record.distribution) == ("p", "cvt-prov")

    def test_repr_says_whether_scanned(self, plugin_env: PluginEnvironment) -> None:
        """The repr shows group, strictness and whether discovery ran."""
        h = plugin_env.host()
        assert repr(h) == f"<PluginHost group={plugin_env.group!r} strict=False: not scanned>"
        h.plugins()
        assert repr(h).endswith(": 0 plugins>")


class TestDefaultHost:
    def test_default_host_is_created_once(self) -> None:
        """host() returns one lazily created host, also across threads."""
        seen: list[PluginHost] = []
        threads = [threading.Thread(target=lambda: seen.append(host())) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(h) for h in seen}) == 1
        assert host() is seen[0]
        assert host().group == "conveyor.plugins"

    def test_set_default_host_swaps_and_returns_previous(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A host application installs its own host; None resets to a fresh default."""
        first = host()
        mine = plugin_env.host(allow=[])
        assert set_default_host(mine) is first
        assert host() is mine
        assert set_default_host(None) is mine
        assert host() is not mine

    def test_set_default_host_refuses_other_objects(self) -> None:
        """Only a PluginHost (or None) can become the default."""
        with pytest.raises(TypeError, match="expects a PluginHost or None"):
            set_default_host("host")  # type: ignore[arg-type]  # deliberately wrong

    def test_default_host_reads_environment_when_created(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The default host takes its options from the environment at creation."""
        monkeypatch.setenv("CONVEYOR_STRICT_PLUGINS", "yes")
        assert host().strict


class TestPublicSurface:
    @pytest.mark.parametrize(
        "name",
        [
            "ENVIRONMENT_VARIABLES",
            "PLUGIN_API_VERSION",
            "PluginBrokenWarning",
            "PluginConflictWarning",
            "PluginError",
            "PluginHost",
            "PluginNamespaceWarning",
            "PluginRecord",
            "PluginState",
            "PluginUnavailable",
            "hookimpl",
            "hookspec",
            "host",
            "set_default_host",
        ],
    )
    def test_public_name_is_exported(self, name: str) -> None:
        """Each public name is listed in __all__ and importable."""
        assert name in conveyor.plugins.__all__
        assert hasattr(conveyor.plugins, name)

    def test_all_is_sorted(self) -> None:
        """__all__ is kept sorted (isort style: constants, classes, functions)."""
        assert conveyor.plugins.__all__ == sorted(conveyor.plugins.__all__)

    def test_markers_use_the_conveyor_project(self) -> None:
        """hookimpl/hookspec are pluggy markers for the project name "conveyor"."""
        assert isinstance(conveyor.plugins.hookimpl, pluggy.HookimplMarker)
        assert isinstance(conveyor.plugins.hookspec, pluggy.HookspecMarker)
        assert conveyor.plugins.hookimpl.project_name == "conveyor"

    def test_api_version_and_environment_constants(self) -> None:
        """The API version is (major, minor); every environment variable is in one tuple."""
        assert PLUGIN_API_VERSION == (1, 0)
        assert conveyor.plugins.ENVIRONMENT_VARIABLES == (
            "CONVEYOR_PLUGINS",
            "CONVEYOR_DISABLE_PLUGINS",
            "CONVEYOR_STRICT_PLUGINS",
            "CONVEYOR_PREFER",
            "CONVEYOR_PLUGIN_IMPORT_TIMEOUT",
            "CONVEYOR_PLUGIN_IMPORT_PROBE",
        )

    def test_exception_and_warning_tree(self) -> None:
        """Errors subclass RuntimeError; the conflict warning is a ConveyorWarning."""
        assert issubclass(PluginError, RuntimeError)
        assert issubclass(PluginUnavailable, RuntimeError)
        assert not issubclass(PluginUnavailable, PluginError)
        assert issubclass(PluginConflictWarning, ConveyorWarning)
        assert issubclass(conveyor.plugins.PluginBrokenWarning, ConveyorWarning)
        assert conveyor.plugins.PluginBrokenWarning.__module__ == "conveyor.plugins"
        assert issubclass(ConveyorWarning, UserWarning)
        assert ConveyorWarning.__module__ == "conveyor"
        assert PluginConflictWarning.__module__ == "conveyor.plugins"
        assert PluginError.__module__ == "conveyor.plugins"

    def test_states_compare_as_strings(self) -> None:
        """PluginState members equal their names, so JSON and comparisons need no mapping."""
        assert [str(s) for s in PluginState] == [
            "loaded",
            "disabled",
            "unavailable",
            "incompatible",
            "broken",
        ]
        state: str = PluginState.BROKEN
        assert state == "broken"

    def test_records_are_frozen(self) -> None:
        """A PluginRecord cannot be modified."""
        record = PluginRecord("n", "d", "1", "m", PluginState.LOADED)
        with pytest.raises(AttributeError):
            record.state = PluginState.BROKEN  # type: ignore[misc]  # deliberately wrong


class TestSuiteGuard:
    def test_suite_refuses_to_start_with_conveyor_variables(self) -> None:
        """A CONVEYOR_* variable in the environment stops the test run before any test."""
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "CONVEYOR_DISABLE_PLUGINS": "generic"}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
            capture_output=True,
            text=True,
            cwd=root,
            env=env,
            timeout=120,
        )
        assert done.returncode == pytest.ExitCode.USAGE_ERROR
        assert "CONVEYOR_DISABLE_PLUGINS" in done.stderr
        assert "passed" not in done.stdout
