"""Linux check 3: each kernel's algorithm, run through TileLang's C target, matches Generic.

The C target lowers the very ``prim_func`` the Metal carrier lowers with ``target="metal"``;
the engine, layout classes, broadcasting, strides and weak-scalar handling are the Metal
carrier's own. Each advertised plan runs on contiguous, strided + broadcast, empty and 0-d
operands; a hypothesis test varies the shapes for a few names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conveyor as cv
from conveyor_metal._engine import Engine
from conveyor_metal._surface import advertised_plans

from .support import assert_close, cases, cpu_engine, operand, plan_id, reference, run
from .sweep import prepare_c, sample_plans

_PLANS = advertised_plans()
_SAMPLE = sample_plans()


@pytest.fixture(scope="module")
def engine(kernel_cache: Any) -> Engine:
    return cpu_engine(kernel_cache)


def _check(engine: Engine, plan: cv.OperationPlan) -> None:
    for label, operands, options in cases(plan, seed=1):
        got = run(engine, plan, options, operands)
        want = reference(plan, options, operands)
        try:
            assert_close(plan.operation, got, want)
        except AssertionError as exc:
            raise AssertionError(f"{plan_id(plan)} on {label} operands: {exc}") from None


@pytest.fixture(scope="module")
def sample_engine(engine: Engine) -> Engine:
    prepare_c(engine, _SAMPLE)
    return engine


@pytest.fixture(scope="module")
def sweep_engine(engine: Engine) -> Engine:
    prepare_c(engine, _PLANS)
    return engine


class TestEveryNameOnTheCTarget:
    """One plan of every advertised name matches Generic on every kind of layout."""

    @pytest.mark.parametrize("plan", _SAMPLE, ids=plan_id)
    def test_sample_plan_matches_generic(
        self, sample_engine: Engine, plan: cv.OperationPlan
    ) -> None:
        _check(sample_engine, plan)


@pytest.mark.metal_sweep
class TestEveryAdvertisedPlanOnTheCTarget:
    """Every advertised plan matches Generic on every kind of layout (the full sweep)."""

    @pytest.mark.parametrize("plan", _PLANS, ids=plan_id)
    def test_advertised_plan_matches_generic(
        self, sweep_engine: Engine, plan: cv.OperationPlan
    ) -> None:
        _check(sweep_engine, plan)


_SHAPES = st.lists(st.sampled_from([0, 1, 2, 3, 7, 64, 65]), min_size=0, max_size=3).map(tuple)


class TestShapesOnTheCTarget:
    """Broadcast pairs of any shape, with a transposed or offset first operand, match Generic."""

    @settings(
        max_examples=15,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        name=st.sampled_from(["add", "mul", "maximum", "lt"]),
        dtype=st.sampled_from([cv.float32, cv.int32]),
        shape=_SHAPES,
        drop=st.integers(0, 3),
        transpose=st.booleans(),
    )
    def test_broadcast_strided_pairs_match_generic(
        self,
        engine: Engine,
        name: str,
        dtype: cv.DType,
        shape: tuple[int, ...],
        drop: int,
        transpose: bool,
    ) -> None:
        rng = np.random.default_rng(len(shape) * 10 + drop)
        plan = cv.resolve_plan(name, dtype, dtype)
        options = cv.OperationExecutionOptions(name)
        # First operand: a transposed and/or offset view; second: shape with leading axes dropped.
        base = rng.integers(-9, 9, size=(3 + int(np.prod(shape)),)).astype(dtype.numpy)
        layout = cv.Layout(shape, offset=3)
        if transpose and len(shape) >= 2:
            layout = cv.Layout(shape[::-1], offset=3).permute(tuple(reversed(range(len(shape)))))
        first = operand(base, dtype, layout)
        second_shape = shape[min(drop, len(shape)) :]
        second = operand(rng.integers(-9, 9, size=second_shape).astype(dtype.numpy), dtype)
        got = run(engine, plan, options, [first, second])
        want = reference(plan, options, [first, second])
        assert_close(name, got, want)
