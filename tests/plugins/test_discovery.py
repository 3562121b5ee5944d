"""Discovery: entry points are scanned lazily, once per host, sorted and de-duplicated."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from conveyor.plugins import PluginState

from .environment import PluginEnvironment


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts ``importlib.metadata.entry_points`` calls (the group of each call)."""
    calls: list[str] = []
    original: Callable[..., Any] = importlib.metadata.entry_points

    def counting(**params: Any) -> Any:
        calls.append(params.get("group", ""))
        return original(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    return calls


class TestLazyDiscovery:
    def test_creating_a_host_scans_nothing(
        self, plugin_env: PluginEnvironment, scans: list[str]
    ) -> None:
        """A new host reads no metadata and imports no plugin until it is queried."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
        plugin_env.host()
        assert scans == []
        assert not plugin_env.imported("alpha")

    def test_first_query_scans_once(self, plugin_env: PluginEnvironment, scans: list[str]) -> None:
        """Queries after the first reuse the cached scan."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
        host = plugin_env.host()
        host.plugins()
        host.carriers()
        host.carrier("alpha")
        assert scans == [plugin_env.group]

    def test_concurrent_first_queries_scan_once(
        self, plugin_env: PluginEnvironment, scans: list[str]
    ) -> None:
        """Threads racing on the first query share one scan."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
        host = plugin_env.host()
        barrier = threading.Barrier(8)
        results: list[object] = []

        def query() -> None:
            barrier.wait()
            results.append(host.carrier("alpha"))

        threads = [threading.Thread(target=query) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert scans == [plugin_env.group]
        assert len(results) == 8 and len(set(map(id, results))) == 1

    def test_import_conveyor_scans_no_entry_points(self) -> None:
        """``import conveyor`` reads no entry points and imports no plugin module."""
        code = (
            "import importlib.metadata as m, sys\n"
            "calls = []\n"
            "original = m.entry_points\n"
            "m.entry_points = lambda *a, **k: calls.append(k) or original(*a, **k)\n"
            "import conveyor, conveyor.plugins\n"
            "print(len(calls), sorted(n for n in sys.modules if n.startswith('conveyor_')))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "0 []"

    def test_refresh_rescans_and_finds_new_distributions(
        self, plugin_env: PluginEnvironment, scans: list[str]
    ) -> None:
        """``refresh()`` drops the cache and sees a distribution installed since."""
        plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
        host = plugin_env.host()
        assert [r.name for r in host.plugins()] == ["alpha"]
        plugin_env.plugin("beta", carriers={"beta": "Beta"})
        assert [r.name for r in host.plugins()] == ["alpha"]
        host.refresh()
        assert [r.name for r in host.plugins()] == ["alpha", "beta"]
        assert sorted(host.carriers()) == ["alpha", "beta"]
        assert scans == [plugin_env.group, plugin_env.group]


class TestOrderAndDuplicates:
    def test_plugins_are_sorted_by_distribution_then_entry_point(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Listing order does not depend on sys.path or installation order."""
        plugin_env.plugin("zeta", distribution="b-dist")
        plugin_env.plugin("beta", distribution="a-dist")
        plugin_env.plugin("alpha", distribution="b-dist")
        records = plugin_env.host().plugins()
        assert [(r.distribution, r.name) for r in records] == [
            ("a-dist", "beta"),
            ("b-dist", "alpha"),
            ("b-dist", "zeta"),
        ]

    def test_identical_entry_points_are_merged(self, plugin_env: PluginEnvironment) -> None:
        """An entry point listed twice by one distribution (editable installs) loads once."""
        module = plugin_env.plugin("alpha", distribution="cvt-alpha", carriers={"alpha": "A"})
        plugin_env.entry_point("cvt-alpha", "alpha", module)
        text = next(plugin_env.site.glob("cvt_alpha-*.dist-info")).joinpath("entry_points.txt")
        assert text.read_text().count(f"alpha = {module}") == 2
        records = plugin_env.host().plugins()
        assert [(r.name, r.state) for r in records] == [("alpha", PluginState.LOADED)]

    def test_distribution_on_two_paths_is_listed_once(
        self, plugin_env: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same distribution found twice on sys.path is one plugin (the first wins)."""
        plugin_env.plugin("alpha", carriers={"alpha": "A"})
        copy = plugin_env.site.parent / "copy"
        copy.mkdir()
        for folder in plugin_env.site.glob("*.dist-info"):
            target = copy / folder.name
            target.mkdir()
            for file in folder.iterdir():
                target.joinpath(file.name).write_text(file.read_text())
        monkeypatch.syspath_prepend(str(copy))
        records = plugin_env.host().plugins()
        assert [(r.name, r.state) for r in records] == [("alpha", PluginState.LOADED)]

    def test_same_name_with_another_target_is_reported(self, plugin_env: PluginEnvironment) -> None:
        """One distribution naming two targets for one entry point is ambiguous, so reported."""
        plugin_env.plugin("alpha", distribution="cvt-dup", carriers={"alpha": "A"})
        other = plugin_env.write_module("other", "")
        plugin_env.entry_point("cvt-dup", "alpha", other)
        records = plugin_env.host().plugins()
        assert [r.state for r in records] == [PluginState.LOADED, PluginState.BROKEN]
        assert "declares entry point 'alpha' twice" in (records[1].error or "")
        assert other in (records[1].error or "")
        assert not plugin_env.imported("other")

    def test_record_carries_distribution_metadata(self, plugin_env: PluginEnvironment) -> None:
        """Records name the distribution, its version and the entry point target."""
        module = plugin_env.plugin("alpha", distribution="Cvt_Alpha", version="2.5")
        (record,) = plugin_env.host().plugins()
        assert (record.name, record.distribution, record.version) == ("alpha", "Cvt_Alpha", "2.5")
        assert record.entry_point == module
        assert record.api_version == "1.0"

    def test_no_plugins_is_an_empty_listing(self, plugin_env: PluginEnvironment) -> None:
        """A group with no entry points gives no records and no carriers."""
        host = plugin_env.host()
        assert host.plugins() == ()
        assert dict(host.carriers()) == {}
