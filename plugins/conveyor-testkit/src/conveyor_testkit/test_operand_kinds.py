"""Every advertised plan gives the oracle's results on view operands, after a write, and with
``requires_grad`` operands (``_variants``): conditions fresh contiguous tensors never exercise.

One test per advertised name and condition, over one plan per kernel shape of the plans the
oracle test runs (``kernel_plans``); each fails with the first failing case of each failing plan.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conveyor.sdk import OperationPlan, enumerate_plans, is_planned
from conveyor_testkit._run import PlanFailure
from conveyor_testkit._target import Target
from conveyor_testkit._variants import (
    check_recompute,
    check_requires_grad,
    check_view_ops,
    check_views,
    kernel_plans,
)
from conveyor_testkit.plugin import Report

_SHOWN = 5
_Check = Callable[[OperationPlan], PlanFailure | None]


def _run(target: Target, name: str, report: Report, check: _Check, what: str) -> None:
    """Run ``check`` on every sampled advertised plan of ``name``; fail listing the failures."""
    if not is_planned(name):
        pytest.skip(f"{name!r} is not a planned name; the oracle covers planned names only")
    capabilities = target.capabilities
    assert capabilities is not None  # set when oracle_skip is None
    advertised = [plan for plan in enumerate_plans(name) if capabilities.supports(plan)]
    plans = kernel_plans(report.sample(name, advertised))
    failures = [f for plan in plans if (f := check(plan)) is not None]
    if failures:
        shown = "\n  ".join(str(f) for f in failures[:_SHOWN])
        more = f"\n  ... and {len(failures) - _SHOWN} more" if len(failures) > _SHOWN else ""
        msg = (
            f"{name} on {target.cls.__name__}: {len(failures)} of {len(plans)} plans {what}:\n"
            f"  {shown}{more}"
        )
        pytest.fail(msg, pytrace=False)


def _no_views(target: Target) -> None:
    if target.surface is not None:
        pytest.skip(
            f"{target.cls.__name__} computes on whole tensors only and refuses views of them "
            f"(TestIndexingAndAssignment checks the refusal): no view operand can be built"
        )


class TestViewOperandsMatchTheOracle:
    def test_view_operands_of_name_match(
        self, conveyor_oracle_target: Target, conveyor_operation: str, conveyor_report: Report
    ) -> None:
        """Operands behind offset, transposed, negative-step and broadcast layouts give the
        oracle's results for their logical values."""
        target = conveyor_oracle_target
        _no_views(target)
        assert target.oracle is not None  # set when oracle_skip is None
        oracle, seed = target.oracle, conveyor_report.seed

        def check(plan: OperationPlan) -> PlanFailure | None:
            return check_views(target.cls, oracle, plan, seed)

        _run(target, conveyor_operation, conveyor_report, check, "fail on view operands")

    def test_view_operation_results_of_name_match(
        self, conveyor_oracle_target: Target, conveyor_operation: str, conveyor_report: Report
    ) -> None:
        """Operands that are results of the carrier's own view operations give the oracle's
        results."""
        target = conveyor_oracle_target
        _no_views(target)
        if target.view_skip:
            pytest.skip(target.view_skip)
        assert target.oracle is not None  # set when oracle_skip is None
        oracle, seed = target.oracle, conveyor_report.seed

        def check(plan: OperationPlan) -> PlanFailure | None:
            return check_view_ops(target.cls, oracle, plan, seed)

        what = "fail on results of view operations"
        _run(target, conveyor_operation, conveyor_report, check, what)


class TestRecomputeAfterWrite:
    def test_fresh_dispatch_after_write_sees_new_values(
        self, conveyor_oracle_target: Target, conveyor_operation: str, conveyor_report: Report
    ) -> None:
        """After ``x[...] = new`` on every operand, a fresh call on the same tensors gives the
        oracle's result for the new values, not a result remembered from before."""
        target = conveyor_oracle_target
        assert target.oracle is not None  # set when oracle_skip is None
        oracle, seed, surface = target.oracle, conveyor_report.seed, target.surface

        def check(plan: OperationPlan) -> PlanFailure | None:
            return check_recompute(target.cls, oracle, plan, seed, surface)

        what = "give stale or wrong results after their operands were written"
        _run(target, conveyor_operation, conveyor_report, check, what)


class TestRequiresGradLeavesResultsUnchanged:
    def test_requires_grad_operands_give_the_same_results(
        self,
        conveyor_oracle_target: Target,
        conveyor_differentiable_operation: str,
        conveyor_report: Report,
    ) -> None:
        """With its floating operands requiring grad, a call returns bit for bit the results
        of the same call without."""
        target = conveyor_oracle_target
        seed, surface = conveyor_report.seed, target.surface

        def check(plan: OperationPlan) -> PlanFailure | None:
            return check_requires_grad(target.cls, plan, seed, surface)

        what = "change their results when operands require grad"
        _run(target, conveyor_differentiable_operation, conveyor_report, check, what)
