"""The kit's comparison: exact for integers, tolerances by dtype and accumulation, NaN handling."""

from __future__ import annotations

import numpy as np

import conveyor as cv
from conveyor_testkit._compare import Tolerance, compare, tolerance
from conveyor_testkit._inputs import cases_for


class TestCompare:
    def test_integer_difference_names_first_index_and_values(self) -> None:
        """An exact comparison reports the first differing index and both values."""
        got = np.array([[1, 2], [3, 5]], np.int32)
        want = np.array([[1, 2], [3, 4]], np.int32)
        mismatch = compare(got, want, Tolerance())
        assert mismatch is not None
        assert mismatch.index == (1, 1)
        assert "first at (1, 1)" in mismatch.text and "5" in mismatch.text

    def test_nan_meets_nan_and_signed_zeros_are_equal(self) -> None:
        """NaN in the same place and -0.0 against 0.0 match."""
        got = np.array([np.nan, -0.0, np.inf])
        want = np.array([np.nan, 0.0, np.inf])
        assert compare(got, want, Tolerance(1e-15, 0.0)) is None

    def test_nan_against_number_and_wrong_infinity_fail(self) -> None:
        """NaN where a number is expected, or the wrong infinity, is a mismatch."""
        assert compare(np.array([np.nan]), np.array([1.0]), Tolerance(1.0, 1.0)) is not None
        assert compare(np.array([-np.inf]), np.array([np.inf]), Tolerance(1.0, 1.0)) is not None

    def test_float_error_reports_max_abs_error(self) -> None:
        """A float mismatch carries the largest absolute error."""
        mismatch = compare(np.array([1.0, 2.5]), np.array([1.0, 2.0]), Tolerance(1e-6, 0.0))
        assert mismatch is not None and mismatch.max_abs_error == 0.5

    def test_shape_difference_fails(self) -> None:
        """Different shapes never match."""
        assert compare(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance()) is not None


class TestTolerance:
    def test_integer_outputs_are_exact(self) -> None:
        plan = cv.resolve_plan("add", cv.int32, cv.int32)
        assert tolerance(plan, 0, [np.zeros(3, np.int32)]).exact

    def test_narrower_floats_get_looser_bounds(self) -> None:
        """float16 allows more than float32, which allows more than float64."""
        rtols = [
            tolerance(cv.resolve_plan("add", d, d), 0, []).rtol
            for d in (cv.float16, cv.float32, cv.float64)
        ]
        assert rtols[0] > rtols[1] > rtols[2] > 0

    def test_accumulations_and_transcendentals_are_looser(self) -> None:
        """Sums and exp allow more than an exactly rounded add of the same dtype."""
        x = np.full(20, 3.0, np.float32)
        add = tolerance(cv.resolve_plan("add", cv.float32, cv.float32), 0, [x, x])
        exp = tolerance(cv.resolve_plan("exp", cv.float32), 0, [x])
        total = tolerance(cv.resolve_plan("reduce_sum", cv.float32), 0, [x])
        assert exp.rtol > add.rtol
        assert total.atol > add.atol


def _half_sums(rows: np.ndarray) -> np.ndarray:
    """Pairwise sums of each row with every partial sum rounded to float16."""
    values = rows.astype(np.float16)
    while values.shape[-1] > 1:
        if values.shape[-1] % 2:
            values = np.concatenate([values, np.zeros((*values.shape[:-1], 1), np.float16)], -1)
        values = (values[..., 0::2] + values[..., 1::2]).astype(np.float16)
    return values[..., 0]


class TestAccumulationBound:
    def _case(self, dtype: cv.DType) -> tuple[cv.OperationPlan, np.ndarray, Tolerance]:
        plan = cv.resolve_plan("reduce_sum", dtype)
        (case,) = [c for c in cases_for(plan) if c.accumulation]
        (x,) = case.operands
        return plan, x, tolerance(plan, 0, [x], accumulation=True)

    def test_float32_accumulation_in_any_order_passes(self) -> None:
        """Sequential and NumPy's pairwise float32 sums both lie within the float32 bound."""
        for dtype in (cv.float32, cv.float16):
            _, x, tol = self._case(dtype)
            exact = x.astype(np.float64).sum(axis=-1).astype(x.dtype)
            sequential = np.add.accumulate(x.astype(np.float32), axis=-1)[:, -1]
            assert compare(sequential.astype(x.dtype), exact, tol) is None
            assert compare(x.sum(axis=-1, dtype=np.float32).astype(x.dtype), exact, tol) is None

    def test_float16_accumulation_fails_for_a_float32_accumulator(self) -> None:
        """Pairwise or sequential float16 sums fail, for float32 and float16 operands alike."""
        for dtype in (cv.float32, cv.float16):
            plan, x, tol = self._case(dtype)
            assert plan.accumulator_dtype is cv.float32
            exact = x.astype(np.float64).sum(axis=-1).astype(x.dtype)
            sequential = np.add.accumulate(x.astype(np.float16), axis=-1, dtype=np.float16)
            assert compare(sequential[:, -1].astype(x.dtype), exact, tol) is not None
            assert compare(_half_sums(x).astype(x.dtype), exact, tol) is not None

    def test_signed_zero_is_exact_for_neg_only_where_asked(self) -> None:
        """neg's tolerance checks the sign of zero; add's does not."""
        neg = tolerance(cv.resolve_plan("neg", cv.float32), 0, [])
        add = tolerance(cv.resolve_plan("add", cv.float32, cv.float32), 0, [])
        got, want = np.array([0.0], np.float32), np.array([-0.0], np.float32)
        mismatch = compare(got, want, neg)
        assert mismatch is not None and "wrong sign of zero" in mismatch.text
        assert compare(got, want, add) is None
