"""Kernel patterns and composite capabilities declared by rule: built per name on first query.

A plugin may hand ``KernelPattern(plans=...)`` or ``CompositeProvider(capabilities=...)`` a
``CapabilitySet.by_rule``; sealing then enumerates nothing, each name's plans are built (and
checked) when the name is first queried, and counts stay exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from tests.core.test_definitions import STORAGE, Vendor, _binary, _plans


def _counting_rule(seen: list[str]) -> Any:
    def rule(name: str) -> list[cv.OperationCapability]:
        seen.append(name)
        return [cv.OperationCapability.from_plan(p) for p in _plans(name)]

    return rule


def _ruled(seen: list[str], *names: str) -> type[cv.Carrier]:
    cls = type("Ruled", (cv.Carrier,), {})
    patterns = [
        cv.KernelPattern(
            operation=name,
            kernel=_binary(np.add if name == "add" else np.multiply),
            plans=cv.CapabilitySet.by_rule([name], _counting_rule(seen)),
        )
        for name in names
    ]
    cv.register_carrier_definition(
        cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider(patterns))
    )
    return cls


class TestRuleDeclaredKernelPatterns:
    def test_sealing_builds_no_plan_and_a_call_builds_only_its_name(self) -> None:
        seen: list[str] = []
        cls = _ruled(seen, "add", "mul")
        x = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        assert seen == []  # sealed (first use) without enumerating
        np.testing.assert_array_equal((x + x).numpy(), [2.0, 4.0])
        assert seen == ["add"]

    def test_counts_stay_exact(self) -> None:
        seen: list[str] = []
        cls = _ruled(seen, "add", "mul")
        eager = len(_plans("add")) + len(_plans("mul"))
        assert len(cv.definition_capabilities(cls)) == eager
        assert sorted(seen) == ["add", "mul"]

    def test_a_plan_outside_the_rule_is_refused_by_the_gate(self) -> None:
        cls = _ruled([], "add")
        x = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        with pytest.raises(cv.UnsupportedOperationPlan) as info:
            cv.add(x, 1.0)  # the rule lists no weak-scalar plan
        assert "the carrier implements add but not this plan" in str(info.value)

    def test_a_rule_pattern_beside_another_pattern_of_its_name_is_refused_at_seal(self) -> None:
        cls = type("Twice", (cv.Carrier,), {})
        rule = cv.CapabilitySet.by_rule(["add"], _counting_rule([]))
        patterns = [
            cv.KernelPattern(operation="add", kernel=_binary(np.add), plans=rule),
            cv.KernelPattern(operation="add", kernel=_binary(np.add), plans=_plans("add")),
        ]
        cv.register_carrier_definition(
            cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider(patterns))
        )
        with pytest.raises(ValueError) as info:
            cls.allocate(1, cv.float32)
        assert str(info.value) == "add on Twice: two kernels cover it"

    def test_a_rule_set_of_another_name_is_refused(self) -> None:
        rule = cv.CapabilitySet.by_rule(["mul"], _counting_rule([]))
        with pytest.raises(ValueError) as info:
            cv.KernelPattern(operation="add", kernel=_binary(np.add), plans=rule)
        assert str(info.value) == "KernelPattern for add: a plan of mul cannot belong to it"


class TestRuleDeclaredComposite:
    def test_composite_capabilities_by_rule_are_built_on_first_query(self) -> None:
        seen: list[str] = []
        cls = type("LazyComposite", (cv.Carrier,), {})
        provider = cv.CompositeProvider(
            capabilities=cv.CapabilitySet.by_rule(["relu"], _counting_rule(seen)),
            result_carriers=(Vendor,),
            prepare=lambda carrier, invocation: cv.Unsupported("declines"),
        )
        cv.register_carrier_definition(
            cls, cv.CarrierDefinition(storage=STORAGE, composite=provider)
        )
        caps = cv.definition_capabilities(cls)
        assert seen == []
        assert caps.names == frozenset({"relu"})
        assert len(caps) == len(_plans("relu"))
        assert seen == ["relu"]
