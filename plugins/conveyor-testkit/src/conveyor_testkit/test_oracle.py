"""Every advertised plan executes and matches the Generic oracle on generated inputs.

One test per advertised operation name runs all of that name's advertised plans (or the
``--conveyor-max-plans`` sample), case by case, and fails with the first mismatch of each failing
plan; the terminal summary lists them.
"""

from __future__ import annotations

import pytest

from conveyor.sdk import enumerate_plans, is_planned
from conveyor_testkit._run import check_plan
from conveyor_testkit._target import Target
from conveyor_testkit.plugin import Report

_SHOWN = 5


class TestAdvertisedPlansMatchTheOracle:
    def test_plans_of_name_match_generic(
        self, conveyor_oracle_target: Target, conveyor_operation: str, conveyor_report: Report
    ) -> None:
        """Each advertised plan of the name gives Generic's results within the tolerance."""
        target, name = conveyor_oracle_target, conveyor_operation
        if not is_planned(name):
            pytest.skip(f"{name!r} is not a planned name; the oracle covers planned names only")
        capabilities, oracle = target.capabilities, target.oracle
        assert capabilities is not None and oracle is not None  # set when oracle_skip is None
        advertised = [plan for plan in enumerate_plans(name) if capabilities.supports(plan)]
        plans = conveyor_report.sample(name, advertised)
        failures = []
        for plan in plans:
            failure = check_plan(target.cls, oracle, plan, conveyor_report.seed, target.surface)
            if failure is not None:
                failures.append(failure)
        conveyor_report.record(name, len(advertised), len(plans) - len(failures), failures)
        if failures:
            shown = "\n  ".join(str(f) for f in failures[:_SHOWN])
            more = f"\n  ... and {len(failures) - _SHOWN} more" if len(failures) > _SHOWN else ""
            msg = (
                f"{name} on {target.cls.__name__}: {len(failures)} of {len(plans)} plans do not "
                f"match the Generic oracle:\n  {shown}{more}"
            )
            pytest.fail(msg, pytrace=False)
