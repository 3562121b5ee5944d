"""Loading: every plugin ends in exactly one state, and a failing plugin never stops the others."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import conveyor.engine.profiling
from conveyor.engine.carrier import Carrier
from conveyor.plugins import PluginRecord, PluginState

from .environment import PluginEnvironment


def _only(records: tuple[PluginRecord, ...], name: str) -> PluginRecord:
    (found,) = [r for r in records if r.name == name]
    return found


class TestLoaded:
    def test_loaded_plugin_contributes_its_carriers(self, plugin_env: PluginEnvironment) -> None:
        """A good plugin is loaded and its classes are registered under their names."""
        module = plugin_env.plugin("alpha", carriers={"alpha": "Alpha", "alpha_fast": "Fast"})
        host = plugin_env.host()
        (record,) = host.plugins()
        assert record.state is PluginState.LOADED
        assert record.carriers == ("alpha", "alpha_fast")
        assert (record.error, record.traceback, record.hook) == (None, None, None)
        cls = host.carrier("alpha")
        assert issubclass(cls, Carrier)
        assert (cls.__module__, cls.__name__) == (module, "Alpha")

    def test_collection_hooks_are_gathered_in_plugin_order(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Definitions and routes are collected per plugin, in listing order."""
        source = """
        import conveyor as cv


        class {name}_a(Carrier):
            pass


        class {name}_b(Carrier):
            pass


        @hookimpl
        def conveyor_operation_definitions():
            return [cv.OperationDefinition(name="{name}.op", roles=("input",), resolve=print)]

        @hookimpl
        def conveyor_move_routes():
            return iter([
                cv.MoveRoute(source={name}_a, destination={name}_b, copy=print),
                cv.MoveRoute(source={name}_b, destination={name}_a, copy=print),
            ])
        """
        plugin_env.plugin("beta", source.format(name="beta"))
        plugin_env.plugin("alpha", source.format(name="alpha"))
        host = plugin_env.host()
        assert [d.name for d in host.operation_definitions()] == ["alpha.op", "beta.op"]
        routes = [f"{r.source.__name__}->{r.destination.__name__}" for r in host.move_routes()]
        assert routes == [
            "alpha_a->alpha_b",
            "alpha_b->alpha_a",
            "beta_a->beta_b",
            "beta_b->beta_a",
        ]

    def test_module_attribute_entry_point_reads_api_from_module(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """``module:object`` entry points register the object; the API is declared by the module."""
        source = """
        class Hooks:
            @staticmethod
            @hookimpl
            def conveyor_carriers():
                return {"gamma": Gamma}

        class Gamma(Carrier):
            pass
        """
        plugin_env.plugin("gamma", source, attribute="Hooks")
        host = plugin_env.host()
        assert host.plugins()[0].state is PluginState.LOADED
        assert host.carrier("gamma").__name__ == "Gamma"

    def test_plugin_without_hooks_loads_with_nothing(self, plugin_env: PluginEnvironment) -> None:
        """A plugin may implement no hook at all."""
        plugin_env.plugin("empty")
        (record,) = plugin_env.host().plugins()
        assert (record.state, record.carriers) == (PluginState.LOADED, ())


class TestBroken:
    def test_import_error_is_broken_with_traceback(self, plugin_env: PluginEnvironment) -> None:
        """An import failure is kept with its traceback and names the way to block the plugin."""
        plugin_env.plugin("bad", "raise ImportError('needs libfoo')", distribution="cvt-bad")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert record.error is not None
        assert "plugin 'bad' of distribution 'cvt-bad'" in record.error
        assert "raised ImportError: needs libfoo" in record.error
        assert "CONVEYOR_DISABLE_PLUGINS=bad" in record.error
        assert record.traceback is not None and "ImportError: needs libfoo" in record.traceback
        assert record.hook is None

    def test_broken_plugin_never_stops_the_others(self, plugin_env: PluginEnvironment) -> None:
        """Plugins before and after a broken one still load."""
        plugin_env.plugin("a_good", carriers={"first": "First"})
        plugin_env.plugin("b_bad", "1 / 0")
        plugin_env.plugin("c_good", carriers={"second": "Second"})
        host = plugin_env.host()
        states = [(r.name, r.state) for r in host.plugins()]
        assert states == [
            ("a_good", PluginState.LOADED),
            ("b_bad", PluginState.BROKEN),
            ("c_good", PluginState.LOADED),
        ]
        assert sorted(host.carriers()) == ["first", "second"]

    def test_exit_at_import_is_broken(self, plugin_env: PluginEnvironment) -> None:
        """A plugin calling sys.exit while imported cannot stop the host."""
        plugin_env.plugin("exits", "import sys\nsys.exit(3)")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert "raised SystemExit: 3" in (record.error or "")

    def test_missing_module_is_broken(self, plugin_env: PluginEnvironment) -> None:
        """An entry point naming a module that does not exist is broken."""
        plugin_env.entry_point("cvt-ghost", "ghost", "cvt_no_such_module_anywhere")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert "ModuleNotFoundError" in (record.error or "")

    def test_hook_error_is_broken_and_contributes_nothing(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A failing hook breaks the whole plugin: its other contributions are dropped too."""
        source = """
        @hookimpl
        def conveyor_move_routes():
            raise RuntimeError("route table corrupt")
        """
        plugin_env.plugin("half", source, distribution="cvt-half", carriers={"half": "Half"})
        host = plugin_env.host()
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_move_routes"
        assert record.carriers == ()
        assert (
            "plugin 'half' of distribution 'cvt-half': hook conveyor_move_routes raised "
            "RuntimeError: route table corrupt" in (record.error or "")
        )
        assert "route table corrupt" in (record.traceback or "")
        assert dict(host.carriers()) == {}

    def test_broken_hooks_are_unregistered(self, plugin_env: PluginEnvironment) -> None:
        """After a hook failure the plugin's hooks are gone from the manager."""
        source = """
        @hookimpl
        def conveyor_kernel_packs():
            raise RuntimeError("no")
        """
        plugin_env.plugin("half", source, carriers={"half": "Half"})
        host = plugin_env.host()
        host.plugins()
        manager = host._scan().manager
        assert manager.get_plugins() == set()

    @pytest.mark.parametrize(
        ("source", "hook", "expected"),
        [
            (
                "@hookimpl\ndef conveyor_carrier():\n    return {}",
                "conveyor_carrier",
                "implements unknown hook 'conveyor_carrier'; Conveyor hooks are conveyor_carriers",
            ),
            (
                "@hookimpl\ndef conveyor_carriers(device):\n    return {}",
                "conveyor_carriers",
                "hook conveyor_carriers takes arguments ['device']; Conveyor hooks take none",
            ),
            (
                "@hookimpl(wrapper=True)\ndef conveyor_carriers():\n    return (yield)",
                "conveyor_carriers",
                "is declared as a wrapper",
            ),
        ],
        ids=["unknown-hook", "arguments", "wrapper"],
    )
    def test_invalid_hook_implementation_is_broken_at_registration(
        self, plugin_env: PluginEnvironment, source: str, hook: str, expected: str
    ) -> None:
        """Hook implementations are validated when registered, before any hook runs."""
        plugin_env.plugin("odd", source, distribution="cvt-odd")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == hook
        assert record.error is not None
        assert record.error.startswith("plugin 'odd' of distribution 'cvt-odd': ")
        assert expected in record.error

    def test_second_entry_point_for_one_module_is_broken(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Two entry points loading one module: the second is refused, the first works."""
        module = plugin_env.plugin("alpha", distribution="cvt-a", carriers={"alpha": "A"})
        plugin_env.entry_point("cvt-b", "again", module)
        records = plugin_env.host().plugins()
        assert [r.state for r in records] == [PluginState.LOADED, PluginState.BROKEN]
        assert "is already loaded as plugin 'cvt-a:alpha'" in (records[1].error or "")


class TestCarrierValidation:
    @pytest.mark.parametrize(
        ("returned", "expected"),
        [
            ("[Good]", "returned [<class"),
            ("{'Bad Name': Good}", "carrier name 'Bad Name' is not a lower-case identifier"),
            ("{'CPU': Good}", "register it as e.g. 'cpu'"),
            ("{3: Good}", "carrier name 3 is not a lower-case identifier"),
            ("{'inst': Good()}", "'inst' maps to <"),
            ("{'num': int}", "'num' maps to <class 'int'> (type), which is not a conveyor.Carrier"),
            ("None", "returned None (NoneType); return a mapping"),
        ],
        ids=["list", "space", "upper", "not-str", "instance", "not-carrier", "none"],
    )
    def test_bad_carrier_contribution_is_broken(
        self, plugin_env: PluginEnvironment, returned: str, expected: str
    ) -> None:
        """Each contributed entry must be a lower-case name mapped to a Carrier subclass."""
        source = f"""
        class Good(Carrier):
            pass

        @hookimpl
        def conveyor_carriers():
            return {returned}
        """
        plugin_env.plugin("vet", source, distribution="cvt-vet")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_carriers"
        message = record.error or ""
        assert message.startswith("plugin 'vet' of distribution 'cvt-vet': hook conveyor_carriers")
        assert expected in message

    def test_failure_while_reading_the_result_is_the_plugins(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A generator hook failing mid-iteration breaks only that plugin, naming the hook."""
        source = """
        @hookimpl
        def conveyor_move_routes():
            yield "first"
            raise KeyError("second")
        """
        plugin_env.plugin("gen", source)
        plugin_env.plugin("ok", carriers={"ok": "Ok"})
        host = plugin_env.host()
        gen = _only(host.plugins(), "gen")
        assert (gen.state, gen.hook) == (PluginState.BROKEN, "conveyor_move_routes")
        assert "raised KeyError: 'second'" in (gen.error or "")
        assert host.move_routes() == ()
        assert list(host.carriers()) == ["ok"]

    def test_mapping_that_fails_is_the_plugins(self, plugin_env: PluginEnvironment) -> None:
        """A carriers mapping whose items() raises breaks the plugin, not the host."""
        source = """
        import collections.abc

        class Odd(collections.abc.Mapping):
            def __getitem__(self, key):
                raise LookupError(key)

            def __iter__(self):
                raise RuntimeError("cannot list carriers")

            def __len__(self):
                return 1

        @hookimpl
        def conveyor_carriers():
            return Odd()
        """
        plugin_env.plugin("odd", source)
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert "raised RuntimeError: cannot list carriers" in (record.error or "")

    @pytest.mark.parametrize(
        ("returned", "expected"),
        [("None", "returned None (NoneType); return a list"), ("'abc'", "returned 'abc' (str)")],
    )
    def test_collection_hook_must_return_a_list(
        self, plugin_env: PluginEnvironment, returned: str, expected: str
    ) -> None:
        """A collection hook returning None or a string is a plugin bug, reported as such."""
        source = f"@hookimpl\ndef conveyor_kernel_packs():\n    return {returned}\n"
        plugin_env.plugin("packs", source)
        (record,) = plugin_env.host().plugins()
        assert (record.state, record.hook) == (PluginState.BROKEN, "conveyor_kernel_packs")
        assert expected in (record.error or "")


class TestUnavailable:
    def test_unavailable_at_import(self, plugin_env: PluginEnvironment) -> None:
        """PluginUnavailable at import marks the plugin unavailable with its own message."""
        plugin_env.plugin("metalish", "raise PluginUnavailable('Metal needs macOS')")
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.UNAVAILABLE
        assert record.error == "plugin 'metalish' of distribution 'cvt-metalish': Metal needs macOS"
        assert record.hook is None

    def test_unavailable_in_hook(self, plugin_env: PluginEnvironment) -> None:
        """PluginUnavailable from a hook names the hook and drops the plugin's contributions."""
        source = """
        @hookimpl
        def conveyor_carriers():
            raise PluginUnavailable("no GPU found")
        """
        plugin_env.plugin("gpu", source)
        host = plugin_env.host()
        (record,) = host.plugins()
        assert (record.state, record.hook) == (PluginState.UNAVAILABLE, "conveyor_carriers")
        assert record.error is not None and record.error.endswith(
            "hook conveyor_carriers: no GPU found"
        )
        assert dict(host.carriers()) == {}


class TestObservers:
    @pytest.fixture
    def observed(self, monkeypatch: pytest.MonkeyPatch) -> list[Callable[[object], None]]:
        """Replaces ``conveyor.engine.profiling.add_observer`` with a recorder returning a
        remover."""
        installed: list[Callable[[object], None]] = []

        def add_observer(callback: Callable[[object], None]) -> Callable[[], None]:
            installed.append(callback)
            return lambda: installed.remove(callback)

        monkeypatch.setattr(conveyor.engine.profiling, "add_observer", add_observer)
        return installed

    def test_observers_are_installed_and_removed_on_refresh(
        self, plugin_env: PluginEnvironment, observed: list[Callable[[object], None]]
    ) -> None:
        """Observers go to conveyor.engine.profiling once; refresh removes them before a rescan."""
        source = """
        def watch(record):
            pass

        @hookimpl
        def conveyor_operation_observers():
            return [watch]
        """
        module = plugin_env.plugin("watcher", source)
        host = plugin_env.host()
        assert observed == []
        (watch,) = host.observers()
        assert watch.__module__ == module
        assert [guard.observer for guard in observed] == [watch]  # type: ignore[attr-defined]
        host.refresh()
        assert [guard.observer for guard in observed] == [watch]  # type: ignore[attr-defined]
        assert host.observers() == (watch,)

    def test_non_callable_observer_is_broken(
        self, plugin_env: PluginEnvironment, observed: list[Callable[[object], None]]
    ) -> None:
        """Observers must be callable; nothing is installed from a plugin that returns others."""
        source = "@hookimpl\ndef conveyor_operation_observers():\n    return [42]\n"
        plugin_env.plugin("watcher", source)
        (record,) = plugin_env.host().plugins()
        assert record.state is PluginState.BROKEN
        assert "observer 42 (int) is not callable" in (record.error or "")
        assert observed == []

    def test_core_without_add_observer_breaks_only_that_plugin(
        self, plugin_env: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If the core lacks profiling.add_observer, the plugin is broken with a clear message."""
        monkeypatch.delattr(conveyor.engine.profiling, "add_observer")
        source = "@hookimpl\ndef conveyor_operation_observers():\n    return [print]\n"
        plugin_env.plugin("watcher", source, carriers={"watched": "Watched"})
        plugin_env.plugin("other", carriers={"other": "Other"})
        host = plugin_env.host()
        watcher = _only(host.plugins(), "watcher")
        assert watcher.state is PluginState.BROKEN
        assert watcher.hook == "conveyor_operation_observers"
        assert "has no conveyor.engine.profiling.add_observer" in (watcher.error or "")
        assert list(host.carriers()) == ["other"]
        assert host._scan().manager.get_plugin("cvt-watcher:watcher") is None

    def test_plugins_without_observers_never_touch_profiling(
        self, plugin_env: PluginEnvironment, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Only plugins implementing the observer hook reach conveyor.engine.profiling."""
        monkeypatch.delattr(conveyor.engine.profiling, "add_observer")
        plugin_env.plugin("plain", carriers={"plain": "Plain"})
        host = plugin_env.host()
        assert host.plugins()[0].state is PluginState.LOADED
        assert host.observers() == ()
