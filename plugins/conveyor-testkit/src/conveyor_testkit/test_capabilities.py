"""The carrier's advertised capabilities agree with the central dtype-policy registry.

Every advertised capability must be exactly a plan ``conveyor.sdk.enumerate_plans()`` returns
for a registered name (so central resolution can ever ask for it), and the capability gate must
answer from that set: supported plans pass, the others raise ``UnsupportedOperationPlan``.
"""

from __future__ import annotations

from typing import Any

import attrs

import conveyor as cv
from conveyor.sdk import enumerate_plans, is_planned
from conveyor_testkit._inputs import plan_text
from conveyor_testkit._target import Target
from conveyor_testkit.test_dispatch_contract import _fail

# Unsupported plans per name whose refusal the gate check inspects in detail.
_GATE_SAMPLE = 3


def _described(capability: cv.OperationCapability) -> str:
    operands = ", ".join(
        f"{o.role}: {o.dtype.name if o.dtype else None}"
        + (f"->{o.convert_to.name}" if o.convert_to else "")
        + (" (scalar)" if o.weak else "")
        for o in capability.operands
    )
    outputs = ", ".join(d.name for d in capability.outputs)
    return (
        f"{capability.operation}({operands}) compute {capability.compute.name}, "
        f"{capability.accumulation}, -> {outputs}"
    )


def _nearest(capability: cv.OperationCapability) -> str:
    """What central resolution gives for the capability's operands, and which fields differ."""
    try:
        keys: list[Any] = []
        for o in capability.operands:
            if o.dtype is None:
                keys.append(None)
            elif o.weak:
                keys.append({"bool": True, "int64": 1, "float64": 1.0}.get(o.dtype.name, 1j))
            else:
                keys.append(o.dtype)
        options = None
        if capability.accumulator_dtype is not None:
            try:
                options = cv.OperationExecutionOptions(
                    capability.operation, accumulator_dtype=capability.accumulator_dtype
                )
            except (TypeError, ValueError):
                options = None
        plan = cv.resolve_plan(capability.operation, *keys, options=options)
    except Exception as exc:
        return f"central planning refuses these operands ({type(exc).__name__}: {exc})"
    resolved = cv.OperationCapability.from_plan(plan)
    differ = [
        f"{f.name}={getattr(capability, f.name)!r} (central: {getattr(resolved, f.name)!r})"
        for f in attrs.fields(cv.OperationCapability)
        if getattr(capability, f.name) != getattr(resolved, f.name)
    ]
    return "differs from the central plan in " + "; ".join(differ)


class TestCapabilitiesMatchTheRegistry:
    def test_advertised_names_are_registered(self, conveyor_target: Target) -> None:
        """Every advertised operation name is a planned name of the central registry."""
        unknown = [
            f"{name!r} is not in conveyor.sdk.registered_operations()"
            for name in conveyor_target.supported_names()
            if not is_planned(name)
        ]
        _fail(unknown, "advertised names unknown to the registry")

    def test_every_capability_is_a_central_plan(self, conveyor_target: Target) -> None:
        """Each advertised capability equals a plan enumerate_plans() returns for its name."""
        capabilities = conveyor_target.capabilities
        assert capabilities is not None
        central: dict[str, set[cv.OperationCapability]] = {}
        failures = []
        for capability in capabilities:
            name = capability.operation
            if not is_planned(name):
                continue  # reported by test_advertised_names_are_registered
            if name not in central:
                central[name] = {cv.OperationCapability.from_plan(p) for p in enumerate_plans(name)}
            if capability not in central[name]:
                failures.append(f"{_described(capability)}: {_nearest(capability)}")
        _fail(failures, "advertised capabilities that central planning never resolves")

    def test_gate_answers_from_the_advertised_set(
        self, conveyor_target: Target, conveyor_instance: cv.Carrier
    ) -> None:
        """supports_operation_plan agrees with the set, and require_operation_plan raises
        UnsupportedOperationPlan naming the operation and carrier for the plans left out."""
        capabilities = conveyor_target.capabilities
        assert capabilities is not None
        cls, failures = conveyor_target.cls, []
        declared = set(capabilities)
        for name in conveyor_target.supported_names():
            if not is_planned(name):
                continue
            refused = 0
            for plan in enumerate_plans(name):
                advertised = cv.OperationCapability.from_plan(plan) in declared
                if conveyor_instance.supports_operation_plan(plan) != advertised:
                    failures.append(
                        f"{plan_text(plan)}: supports_operation_plan says "
                        f"{not advertised}, the capability set says {advertised}"
                    )
                if advertised or refused >= _GATE_SAMPLE:
                    continue
                refused += 1
                failures += _gate_refusal(conveyor_instance, cls, plan)
        _fail(failures, "capability gate disagreements")

    def test_capabilities_are_sealed(self, conveyor_target: Target) -> None:
        """Two instances report the same capability set, and it does not change between queries."""
        first = conveyor_target.instance()
        second = conveyor_target.instance()
        try:
            a, b = set(first.operation_capabilities()), set(second.operation_capabilities())
            again = set(first.operation_capabilities())
        finally:
            first.release()
            second.release()
        assert a == again, "the capability set changed between two queries on one instance"
        assert a == b, "two instances of the carrier report different capability sets"


def _gate_refusal(carrier: cv.Carrier, cls: type[cv.Carrier], plan: Any) -> list[str]:
    text = plan_text(plan)
    try:
        carrier.require_operation_plan(plan)
    except cv.UnsupportedOperationPlan as exc:
        if exc.operation != plan.operation or exc.carrier is not cls:
            return [
                f"{text}: the refusal carries operation={exc.operation!r}, carrier={exc.carrier!r}"
            ]
        return []
    except Exception as exc:
        return [
            f"{text}: require_operation_plan raised {type(exc).__name__}, not "
            f"UnsupportedOperationPlan"
        ]
    return [f"{text}: not advertised, yet require_operation_plan accepted it"]
