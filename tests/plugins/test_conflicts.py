"""Carrier name conflicts: reported, resolved deterministically, and overridable by the user."""

from __future__ import annotations

import warnings

import pytest

from conveyor.plugins import PluginConflictWarning, PluginState

from .environment import PluginEnvironment


@pytest.fixture
def clash(plugin_env: PluginEnvironment) -> PluginEnvironment:
    """Distributions cvt-zulu and cvt-alpha both register carrier "dup"."""
    plugin_env.plugin("zulu", distribution="cvt-zulu", carriers={"dup": "Zulu", "z": "Z"})
    plugin_env.plugin("alpha", distribution="cvt-alpha", carriers={"dup": "Alpha"})
    return plugin_env


class TestConflicts:
    def test_conflict_warns_and_first_distribution_wins(self, clash: PluginEnvironment) -> None:
        """Without a preference, the lexicographically first distribution provides the name."""
        host = clash.host()
        with pytest.warns(PluginConflictWarning) as caught:
            carriers = host.carriers()
        assert len(caught) == 1
        assert caught[0].filename == __file__
        assert carriers["dup"].__name__ == "Alpha"
        assert carriers["z"].__name__ == "Z"
        assert host.provider("dup").distribution == "cvt-alpha"
        message = str(caught[0].message)
        assert message.startswith("carrier name 'dup' is claimed by cvt-alpha (plugin 'alpha', ")
        assert "cvt-zulu (plugin 'zulu', " in message
        assert "using cvt-alpha (first distribution by name)" in message
        assert "choose with CONVEYOR_PREFER=dup=<distribution>" in message

    def test_conflict_is_recorded_on_both_plugins(self, clash: PluginEnvironment) -> None:
        """Both claimants' records carry the conflict; both stay loaded."""
        with pytest.warns(PluginConflictWarning):
            records = clash.host().plugins()
        assert [r.state for r in records] == [PluginState.LOADED, PluginState.LOADED]
        assert records[0].conflicts == records[1].conflicts
        assert len(records[0].conflicts) == 1
        assert records[1].carriers == ("dup", "z")

    def test_host_lists_conflicts_by_name(self, clash: PluginEnvironment) -> None:
        """conflicts() maps each contested name to its message."""
        host = clash.host()
        with pytest.warns(PluginConflictWarning):
            conflicts = host.conflicts()
        assert list(conflicts) == ["dup"]

    def test_preference_argument_wins(self, clash: PluginEnvironment) -> None:
        """prefer= chooses the provider; the warning still reports the conflict and the reason."""
        host = clash.host(prefer={"DUP": "CVT_Zulu"})
        with pytest.warns(PluginConflictWarning, match=r"using cvt-zulu \(preferred by Plugin"):
            assert host.carrier("dup").__name__ == "Zulu"

    def test_preference_from_environment(
        self, clash: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONVEYOR_PREFER=name=distribution chooses the provider."""
        monkeypatch.setenv("CONVEYOR_PREFER", "dup=cvt-zulu, other=x")
        host = clash.host()
        with pytest.warns(PluginConflictWarning, match="preferred by CONVEYOR_PREFER"):
            assert host.carrier("dup").__name__ == "Zulu"

    def test_preference_for_a_non_claimant_falls_back_and_says_so(
        self, clash: PluginEnvironment
    ) -> None:
        """A preference naming a distribution that does not provide the name is reported."""
        host = clash.host(prefer={"dup": "cvt-missing"})
        with pytest.warns(PluginConflictWarning, match="prefers 'cvt-missing', which does not"):
            assert host.carrier("dup").__name__ == "Alpha"

    def test_resolution_is_stable_across_refreshes(self, clash: PluginEnvironment) -> None:
        """Rescanning resolves the same way and reports the conflict again."""
        host = clash.host()
        with pytest.warns(PluginConflictWarning):
            first = host.carrier("dup")
        with pytest.warns(PluginConflictWarning):
            host.refresh()
        assert host.carrier("dup") is first

    def test_same_class_from_two_plugins_is_no_conflict(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Re-exporting the identical class under the same name leaves nothing to choose."""
        module = plugin_env.plugin("base", carriers={"shared": "Shared"})
        source = f"""
        from {module} import Shared

        @hookimpl
        def conveyor_carriers():
            return {{"shared": Shared}}
        """
        plugin_env.plugin("reexport", source)
        host = plugin_env.host()
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginConflictWarning)
            assert host.carrier("shared").__module__ == module
        assert host.conflicts() == {}


_CARRIER_PLUGIN = """
from conveyor.engine.carrier import Carrier
from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


class {cls}(Carrier):
    pass


@hookimpl
def conveyor_carriers():
    return {{{name!r}: {cls}}}
"""


@pytest.fixture
def same_entry_point(plugin_env: PluginEnvironment) -> PluginEnvironment:
    """Distributions cvt-ours and cvt-theirs both declare entry point "shared"."""
    for distribution, carrier in (("cvt-theirs", "theirs"), ("cvt-ours", "ours")):
        source = _CARRIER_PLUGIN.format(cls=carrier.title(), name=carrier)
        module = plugin_env.write_module(carrier, source)
        plugin_env.entry_point(distribution, "shared", module)
    return plugin_env


class TestEntryPointNameClashes:
    """Two distributions declaring one entry-point name: reported as a conflict naming both."""

    MESSAGE = (
        "entry point name 'shared' is declared by cvt-ours ({ours}) and cvt-theirs ({theirs}); "
        "an allow- or block-list entry naming 'shared' (CONVEYOR_PLUGINS, "
        "CONVEYOR_DISABLE_PLUGINS, allow=, block=) selects all of them; name the distribution "
        "instead, e.g. CONVEYOR_DISABLE_PLUGINS=cvt-theirs"
    )

    def message(self, env: PluginEnvironment) -> str:
        return self.MESSAGE.format(ours=env.module_name("ours"), theirs=env.module_name("theirs"))

    def test_clash_warns_and_is_on_both_records(self, same_entry_point: PluginEnvironment) -> None:
        """Both still load (each under its distribution); the warning and records name both."""
        host = same_entry_point.host()
        with pytest.warns(PluginConflictWarning) as caught:
            records = host.plugins()

        assert [str(w.message) for w in caught] == [self.message(same_entry_point)]
        assert [(r.distribution, r.state) for r in records] == [
            ("cvt-ours", PluginState.LOADED),
            ("cvt-theirs", PluginState.LOADED),
        ]
        assert records[0].conflicts == records[1].conflicts == (self.message(same_entry_point),)
        assert dict(host.entry_point_conflicts()) == {"shared": self.message(same_entry_point)}
        assert host.conflicts() == {}  # no carrier name is contested

    def test_blocking_by_distribution_keeps_the_other(
        self, same_entry_point: PluginEnvironment
    ) -> None:
        """The remedy the message names works: block one distribution, the other loads."""
        host = same_entry_point.host(block=["cvt-theirs"])
        with pytest.warns(PluginConflictWarning):
            states = {r.distribution: r.state for r in host.plugins()}
        assert states == {"cvt-ours": PluginState.LOADED, "cvt-theirs": PluginState.DISABLED}
        assert sorted(host.carriers()) == ["ours"]

    def test_blocking_the_shared_name_disables_both_and_says_so(
        self, same_entry_point: PluginEnvironment
    ) -> None:
        """Blocking the entry-point name disables every claimant: the hazard the message names,
        recorded on both records although neither was imported."""
        host = same_entry_point.host(block=["shared"])
        with pytest.warns(PluginConflictWarning):
            records = host.plugins()
        assert [r.state for r in records] == [PluginState.DISABLED] * 2  # the hazard, reported
        assert all(r.conflicts == (self.message(same_entry_point),) for r in records)

    def test_one_distribution_per_name_is_no_clash(self, plugin_env: PluginEnvironment) -> None:
        """Distinct entry-point names report nothing."""
        plugin_env.plugin("one", carriers={"one": "One"})
        plugin_env.plugin("two", carriers={"two": "Two"})
        host = plugin_env.host()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            records = host.plugins()
        assert host.entry_point_conflicts() == {}
        assert all(r.conflicts == () for r in records)
