"""Options: allow/block lists act before import, strict mode, and the plugin API handshake."""

from __future__ import annotations

import pytest

from conveyor.plugins import PluginError, PluginHost, PluginState
from conveyor.plugins import _load as load_module

from .environment import PluginEnvironment


@pytest.fixture
def three(plugin_env: PluginEnvironment) -> PluginEnvironment:
    """Plugins alpha, beta (distribution Cvt_Beta) and gamma, each with one carrier."""
    plugin_env.plugin("alpha", carriers={"alpha": "Alpha"})
    plugin_env.plugin("beta", distribution="Cvt_Beta", carriers={"beta": "Beta"})
    plugin_env.plugin("gamma", carriers={"gamma": "Gamma"})
    return plugin_env


def _states(host: PluginHost) -> dict[str, PluginState]:
    return {r.name: r.state for r in host.plugins()}


class TestBlockList:
    def test_blocked_plugin_is_disabled_and_never_imported(self, three: PluginEnvironment) -> None:
        """A blocked plugin's module is not imported at all."""
        host = three.host(block=["beta"])
        assert _states(host) == {
            "alpha": PluginState.LOADED,
            "beta": PluginState.DISABLED,
            "gamma": PluginState.LOADED,
        }
        assert not three.imported("beta")
        assert three.imported("alpha")
        beta = host.plugins()[1]
        assert beta.error is not None
        assert "disabled by PluginHost(block=['beta']), which names 'beta'" in beta.error
        assert beta.api_version is None and beta.carriers == ()

    def test_block_by_distribution_name_in_any_spelling(self, three: PluginEnvironment) -> None:
        """Distribution names compare in canonical form (case, -, _ and . are equivalent)."""
        host = three.host(block=["cvt.BETA"])
        assert _states(host)["beta"] is PluginState.DISABLED
        assert not three.imported("beta")

    def test_block_list_from_environment_names_the_variable(
        self, three: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONVEYOR_DISABLE_PLUGINS blocks, and the message names the variable."""
        monkeypatch.setenv("CONVEYOR_DISABLE_PLUGINS", " alpha , gamma")
        host = three.host()
        assert _states(host)["alpha"] is PluginState.DISABLED
        assert _states(host)["gamma"] is PluginState.DISABLED
        assert "CONVEYOR_DISABLE_PLUGINS=' alpha , gamma'" in (host.plugins()[0].error or "")
        assert not three.imported("alpha") and not three.imported("gamma")

    def test_argument_wins_over_environment(
        self, three: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An explicit block argument replaces the variable instead of adding to it."""
        monkeypatch.setenv("CONVEYOR_DISABLE_PLUGINS", "alpha")
        host = three.host(block=[])
        assert set(_states(host).values()) == {PluginState.LOADED}


class TestAllowList:
    def test_only_allowed_plugins_are_imported(self, three: PluginEnvironment) -> None:
        """Plugins not on the allow-list are disabled and never imported."""
        host = three.host(allow=["gamma", "cvt-beta"])
        assert _states(host) == {
            "alpha": PluginState.DISABLED,
            "beta": PluginState.LOADED,
            "gamma": PluginState.LOADED,
        }
        assert not three.imported("alpha")
        message = host.plugins()[0].error or ""
        assert "the allow-list does not name it; add 'alpha' to load it" in message

    def test_empty_allow_list_from_environment_loads_none(
        self, three: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONVEYOR_PLUGINS set to the empty string loads no plugin."""
        monkeypatch.setenv("CONVEYOR_PLUGINS", "")
        host = three.host()
        assert set(_states(host).values()) == {PluginState.DISABLED}
        assert "CONVEYOR_PLUGINS='': an empty allow-list loads no plugin" in (
            host.plugins()[0].error or ""
        )
        assert not any(three.imported(n) for n in ("alpha", "beta", "gamma"))

    def test_allow_list_from_environment(
        self, three: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONVEYOR_PLUGINS=a,b loads exactly those."""
        monkeypatch.setenv("CONVEYOR_PLUGINS", "alpha,beta")
        assert _states(three.host())["gamma"] is PluginState.DISABLED

    def test_block_list_wins_over_allow_list(self, three: PluginEnvironment) -> None:
        """Blocking is how a user silences a broken plugin, whatever else is configured."""
        host = three.host(allow=["alpha"], block=["alpha"])
        record = host.plugins()[0]
        assert record.state is PluginState.DISABLED
        assert "PluginHost(block=['alpha'])" in (record.error or "")

    def test_unmatched_entries_are_reported(self, three: PluginEnvironment) -> None:
        """A list entry that names no installed plugin is probably a typo; notes say so."""
        host = three.host(allow=["alpha", "alhpa"], block=["nope"])
        assert host.notes() == (
            "PluginHost(allow=['alhpa', 'alpha']) names 'alhpa', which no plugin is called",
            "PluginHost(block=['nope']) names 'nope', which no plugin is called",
        )


class TestMalformedOptions:
    @pytest.mark.parametrize(
        ("options", "error", "expected"),
        [
            ({"allow": "alpha"}, TypeError, "pass a list such as ['alpha']"),
            ({"block": [3]}, TypeError, "plugin names are strings, got 3 (int)"),
            ({"strict": "yes"}, TypeError, "PluginHost(strict=...): expected True or False"),
            ({"prefer": ["cpu"]}, TypeError, "expected a mapping of carrier name to distribution"),
            (
                {"import_timeout": "5"},
                TypeError,
                "PluginHost(import_timeout=...): expected seconds",
            ),
            (
                {"import_timeout": 0},
                ValueError,
                "PluginHost(import_timeout=...): expected seconds > 0",
            ),
        ],
    )
    def test_bad_argument_is_refused_at_construction(
        self, options: dict[str, object], error: type[Exception], expected: str
    ) -> None:
        """A malformed argument fails when the host is created, naming the argument."""
        with pytest.raises(error) as info:
            PluginHost(**options)  # type: ignore[arg-type]  # deliberately wrong types
        assert expected in str(info.value)

    @pytest.mark.parametrize(
        ("variable", "value", "expected"),
        [
            ("CONVEYOR_STRICT_PLUGINS", "maybe", "CONVEYOR_STRICT_PLUGINS='maybe' is not a switch"),
            ("CONVEYOR_PREFER", "cpu", "CONVEYOR_PREFER='cpu': 'cpu' is not carrier=distribution"),
            (
                "CONVEYOR_PLUGIN_IMPORT_TIMEOUT",
                "soon",
                "CONVEYOR_PLUGIN_IMPORT_TIMEOUT='soon' is not a number of seconds > 0",
            ),
        ],
    )
    def test_bad_variable_is_refused_at_construction(
        self, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
    ) -> None:
        """A malformed environment variable fails with ValueError naming it."""
        monkeypatch.setenv(variable, value)
        with pytest.raises(ValueError, match="is not") as info:
            PluginHost()
        assert expected in str(info.value)


class TestPreferNames:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (
                "cpu=a=b",
                "CONVEYOR_PREFER='cpu=a=b': 'a=b' is not a distribution name (letters, digits and "
                ". _ -, as pip spells it); write e.g. CONVEYOR_PREFER=cpu=conveyor-generic",
            ),
            (
                "cpu=conveyor-generic,my gpu=vendor",
                "CONVEYOR_PREFER='cpu=conveyor-generic,my gpu=vendor': 'my gpu' is not a carrier "
                "name (a lower-case identifier such as 'cpu'); write e.g. "
                "CONVEYOR_PREFER=cpu=conveyor-generic",
            ),
            (
                "cpu=-dist",
                "CONVEYOR_PREFER='cpu=-dist': '-dist' is not a distribution name (letters, digits "
                "and . _ -, as pip spells it); write e.g. CONVEYOR_PREFER=cpu=conveyor-generic",
            ),
        ],
    )
    def test_malformed_preference_value_error_at_construction(
        self, monkeypatch: pytest.MonkeyPatch, value: str, expected: str
    ) -> None:
        """A preference naming no possible carrier or distribution is refused, not ignored."""
        monkeypatch.setenv("CONVEYOR_PREFER", value)
        with pytest.raises(ValueError) as info:
            PluginHost()
        assert str(info.value) == expected

    def test_malformed_preference_argument_value_error(self) -> None:
        """The prefer= argument is held to the same names, with the argument's example."""
        with pytest.raises(ValueError) as info:
            PluginHost(prefer={"cpu": "a=b"})
        assert str(info.value) == (
            "PluginHost(prefer=...): 'a=b' is not a distribution name (letters, digits and . _ -, "
            "as pip spells it); write e.g. prefer={'cpu': 'conveyor-generic'}"
        )

    def test_well_formed_preferences_are_canonicalised(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Case, spaces and pip's spellings of a distribution still name one preference."""
        monkeypatch.setenv("CONVEYOR_PREFER", " CPU = Conveyor_Generic ,file=conveyor.storage")
        config = PluginHost()._config
        assert dict(config.prefer) == {"cpu": "conveyor-generic", "file": "conveyor-storage"}


class TestProbeSwitch:
    def test_probe_is_off_unless_asked_for(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Probing costs a second import of every plugin, so it is opt-in (variable or argument,
        the argument winning)."""
        assert PluginHost()._config.probe_imports is False
        monkeypatch.setenv("CONVEYOR_PLUGIN_IMPORT_PROBE", "1")
        assert PluginHost()._config.probe_imports is True
        assert PluginHost(probe_imports=False)._config.probe_imports is False

    def test_malformed_probe_switch_is_refused_naming_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with pytest.raises(TypeError) as info:
            PluginHost(probe_imports="yes")  # type: ignore[arg-type]  # the point of the test
        assert str(info.value) == "PluginHost(probe_imports=...): expected True or False, got 'yes'"
        monkeypatch.setenv("CONVEYOR_PLUGIN_IMPORT_PROBE", "sometimes")
        with pytest.raises(ValueError) as error:
            PluginHost()
        assert str(error.value) == (
            "CONVEYOR_PLUGIN_IMPORT_PROBE='sometimes' is not a switch; set it to 1 (probe) or 0 "
            "(import directly)"
        )


class TestStrictMode:
    def test_strict_query_raises_for_a_broken_plugin(self, plugin_env: PluginEnvironment) -> None:
        """Strict mode turns the first broken plugin into PluginError naming it."""
        plugin_env.plugin("good", carriers={"good": "Good"})
        plugin_env.plugin("hooky", "@hookimpl\ndef conveyor_kernel_packs():\n    1 / 0\n")
        host = plugin_env.host(strict=True)
        assert host.strict
        with pytest.raises(PluginError) as info:
            host.carriers()
        error = info.value
        assert isinstance(error, RuntimeError)
        assert (error.distribution, error.entry_point, error.hook) == (
            "cvt-hooky",
            "hooky",
            "conveyor_kernel_packs",
        )
        assert "hook conveyor_kernel_packs raised ZeroDivisionError" in str(error)
        assert str(error).endswith("(strict plugin mode is on)")
        assert isinstance(error.__cause__, ZeroDivisionError)
        with pytest.raises(PluginError):
            host.carrier("good")

    def test_strict_listing_still_works(self, plugin_env: PluginEnvironment) -> None:
        """plugins() is the diagnostic view and never raises, even in strict mode."""
        plugin_env.plugin("bad", "raise ValueError('x')")
        host = plugin_env.host(strict=True)
        assert host.plugins()[0].state is PluginState.BROKEN
        host.refresh()
        assert host.conflicts() == {}

    def test_strict_import_error_has_no_hook(self, plugin_env: PluginEnvironment) -> None:
        """A failure at import carries hook None."""
        plugin_env.plugin("bad", "raise ValueError('x')")
        with pytest.raises(PluginError) as info:
            plugin_env.host(strict=True).carriers()
        assert (info.value.entry_point, info.value.hook) == ("bad", None)
        assert isinstance(info.value.__cause__, ValueError)

    def test_strict_from_environment_and_incompatible(
        self, plugin_env: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CONVEYOR_STRICT_PLUGINS=1 is strict, and incompatible plugins are failures too."""
        monkeypatch.setenv("CONVEYOR_STRICT_PLUGINS", "1")
        plugin_env.plugin("future", api="2.0")
        host = plugin_env.host()
        assert host.strict
        with pytest.raises(PluginError, match=r"written for plugin API 2\.0"):
            host.move_routes()

    def test_unavailable_and_disabled_are_not_failures(self, plugin_env: PluginEnvironment) -> None:
        """Missing hardware or a blocked plugin is expected, even in strict mode."""
        plugin_env.plugin("gpu", "raise PluginUnavailable('no GPU')")
        plugin_env.plugin("off", "raise ValueError('never imported')")
        plugin_env.plugin("ok", carriers={"ok": "Ok"})
        host = plugin_env.host(strict=True, block=["off"])
        assert list(host.carriers()) == ["ok"]

    def test_lenient_by_default(self, plugin_env: PluginEnvironment) -> None:
        """Without strict mode, a broken plugin only shows in its record."""
        plugin_env.plugin("bad", "raise ValueError('x')")
        host = plugin_env.host()
        assert not host.strict
        assert dict(host.carriers()) == {}


class TestApiHandshake:
    def test_missing_declaration_is_incompatible(self, plugin_env: PluginEnvironment) -> None:
        """A plugin that does not declare its API version is refused, saying what to add."""
        plugin_env.plugin("old", carriers={"old": "Old"}, api=None)
        host = plugin_env.host()
        (record,) = host.plugins()
        assert record.state is PluginState.INCOMPATIBLE
        assert record.api_version is None
        assert "does not declare CONVEYOR_PLUGIN_API" in (record.error or "")
        assert "loads plugins declaring 1.0" in (record.error or "")
        assert 'add CONVEYOR_PLUGIN_API = "1.0"' in (record.error or "")
        assert dict(host.carriers()) == {}

    def test_newer_major_is_incompatible_and_hooks_never_run(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """API 2.0 on a 1.0 host: refused before its hooks run, naming the matching versions."""
        source = """
        @hookimpl
        def conveyor_carriers():
            raise AssertionError("hooks of an incompatible plugin must not run")
        """
        plugin_env.plugin("future", source, distribution="cvt-future", api="2.0")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.INCOMPATIBLE
        assert record.api_version == "2.0"
        assert record.error == (
            "plugin 'future' of distribution 'cvt-future': written for plugin API 2.0, but this "
            "conveyor-core speaks plugin API 1.0 and loads plugins declaring 1.0; upgrade "
            "conveyor-core to one that speaks plugin API 2.0, or block it with "
            "CONVEYOR_DISABLE_PLUGINS=future"
        )
        assert record.traceback is None

    @pytest.mark.parametrize("declared", ["1.1", "0.9"])
    def test_newer_minor_or_older_major_is_incompatible(
        self, plugin_env: PluginEnvironment, declared: str
    ) -> None:
        """A newer minor needs hooks this host lacks; an older major used a removed contract."""
        plugin_env.plugin("p", api=declared)
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.INCOMPATIBLE
        fix = "upgrade conveyor-core" if declared == "1.1" else "install a release of cvt-p"
        assert fix in (record.error or "")

    @pytest.mark.parametrize("declared", ["one", "1", 1.0, "1.0.0"])
    def test_malformed_declaration_is_incompatible(
        self, plugin_env: PluginEnvironment, declared: object
    ) -> None:
        """The declaration must be a "MAJOR.MINOR" string."""
        plugin_env.plugin("p", api=declared)
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.INCOMPATIBLE
        assert 'is not a "MAJOR.MINOR" string' in (record.error or "")

    def test_older_minor_loads_on_a_newer_host(
        self, plugin_env: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A 1.3 host loads plugins written for 1.0 to 1.3, and says so when refusing 1.4."""
        monkeypatch.setattr(load_module, "PLUGIN_API_VERSION", (1, 3))
        plugin_env.plugin("a", api="1.0")
        plugin_env.plugin("b", api="1.3")
        plugin_env.plugin("c", api="1.4")
        records = plugin_env.host().plugins()
        assert [r.state for r in records] == [
            PluginState.LOADED,
            PluginState.LOADED,
            PluginState.INCOMPATIBLE,
        ]
        assert "loads plugins declaring 1.0 to 1.3" in (records[2].error or "")
