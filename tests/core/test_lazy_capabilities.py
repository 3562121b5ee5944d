"""Capability sets declared by rule: exact data, materialised per name on first query."""

from __future__ import annotations

import pytest

import conveyor as cv
from conveyor.types.capabilities import CapabilitySet, policy_capabilities
from conveyor.types.policy import enumerate_plans


def _records(name: str) -> list[cv.OperationCapability]:
    return [cv.OperationCapability.from_plan(plan) for plan in enumerate_plans(name)]


class CountingRule:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, name: str) -> list[cv.OperationCapability]:
        self.asked.append(name)
        return _records(name)


class TestByRule:
    def test_names_are_known_without_building_any_record(self) -> None:
        rule = CountingRule()
        caps = CapabilitySet.by_rule(["add", "relu"], rule)
        assert caps.names == frozenset({"add", "relu"})
        assert rule.asked == []

    def test_a_query_builds_only_the_queried_name_once(self) -> None:
        rule = CountingRule()
        caps = CapabilitySet.by_rule(["add", "relu"], rule)
        plan = cv.resolve_plan("add", cv.float32, cv.float32)
        assert caps.supports(plan)
        assert caps.supports(cv.resolve_plan("add", cv.int8, cv.int8))
        assert caps.reason(cv.resolve_plan("mul", cv.float32, cv.float32)) is not None
        assert rule.asked == ["add"]

    def test_len_and_iteration_are_the_exact_eager_set(self) -> None:
        eager = CapabilitySet(_records("add") + _records("relu"))
        lazy = CapabilitySet.by_rule(["relu", "add"], CountingRule())
        assert len(lazy) == len(eager)
        assert set(lazy) == set(eager)
        assert lazy.names == eager.names

    def test_a_bad_record_is_refused_at_first_query_and_stores_nothing(self) -> None:
        def rule(name: str) -> list[object]:
            return [*_records(name)[:1], "not a record"]

        caps = CapabilitySet.by_rule(["add"], rule)  # type: ignore[arg-type]  # the bad rule
        plan = cv.resolve_plan("add", cv.float32, cv.float32)
        for _ in range(2):
            with pytest.raises(TypeError, match="capabilities must be OperationCapability"):
                caps.supports(plan)
        assert list(caps._by_key) == []

    def test_a_record_of_another_name_is_refused(self) -> None:
        caps = CapabilitySet.by_rule(["add"], lambda name: _records("mul"))
        with pytest.raises(ValueError, match="gave a mul record for add"):
            caps.supports(cv.resolve_plan("add", cv.float32, cv.float32))


class TestPolicyCapabilities:
    def test_every_planned_name_and_plan_by_default(self) -> None:
        caps = policy_capabilities()
        assert caps.names == frozenset(cv.registered_operations())
        assert len(caps) == len(enumerate_plans())

    def test_an_unplanned_name_is_refused_before_anything_is_declared(self) -> None:
        with pytest.raises(NotImplementedError, match="'reshape' is not a planned dispatch name"):
            policy_capabilities(["add", "reshape"])

    def test_a_registered_rule_set_is_kept_as_declared(self) -> None:
        class Lazy(cv.Carrier):
            pass

        caps = policy_capabilities(["add"])
        cv.register_operation_capabilities(Lazy, caps)
        assert cv.declared_capabilities(Lazy) is caps
        assert Lazy().supports_operation_plan(cv.resolve_plan("add", cv.float16, cv.float16))
