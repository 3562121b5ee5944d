"""The dispatch contract (docs/contract.md), scenario by scenario, on test-only carriers."""

from __future__ import annotations

import typing

import numpy as np
import pytest

import conveyor as cv
from tests.core.carriers import (
    ArrayCarrier,
    ArrayOperation,
    CachingCarrier,
    CategoryCarrier,
    NullCarrier,
    StorageOnlyCarrier,
    WrongTypeCarrier,
    from_array,
)


def _pair(dtype: cv.DType = cv.float32) -> tuple[cv.Tensor, cv.Tensor]:
    a = from_array(np.arange(6).reshape(2, 3), dtype)
    b = from_array(np.ones((2, 3)), dtype)
    return a, b


class _Counters:
    """Snapshot of the test carriers' allocation and kernel-entry counters."""

    def __init__(self) -> None:
        self.allocations = ArrayCarrier.allocations
        self.kernels = ArrayCarrier.kernel_entries

    def unchanged(self) -> bool:
        return (
            ArrayCarrier.allocations == self.allocations
            and ArrayCarrier.kernel_entries == self.kernels
        )


class TestDispatchIsAnInstanceOperation:
    """Requirement: Dispatch is an instance operation."""

    def test_dispatch_from_legacy_instance_returns_hook_operation(self) -> None:
        """A definition-free instance dispatches through its hook and gets a fresh Operation."""
        carrier = ArrayCarrier.allocate(1, cv.float32)
        op = carrier.dispatch_op("add")
        assert type(op) is ArrayOperation
        assert op._operation_name == "add"
        assert op._dispatch_carrier_class is ArrayCarrier

    def test_reject_class_dispatch_without_instance_type_error(self) -> None:
        """dispatch_op called on a carrier class (no instance) raises TypeError."""
        with pytest.raises(TypeError, match="instance operation"):
            ArrayCarrier.dispatch_op("add")

    def test_reject_class_passed_as_self_type_error(self) -> None:
        """Passing a class where the instance belongs raises TypeError naming what was given."""
        with pytest.raises(TypeError, match="not on the class Carrier"):
            cv.Carrier.dispatch_op(ArrayCarrier, "add")

    def test_unbound_call_with_instance_dispatches(self) -> None:
        """The unbound form with a real instance behaves like the bound call."""
        carrier = ArrayCarrier.allocate(1, cv.float32)
        op = cv.Carrier.dispatch_op(carrier, "neg")
        assert op._operation_name == "neg"
        assert op._dispatch_carrier_class is ArrayCarrier

    @pytest.mark.parametrize("name", [1, None, b"add", ("add",)])
    def test_non_string_name_type_error(self, name: object) -> None:
        """A dispatch name that is not a str raises TypeError naming its type."""
        carrier = ArrayCarrier.allocate(1, cv.float32)
        with pytest.raises(TypeError, match=f"must be a str, got .*{type(name).__name__}"):
            carrier.dispatch_op(name)  # type: ignore[arg-type]  # the error under test

    def test_default_legacy_hook_not_implemented_names_operation(self) -> None:
        """The default hook of a bare sibling raises NotImplementedError naming the name."""

        class Bare(cv.Carrier):
            pass

        with pytest.raises(NotImplementedError, match="fancy_op on Bare"):
            Bare().dispatch_op("fancy_op")

    def test_unknown_name_not_implemented(self) -> None:
        """A name the hook does not know raises NotImplementedError naming it and the carrier."""
        carrier = ArrayCarrier.allocate(1, cv.float32)
        with pytest.raises(NotImplementedError, match="no_such_op on ArrayCarrier"):
            carrier.dispatch_op("no_such_op")

    def test_storage_only_definition_refuses_computational_name(self) -> None:
        """Scenario 'Dispatch a storage-only carrier': NotImplementedError identifying the name."""
        with pytest.raises(NotImplementedError, match=r"matmul on StorageOnly.*storage-only"):
            StorageOnlyCarrier().dispatch_op("matmul")

    def test_definition_backed_unknown_name_not_implemented(self) -> None:
        """A definition-backed carrier refuses a name with no central definition."""
        with pytest.raises(NotImplementedError, match="frobnicate on StorageOnlyCarrier"):
            StorageOnlyCarrier().dispatch_op("frobnicate")


class TestEveryDispatchReturnsAFreshOperation:
    """Requirement: Every dispatch returns a fresh Operation."""

    def test_dispatch_same_name_twice_distinct_independent(self) -> None:
        """Two dispatches of one name are distinct objects with independent state."""
        a, b = _pair()
        first = a.carrier.dispatch_op("add")
        second = a.carrier.dispatch_op("add")
        assert first is not second
        first.forward(a, b)
        assert first.plan is not None
        assert second.plan is None and not second._forwarded
        assert first.plan is cv.resolve_plan("add", cv.float32, cv.float32)

    def test_reject_cached_operation_keeps_first_metadata(self) -> None:
        """A hook returning an already dispatched operation fails; the first metadata stays."""
        carrier = CachingCarrier.allocate(1, cv.float32)
        first = carrier.dispatch_op("add")
        with pytest.raises(TypeError, match="already dispatched as 'add' by CachingCarrier"):
            carrier.dispatch_op("neg")
        assert first._operation_name == "add"
        assert first._dispatch_carrier_class is CachingCarrier

    def test_reject_non_operation_result_type_error(self) -> None:
        """A hook returning something other than an Operation makes dispatch fail."""
        carrier = WrongTypeCarrier.allocate(1, cv.float32)
        with pytest.raises(TypeError, match=r"add on WrongTypeCarrier.*returned function"):
            carrier.dispatch_op("add")

    def test_forward_is_single_use(self) -> None:
        """Calling forward twice on one dispatched operation raises RuntimeError."""
        a, b = _pair()
        op = a.carrier.dispatch_op("add")
        op.forward(a, b)
        with pytest.raises(RuntimeError, match="forward was already called"):
            op.forward(a, b)

    @pytest.mark.parametrize(
        ("refused_call", "error", "pattern"),
        [
            (
                lambda op, a, b: op.forward(a, b, options=cv.OperationExecutionOptions("neg")),
                ValueError,
                "options were validated for 'neg'",
            ),
            (lambda op, a, b: op.forward(a, b, axis=0), TypeError, "unexpected keyword"),
            (lambda op, a, b: op.forward(a), TypeError, r"expected 2 operand\(s\)"),
            (lambda op, a, b: op.forward(a, "b"), TypeError, "operands must be Tensors"),
        ],
        ids=["options-validation", "unexpected-keyword", "plan-arity", "plan-operand"],
    )
    def test_forward_refused_first_call_still_consumes_operation(
        self, refused_call: typing.Any, error: type[Exception], pattern: str
    ) -> None:
        """A first forward refused before running still consumes the operation."""
        a, b = _pair()
        op = a.carrier.dispatch_op("add")
        with pytest.raises(error, match=pattern):
            refused_call(op, a, b)
        with pytest.raises(RuntimeError, match="forward was already called"):
            op.forward(a, b)
        assert op.plan is None

    def test_undispatched_operation_forward_type_error(self) -> None:
        """An Operation built directly, never dispatched, cannot run."""
        a, b = _pair()
        with pytest.raises(TypeError, match="never dispatched"):
            ArrayOperation().forward(a, b)


class TestDispatchMetadata:
    """Requirement: Dispatch metadata records name and exact carrier class."""

    def test_custom_subclass_records_exact_class(self) -> None:
        """Scenario 'Dispatch from a custom subclass': metadata names the exact subclass."""

        class Custom(ArrayCarrier):
            pass

        cv.register_operation_capabilities(Custom, list(cv.declared_capabilities(ArrayCarrier)))
        a = Custom.allocate(3, cv.float32)
        t = cv.Tensor(a, cv.Layout((3,)))
        op = a.dispatch_op("exp")
        assert op._operation_name == "exp"
        assert op._dispatch_carrier_class is Custom
        with cv.profile() as prof:
            t.requires_grad = True
            out = op.forward(t)
        out.sum().backward()
        assert op._dispatch_carrier_class is Custom
        assert out.autograd_ctx is op
        assert prof.records[0].operation == "exp"
        assert prof.records[0].carrier is Custom

    def test_metadata_is_the_requested_string(self) -> None:
        """_operation_name is exactly the string asked for."""
        carrier = ArrayCarrier.allocate(1, cv.float32)
        name = "".join(["re", "lu"])
        assert carrier.dispatch_op(name)._operation_name == name


class TestClosedCarriers:
    """Requirement: Carrier is open while shipped implementations are closed."""

    def test_reject_specialization_of_closed_carrier(self) -> None:
        """Subclassing a closed carrier fails at class creation with the common message."""

        @typing.final
        @cv.closed_carrier
        class Shipped(cv.Carrier):
            pass

        assert cv.is_closed_carrier(Shipped)
        with pytest.raises(TypeError, match="cannot subclass Shipped: it is a closed carrier"):

            class Special(Shipped):  # type: ignore[misc]  # the refusal under test
                pass

    def test_carrier_and_dependent_carrier_stay_open(self) -> None:
        """Carrier and DependentCarrier accept sibling subclasses."""

        class Sibling(cv.Carrier):
            pass

        class Composite(cv.DependentCarrier):
            pass

        assert not cv.is_closed_carrier(Sibling)
        assert issubclass(Composite, cv.Carrier)

    def test_closed_carrier_requires_carrier_class(self) -> None:
        """closed_carrier refuses to decorate something that is not a Carrier class."""
        with pytest.raises(TypeError, match="decorates Carrier subclasses"):
            cv.closed_carrier(int)


class TestPlannedExecutionGate:
    """Requirement: Planned execution passes the backend capability gate."""

    def test_refuse_plan_before_backend_work(self) -> None:
        """An unadvertised plan raises UnsupportedOperationPlan before allocating or entering."""
        a = from_array(np.ones(3), cv.float16)
        before = _Counters()
        op = a.carrier.dispatch_op("add")
        with pytest.raises(cv.UnsupportedOperationPlan) as info:
            op.forward(a, a)
        assert before.unchanged()
        assert isinstance(info.value, NotImplementedError)
        assert info.value.operation == "add" and info.value.carrier is ArrayCarrier
        assert "implements add but not this plan" in str(info.value)

    def test_unknown_operation_reason_on_carrier_without_capabilities(self) -> None:
        """A carrier advertising nothing for a name says the operation is unknown to it."""
        storage = NullCarrier.allocate(3, cv.float32)
        t = cv.Tensor(storage, cv.Layout((3,)))
        before = _Counters()
        with pytest.raises(cv.UnsupportedOperationPlan, match="does not implement exp for any"):
            storage.dispatch_op("exp").forward(t)
        assert before.unchanged()

    def test_reject_category_before_capability_lookup(self) -> None:
        """An abstract-category operand fails central planning with TypeError, before any lookup."""
        storage = CategoryCarrier.allocate(3, cv.float32)
        t = cv.Tensor(storage, cv.Layout((3,)))
        assert t.dtype is cv.floating
        lookups = CategoryCarrier.capability_lookups
        before = _Counters()
        with pytest.raises(TypeError, match="categor"):
            storage.dispatch_op("add").forward(t, t)
        assert CategoryCarrier.capability_lookups == lookups
        assert before.unchanged()

    def test_accepted_plan_is_available_to_implementation(self) -> None:
        """The accepted central plan is on the operation and drives the output dtype."""
        a = from_array(np.arange(3), cv.int32)
        op = a.carrier.dispatch_op("add")
        out = op.forward(a, 2.5)
        assert op.plan is cv.resolve_plan("add", cv.int32, 2.5)
        assert out.dtype is op.plan.outputs[0] is cv.float32
        np.testing.assert_allclose(out.numpy(), [2.5, 3.5, 4.5])

    def test_wrong_operand_count_type_error_before_work(self) -> None:
        """A planned operation given the wrong number of operands fails before any work."""
        a, _ = _pair()
        before = _Counters()
        with pytest.raises(TypeError, match="expected 2 operand"):
            a.carrier.dispatch_op("add").forward(a)
        assert before.unchanged()

    def test_non_tensor_operand_type_error(self) -> None:
        """An operand that is neither a Tensor nor a Python scalar is refused."""
        a, _ = _pair()
        with pytest.raises(TypeError, match="must be Tensors or Python scalars"):
            a.carrier.dispatch_op("add").forward(a, np.ones(3))


class TestExecutionOptions:
    """Requirement: Execution options are validated at the dispatched boundary."""

    def test_reject_options_for_another_operation(self) -> None:
        """Scenario: a dispatched matmul given reduce_sum options fails with ValueError."""
        a = from_array(np.ones((2, 2)), cv.float32)
        options = cv.OperationExecutionOptions("reduce_sum", axis=0)
        before = _Counters()
        with pytest.raises(ValueError, match="validated for 'reduce_sum', not 'matmul'"):
            a.carrier.dispatch_op("matmul").forward(a, a, options=options)
        assert before.unchanged()

    def test_unknown_keyword_type_error(self) -> None:
        """Any keyword other than options is a TypeError."""
        a = from_array(np.ones(3), cv.float32)
        with pytest.raises(TypeError, match=r"unexpected keyword argument.*axis"):
            a.carrier.dispatch_op("reduce_sum").forward(a, axis=0)

    @pytest.mark.parametrize("options", [{"axis": 0}, "reduce_sum", 0])
    def test_options_of_another_type_type_error(self, options: object) -> None:
        """An options value that is not an OperationExecutionOptions is a TypeError."""
        a = from_array(np.ones(3), cv.float32)
        with pytest.raises(TypeError, match="options must be an OperationExecutionOptions"):
            a.carrier.dispatch_op("reduce_sum").forward(a, options=options)

    def test_validated_options_reach_implementation_not_saved(self) -> None:
        """Options reach the implementation and are never saved as autograd inputs."""
        a = from_array(np.arange(6).reshape(2, 3), cv.float32)
        a.requires_grad = True
        options = cv.OperationExecutionOptions("reduce_sum", axis=1)
        op = a.carrier.dispatch_op("reduce_sum")
        out = op.forward(a, options=options)
        np.testing.assert_allclose(out.numpy(), [3.0, 12.0])
        assert op.options is options
        assert op.saved_inputs == (a,)

    def test_lowered_execution_validates_options(self) -> None:
        """execute_lowered applies the same options validation as forward."""
        a = from_array(np.ones((2, 2)), cv.float32)
        options = cv.OperationExecutionOptions("reduce_sum")
        with pytest.raises(ValueError, match="validated for 'reduce_sum'"):
            cv.execute_lowered(a.carrier.dispatch_op("matmul"), a, a, options=options)
        with pytest.raises(TypeError, match="unexpected keyword"):
            a.carrier.dispatch_op("neg")._execute((a,), None, {"axis": 1}, False)


class TestLoweredExecution:
    """Lowered execution: full validation and saved state, but no visible autograd node."""

    def test_lowered_result_has_no_node_but_nested_state_is_saved(self) -> None:
        """The result has no autograd node; the nested op keeps inputs for delegated backward."""
        a = from_array(np.arange(3), cv.float32)
        a.requires_grad = True
        op = a.carrier.dispatch_op("exp")
        out = cv.execute_lowered(op, a)
        assert out.autograd_ctx is None and not out.requires_grad
        assert op.saved_inputs == (a,)
        (grad,) = op.backward(from_array(np.ones(3), cv.float32))
        np.testing.assert_allclose(grad.numpy(), np.exp([0.0, 1.0, 2.0]), rtol=1e-6)

    def test_lowered_execution_runs_the_gate(self) -> None:
        """An unadvertised plan is refused in lowered execution too, before any work."""
        a = from_array(np.ones(3), cv.float16)
        before = _Counters()
        with pytest.raises(cv.UnsupportedOperationPlan):
            cv.execute_lowered(a.carrier.dispatch_op("exp"), a)
        assert before.unchanged()

    def test_lowered_execution_is_profiled(self) -> None:
        """Lowered execution records a profile entry with the nested dispatch metadata."""
        a = from_array(np.ones(3), cv.float32)
        with cv.profile() as prof:
            cv.execute_lowered(a.carrier.dispatch_op("neg"), a)
        assert [(r.operation, r.carrier, r.success) for r in prof.records] == [
            ("neg", ArrayCarrier, True)
        ]

    def test_non_operation_type_error(self) -> None:
        """execute_lowered refuses anything that is not an Operation."""
        with pytest.raises(TypeError, match="expects an Operation"):
            cv.execute_lowered(lambda x: x, 1)  # type: ignore[arg-type]  # under test


class TestPublicFunctionOperands:
    """The public functions refuse mixed carriers in one place, pointing to cv.move."""

    def test_mixed_carrier_classes_type_error(self) -> None:
        """Operands on different exact carrier classes raise TypeError naming both."""

        class Other(ArrayCarrier):
            pass

        a = from_array(np.ones(3), cv.float32)
        b = cv.Tensor(Other.allocate(3, cv.float32), cv.Layout((3,)))
        with pytest.raises(TypeError, match=r"ArrayCarrier and Other.*cv\.move"):
            cv.add(a, b)

    def test_scalars_only_type_error(self) -> None:
        """A public function needs at least one Tensor operand."""
        with pytest.raises(TypeError, match="at least one operand must be a Tensor"):
            cv.add(1, 2)

    def test_public_function_dispatches_on_first_tensor(self) -> None:
        """cv.add on a scalar and a tensor dispatches on the tensor's carrier."""
        a = from_array(np.arange(3), cv.float32)
        with cv.profile() as prof:
            out = cv.add(1.0, a)
        np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
        assert prof.records[0].carrier is ArrayCarrier
