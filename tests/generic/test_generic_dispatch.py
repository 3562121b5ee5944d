"""Generic dispatch scenarios from the spec: fresh operations, metadata, surface, closure, gate."""

from __future__ import annotations

import typing

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.functional import VIEW_OPERATIONS
from conveyor.types.policy import enumerate_plans, registered_operations
from conveyor_generic import Generic


@pytest.fixture
def carrier() -> Generic:
    return Generic.allocate(4, cv.float32)


class TestDispatch:
    def test_supported_name_twice_gives_two_fresh_operations(self, carrier: Generic) -> None:
        """Each dispatch returns a distinct operation carrying the name and exactly Generic."""
        first, second = carrier.dispatch_op("add"), carrier.dispatch_op("add")
        assert first is not second
        for op in (first, second):
            assert op._operation_name == "add"
            assert op._dispatch_carrier_class is Generic

    @pytest.mark.parametrize("name", [*registered_operations(), *VIEW_OPERATIONS])
    def test_every_registered_and_view_name_dispatches(self, carrier: Generic, name: str) -> None:
        op = carrier.dispatch_op(name)
        assert isinstance(op, cv.Operation)
        assert op._operation_name == name and op._dispatch_carrier_class is Generic

    @pytest.mark.parametrize("name", ["conv", "Add", "softmax", ""])
    def test_unknown_name_is_refused(self, carrier: Generic, name: str) -> None:
        with pytest.raises(
            NotImplementedError, match=rf"{name} on Generic: the carrier does not implement"
        ):
            carrier.dispatch_op(name)

    def test_dispatch_on_the_class_is_refused(self) -> None:
        with pytest.raises(TypeError, match="instance operation"):
            Generic.dispatch_op("add")

    def test_operations_are_single_use(self, carrier: Generic) -> None:
        x = cv.tensor([1.0, 2.0], carrier=Generic)
        op = carrier.dispatch_op("neg")
        op.forward(x)
        with pytest.raises(RuntimeError, match="forward was already called"):
            op.forward(x)


class TestClosed:
    def test_subclassing_is_refused(self) -> None:
        with pytest.raises(
            TypeError,
            match=r"cannot subclass Generic: it is a closed carrier\. Subclass conveyor\.Carrier",
        ):

            class Mine(Generic):  # type: ignore[misc]  # final on purpose
                pass

    def test_closed_and_final(self) -> None:
        assert cv.is_closed_carrier(Generic)
        assert getattr(Generic, "__final__", False) is True
        assert typing.get_type_hints(Generic._dispatch_op)["return"] is cv.Operation


class TestCapabilities:
    def test_advertises_exactly_every_policy_plan(self) -> None:
        """Generic executes every plan the policy can resolve, and nothing else."""
        caps = Generic.allocate(0, cv.float32).operation_capabilities()
        expected = {cv.OperationCapability.from_plan(p) for p in enumerate_plans()}
        assert set(caps) == expected
        assert caps.names == frozenset(registered_operations())

    def test_every_plan_passes_the_gate(self, carrier: Generic) -> None:
        for plan in enumerate_plans():
            carrier.require_operation_plan(plan)


class TestResults:
    def test_results_own_fresh_storage(self) -> None:
        """A planned result never shares memory with its inputs."""
        x = cv.tensor([1.0, 2.0], carrier=Generic)
        y = cv.add(x, 0.0)
        assert type(y.carrier) is Generic and y.carrier is not x.carrier
        y[0] = 5.0
        np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])

    def test_strided_and_broadcast_inputs_are_read_through_their_layout(self) -> None:
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier=Generic)
        y = cv.add(x.T, cv.broadcast_to(cv.tensor([10.0, 20.0], carrier=Generic), shape=(3, 2)))
        expected = np.arange(6.0).reshape(2, 3).T + np.array([10.0, 20.0])
        np.testing.assert_array_equal(y.numpy(), expected)

    def test_views_share_storage(self) -> None:
        x = cv.tensor(np.arange(6.0), carrier=Generic)
        v = cv.reshape(x, shape=(2, 3))
        assert v.carrier is x.carrier

    def test_options_bound_to_another_operation_are_refused(self, carrier: Generic) -> None:
        x = cv.tensor([[1.0]], carrier=Generic)
        op = carrier.dispatch_op("matmul")
        with pytest.raises(ValueError, match="validated for 'reduce_sum'"):
            op.forward(x, x, options=cv.OperationExecutionOptions("reduce_sum"))

    def test_required_option_missing(self) -> None:
        x = cv.tensor([1.0], carrier=Generic)
        op = x.carrier.dispatch_op("gather")
        with pytest.raises(TypeError, match="missing required option"):
            op.forward(x, cv.tensor([0], carrier=Generic))


def test_generic_is_registered_under_its_name() -> None:
    """The conveyor.plugins entry point contributes Generic as "generic"."""
    x = cv.tensor([1.0], carrier="generic")
    assert type(x.carrier) is Generic
