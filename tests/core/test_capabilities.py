"""Capabilities: exact plan records, once-only class declarations, dependent snapshots, queries."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import conveyor as cv
from tests.core.more_carriers import CountingDependent

ADD_F32 = cv.resolve_plan("add", cv.float32, cv.float32)
ADD_F64 = cv.resolve_plan("add", cv.float64, cv.float64)
MUL_F32 = cv.resolve_plan("mul", cv.float32, cv.float32)
# Every field of this plan is set (an accumulator, a conversion), so each one can differ.
SUM_F16 = cv.resolve_plan("reduce_sum", cv.float16)


def cap(plan: cv.OperationPlan) -> cv.OperationCapability:
    return cv.OperationCapability.from_plan(plan)


def fresh_carrier_class(name: str = "Fresh") -> type[cv.Carrier]:
    """A new, never declared or observed, definition-free carrier class."""
    return type(name, (cv.Carrier,), {})


def _with_operand(plan: cv.OperationPlan, **changes: Any) -> cv.OperationPlan:
    return attrs.evolve(plan, operands=(attrs.evolve(plan.operands[0], **changes),))


# One variant of SUM_F16 per field, each differing from it in that field only.
_SINGLE_FIELD_VARIANTS = {
    "operation": attrs.evolve(SUM_F16, operation="reduce_prod"),
    "operand count": attrs.evolve(SUM_F16, operands=SUM_F16.operands * 2),
    "operand role": _with_operand(SUM_F16, role="other"),
    "operand dtype": _with_operand(SUM_F16, dtype=cv.bfloat16),
    "operand convert_to": _with_operand(SUM_F16, convert_to=cv.float64),
    "operand weak": _with_operand(SUM_F16, weak=True),
    "compute": attrs.evolve(SUM_F16, compute=cv.float64),
    "accumulation": attrs.evolve(SUM_F16, accumulation="none"),
    "accumulator dtype": attrs.evolve(SUM_F16, accumulator_dtype=cv.float64),
    "no accumulator": attrs.evolve(SUM_F16, accumulator_dtype=None),
    "outputs": attrs.evolve(SUM_F16, outputs=(cv.float32,)),
}


class TestOperationCapability:
    def test_from_plan_copies_every_field(self) -> None:
        """from_plan records the plan's operation, operands, compute, accumulation and outputs."""
        c = cap(SUM_F16)

        assert (c.operation, c.compute, c.accumulation, c.accumulator_dtype, c.outputs) == (
            "reduce_sum",
            cv.float32,
            "float",
            cv.float32,
            (cv.float16,),
        )
        assert c.operands == (cv.OperandCapability("input", cv.float16, cv.float32, False),)

    def test_matches_its_own_plan(self) -> None:
        """A capability built from a plan matches that plan."""
        assert cap(SUM_F16).matches(SUM_F16)

    @pytest.mark.parametrize("field", list(_SINGLE_FIELD_VARIANTS))
    def test_plan_differing_in_one_field_does_not_match(self, field: str) -> None:
        """matches is exact: a plan that differs in any single field is not matched."""
        variant = _SINGLE_FIELD_VARIANTS[field]

        assert variant != SUM_F16
        assert not cap(SUM_F16).matches(variant)

    def test_capabilities_are_hashable_values(self) -> None:
        """Two capabilities from equal plans are equal and hash equal."""
        assert cap(ADD_F32) == cap(attrs.evolve(ADD_F32))
        assert hash(cap(ADD_F32)) == hash(cap(attrs.evolve(ADD_F32)))

    def test_from_plan_of_non_plan_raises(self) -> None:
        """from_plan needs an OperationPlan."""
        with pytest.raises(TypeError, match="from_plan expects an OperationPlan, got 'add'"):
            cv.OperationCapability.from_plan("add")  # type: ignore[arg-type]  # the point


class TestRegisterOperationCapabilities:
    def test_declared_set_is_what_the_class_supports(self) -> None:
        """After declaration, instances support exactly the declared plans."""
        cls = fresh_carrier_class()

        cv.register_operation_capabilities(cls, [cap(ADD_F32), cap(MUL_F32)])

        carrier = cls()
        assert carrier.supports_operation_plan(ADD_F32)
        assert carrier.supports_operation_plan(MUL_F32)
        assert not carrier.supports_operation_plan(ADD_F64)
        assert set(cv.declared_capabilities(cls)) == {cap(ADD_F32), cap(MUL_F32)}

    def test_second_declaration_raises(self) -> None:
        """A class declares its complete set once; a second call is a ValueError."""
        cls = fresh_carrier_class("Twice")
        cv.register_operation_capabilities(cls, [cap(ADD_F32)])

        with pytest.raises(ValueError, match="Twice already has a sealed capability set"):
            cv.register_operation_capabilities(cls, [cap(MUL_F32)])

        assert not cls().supports_operation_plan(MUL_F32)

    def test_duplicate_records_raise(self) -> None:
        """The same capability twice in one declaration is a ValueError."""
        cls = fresh_carrier_class()

        with pytest.raises(ValueError, match="duplicate capability for add"):
            cv.register_operation_capabilities(cls, [cap(ADD_F32), cap(ADD_F32)])

    def test_non_capability_item_raises(self) -> None:
        """Every item must be an OperationCapability; a plan is not one."""
        cls = fresh_carrier_class()

        with pytest.raises(TypeError, match=r"must be OperationCapability records, got .*Plan"):
            cv.register_operation_capabilities(cls, [cap(ADD_F32), ADD_F64])  # type: ignore[list-item]

    @pytest.mark.parametrize(
        "target", [cv.Carrier(), int, "Carrier"], ids=["instance", "int", "str"]
    )
    def test_non_carrier_class_raises(self, target: Any) -> None:
        """Only Carrier classes declare capabilities."""
        with pytest.raises(TypeError, match="is not a Carrier class"):
            cv.register_operation_capabilities(target, [])

    @pytest.mark.parametrize(
        "bad_items",
        [
            [cap(ADD_F32), cap(MUL_F32), cap(ADD_F32)],
            [cap(ADD_F32), "add"],
        ],
        ids=["duplicate", "non-capability"],
    )
    def test_failed_declaration_leaves_class_undeclared(self, bad_items: list[Any]) -> None:
        """A refused declaration stores nothing: a later valid declaration still succeeds."""
        cls = fresh_carrier_class()
        with pytest.raises((TypeError, ValueError)):
            cv.register_operation_capabilities(cls, bad_items)

        cv.register_operation_capabilities(cls, [cap(ADD_F64)])

        assert set(cv.declared_capabilities(cls)) == {cap(ADD_F64)}

    @pytest.mark.parametrize(
        "observe",
        [
            lambda c: c.supports_operation_plan(ADD_F32),
            lambda c: c.operation_capabilities(),
            lambda c: c.unsupported_plan_reason(ADD_F32),
            lambda c: cv.declared_capabilities(type(c)),
        ],
        ids=["supports", "operation_capabilities", "reason", "declared_capabilities"],
    )
    def test_first_query_seals_class_empty(self, observe: Any) -> None:
        """Any query of an undeclared class seals it empty; declaring afterwards is refused."""
        cls = fresh_carrier_class("Observed")
        observe(cls())

        with pytest.raises(ValueError, match="Observed already has a sealed capability set"):
            cv.register_operation_capabilities(cls, [cap(ADD_F32)])

        assert len(cls().operation_capabilities()) == 0

    def test_subclass_inherits_nothing(self) -> None:
        """A subclass of a declared class starts undeclared and supports nothing."""
        parent = fresh_carrier_class("Parent")
        cv.register_operation_capabilities(parent, [cap(ADD_F32)])
        child = type("Child", (parent,), {})

        assert parent().supports_operation_plan(ADD_F32)
        assert not child().supports_operation_plan(ADD_F32)
        assert len(child().operation_capabilities()) == 0

    def test_subclass_declares_its_own_set(self) -> None:
        """A subclass of a declared class can declare its own, independent set."""
        parent = fresh_carrier_class("Parent")
        cv.register_operation_capabilities(parent, [cap(ADD_F32)])
        child = type("Child", (parent,), {})

        cv.register_operation_capabilities(child, [cap(MUL_F32)])

        assert child().supports_operation_plan(MUL_F32)
        assert not child().supports_operation_plan(ADD_F32)
        assert not parent().supports_operation_plan(MUL_F32)

    def test_dependent_carrier_class_raises(self) -> None:
        """A DependentCarrier computes capabilities per instance and cannot declare a class set."""
        with pytest.raises(TypeError, match="CountingDependent is a DependentCarrier"):
            cv.register_operation_capabilities(CountingDependent, [cap(ADD_F32)])


class TestDependentCarrierSnapshot:
    def test_snapshot_is_computed_once_per_instance(self) -> None:
        """The first query computes the instance's set; later queries reuse the same object."""
        carrier = CountingDependent([cap(ADD_F32)])

        first = carrier.operation_capabilities()
        assert carrier.supports_operation_plan(ADD_F32)
        assert carrier.unsupported_plan_reason(ADD_F64) is not None
        second = carrier.operation_capabilities()

        assert carrier.computations == 1
        assert first is second

    def test_each_instance_computes_its_own_snapshot(self) -> None:
        """Two instances of one dependent class advertise what each composes."""
        adds, muls = CountingDependent([cap(ADD_F32)]), CountingDependent([cap(MUL_F32)])

        assert adds.supports_operation_plan(ADD_F32)
        assert not adds.supports_operation_plan(MUL_F32)
        assert muls.supports_operation_plan(MUL_F32)
        assert (adds.computations, muls.computations) == (1, 1)

    def test_snapshot_is_frozen_after_first_query(self) -> None:
        """Changing what the instance composes after the first query changes nothing."""
        carrier = CountingDependent([cap(ADD_F32)])
        carrier.operation_capabilities()

        carrier.capabilities.append(cap(MUL_F32))

        assert not carrier.supports_operation_plan(MUL_F32)
        assert len(carrier.operation_capabilities()) == 1
        assert carrier.computations == 1

    def test_snapshot_with_invalid_item_raises(self) -> None:
        """A computed set is validated like a declaration."""
        carrier = CountingDependent(["add"])  # type: ignore[list-item]  # the point of the test

        with pytest.raises(TypeError, match="must be OperationCapability records"):
            carrier.operation_capabilities()


def _add_f32_carrier() -> cv.Carrier:
    cls = fresh_carrier_class("AddOnly")
    cv.register_operation_capabilities(
        cls, [cap(ADD_F32), cap(SUM_F16), cap(cv.resolve_plan("add", cv.float32, 1.5))]
    )
    return cls()


class TestCapabilityQueries:
    def test_supported_plan_has_no_reason_and_passes(self) -> None:
        """An advertised plan is supported, has no reason, and require returns None."""
        carrier = _add_f32_carrier()

        assert carrier.supports_operation_plan(ADD_F32)
        assert carrier.unsupported_plan_reason(ADD_F32) is None
        assert carrier.require_operation_plan(ADD_F32) is None  # type: ignore[func-returns-value]

    def test_unknown_operation_reason_says_so(self) -> None:
        """For an operation the carrier never implements, the reason says no dtype is supported."""
        carrier = _add_f32_carrier()

        assert carrier.unsupported_plan_reason(MUL_F32) == (
            "the carrier does not implement mul for any dtype"
        )

    def test_missing_plan_shape_reason_names_the_operands(self) -> None:
        """For a known operation, the reason says only this plan is missing and names it."""
        carrier = _add_f32_carrier()

        reason = carrier.unsupported_plan_reason(ADD_F64)

        assert reason is not None
        assert reason.startswith(
            "the carrier implements add but not this plan (input=float64, other=float64)"
        )
        assert "cast the operands" in reason

    def test_reason_marks_scalars_and_accumulator(self) -> None:
        """The plan description marks weak scalars and names the accumulator dtype."""
        carrier = _add_f32_carrier()
        scalar_plan = cv.resolve_plan("add", cv.float64, 1.5)
        sum_plan = cv.resolve_plan("reduce_sum", cv.bfloat16)

        assert "(input=float64, other=float64 (scalar))" in str(
            carrier.unsupported_plan_reason(scalar_plan)
        )
        assert "(input=bfloat16, accumulator float32)" in str(
            carrier.unsupported_plan_reason(sum_plan)
        )

    def test_require_unknown_operation_raises_with_attributes(self) -> None:
        """require_operation_plan raises UnsupportedOperationPlan naming operation and carrier."""
        carrier = _add_f32_carrier()

        with pytest.raises(cv.UnsupportedOperationPlan) as info:
            carrier.require_operation_plan(MUL_F32)

        error = info.value
        assert str(error) == "mul on AddOnly: the carrier does not implement mul for any dtype"
        assert (error.operation, error.carrier, error.plan) == ("mul", type(carrier), MUL_F32)

    def test_require_missing_plan_shape_raises_with_reason(self) -> None:
        """For a missing plan shape, the error's reason is the plan-shape reason."""
        carrier = _add_f32_carrier()

        with pytest.raises(cv.UnsupportedOperationPlan, match="implements add but not this plan"):
            carrier.require_operation_plan(ADD_F64)


class TestUnsupportedOperationPlan:
    def test_is_a_not_implemented_error(self) -> None:
        """UnsupportedOperationPlan is caught by `except NotImplementedError`."""
        assert issubclass(cv.UnsupportedOperationPlan, NotImplementedError)

    def test_constructor_sets_attributes_and_message(self) -> None:
        """The error keeps operation, carrier, plan and reason, and its message joins them."""
        cls = fresh_carrier_class("Somewhere")

        error = cv.UnsupportedOperationPlan("add", cls, ADD_F32, "no reason at all")

        assert (error.operation, error.carrier, error.plan) == ("add", cls, ADD_F32)
        assert error.reason == "no reason at all"
        assert str(error) == "add on Somewhere: no reason at all"

    def test_is_shown_as_a_conveyor_name(self) -> None:
        """The class reads as conveyor.UnsupportedOperationPlan in tracebacks."""
        assert cv.UnsupportedOperationPlan.__module__ == "conveyor"
