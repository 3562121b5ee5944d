"""``CarrierDefinition(fallback=CPU)``: names a vendor has no kernel for run on the fallback class
under the same plan, their results moved back; the capabilities list them; autograd works."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.carrier_registry import fallback_route
from conveyor.sdk import policy_capabilities
from conveyor_generic import CPU
from conveyor_generic._storage import ArrayStorage
from conveyor_generic.generic import GenericOperation
from tests.conformance.reference_vendor import _ArrayStorage

_CALLS: list[str] = []


def _add(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    _CALLS.append(ctx.invocation.operation)
    out = ctx.allocate_result(0)
    np.add(*ctx.arrays(), out=ctx.array(out))
    return cv.ProviderResult(out)


def _definition(**fields: Any) -> cv.CarrierDefinition:
    patterns = [cv.KernelPattern(operation="add", kernel=_add, plans=policy_capabilities(["add"]))]
    return cv.CarrierDefinition(
        storage=_ArrayStorage(), kernels=cv.KernelProvider(patterns), **fields
    )


class Falls(cv.Carrier):
    """A vendor with one kernel (add) and CPU as its fallback."""


class Alone(cv.Carrier):
    """The same vendor without a fallback."""


cv.register_carrier_definition(Falls, _definition(fallback=CPU))
cv.register_carrier_definition(Alone, _definition())

_VALUES = np.array([[0.5, -1.0, 2.0], [3.0, -0.25, 1.5]], np.float32)


def _pair(values: np.ndarray[Any, Any] = _VALUES) -> tuple[cv.Tensor, cv.Tensor]:
    on_cpu = cv.tensor(values, carrier="cpu")
    return cv.move(on_cpu, Falls), on_cpu


@pytest.mark.parametrize(
    ("label", "call"),
    [
        ("exp", lambda x: cv.exp(x)),
        ("mul by a scalar", lambda x: x * 3.0),
        ("reduce_sum over an axis, keepdims", lambda x: cv.reduce_sum(x, axis=1, keepdims=True)),
        ("matmul with a transposed view", lambda x: x @ x.T),
        ("argmax", lambda x: cv.argmax(x, axis=0)),
        ("sort, two results", lambda x: cv.sort(x, axis=1)),
    ],
)
def test_names_without_a_kernel_run_on_the_fallback_and_match_it(label: str, call: Any) -> None:
    x, on_cpu = _pair()
    before = x.numpy().copy()
    got, expected = call(x), call(on_cpu)
    for g, e in zip(
        got if isinstance(got, tuple) else (got,),
        expected if isinstance(expected, tuple) else (expected,),
        strict=True,
    ):
        assert type(g.carrier) is Falls, label  # the result comes back to the vendor class
        assert g.dtype is e.dtype and g.shape == e.shape, label
        np.testing.assert_array_equal(g.numpy(), e.numpy(), err_msg=label)
    np.testing.assert_array_equal(x.numpy(), before)  # the operands are untouched


def test_a_name_with_a_kernel_still_runs_the_vendor_kernel() -> None:
    x, _ = _pair()
    _CALLS.clear()
    out = x + x
    assert _CALLS == ["add"]
    np.testing.assert_array_equal(out.numpy(), _VALUES * 2)


def test_gradients_through_fallback_names_match_cpu() -> None:
    grads = []
    for carrier in (Falls, CPU):
        x = cv.move(cv.tensor(_VALUES, carrier="cpu"), carrier)
        x.requires_grad = True
        for _ in range(2):  # the second call runs bound
            x.grad = None
            (cv.exp(x) * x).sum().backward()
        assert x.grad is not None and type(x.grad.carrier) is carrier
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


def test_capabilities_list_the_fallback_plans_and_the_route_names_them() -> None:
    target, through = fallback_route(Falls)
    assert target is CPU
    assert "add" not in through and {"exp", "matmul", "sort"} <= through
    caps = cv.definition_capabilities(Falls)
    assert caps.of("exp") == CPU.operation_capabilities(CPU.allocate(1, cv.float32)).of("exp")
    assert fallback_route(Alone) == (None, frozenset())
    assert "exp" not in cv.definition_capabilities(Alone).names


def test_without_a_fallback_the_name_is_refused_before_any_work() -> None:
    x = cv.move(cv.tensor(_VALUES, carrier="cpu"), Alone)
    with pytest.raises(NotImplementedError, match="exp on Alone"):
        cv.exp(x)


class NarrowFallback(ArrayStorage):
    """A fallback that runs only float32 neg."""

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return NarrowFallback._dispatch_classes[operation_name]()


NarrowFallback._dispatch_classes = {"neg": GenericOperation}
cv.register_operation_capabilities(
    NarrowFallback,
    [cv.OperationCapability.from_plan(cv.resolve_plan("neg", cv.float32))],
)


class FallsNarrow(cv.Carrier):
    """A vendor whose fallback runs a single plan."""


cv.register_carrier_definition(FallsNarrow, _definition(fallback=NarrowFallback))


def test_plans_the_fallback_does_not_run_are_refused_by_the_gate_before_any_work() -> None:
    x = cv.move(cv.tensor(_VALUES, carrier="cpu"), FallsNarrow)
    np.testing.assert_array_equal(cv.neg(x).numpy(), -_VALUES)  # the one plan it runs
    wide = cv.move(cv.tensor(_VALUES.astype(np.float64), carrier="cpu"), FallsNarrow)
    for call in (lambda: cv.neg(wide), lambda: cv.exp(x)):
        with pytest.raises(cv.UnsupportedOperationPlan, match="FallsNarrow"):
            call()
    np.testing.assert_array_equal(x.numpy(), _VALUES)


class _FloatStorage(_ArrayStorage):
    """Storage of float32 and float64 only, like the guide's Acme."""

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return dtype in (cv.float32, cv.float64)


class FallsFloats(cv.Carrier):
    """A float-only vendor with CPU as its fallback."""


cv.register_carrier_definition(
    FallsFloats,
    cv.CarrierDefinition(
        storage=_FloatStorage(),
        kernels=cv.KernelProvider(
            [cv.KernelPattern(operation="add", kernel=_add, plans=policy_capabilities(["add"]))]
        ),
        fallback=CPU,
    ),
)


def test_fallback_plans_needing_a_dtype_the_storage_lacks_are_refused_by_the_gate() -> None:
    """A bool result (lt) or an int64 one (argmax) cannot be stored: the gate refuses those
    plans before any work, while float results of the same fallback run."""
    x = cv.move(cv.tensor(_VALUES, carrier="cpu"), FallsFloats)
    caps = cv.definition_capabilities(FallsFloats)
    assert all(cv.bool not in c.outputs for c in caps.of("lt"))
    assert caps.of("exp")  # float plans stay
    for call in (lambda: cv.lt(x, 2.5), lambda: cv.argmax(x, axis=0)):
        with pytest.raises(cv.UnsupportedOperationPlan, match="FallsFloats"):
            call()
    np.testing.assert_allclose(cv.exp(x).numpy(), np.exp(_VALUES), rtol=1e-6)
    np.testing.assert_array_equal(x.numpy(), _VALUES)


@pytest.mark.parametrize(
    "bad", [cv.DependentCarrier, "cpu", object()], ids=["dependent", "name", "object"]
)
def test_fallback_must_be_an_independent_carrier_class(bad: Any) -> None:
    with pytest.raises(TypeError, match="fallback must be an independent Carrier class"):
        _definition(fallback=bad)
