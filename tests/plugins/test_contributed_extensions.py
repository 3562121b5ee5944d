"""Extension contributions: kernel packs and operation definitions from plugin hooks reach dispatch.

Each test writes a throw-away plugin (real dist-info on ``sys.path``) and installs its host as the
default host, which is what ``conveyor.engine.carrier_registry`` and
``conveyor.engine.operation_definitions`` consult.
Target carrier classes are fresh per test and registered here, in ``TARGETS`` under the test's
module prefix; the plugin module looks its target up there when it is imported by the scan.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.plugins import PluginState, set_default_host
from conveyor.sdk import DefinitionOperation

from .environment import PluginEnvironment


class ArrayStorage(cv.StorageProvider):
    """Slots in a flat NumPy array (floating dtypes only)."""

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return dtype in (cv.float32, cv.float64)

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return size * np.dtype(dtype.numpy).itemsize

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Any:
        return np.zeros(size, dtype.numpy)

    def release(self, handle: Any) -> None:
        pass

    def read(self, handle: Any, index: int) -> Any:
        return handle[index].item()

    def write(self, handle: Any, index: int, value: Any) -> None:
        handle[index] = value

    def _view(self, handle: Any, layout: cv.Layout) -> Any:
        item = handle.itemsize
        return np.ndarray(
            layout.shape,
            handle.dtype,
            buffer=handle,
            offset=layout.offset * item,
            strides=tuple(s * item for s in layout.strides),
        )

    def export_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType) -> Any:
        return self._view(handle, layout).copy()

    def import_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType, values: Any) -> None:
        self._view(handle, layout)[...] = values


STORAGE = ArrayStorage()
#: Target carrier class per plugin environment (keyed by ``PluginEnvironment.prefix``).
TARGETS: dict[str, type[cv.Carrier]] = {}


def _resolve_same(call: cv.BoundCall) -> cv.ResolvedInvocation:
    (x,) = call.operands
    return call.resolved([cv.ResultSpec(dtype=x.dtype, shape=x.shape)])


TRIPLE = cv.define_operation("cvtest_contrib.triple", roles=("input",), resolve=_resolve_same)


def _halve(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    (x,) = ctx.operands
    out = ctx.allocate_result(0)
    out.carrier.import_span(out.layout, x.carrier.export_span(x.layout) / 2)
    return cv.ProviderResult(out)


def _target(
    env: PluginEnvironment, name: str, patterns: tuple[cv.KernelPattern, ...] = ()
) -> type[cv.Carrier]:
    """A fresh definition-backed carrier class with ``patterns``, published for ``env``."""
    cls = type(name, (cv.Carrier,), {})
    cv.register_carrier_definition(
        cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider(patterns))
    )
    TARGETS[env.prefix] = cls
    return cls


def _pack_plugin(env: PluginEnvironment) -> str:
    """A plugin contributing the pack ``triple-pack`` (a cvtest_contrib.triple kernel)."""
    return env.plugin(
        "packs",
        f"""
        import sys

        import conveyor as cv

        _TARGET = sys.modules[{__name__!r}].TARGETS[{env.prefix!r}]


        def _triple(ctx):
            (x,) = ctx.operands
            out = ctx.allocate_result(0)
            out.carrier.import_span(out.layout, x.carrier.export_span(x.layout) * 3)
            return cv.ProviderResult(out)


        PACK = cv.KernelPack(
            name="triple-pack",
            carrier=_TARGET,
            patterns=[cv.KernelPattern(operation="cvtest_contrib.triple", kernel=_triple)],
        )


        @hookimpl
        def conveyor_kernel_packs():
            return [PACK]
        """,
    )


@pytest.fixture(autouse=True)
def _forget_targets() -> Any:
    yield
    TARGETS.clear()


def test_pack_contributed_before_first_use_executes_with_exact_metadata(
    plugin_env: PluginEnvironment,
) -> None:
    """A kernel pack from conveyor_kernel_packs makes its carrier dispatch and run its operation."""
    cls = _target(plugin_env, "Packed")
    module = _pack_plugin(plugin_env)
    host = plugin_env.host()
    set_default_host(host)
    assert [(r.name, r.state) for r in host.plugins()] == [("packs", PluginState.LOADED)]
    assert host.kernel_packs() == (sys.modules[module].PACK,)

    x = cv.tensor([[1.0, 2.0], [3.0, 4.0]], cv.float64, carrier=cls)
    op = x.carrier.dispatch_op("cvtest_contrib.triple")
    assert type(op) is DefinitionOperation and op.definition is TRIPLE
    out = op.forward(x)
    assert type(out) is cv.Tensor and type(out.carrier) is cls
    assert (out.shape, out.dtype) == ((2, 2), cv.float64)
    assert out.layout == cv.Layout.contiguous((2, 2))
    np.testing.assert_array_equal(out.numpy(), [[3.0, 6.0], [9.0, 12.0]])
    assert op.invocation is not None and op.invocation.operation == "cvtest_contrib.triple"
    np.testing.assert_array_equal(TRIPLE(x).numpy(), [[3.0, 6.0], [9.0, 12.0]])


def test_carrier_used_before_host_scanned_refuses_contributed_pack_operation(
    plugin_env: PluginEnvironment,
) -> None:
    """A carrier first used before the default host scanned is sealed without contributed packs."""
    cls = _target(plugin_env, "Early")
    _pack_plugin(plugin_env)
    host = plugin_env.host()
    set_default_host(host)

    x = cv.tensor([1.0], cv.float64, carrier=cls)  # first use: seals the class, host unscanned
    assert not plugin_env.imported("packs")
    (pack,) = host.kernel_packs()  # the scan now loads the plugin and its pack
    assert pack.carrier is cls
    with pytest.raises(NotImplementedError) as info:
        x.carrier.dispatch_op("cvtest_contrib.triple")
    assert str(info.value) == (
        "cvtest_contrib.triple on Early: the carrier's kernel and composite providers cover no "
        "invocation of this operation"
    )


def test_definition_contributed_through_hook_dispatches_on_covering_carrier(
    plugin_env: PluginEnvironment,
) -> None:
    """A definition from conveyor_operation_definitions becomes dispatchable after the scan."""
    name = f"{plugin_env.group}.halve"
    cls = _target(plugin_env, "Halving", (cv.KernelPattern(operation=name, kernel=_halve),))
    module = plugin_env.plugin(
        "definitions",
        f"""
        import conveyor as cv


        def _resolve(call):
            (x,) = call.operands
            return call.resolved([cv.ResultSpec(dtype=x.dtype, shape=x.shape)])


        # Built directly, not with define_operation: only the hook can make it known.
        DEFINITION = cv.OperationDefinition(name={name!r}, roles=("input",), resolve=_resolve)


        @hookimpl
        def conveyor_operation_definitions():
            return [DEFINITION]
        """,
    )
    host = plugin_env.host()
    set_default_host(host)
    x = cv.tensor([4.0, 6.0], cv.float32, carrier=cls)

    assert cv.operation_definition(name) is None  # the default host has not scanned yet
    with pytest.raises(NotImplementedError) as info:
        x.carrier.dispatch_op(name)
    assert str(info.value) == (f"{name} on Halving: no central operation definition has this name")

    assert [(r.name, r.state) for r in host.plugins()] == [("definitions", PluginState.LOADED)]
    definition = sys.modules[module].DEFINITION
    assert cv.operation_definition(name) is definition
    op = x.carrier.dispatch_op(name)
    assert type(op) is DefinitionOperation and op.definition is definition
    out = op.forward(x)
    assert type(out.carrier) is cls and (out.shape, out.dtype) == ((2,), cv.float32)
    np.testing.assert_array_equal(out.numpy(), np.array([2.0, 3.0], np.float32))
    np.testing.assert_array_equal(definition(x).numpy(), np.array([2.0, 3.0], np.float32))


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("conveyor.sneaky", "uses the reserved namespace 'conveyor'"),
        ("NotNamespaced", "is not a namespaced name"),
        ("cvtest_contrib.triple", "'cvtest_contrib.triple' is already defined"),
    ],
    ids=["reserved-namespace", "not-namespaced", "clashes-with-existing"],
)
def test_bad_contributed_definition_marks_its_plugin_broken(
    plugin_env: PluginEnvironment, name: str, error: str
) -> None:
    """A definition define_operation would refuse breaks only the plugin that contributed it."""
    plugin_env.plugin(
        "baddefs",
        f"""
        import conveyor as cv


        @hookimpl
        def conveyor_operation_definitions():
            return [cv.OperationDefinition(name={name!r}, roles=("input",), resolve=print)]
        """,
    )
    host = plugin_env.host()
    set_default_host(host)
    (record,) = host.plugins()
    assert record.state is PluginState.BROKEN
    assert record.hook == "conveyor_operation_definitions"
    assert error in (record.error or "")
    assert "baddefs" in (record.error or "")
    assert host.operation_definitions() == ()
    assert cv.operation_definition("cvtest_contrib.unrelated") is None
