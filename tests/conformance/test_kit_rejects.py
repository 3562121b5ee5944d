"""The conformance kit rejects deliberately broken carriers, naming each defect, and never passes
a run that checked nothing.
"""

from __future__ import annotations

import pytest

from tests.conformance.kit_runner import KitRun, run_kit

# Kit runs: run id -> extra pytest arguments (no --conveyor-carrier at all for "unset").
_RUNS: dict[str, list[str]] = {
    "off_by_one": ["--conveyor-carrier=broken_off_by_one"],
    "caching": ["--conveyor-carrier=broken_caching"],
    "eager": ["--conveyor-carrier=broken_eager"],
    "overclaim": ["--conveyor-carrier=broken_overclaim"],
    "dependent": ["--conveyor-carrier=broken_dependent"],
    "mutating": ["--conveyor-carrier=broken_mutating"],
    "silent_mutation": ["--conveyor-carrier=broken_silent_mutation"],
    "aliasing": ["--conveyor-carrier=broken_aliasing"],
    "foreign_alloc": ["--conveyor-carrier=broken_foreign_alloc"],
    "large": ["--conveyor-carrier=broken_large"],
    "gradient": ["--conveyor-carrier=broken_gradient"],
    "indexing": ["--conveyor-carrier=broken_indexing"],
    "moves": ["--conveyor-carrier=broken_moves"],
    "ignores_layout": ["--conveyor-carrier=broken_ignores_layout"],
    "past_largest": ["--conveyor-carrier=broken_past_largest"],
    "first_tile": ["--conveyor-carrier=broken_first_tile"],
    "half_accumulator": ["--conveyor-carrier=broken_half_accumulator"],
    "stale": ["--conveyor-carrier=broken_stale"],
    "grad_mode": ["--conveyor-carrier=broken_grad_mode"],
    "unsigned_zero": ["--conveyor-carrier=broken_unsigned_zero"],
    "unknown": ["--conveyor-carrier=no_such_carrier"],
    "unset": ["-rs"],
}


@pytest.fixture(scope="module")
def kit_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KitRun]:
    return run_kit(tmp_path_factory.mktemp("kit"), _RUNS)


class TestBrokenCarriersFail:
    def test_wrong_results_fail_with_the_first_mismatch(self, kit_runs: dict[str, KitRun]) -> None:
        """An add that is off by one fails the oracle check, naming plan, index and values;
        the correct neg passes."""
        run = kit_runs["off_by_one"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED plans of add: 4 of 4 checked" in summary
        assert "add(input: float32, other: float32) -> float32 [case 4x5]" in summary
        assert "max abs error 1;" in summary
        assert "first at (0, 0): got" in summary
        assert "plans of neg" not in summary
        assert "result: DOES NOT CONFORM" in summary

    def test_cached_operations_fail_the_freshness_check(self, kit_runs: dict[str, KitRun]) -> None:
        """A dispatch hook returning a cached operation fails the dispatch contract."""
        run = kit_runs["caching"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED TestDispatchIsFresh::test_every_advertised_name_dispatches_fresh" in summary
        assert "neg: the second dispatch raised TypeError" in summary
        assert "already dispatched" in summary

    def test_allocation_before_refusal_fails(self, kit_runs: dict[str, KitRun]) -> None:
        """Allocating the result before the capability gate refuses fails the refusal check."""
        run = kit_runs["eager"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED TestRefusalsBeforeAllocation::test_unadvertised_plan_refused" in summary
        assert "allocated or entered the implementation before refusing" in summary
        assert "Eager.allocate" in summary

    def test_unresolvable_capabilities_fail(self, kit_runs: dict[str, KitRun]) -> None:
        """A forged capability and an unknown name fail the registry checks, naming both."""
        run = kit_runs["overclaim"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "'frobnicate' is not in conveyor.sdk.registered_operations()" in summary
        assert "FAILED TestCapabilitiesMatchTheRegistry::test_every_capability_is_a_central" in (
            summary
        )
        assert "compute=" in summary and "float16" in summary


class TestNothingCheckedFails:
    def test_dependent_carrier_fails_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """A carrier the kit cannot drive checks nothing, so the run fails and says why."""
        run = kit_runs["dependent"]
        assert run.returncode == 1, run.output[-4000:]
        summary = run.summary()
        assert "not tested: Tiered is a DependentCarrier" in summary
        assert "checks: 0 run, 0 passed, 0 failed," in summary
        assert "result: NOTHING CHECKED" in summary

    def test_unset_carrier_fails_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """Without --conveyor-carrier every check skips, telling how to run the kit; exit 1."""
        run = kit_runs["unset"]
        assert run.returncode == 1, run.output[-4000:]
        assert "--conveyor-carrier is not set" in run.output
        assert " passed" not in run.output
        assert "result: NOTHING CHECKED" in run.summary()

    def test_unknown_carrier_is_a_usage_error(self, kit_runs: dict[str, KitRun]) -> None:
        """An unregistered name stops the run with the known names listed."""
        run = kit_runs["unknown"]
        assert run.returncode == 4, run.output[-4000:]
        assert "--conveyor-carrier='no_such_carrier'" in run.output
        assert "'generic'" in run.output


# Each deliberately broken carrier, and what the kit must say about it.
_REJECTED: dict[str, list[str]] = {
    "mutating": ["it mutated its input input (version 1 -> 2); kernels must never write"],
    "silent_mutation": ["it mutated its input input without a version bump"],
    "aliasing": ["output 0 aliases input operand 0 (the same carrier instance)"],
    "foreign_alloc": [
        "FAILED TestRefusalsBeforeAllocation::test_unadvertised_plan_refused_before_allocation",
        "Generic.allocate (another carrier class)",
    ],
    "large": ["[case n=65]", "first at (64,)"],
    "gradient": ["FAILED TestGradientsMatchTheOracle::test_gradients_of_name_match[mul]"],
    "indexing": ["FAILED TestIndexingAndAssignment::test_indexing_matches_numpy"],
    "moves": ["FAILED TestMoves::test_round_trip_with_cpu_is_bit_exact", "the move to CPU changed"],
}


class TestCommonVendorMistakesAreRejected:
    @pytest.mark.parametrize("run_id", sorted(_REJECTED))
    def test_broken_carrier_rejected_naming_the_problem(
        self, kit_runs: dict[str, KitRun], run_id: str
    ) -> None:
        """Each broken carrier fails the kit (exit 1) with a message naming its defect."""
        run = kit_runs[run_id]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        for text in _REJECTED[run_id]:
            assert text in summary, summary[-4000:]
        assert "result: DOES NOT CONFORM" in summary


def _rejected(run: KitRun) -> str:
    """The summary of a run that must have failed the kit."""
    summary = run.summary()
    assert run.returncode == 1, run.output[-4000:]
    assert "result: DOES NOT CONFORM" in summary
    return summary


class TestBreaksTheOldKitMissedAreCaught:
    """Issue 22, item 5: breaks that passed the whole kit before it fed views, long operands,
    long inner extents, accumulation cases, writes and requires_grad operands."""

    def test_kernel_ignoring_offset_and_strides_fails_on_view_operands(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """An add that reads its operands' storage from slot 0 passes every contiguous case and
        fails on offset views and on results of view operations."""
        summary = _rejected(kit_runs["ignores_layout"])
        assert "FAILED TestViewOperandsMatchTheOracle::test_view_operands_of_name_match[add]" in (
            summary
        )
        assert "[case 4x5, offset view (3 slots into its buffer)]" in summary
        assert "test_view_operation_results_of_name_match[add]" in summary
        assert "FAILED plans of add" not in summary  # contiguous operands alone never showed it

    def test_error_only_past_4097_elements_fails_at_65537(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """An add wrong only past the old largest case fails at n=65537, at element 4097."""
        summary = _rejected(kit_runs["past_largest"])
        assert "add(input: float32, other: float32) -> float32 [case n=65537]" in summary
        assert "first at (4097,)" in summary

    def test_matmul_wrong_past_inner_extent_8_fails_at_inner_64(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """A matmul that sums only its first tile of 8 inner terms fails the inner-64 case."""
        summary = _rejected(kit_runs["first_tile"])
        assert "FAILED plans of matmul: 4 of 4 checked" in summary
        assert "[case inner 64: 3x64 @ 64x5]" in summary

    def test_float16_accumulation_of_float32_sum_fails_the_accumulator_bound(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """A float32 reduce_sum accumulating pairwise in float16 fails the accumulation case,
        whose bound comes from the plan's float32 accumulator."""
        summary = _rejected(kit_runs["half_accumulator"])
        assert "FAILED plans of reduce_sum: 1 of 1 checked" in summary
        plan = "reduce_sum(input: float32) -> float32 [accumulator float32]"
        assert f"{plan} [case accumulation 16x4097 axis=1 (half the rows cancelling)]" in summary
        assert "elements outside rtol=4.77e-07, atol=0.000995" in summary

    def test_stale_cached_results_after_a_write_fail_the_recompute(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """A neg that returns results cached by operand identity fails after x[...] = new."""
        summary = _rejected(kit_runs["stale"])
        check = "TestRecomputeAfterWrite::test_fresh_dispatch_after_write_sees_new_values[neg]"
        assert f"FAILED {check}" in summary
        assert "[case 4x5, recomputed after x[...] = new values]" in summary
        assert "FAILED plans of neg" not in summary

    def test_results_changed_by_requires_grad_fail(self, kit_runs: dict[str, KitRun]) -> None:
        """A mul one ulp off when an operand requires grad fails the requires_grad check."""
        summary = _rejected(kit_runs["grad_mode"])
        check = "TestRequiresGradLeavesResultsUnchanged::test_requires_grad_operands_give_the"
        assert f"FAILED {check}_same_results[mul]" in summary
        assert "differ from the same call without requires_grad" in summary
        assert "FAILED plans of mul" not in summary

    def test_neg_of_zero_giving_plus_zero_fails_the_sign_check(
        self, kit_runs: dict[str, KitRun]
    ) -> None:
        """A neg computed as 0 - x (neg(0.0) == +0.0) fails: neg's sign of zero is exact."""
        summary = _rejected(kit_runs["unsigned_zero"])
        assert "FAILED plans of neg: 2 of 2 checked" in summary
        assert "elements have the wrong sign of zero" in summary
        assert "got 0.0, expected -0.0" in summary
