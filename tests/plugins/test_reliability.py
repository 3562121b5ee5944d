"""A broken plugin never takes the host or another plugin down.

Each scenario writes throw-away plugins (real dist-info folders on ``sys.path``) that misbehave in
one way: interrupting or exiting, raising from an observer, taking over a shipped carrier name,
contributing bad routes or kernel packs, querying the host while imported, printing at import.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.cli import main
from conveyor.engine import profiling
from conveyor.plugins import (
    PluginBrokenWarning,
    PluginConflictWarning,
    PluginHost,
    PluginState,
    set_default_host,
)
from conveyor_generic import CPU

from . import test_contributed_extensions as extensions
from .environment import PluginEnvironment

SUBPROCESS_TIMEOUT_S = 120
move_module = importlib.import_module(
    "conveyor.engine.move"
)  # ``conveyor.engine.move`` is also a function


def _by_name(host: PluginHost) -> dict[str, Any]:
    return {r.name: r for r in host.plugins()}


def _counting(path: Path) -> str:
    """Module source that appends one line to ``path`` each time the module is executed."""
    return f"with open({str(path)!r}, 'a') as _count:\n    _count.write('imported\\n')\n"


def _imports(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class Source(cv.Carrier):
    """Route endpoints shared by the plugins of one test (looked up through this module)."""


class Destination(cv.Carrier):
    pass


def _route_source(copy: str = "print") -> str:
    return textwrap.dedent(
        f"""
        import sys

        import conveyor as cv

        _HERE = sys.modules[{__name__!r}]


        @hookimpl
        def conveyor_move_routes():
            return [cv.MoveRoute(source=_HERE.Source, destination=_HERE.Destination, copy={copy})]
        """
    )


@pytest.fixture
def clean_routes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty registered-route table and merge cache for this test only."""
    monkeypatch.setattr(move_module, "_registered", {})
    monkeypatch.setattr(move_module, "_merged", None)
    yield
    move_module._merged = None


@pytest.fixture
def forget_targets() -> Iterator[None]:
    yield
    extensions.TARGETS.clear()


class TestInterruptsAndExits:
    def test_keyboard_interrupt_at_import_stops_scan_once_then_host_usable(
        self, plugin_env: PluginEnvironment, tmp_path: Path
    ) -> None:
        """Ctrl-C in a plugin import stops the scan once; the host then answers from it."""
        count = tmp_path / "interrupting.count"
        plugin_env.plugin("a_good", carriers={"good": "Good"})
        plugin_env.plugin("b_interrupting", _counting(count) + "raise KeyboardInterrupt\n")
        plugin_env.plugin("c_later", carriers={"later": "Later"})
        host = plugin_env.host()

        with pytest.raises(KeyboardInterrupt):
            host.plugins()

        records = _by_name(host)  # no second KeyboardInterrupt, no second import
        assert _imports(count) == 1
        assert records["a_good"].state is PluginState.LOADED
        assert records["b_interrupting"].state is PluginState.BROKEN
        assert "raised KeyboardInterrupt" in (records["b_interrupting"].error or "")
        assert records["c_later"].state is PluginState.BROKEN
        assert not plugin_env.imported("c_later")
        assert records["c_later"].error == (
            "plugin 'c_later' of distribution 'cvt-c_later': not loaded, because the scan "
            "stopped when importing plugin 'b_interrupting' of distribution "
            "'cvt-b_interrupting' was interrupted (KeyboardInterrupt); call refresh() to load it"
        )
        assert list(host.carriers()) == ["good"]
        assert _imports(count) == 1

    @pytest.mark.parametrize("kind", ["SystemExit(4)", "KeyboardInterrupt", "GeneratorExit"])
    def test_base_exception_in_hook_marks_plugin_broken(
        self, plugin_env: PluginEnvironment, kind: str
    ) -> None:
        """Every BaseException kind from a hook is contained: the plugin is broken, named."""
        source = f"@hookimpl\ndef conveyor_carriers():\n    raise {kind}\n"
        plugin_env.plugin("raiser", source)
        plugin_env.plugin("zz_other", carriers={"other": "Other"})
        host = plugin_env.host()
        try:
            host.plugins()
        except KeyboardInterrupt:  # only KeyboardInterrupt stops the scan, once
            assert kind == "KeyboardInterrupt"
        record = _by_name(host)["raiser"]
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_carriers"
        assert f"hook conveyor_carriers raised {kind.split('(')[0]}" in (record.error or "")


class TestObserverFailures:
    @pytest.mark.parametrize(
        "kind", ["SystemExit(3)", "KeyboardInterrupt", "GeneratorExit", "ValueError('bad')"]
    )
    def test_observer_raising_breaks_its_plugin_not_the_program(
        self, plugin_env: PluginEnvironment, tmp_path: Path, kind: str
    ) -> None:
        """An observer raising any kind is contained: the operation succeeds, the plugin breaks."""
        calls = tmp_path / "observer.calls"
        source = f"""
        def watch(record):
            with open({str(calls)!r}, "a") as out:
                out.write("called\\n")
            raise {kind}

        @hookimpl
        def conveyor_operation_observers():
            return [watch]
        """
        plugin_env.plugin("watcher", source, carriers={"watched": "Watched"})
        plugin_env.plugin("zz_other", carriers={"other": "Other"})
        host = plugin_env.host()
        set_default_host(host)
        before = len(profiling._observers)
        assert host.plugins()[0].state is PluginState.LOADED
        assert len(profiling._observers) == before + 1
        x = cv.tensor([1.0, 2.0], carrier=CPU)

        with pytest.warns(PluginBrokenWarning, match=r"observer .*watch.* raised"):
            result = cv.add(x, x)

        np.testing.assert_array_equal(result.numpy(), [2.0, 4.0])
        record = _by_name(host)["watcher"]
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_operation_observers"
        assert f"raised {kind.split('(')[0]}" in (record.error or "")
        assert "its contributions are withdrawn" in (record.error or "")
        assert record.carriers == ()
        assert list(host.carriers()) == ["other"]  # everything the plugin contributed is gone
        assert host.observers() == ()
        assert len(profiling._observers) == before
        cv.add(x, x)
        assert _imports(calls) == 1  # the broken observer is never called again


class TestShippedNames:
    def test_third_party_cannot_take_over_shipped_carrier_name(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A name a shipped distribution registers stays with it; the claimant is broken."""
        plugin_env.plugin("generic", distribution="conveyor-generic", carriers={"cpu": "Cpu"})
        plugin_env.plugin("evil", distribution="aaa-evil", carriers={"cpu": "Evil", "evil": "Evil"})
        host = plugin_env.host()
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginConflictWarning)
            records = _by_name(host)
        assert host.carrier("cpu").__module__ == plugin_env.module_name("generic")
        assert records["generic"].state is PluginState.LOADED
        evil = records["evil"]
        assert evil.state is PluginState.BROKEN
        assert evil.hook == "conveyor_carriers"
        assert evil.error == (
            "plugin 'evil' of distribution 'aaa-evil': hook conveyor_carriers: carrier name "
            "'cpu' belongs to conveyor-generic, which ships with Conveyor, and aaa-evil may not "
            "take it over; rename the carrier, or choose it with CONVEYOR_PREFER=cpu=aaa-evil"
        )
        assert "evil" not in host.carriers()  # a plugin contributes everything or nothing
        assert host.conflicts() == {}

    def test_preference_gives_shipped_name_to_another_distribution(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """CONVEYOR_PREFER (here prefer=) is how a user hands a shipped name to another one."""
        plugin_env.plugin("generic", distribution="conveyor-generic", carriers={"cpu": "Cpu"})
        plugin_env.plugin("fast", distribution="zz-fast", carriers={"cpu": "Fast"})
        host = plugin_env.host(prefer={"cpu": "zz-fast"})
        with pytest.warns(PluginConflictWarning, match="preferred by"):
            records = _by_name(host)
        assert host.carrier("cpu").__module__ == plugin_env.module_name("fast")
        assert {r.state for r in records.values()} == {PluginState.LOADED}


@pytest.mark.usefixtures("clean_routes")
class TestContributionsValidated:
    def test_duplicate_move_route_breaks_only_the_second_plugin(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Two plugins routing one pair: the second is broken, naming the first; move works."""
        plugin_env.plugin("a_routes", _route_source("print"))
        plugin_env.plugin("b_routes", _route_source("repr"))
        host = plugin_env.host()
        set_default_host(host)
        records = _by_name(host)
        assert records["a_routes"].state is PluginState.LOADED
        second = records["b_routes"]
        assert second.state is PluginState.BROKEN
        assert second.hook == "conveyor_move_routes"
        assert second.error == (
            "plugin 'b_routes' of distribution 'cvt-b_routes': hook conveyor_move_routes: a "
            "route from Source to Destination is also contributed by plugin 'a_routes' of "
            "distribution 'cvt-a_routes'; each pair has exactly one route; fix the plugin or "
            "block it with CONVEYOR_DISABLE_PLUGINS=b_routes"
        )
        (route,) = host.move_routes()
        assert route.copy is print
        assert cv.move_route(Source, Destination) is route

    def test_malformed_move_route_breaks_plugin_and_move_keeps_working(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A route that is no MoveRoute breaks its plugin at load, not every later move."""
        source = "@hookimpl\ndef conveyor_move_routes():\n    return ['not a route']\n"
        plugin_env.plugin("bad_routes", source)
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert "contributed 'not a route' (str); contribute conveyor.MoveRoute records" in (
            record.error or ""
        )
        x = cv.tensor([1.0, 2.0], carrier=CPU)
        np.testing.assert_array_equal(cv.move(x, CPU).numpy(), [1.0, 2.0])

    def test_route_duplicating_registered_route_breaks_plugin(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A contributed pair that register_move_route already holds is refused at load."""
        cv.register_move_route(source=Source, destination=Destination, copy=print)
        plugin_env.plugin("routes", _route_source("repr"))
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert "already registered with register_move_route" in (record.error or "")
        assert cv.move_route(Source, Destination).copy is print

    def test_malformed_kernel_pack_breaks_plugin_not_carriers(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A kernel pack that is no KernelPack, or targets a plain class, breaks its plugin."""
        plugin_env.plugin("a_packs", "@hookimpl\ndef conveyor_kernel_packs():\n    return [42]\n")
        plugin_env.plugin(
            "b_packs",
            """
            import conveyor as cv

            class Plain(Carrier):
                pass

            @hookimpl
            def conveyor_kernel_packs():
                return [cv.KernelPack(name="p", carrier=Plain, patterns=[])]
            """,
        )
        plugin_env.plugin("c_fine", carriers={"fine": "Fine"})
        host = plugin_env.host()
        set_default_host(host)
        records = _by_name(host)
        assert records["a_packs"].state is PluginState.BROKEN
        assert "contributed 42 (int); contribute conveyor.KernelPack records" in (
            records["a_packs"].error or ""
        )
        assert records["b_packs"].state is PluginState.BROKEN
        assert "kernel pack 'p': Plain is not definition-backed" in (records["b_packs"].error or "")
        assert host.kernel_packs() == ()
        assert list(host.carriers()) == ["fine"]


@pytest.mark.usefixtures("clean_routes")
def _triple_pack_plugin(env: PluginEnvironment, name: str) -> None:
    """A plugin contributing pack ``<name>-pack``: a cvtest_contrib.triple kernel for the target."""
    env.plugin(
        name,
        f"""
        import sys

        import conveyor as cv

        _TARGET = sys.modules[{extensions.__name__!r}].TARGETS[{env.prefix!r}]


        def _triple(ctx):
            raise AssertionError("never run in these tests")


        @hookimpl
        def conveyor_kernel_packs():
            return [
                cv.KernelPack(
                    name="{name}-pack",
                    carrier=_TARGET,
                    patterns=[cv.KernelPattern(operation="cvtest_contrib.triple", kernel=_triple)],
                )
            ]
        """,
    )


@pytest.mark.usefixtures("forget_targets")
class TestKernelPackCollisions:
    def test_pack_covering_what_the_class_covers_breaks_plugin(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A pack repeating one of its class's own kernels is refused at load; the class works."""
        kernel = cv.KernelPattern(operation="cvtest_contrib.triple", kernel=print)
        cls = extensions._target(plugin_env, "Covered", (kernel,))
        _triple_pack_plugin(plugin_env, "dup")
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_kernel_packs"
        assert "cvtest_contrib.triple on Covered: two kernels cover it" in (record.error or "")
        assert host.kernel_packs() == ()
        x = cv.tensor([1.0], cv.float64, carrier=cls)  # sealing the class no longer fails
        assert x.carrier.dispatch_op("cvtest_contrib.triple") is not None

    def test_two_plugins_packing_one_kernel_break_the_second_naming_the_first(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Packs from two plugins covering the same operation: the later plugin is broken."""
        extensions._target(plugin_env, "Shared")
        _triple_pack_plugin(plugin_env, "a_first")
        _triple_pack_plugin(plugin_env, "b_second")
        host = plugin_env.host()
        set_default_host(host)
        records = _by_name(host)
        assert records["a_first"].state is PluginState.LOADED
        second = records["b_second"]
        assert second.state is PluginState.BROKEN
        assert (
            "(kernel pack 'b_second-pack' collides with pack 'a_first-pack' of plugin 'a_first' "
            "of distribution 'cvt-a_first')"
        ) in (second.error or "")
        assert [p.name for p in host.kernel_packs()] == ["a_first-pack"]


_PATCHES_AND_RAISES = """
import conveyor as cv
from conveyor.engine import functional

real_add = functional.add


def evil(a, b, **fields):
    return real_add(real_add(a, b), 1)


cv.add = evil
functional.add = evil  # what Tensor.__add__ calls
cv.Tensor.__mul__ = lambda self, other: evil(self, other)
cv.shiny_new_helper = evil
raise RuntimeError("broken after patching")
"""

_REPLACES_EXP = """
import conveyor as cv

real_exp = cv.exp


def louder_exp(x, **fields):
    return real_exp(x, **fields)


cv.exp = louder_exp
"""


@pytest.fixture
def guarded_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """The originals of the names these tests' plugins patch, put back whatever happens."""
    from conveyor.engine import functional

    originals = {
        "cv.add": cv.add,
        "functional.add": functional.add,
        "Tensor.__mul__": cv.Tensor.__dict__["__mul__"],
        "cv.exp": cv.exp,
    }
    monkeypatch.setattr(cv, "add", cv.add)
    monkeypatch.setattr(functional, "add", functional.add)
    monkeypatch.setattr(cv.Tensor, "__mul__", cv.Tensor.__dict__["__mul__"])
    monkeypatch.setattr(cv, "exp", cv.exp)
    yield originals
    vars(cv).pop("shiny_new_helper", None)


class TestNamespaceGuard:
    """A plugin cannot change the conveyor namespace behind the host's back (issue 25 item 6)."""

    def test_broken_plugin_patching_arithmetic_is_undone_with_a_warning(
        self, plugin_env: PluginEnvironment, guarded_names: dict[str, object]
    ) -> None:
        """conveyor.add, functional.add and Tensor.__mul__ replaced by a plugin that then
        raises are restored (and its new name removed): [1, 2] + [10, 20] stays [11, 22]."""
        from conveyor.engine import functional
        from tests.core.carriers import ArrayCarrier

        plugin_env.plugin("patcher", _PATCHES_AND_RAISES)
        host = plugin_env.host()
        with pytest.warns(cv.plugins.PluginNamespaceWarning) as caught:
            (record,) = host.plugins()

        assert record.state is PluginState.BROKEN
        assert [str(w.message) for w in caught] == [
            "plugin 'patcher' of distribution 'cvt-patcher' ended broken after changing "
            "conveyor.add, conveyor.shiny_new_helper, conveyor.Tensor.__mul__, "
            "conveyor.engine.functional.add while it loaded; the originals are restored; fix the "
            "plugin or block it with CONVEYOR_DISABLE_PLUGINS=patcher"
        ]
        assert cv.add is guarded_names["cv.add"]
        assert functional.add is guarded_names["functional.add"]
        assert cv.Tensor.__dict__["__mul__"] is guarded_names["Tensor.__mul__"]
        assert "shiny_new_helper" not in vars(cv)
        a = cv.tensor([1, 2], carrier=ArrayCarrier)
        b = cv.tensor([10, 20], carrier=ArrayCarrier)
        assert (a + b).tolist() == [11, 22]
        assert cv.add(a, b).tolist() == [11, 22]
        assert (a * b).tolist() == [10, 40]

    def test_loaded_plugin_replacing_a_name_is_warned_about_and_keeps_it(
        self, plugin_env: PluginEnvironment, guarded_names: dict[str, object]
    ) -> None:
        """A plugin that loads may keep what it replaced, but never silently."""
        plugin_env.plugin("louder", _REPLACES_EXP, carriers={"louder": "Louder"})
        host = plugin_env.host()
        with pytest.warns(cv.plugins.PluginNamespaceWarning) as caught:
            (record,) = host.plugins()

        assert record.state is PluginState.LOADED
        assert [str(w.message) for w in caught] == [
            "plugin 'louder' of distribution 'cvt-louder' replaced conveyor.exp while it "
            "loaded; the replacements stay while it is loaded and are undone if it breaks; "
            "check the plugin, or block it with CONVEYOR_DISABLE_PLUGINS=louder"
        ]
        assert cv.exp is not guarded_names["cv.exp"]
        assert cv.exp.__name__ == "louder_exp"

    def test_replacement_is_undone_when_the_plugin_breaks_after_loading(
        self, plugin_env: PluginEnvironment, guarded_names: dict[str, object]
    ) -> None:
        """Broken by a cross-plugin check (here: taking a shipped carrier name), the plugin's
        replacement goes with its other contributions."""
        plugin_env.plugin("generic", distribution="conveyor-generic", carriers={"cpu": "Cpu"})
        plugin_env.plugin(
            "taker", _REPLACES_EXP, distribution="aaa-taker", carriers={"cpu": "Taker"}
        )
        host = plugin_env.host()
        with pytest.warns(cv.plugins.PluginNamespaceWarning) as caught:
            records = _by_name(host)

        assert records["taker"].state is PluginState.BROKEN
        assert cv.exp is guarded_names["cv.exp"]
        assert (
            "plugin 'taker' of distribution 'aaa-taker' broke after loading; its changes to "
            "conveyor.exp are undone"
        ) in [str(w.message) for w in caught]

    def test_loading_plugins_that_change_nothing_warns_nothing(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Importing submodules or profiling at import is not a change of the namespace."""
        plugin_env.plugin(
            "quiet",
            "import conveyor.array_api\nimport conveyor as cv\nwith cv.profile():\n    pass\n",
            carriers={"quiet": "Quiet"},
        )
        host = plugin_env.host()
        with warnings.catch_warnings():
            warnings.simplefilter("error", cv.plugins.PluginNamespaceWarning)
            (record,) = host.plugins()
        assert record.state is PluginState.LOADED


@pytest.mark.usefixtures("clean_routes")
class TestBrokenPluginRollback:
    _REGISTERS_AT_IMPORT = textwrap.dedent(
        f"""
        import sys

        import conveyor as cv

        _HERE = sys.modules[{__name__!r}]
        cv.register_move_route(source=_HERE.Source, destination=_HERE.Destination, copy=print)
        """
    )

    def test_route_registered_at_import_is_withdrawn_when_a_hook_fails(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A plugin broken by a hook leaves no route it registered while imported."""
        source = self._REGISTERS_AT_IMPORT + (
            "@hookimpl\ndef conveyor_carriers():\n    raise ValueError('late failure')\n"
        )
        plugin_env.plugin("half", source)
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_carriers"  # imported fine: the route was registered
        with pytest.raises(NotImplementedError, match="no move route joins these carriers"):
            cv.move_route(Source, Destination)

    def test_route_registered_at_import_is_withdrawn_when_plugin_breaks_later(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """Losing a shipped carrier name (a break after loading) withdraws import-time routes."""
        plugin_env.plugin("generic", distribution="conveyor-generic", carriers={"cpu": "Cpu"})
        plugin_env.plugin(
            "taker", self._REGISTERS_AT_IMPORT, distribution="aaa-taker", carriers={"cpu": "T"}
        )
        host = plugin_env.host()
        set_default_host(host)
        assert _by_name(host)["taker"].state is PluginState.BROKEN
        with pytest.raises(NotImplementedError, match="no move route joins these carriers"):
            cv.move_route(Source, Destination)

    def test_route_registered_at_import_stays_when_plugin_loads(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A plugin that loads keeps what it registered (the journal only undoes failures)."""
        plugin_env.plugin("whole", self._REGISTERS_AT_IMPORT, carriers={"whole": "Whole"})
        host = plugin_env.host()
        set_default_host(host)
        assert host.plugins()[0].state is PluginState.LOADED
        assert cv.move_route(Source, Destination).copy is print

    def test_definitions_made_at_import_are_withdrawn_when_a_hook_fails(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """`define_operation` and `register_carrier_definition` calls made by a plugin's import
        are undone when the plugin ends broken: the name and the class are free again."""
        name = f"{plugin_env.prefix.strip('_')}.op"
        source = textwrap.dedent(
            f"""
            import sys

            import conveyor as cv

            _EXT = sys.modules[{extensions.__name__!r}]
            OP = cv.define_operation({name!r}, roles=("input",), resolve=_EXT._resolve_same)


            class Defined(Carrier):
                pass


            cv.register_carrier_definition(
                Defined, cv.CarrierDefinition(storage=_EXT.STORAGE, kernels=cv.KernelProvider(()))
            )


            @hookimpl
            def conveyor_carriers():
                raise ValueError("late failure")
            """
        )
        module = plugin_env.plugin("defines", source)
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_carriers"  # imported fine: both were registered
        defined = sys.modules[module].Defined
        assert name not in {d.name for d in cv.operation_definitions()}
        assert defined._read is cv.Carrier._read  # the definition's hooks are gone
        again = cv.define_operation(name, roles=("input",), resolve=extensions._resolve_same)
        assert again.name == name
        cv.register_carrier_definition(
            defined, cv.CarrierDefinition(storage=extensions.STORAGE, kernels=cv.KernelProvider(()))
        )

    def test_definition_of_a_plugin_broken_at_run_time_stops_serving_and_names_the_plugin(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A plugin that breaks after it loaded (its observer raised) loses what it registered
        at import: its class no longer allocates and its existing tensors no longer compute,
        each refusal naming the plugin; a move of the data off the carrier still works."""
        source = textwrap.dedent(
            f"""
            import sys

            import conveyor as cv
            from conveyor.sdk import policy_capabilities

            _EXT = sys.modules[{extensions.__name__!r}]


            def _double(ctx):
                (x, y) = ctx.operands
                out = ctx.allocate_result(0)
                out.carrier.import_span(out.layout, x.carrier.export_span(x.layout) * 2)
                return cv.ProviderResult(out)


            class Served(Carrier):
                pass


            cv.register_carrier_definition(
                Served,
                cv.CarrierDefinition(
                    storage=_EXT.STORAGE,
                    kernels=cv.KernelProvider(
                        [
                            cv.KernelPattern(
                                operation="add", kernel=_double, plans=policy_capabilities(["add"])
                            )
                        ]
                    ),
                ),
            )


            def watch(record):
                if record.operation == "neg":
                    raise ValueError("observer bug")


            @hookimpl
            def conveyor_operation_observers():
                return [watch]


            @hookimpl
            def conveyor_carriers():
                return {{"served": Served}}
            """
        )
        plugin_env.plugin("serves", source)
        host = plugin_env.host()
        set_default_host(host)
        assert _by_name(host)["serves"].state is PluginState.LOADED, host.plugins()
        served = host.carrier("served")
        x = cv.move(cv.tensor([1.0, 2.0], carrier=CPU), served)
        for _ in range(3):  # bound on the fast path too
            np.testing.assert_array_equal((x + x).numpy(), [2.0, 4.0])
        with pytest.warns(PluginBrokenWarning, match="observer bug"):
            cv.neg(cv.tensor([1.0], carrier=CPU))
        assert _by_name(host)["serves"].state is PluginState.BROKEN
        with pytest.raises(RuntimeError, match=r"Served.*plugin 'serves'.*broken"):
            served.allocate(2, cv.float32)
        with pytest.raises(RuntimeError, match=r"add on Served.*plugin 'serves'.*broken"):
            x + x
        np.testing.assert_array_equal(cv.move(x, CPU).numpy(), [1.0, 2.0])

    def test_registration_by_another_package_imported_first_stays(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A module of another package that a broken plugin imported first keeps its route:
        only the plugin's own registrations are withdrawn (the module stays imported)."""
        shared = plugin_env.write_module("shared", self._REGISTERS_AT_IMPORT)
        source = (
            f"import {shared}\n@hookimpl\ndef conveyor_carriers():\n    raise ValueError('x')\n"
        )
        plugin_env.plugin("borrower", source)
        host = plugin_env.host()
        set_default_host(host)
        assert host.plugins()[0].state is PluginState.BROKEN
        assert cv.move_route(Source, Destination).copy is print


class TestQueriesDuringImport:
    def test_plugin_creating_tensor_at_import_loads_plugins_once(
        self, plugin_env: PluginEnvironment, tmp_path: Path
    ) -> None:
        """A plugin querying the host while imported is broken; nothing loads twice or leaks."""
        counts = {name: tmp_path / f"{name}.count" for name in ("a_watch", "b_eager", "c_other")}
        plugin_env.plugin(
            "a_watch",
            _counting(counts["a_watch"])
            + "@hookimpl\ndef conveyor_operation_observers():\n    return [print]\n",
        )
        plugin_env.plugin(
            "b_eager", _counting(counts["b_eager"]) + "import conveyor\nconveyor.zeros(3)\n"
        )
        plugin_env.plugin("c_other", _counting(counts["c_other"]), carriers={"other": "Other"})
        host = plugin_env.host()
        set_default_host(host)
        before = len(profiling._observers)

        records = _by_name(host)

        assert {name: _imports(path) for name, path in counts.items()} == {
            "a_watch": 1,
            "b_eager": 1,
            "c_other": 1,
        }
        assert len(profiling._observers) == before + 1
        assert host.observers() == (print,)
        eager = records["b_eager"]
        assert eager.state is PluginState.BROKEN
        assert "raised RuntimeError: plugin host: a plugin queried the host" in (eager.error or "")
        assert records["c_other"].state is PluginState.LOADED
        host.refresh()
        assert len(profiling._observers) == before + 1

    def test_plugins_json_stays_parseable_when_plugin_prints_at_import(
        self, plugin_env: PluginEnvironment, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """What a plugin prints while loading goes to stderr; stdout is one JSON document."""
        source = "import os\nprint('hello from import')\nos.write(1, b'raw bytes on fd 1\\n')\n"
        plugin_env.plugin("chatty", source, carriers={"chatty": "Chatty"})
        set_default_host(plugin_env.host())

        status = main(["plugins", "--json"])

        out, err = capfd.readouterr()
        assert status == 0
        (record,) = json.loads(out)["plugins"]
        assert record["state"] == "loaded"
        assert "hello from import" in err and "raw bytes on fd 1" in err


class TestLoadTimes:
    def test_load_time_is_recorded_and_listed(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Each imported plugin's load time is in its record and in `conveyor plugins`."""
        plugin_env.plugin("slow", "import time\ntime.sleep(0.5)\n", carriers={"slow": "Slow"})
        plugin_env.plugin("quick", carriers={"quick": "Quick"})
        plugin_env.plugin("off", carriers={"off": "Off"})
        host = plugin_env.host(block=["off"])
        set_default_host(host)
        records = _by_name(host)
        assert (records["slow"].load_seconds or 0.0) >= 0.5
        assert 0.0 <= (records["quick"].load_seconds or -1.0) < (records["slow"].load_seconds or 0)
        assert records["off"].load_seconds is None  # never imported

        assert main(["plugins"]) == 0
        lines = capsys.readouterr().out.splitlines()
        load = lines[0].index("LOAD")
        rows = {line.split()[0]: line for line in lines[1:4]}
        assert rows["slow"][load:].startswith(f"{records['slow'].load_seconds:.3f}s")
        assert rows["off"][load:].startswith("-")
        assert lines[-1].startswith("slowest plugin loads: slow 0.")

    def test_no_load_lists_entry_points_without_importing(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`conveyor plugins --no-load` reads metadata only: a hanging plugin is never imported."""
        plugin_env.plugin("hangs", "import time\ntime.sleep(3600)\n")
        plugin_env.plugin("off", carriers={"off": "Off"})
        set_default_host(plugin_env.host(block=["off"]))

        assert main(["plugins", "--no-load"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "ENTRY", "POINT", "STATE"]
        assert lines[1].split() == [
            "hangs",
            "cvt-hangs",
            "1.0",
            plugin_env.module_name("hangs"),
            "not",
            "loaded",
        ]
        assert lines[2].split() == [
            "off",
            "cvt-off",
            "1.0",
            plugin_env.module_name("off"),
            "disabled",
        ]
        assert main(["plugins", "--no-load", "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["loaded"] is False
        assert [e["name"] for e in document["entry_points"]] == ["hangs", "off"]
        assert not plugin_env.imported("hangs") and not plugin_env.imported("off")


class TestExitAtImport:
    """``os._exit`` at import ends the process before Python can contain it: block the plugin."""

    @pytest.fixture
    def site(self, tmp_path: Path) -> Path:
        """A site folder with one plugin in the real group that calls os._exit(17) at import."""
        site = tmp_path / "site"
        (site / "cvt_exits_at_import-1.0.dist-info").mkdir(parents=True)
        (site / "cvt_exits_at_import.py").write_text(
            'CONVEYOR_PLUGIN_API = "1.0"\nimport os\nos._exit(17)\n'
        )
        info = site / "cvt_exits_at_import-1.0.dist-info"
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: cvt-exits-at-import\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text("[conveyor.plugins]\nexits = cvt_exits_at_import\n")
        return site

    def _conveyor(self, site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        clean["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path])
        return subprocess.run(
            [sys.executable, "-m", "conveyor.cli", *args],
            capture_output=True,
            text=True,
            env={**clean, **env},
            timeout=SUBPROCESS_TIMEOUT_S,
        )

    def test_os_exit_at_import_kills_the_scan_but_block_list_is_the_remedy(
        self, site: Path
    ) -> None:
        """Unblocked, the process exits with the plugin's code; blocked, everything works."""
        killed = self._conveyor(site, "plugins")
        assert killed.returncode == 17
        assert killed.stdout == ""

        listed = self._conveyor(site, "plugins", "--no-load")
        assert listed.returncode == 0
        assert "exits" in listed.stdout and "cvt-exits-at-import" in listed.stdout

        blocked = self._conveyor(site, "plugins", CONVEYOR_DISABLE_PLUGINS="exits")
        assert blocked.returncode == 0, blocked.stderr
        row = next(line for line in blocked.stdout.splitlines() if line.startswith("exits "))
        assert row.split()[3] == "disabled"
        assert "generic" in blocked.stdout  # the other plugins still load
