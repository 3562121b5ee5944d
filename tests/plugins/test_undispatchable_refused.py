"""Registration refuses what could never dispatch: names with no central operation definition.

Before central definitions covered every name, a vendor could advertise ``exp`` or a made-up name
and only find out at dispatch. Now every built-in name has a definition, and a provider covering a
name that has none is refused when it is registered — directly, or through a plugin hook, which
marks that plugin broken with a message naming the plugin and the name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import conveyor as cv
from conveyor.plugins import PluginState, set_default_host
from conveyor.types.policy import enumerate_plans

from .environment import PluginEnvironment
from .test_contributed_extensions import STORAGE, TARGETS, _halve, _target


@pytest.fixture(autouse=True)
def _forget_targets() -> Iterator[None]:
    yield
    TARGETS.clear()


def _fresh(name: str) -> type[cv.Carrier]:
    return type(name, (cv.Carrier,), {})


class TestDirectRegistrationRefusesUndefinedNames:
    """register_carrier_definition and register_kernel_pack: ValueError naming name and owner."""

    def test_carrier_definition_with_undefined_name_refused(self) -> None:
        cls = _fresh("Frobnicating")
        definition = cv.CarrierDefinition(
            storage=STORAGE,
            kernels=cv.KernelProvider([cv.KernelPattern(operation="frobnicate", kernel=_halve)]),
        )
        with pytest.raises(ValueError) as info:
            cv.register_carrier_definition(cls, definition)
        assert str(info.value) == (
            "register_carrier_definition Frobnicating: 'frobnicate' has no central operation "
            "definition, so no call of it could dispatch; cover a name listed by "
            "conveyor.operation_definitions(), or define a namespaced custom operation with "
            "conveyor.define_operation first"
        )
        # Nothing was registered: the class is still free to get a valid definition.
        cv.register_carrier_definition(cls, cv.CarrierDefinition(storage=STORAGE))

    def test_kernel_pack_with_undefined_name_refused(self) -> None:
        cls = _fresh("Packable")
        cv.register_carrier_definition(cls, cv.CarrierDefinition(storage=STORAGE))
        pack = cv.KernelPack(
            name="vendor-pack",
            carrier=cls,
            patterns=[cv.KernelPattern(operation="subtract", kernel=_halve)],
        )
        with pytest.raises(ValueError, match=r"register_kernel_pack 'vendor-pack': 'subtract' has"):
            cv.register_kernel_pack(pack)
        assert cv.definition_capabilities(cls).names == frozenset()

    @pytest.mark.parametrize("name", ["exp", "sub", "div", "sort", "gather", "view"])
    def test_formerly_undispatchable_names_now_register_and_dispatch(self, name: str) -> None:
        """Names a vendor could advertise but never dispatch before now have definitions."""
        cls = _fresh(f"Covers_{name}")
        plans = enumerate_plans(name) if name != "view" else ()
        pattern = cv.KernelPattern(operation=name, kernel=_halve, plans=plans)
        cv.register_carrier_definition(
            cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider([pattern]))
        )
        carrier = cls.allocate(1, cv.float32)
        assert isinstance(carrier.dispatch_op(name), cv.Operation)


class TestPluginContributedPackRefused:
    """A plugin contributing a pack for an undefined name is broken, and named."""

    def test_pack_for_undefined_name_marks_plugin_broken(
        self, plugin_env: PluginEnvironment
    ) -> None:
        _target(plugin_env, "PackTarget")
        plugin_env.plugin(
            "badpack",
            f"""
            import sys

            import conveyor as cv

            _TARGET = sys.modules[{__name__!r}].TARGETS[{plugin_env.prefix!r}]
            PACK = cv.KernelPack(
                name="bad-pack",
                carrier=_TARGET,
                patterns=[cv.KernelPattern(operation="{plugin_env.group}.missing", kernel=print)],
            )


            @hookimpl
            def conveyor_kernel_packs():
                return [PACK]
            """,
        )
        host = plugin_env.host()
        set_default_host(host)
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_kernel_packs"
        assert "badpack" in (record.error or "")
        assert f"'{plugin_env.group}.missing' has no central operation definition" in (
            record.error or ""
        )
        assert host.kernel_packs() == ()

    def test_pack_for_own_contributed_definition_accepted(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A dotted name the same plugin defines through its definitions hook is fine."""
        _target(plugin_env, "OwnTarget")
        name = f"{plugin_env.group}.halve"
        plugin_env.plugin(
            "ownpack",
            f"""
            import sys

            import conveyor as cv

            _TARGET = sys.modules[{__name__!r}].TARGETS[{plugin_env.prefix!r}]


            def _resolve(call):
                (x,) = call.operands
                return call.resolved([cv.ResultSpec(dtype=x.dtype, shape=x.shape)])


            DEFINITION = cv.OperationDefinition(name={name!r}, roles=("input",), resolve=_resolve)
            PACK = cv.KernelPack(
                name="own-pack",
                carrier=_TARGET,
                patterns=[cv.KernelPattern(operation={name!r}, kernel=print)],
            )


            @hookimpl
            def conveyor_operation_definitions():
                return [DEFINITION]


            @hookimpl
            def conveyor_kernel_packs():
                return [PACK]
            """,
        )
        host = plugin_env.host()
        set_default_host(host)
        assert [(r.name, r.state) for r in host.plugins()] == [("ownpack", PluginState.LOADED)]


class TestCarriersListingOnlyShowsDispatchablePlans:
    """Every plan `conveyor carriers` lists belongs to a name that dispatches on that carrier."""

    @pytest.mark.parametrize("carrier", ["generic", "cpu", "shm"])
    def test_every_listed_name_dispatches(self, carrier: str) -> None:
        cls = cv.plugins.host().carrier(carrier)
        instance = cls.allocate(1, cv.float32)
        names = cv.definition_capabilities(cls).names
        assert names
        for name in sorted(names):
            assert cv.operation_definition(name) is not None
            assert isinstance(instance.dispatch_op(name), cv.Operation)
