"""Every advertised differentiable name gives the oracle's gradients through the carrier."""

from __future__ import annotations

import pytest

from conveyor.sdk import enumerate_plans
from conveyor_testkit._grad import check_gradients, gradient_plans
from conveyor_testkit._target import Target
from conveyor_testkit.plugin import Report


class TestGradientsMatchTheOracle:
    def test_gradients_of_name_match(
        self,
        conveyor_oracle_target: Target,
        conveyor_differentiable_operation: str,
        conveyor_report: Report,
    ) -> None:
        """Backward through the carrier gives Generic's gradients (Generic: numeric ones)."""
        target, name = conveyor_oracle_target, conveyor_differentiable_operation
        capabilities, oracle = target.capabilities, target.oracle
        assert capabilities is not None and oracle is not None  # set when oracle_skip is None
        plans = gradient_plans([p for p in enumerate_plans(name) if capabilities.supports(p)])
        if not plans:
            pytest.skip(f"{target.cls.__name__} advertises no float32/float64 plan of {name}")
        failures = [
            f
            for p in plans
            if (f := check_gradients(target.cls, oracle, p, conveyor_report.seed, target.surface))
        ]
        if failures:
            shown = "\n  ".join(str(f) for f in failures)
            msg = f"{name} on {target.cls.__name__}: wrong gradients:\n  {shown}"
            pytest.fail(msg, pytrace=False)
