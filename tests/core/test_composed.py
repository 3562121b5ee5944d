"""The composed everyday functions against NumPy, on CPU and Generic, with their gradients.

Values come from hypothesis (shapes with empty and unit extents, 0-d where the function takes
it, special values for the element-wise tests); every differentiable function is checked
against central finite differences with the shared gradient check.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.exceptions import AxisError

import conveyor as cv
from conveyor.lib import composed
from tests.generic.gradcheck import GradientCase, check_gradient

CARRIERS = ["cpu", "generic"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(params=CARRIERS)
def carrier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def carrier_class(name: str) -> type:
    return type(cv.zeros(1, carrier=name).carrier)


def finite(shape: Any = None, min_dims: int = 1) -> st.SearchStrategy[Any]:
    shapes = shape or hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=4)
    return hnp.arrays(np.float64, shapes, elements=st.floats(-50, 50))


def on(values: Any, carrier: str) -> cv.Tensor:
    return cv.tensor(values, cv.float64, carrier)


class TestJoinsAndSplits:
    def test_concatenate_stack_split(self, carrier: str) -> None:
        """concatenate/stack/split match NumPy for every axis, empty pieces included."""

        @SETTINGS
        @given(values=finite())
        def check(values: Any) -> None:
            t = on(values, carrier)
            for axis in range(values.ndim):
                np.testing.assert_array_equal(
                    cv.concatenate([t, t[:0] if axis == 0 else t, t], axis=axis).numpy(),
                    np.concatenate(
                        [values, values[:0] if axis == 0 else values, values], axis=axis
                    ),
                )
                np.testing.assert_array_equal(
                    cv.stack([t, t], axis=axis).numpy(), np.stack([values, values], axis=axis)
                )
                cut = [values.shape[axis] // 2]
                for got, want in zip(
                    cv.split(t, cut, axis=axis), np.split(values, cut, axis=axis), strict=True
                ):
                    np.testing.assert_array_equal(got.numpy(), want)

        check()

    def test_concatenate_promotes_dtypes(self, carrier: str) -> None:
        """Pieces of different dtypes join in their promoted dtype."""
        a = cv.tensor([1, 2], cv.int32, carrier)
        b = cv.tensor([0.5], cv.float64, carrier)

        joined = cv.concatenate([a, b])

        assert joined.dtype is cv.float64
        np.testing.assert_array_equal(joined.numpy(), [1.0, 2.0, 0.5])

    def test_concatenate_refusals(self, carrier: str) -> None:
        """Mismatched shapes, 0-d pieces and empty lists raise ValueError with the reason."""
        a = cv.zeros((2, 3), carrier=carrier)
        with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(2, 4\) differ off axis 0"):
            cv.concatenate([a, cv.zeros((2, 4), carrier=carrier)])
        with pytest.raises(ValueError, match="0-d tensors cannot be joined; use stack"):
            cv.concatenate([cv.zeros((), carrier=carrier)])
        with pytest.raises(ValueError, match="needs at least one tensor"):
            cv.concatenate([])
        with pytest.raises(ValueError, match="do not divide into 4 equal parts"):
            cv.split(a, 4, axis=1)


class TestReordering:
    def test_flip_roll_pad_tile_repeat(self, carrier: str) -> None:
        """The reordering functions match NumPy for every axis."""

        @SETTINGS
        @given(values=finite(), shift=st.integers(-5, 5), reps=st.integers(0, 3))
        def check(values: Any, shift: int, reps: int) -> None:
            t = on(values, carrier)
            np.testing.assert_array_equal(cv.flip(t).numpy(), np.flip(values))
            np.testing.assert_array_equal(cv.roll(t, shift).numpy(), np.roll(values, shift))
            np.testing.assert_array_equal(
                cv.pad(t, 1, value=-1.0).numpy(), np.pad(values, 1, constant_values=-1.0)
            )
            np.testing.assert_array_equal(cv.tile(t, (reps, 2)).numpy(), np.tile(values, (reps, 2)))
            np.testing.assert_array_equal(cv.repeat(t, reps).numpy(), np.repeat(values, reps))
            for axis in range(values.ndim):
                np.testing.assert_array_equal(cv.flip(t, axis=axis).numpy(), np.flip(values, axis))
                np.testing.assert_array_equal(
                    cv.roll(t, shift, axis=axis).numpy(), np.roll(values, shift, axis)
                )
                np.testing.assert_array_equal(
                    cv.repeat(t, reps, axis=axis).numpy(), np.repeat(values, reps, axis)
                )

        check()

    def test_pad_per_axis_widths(self, carrier: str) -> None:
        """NumPy's per-axis (before, after) widths."""
        values = np.arange(6.0).reshape(2, 3)

        got = cv.pad(on(values, carrier), ((1, 0), (2, 1)))

        np.testing.assert_array_equal(got.numpy(), np.pad(values, ((1, 0), (2, 1))))
        with pytest.raises(ValueError, match="widths must be non-negative"):
            cv.pad(on(values, carrier), -1)


class TestWrongResultsNowMatchNumPy:
    """Calls that returned a wrong value without an error now match NumPy or refuse."""

    @pytest.mark.parametrize("cuts", [[-2], [1, -1], [-10], [3, 1], [-1, 7]])
    def test_split_negative_and_clamped_cuts_match_numpy(
        self, carrier: str, cuts: list[int]
    ) -> None:
        """Negative cut indices count from the end and cuts past an end clamp, as in NumPy."""
        values = np.arange(5.0)

        got = cv.split(on(values, carrier), cuts)

        want = np.split(values, cuts)
        assert [g.numpy().tolist() for g in got] == [w.tolist() for w in want]

    def test_take_from_empty_axis_index_error(self, carrier: str) -> None:
        """take of an empty tensor with indices refuses them (IndexError), as gather does."""
        empty = on(np.zeros(0), carrier)
        version = empty.version

        with pytest.raises(IndexError) as info:
            cv.take(empty, [0, 3])

        assert str(info.value) == (
            f"take on {carrier_class(carrier).__name__}: index 0 is out of range for axis 0 "
            f"with extent 0; indices must lie in [0, 0)"
        )
        assert empty.version == version and empty.shape == (0,)

    def test_take_out_of_range_on_other_empty_axis_index_error(self, carrier: str) -> None:
        """With another axis empty, indices are still checked against the taken axis."""
        x = on(np.zeros((3, 0)), carrier)

        with pytest.raises(IndexError, match=r"index -4 is out of range for axis 0 with extent 3"):
            cv.take(x, [1, -4], axis=0)
        assert cv.take(x, [2, -3], axis=0).shape == (2, 0)  # in range: the empty result

    def test_flip_repeated_axis_value_error(self, carrier: str) -> None:
        """flip refuses an axis named twice (NumPy's ValueError) instead of flipping once."""
        x = on(np.arange(6.0).reshape(2, 3), carrier)

        with pytest.raises(ValueError) as info:
            cv.flip(x, axis=(0, -2))

        assert str(info.value) == "flip: repeated axis in (0, -2); name each axis once"
        np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))

    @pytest.mark.parametrize("side", ["left", "right"])
    @pytest.mark.parametrize(
        ("sorted_values", "x"),
        [
            ([1.0, 2.0], math.nan),
            ([1.0, 2.0, math.nan], math.nan),
            ([1.0, math.nan, math.nan], 5.0),
            ([1.0, 2.0, math.nan], [0.5, math.nan, 2.0, math.inf]),
        ],
    )
    def test_searchsorted_puts_nan_last_as_sort_does(
        self, carrier: str, side: str, sorted_values: list[float], x: Any
    ) -> None:
        """NaN sorts after every number (NumPy 2): as a query and as entries of the sequence."""
        got = cv.searchsorted(on(sorted_values, carrier), x, side=side)

        want = np.searchsorted(np.array(sorted_values), x, side=side)
        np.testing.assert_array_equal(got.numpy(), want)

    @pytest.mark.parametrize("axis", [2, -2])
    @pytest.mark.parametrize("function", [cv.argsort, composed.sort])
    def test_zero_d_sort_axis_out_of_range_axis_error(
        self, carrier: str, function: Any, axis: int
    ) -> None:
        """A 0-d tensor answers to axis 0 and -1 only, as reduce_sum and the sort kernel say."""
        x = on(1.5, carrier)

        with pytest.raises(AxisError) as info:
            function(x, axis=axis)

        name = function.__name__
        assert str(info.value) == (
            f"{name} on {carrier_class(carrier).__name__}: axis {axis} is out of range for 0 "
            f"axes; pass an axis in [-1, 1)"
        )
        assert function(x, axis=-1).shape == ()


SINGULAR = [
    [[0.0, 0.0], [0.0, 0.0]],
    [[0.0, 1.0], [0.0, 1.0]],
    [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0]],
]


class TestSingularMatrices:
    """Singular and indefinite input: NumPy's values, or NumPy's LinAlgError."""

    @pytest.mark.parametrize("matrix", SINGULAR)
    def test_det_and_slogdet_of_singular_matrix_are_numpys(
        self, carrier: str, matrix: list[list[float]]
    ) -> None:
        """det is 0.0 and slogdet (0.0, -inf) for an exactly singular matrix, never NaN."""
        x = on(matrix, carrier)

        det = cv.det(x).numpy()
        sign, logabs = (t.numpy() for t in cv.slogdet(x))

        assert (det, sign, logabs) == (0.0, 0.0, -math.inf)
        assert not np.signbit(det) and not np.signbit(sign)  # 0.0 as in NumPy, not -0.0

    def test_det_of_a_batch_with_one_singular_matrix(self, carrier: str) -> None:
        """Only the singular matrix of a batch gets 0; the others keep their determinant."""
        batch = on([[[2.0, 0.0], [0.0, 3.0]], [[0.0, 1.0], [0.0, 1.0]]], carrier)

        np.testing.assert_array_equal(cv.det(batch).numpy(), [6.0, 0.0])

    @pytest.mark.parametrize("matrix", SINGULAR)
    @pytest.mark.parametrize("function", ["inv", "solve"])
    def test_inv_and_solve_of_singular_matrix_value_error(
        self, carrier: str, matrix: list[list[float]], function: str
    ) -> None:
        """inv and solve refuse a singular matrix with ValueError (NumPy's LinAlgError is one)
        instead of returning inf / NaN; the input is unchanged."""
        x = on(matrix, carrier)
        rhs = on(np.ones(len(matrix)), carrier)
        version = x.version

        with pytest.raises(ValueError) as info:
            cv.inv(x) if function == "inv" else cv.solve(x, rhs)

        assert type(info.value) is ValueError
        assert str(info.value).startswith(
            f"{function} on {carrier_class(carrier).__name__}: a matrix is singular, so "
        )
        assert "conveyor.array_api.linalg.pinv" in str(info.value)
        assert x.version == version and x.numpy().tolist() == matrix

    @pytest.mark.parametrize(
        "matrix",
        [[[1.0, 2.0], [2.0, 1.0]], [[0.0, 0.0], [0.0, 1.0]], [[-1.0]]],
    )
    def test_cholesky_of_non_positive_definite_matrix_value_error(
        self, carrier: str, matrix: list[list[float]]
    ) -> None:
        """cholesky refuses a matrix that is not positive definite instead of returning NaN
        entries. (A matrix holding NaN gives NaN entries, as NumPy's does.)"""
        x = on(matrix, carrier)

        with pytest.raises(ValueError) as info:
            cv.cholesky(x)

        assert str(info.value) == (
            f"cholesky on {carrier_class(carrier).__name__}: a matrix is not positive definite, "
            f"so it has no Cholesky factor"
        )
        assert np.array_equal(x.numpy(), np.array(matrix))

    def test_non_singular_matrices_still_solve(self, carrier: str) -> None:
        """The checks refuse nothing regular: a permutation needing a pivot still inverts."""
        x = on([[0.0, 2.0], [1.0, 0.0]], carrier)

        np.testing.assert_array_equal(cv.inv(x).numpy(), np.linalg.inv(x.numpy()))
        np.testing.assert_allclose(
            cv.cholesky(on([[4.0, 2.0], [2.0, 3.0]], carrier)).numpy(),
            np.linalg.cholesky(np.array([[4.0, 2.0], [2.0, 3.0]])),
        )


class TestCreation:
    def test_linspace_eye_like(self, carrier: str) -> None:
        """linspace, eye, full_like and empty_like as NumPy (empty_like is zero-filled)."""
        np.testing.assert_allclose(
            cv.linspace(0, 1, 5, carrier=carrier).numpy(), np.linspace(0, 1, 5, dtype=np.float32)
        )
        np.testing.assert_array_equal(cv.eye(3, 2, k=-1, carrier=carrier).numpy(), np.eye(3, 2, -1))
        t = cv.tensor([[1, 2]], cv.int16, carrier)
        like = cv.full_like(t, 9)
        assert like.dtype is cv.int16 and type(like.carrier) is type(t.carrier)
        np.testing.assert_array_equal(like.numpy(), [[9, 9]])
        np.testing.assert_array_equal(cv.empty_like(t).numpy(), [[0, 0]])
        with pytest.raises(ValueError, match="num must be a non-negative int, got -1"):
            cv.linspace(0, 1, -1)


class TestStatistics:
    # NumPy, the reference, warns for empty axes where Conveyor (like the standard) returns NaN.
    @pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:Degrees of freedom")
    def test_mean_std_var_any_all(self, carrier: str) -> None:
        """Reductions over all axes and each axis match NumPy (NaN over empty axes for mean)."""

        @SETTINGS
        @given(values=finite(min_dims=1))
        def check(values: Any) -> None:
            t = on(values, carrier)
            with np.errstate(all="ignore"):
                for axis in (None, *range(values.ndim)):
                    np.testing.assert_allclose(
                        cv.mean(t, axis=axis).numpy(),
                        np.mean(values, axis=axis),
                        rtol=1e-12,
                        atol=1e-12,
                    )
                    np.testing.assert_allclose(
                        cv.var(t, axis=axis).numpy(),
                        np.var(values, axis=axis),
                        rtol=1e-9,
                        atol=1e-9,
                    )
                    np.testing.assert_allclose(
                        cv.std(t, axis=axis, keepdims=True).numpy(),
                        np.std(values, axis=axis, keepdims=True),
                        rtol=1e-9,
                        atol=1e-9,
                    )
                    np.testing.assert_array_equal(
                        cv.any(t > 10, axis=axis).numpy(), np.any(values > 10, axis=axis)
                    )
                    np.testing.assert_array_equal(
                        cv.all(t > -40, axis=axis).numpy(), np.all(values > -40, axis=axis)
                    )

        check()

    def test_softmax_family(self, carrier: str) -> None:
        """softmax, log_softmax and logsumexp match the stable NumPy formulas, even far out."""

        @SETTINGS
        @given(
            values=hnp.arrays(
                np.float64,
                hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
                elements=st.floats(-800, 800),
            )
        )
        def check(values: Any) -> None:
            t = on(values, carrier)
            high = values.max(axis=-1, keepdims=True)
            lse = np.log(np.exp(values - high).sum(axis=-1, keepdims=True)) + high
            np.testing.assert_allclose(
                cv.logsumexp(t, axis=-1, keepdims=True).numpy(), lse, rtol=1e-12
            )
            np.testing.assert_allclose(
                cv.log_softmax(t).numpy(), values - lse, rtol=1e-9, atol=1e-9
            )
            np.testing.assert_allclose(
                cv.softmax(t).numpy(), np.exp(values - lse), rtol=1e-9, atol=1e-300
            )

        check()

    def test_logsumexp_of_infinities(self, carrier: str) -> None:
        """All -inf gives -inf; any +inf gives +inf (no NaN from inf - inf)."""
        t = on([[-math.inf, -math.inf], [math.inf, 1.0]], carrier)

        np.testing.assert_array_equal(cv.logsumexp(t, axis=1).numpy(), [-math.inf, math.inf])


class TestPredicates:
    def test_isnan_isfinite_isinf_isclose(self, carrier: str) -> None:
        """The value tests agree with NumPy on special values, ints and bools."""
        values = np.array([0.0, -0.0, 1.0, math.inf, -math.inf, math.nan, 1e-300])
        t = on(values, carrier)

        np.testing.assert_array_equal(cv.isnan(t).numpy(), np.isnan(values))
        np.testing.assert_array_equal(cv.isfinite(t).numpy(), np.isfinite(values))
        np.testing.assert_array_equal(cv.isinf(t).numpy(), np.isinf(values))
        np.testing.assert_array_equal(
            cv.isclose(t, t + 1e-9).numpy(), np.isclose(values, values + 1e-9)
        )
        np.testing.assert_array_equal(
            cv.isclose(t, t, equal_nan=True).numpy(), np.isclose(values, values, equal_nan=True)
        )
        np.testing.assert_array_equal(
            cv.isnan(cv.tensor([1, 2], carrier=carrier)).numpy(), [False, False]
        )
        assert cv.allclose(t[:3], t[:3] * (1 + 1e-7))
        assert not cv.allclose(t, t)  # NaN is not close to NaN without equal_nan


class TestContractions:
    @pytest.mark.parametrize(
        ("spec", "shapes"),
        [
            ("ij,jk->ik", [(2, 3), (3, 4)]),
            ("bij,bjk->bik", [(2, 2, 3), (2, 3, 1)]),
            ("i,i->", [(0,), (0,)]),
            ("ij->ji", [(2, 3)]),
            ("ij,kl", [(2, 1), (1, 2)]),
            ("...ij,...jk->...ik", [(2, 1, 3), (3, 2)]),
            ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
        ],
    )
    def test_einsum_matches_numpy(
        self, carrier: str, spec: str, shapes: list[tuple[int, ...]]
    ) -> None:
        """einsum through permute/reshape/matmul matches NumPy's einsum."""
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s) for s in shapes]

        got = cv.einsum(spec, *[on(a, carrier) for a in arrays])

        np.testing.assert_allclose(got.numpy(), np.einsum(spec, *arrays), rtol=1e-12, atol=1e-12)

    def test_tensordot_outer(self, carrier: str) -> None:
        """tensordot (int and explicit axes) and outer match NumPy."""
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3, 2))

        np.testing.assert_allclose(
            cv.tensordot(on(a, carrier), on(b, carrier), axes=([1, 2], [1, 0])).numpy(),
            np.tensordot(a, b, axes=([1, 2], [1, 0])),
            rtol=1e-12,
        )
        np.testing.assert_allclose(
            cv.tensordot(on(a, carrier), on(b, carrier), axes=1).numpy(),
            np.tensordot(a, b, axes=1),
            rtol=1e-12,
        )
        np.testing.assert_allclose(
            cv.outer(on(a[0, 0], carrier), on(b[0, 0], carrier)).numpy(), np.outer(a[0, 0], b[0, 0])
        )

    def test_einsum_refusals(self, carrier: str) -> None:
        """Repeated subscripts (diagonals) and mismatched operands raise ValueError."""
        t = on(np.eye(2), carrier)
        with pytest.raises(ValueError, match="repeated subscript in 'ii'"):
            cv.einsum("ii->i", t)
        with pytest.raises(ValueError, match="2 subscript groups for 1 operands"):
            cv.einsum("ij,jk->ik", t)


class TestAdvancedIndexing:
    def test_boolean_and_integer_keys_match_numpy(self, carrier: str) -> None:
        """Masks, index lists/arrays/tensors and mixed keys read what NumPy reads."""
        values = np.arange(24.0).reshape(2, 3, 4)
        t = on(values, carrier)
        keys: list[Any] = [
            values > 10,
            [1, 0],
            (slice(None), [2, 0]),
            (0, [0, 2], slice(1, 3)),
            (np.array([True, False]), Ellipsis, -1),
            (cv.tensor([1, 1], carrier=carrier), 2),
        ]
        for key in keys:
            host = (
                tuple(k.numpy() if isinstance(k, cv.Tensor) else k for k in key)
                if isinstance(key, tuple)
                else key
            )
            np.testing.assert_array_equal(t[key].numpy(), values[host])
        np.testing.assert_array_equal(t[t > 10].numpy(), values[values > 10])

    def test_advanced_assignment(self, carrier: str) -> None:
        """Masked and integer-array assignment write into the tensor's storage."""
        values = np.arange(6.0)
        t = on(values, carrier)
        storage = t.carrier

        t[t > 3] = -1.0
        t[[0, 1]] = cv.tensor([7.0, 8.0], cv.float64, carrier)
        values[values > 3] = -1.0
        values[[0, 1]] = [7.0, 8.0]

        assert t.carrier is storage
        np.testing.assert_array_equal(t.numpy(), values)

    def test_out_of_range_index_is_refused(self, carrier: str) -> None:
        """An index past the extent raises IndexError, nothing is written."""
        t = on(np.zeros(3), carrier)

        with pytest.raises(IndexError, match="out of bounds"):
            t[[5]]
        with pytest.raises(IndexError, match="out of bounds"):
            t[[5]] = 1.0
        np.testing.assert_array_equal(t.numpy(), [0, 0, 0])


def _case(name: str, build: Any) -> GradientCase:
    return GradientCase(name, name, build)


def _normal(*shape: int) -> Any:
    return lambda rng: ([rng.standard_normal(shape)], {})


GRADIENT_CASES = [
    (_case("mean", _normal(2, 3)), lambda x: cv.mean(x, axis=1)),
    (_case("var", _normal(2, 3)), lambda x: cv.var(x, axis=0, correction=1)),
    (_case("std", lambda rng: ([rng.standard_normal((2, 3)) + 3], {})), lambda x: cv.std(x)),
    (_case("softmax", _normal(2, 3)), lambda x: cv.softmax(x, axis=-1)),
    (_case("log_softmax", _normal(2, 3)), lambda x: cv.log_softmax(x, axis=0)),
    (_case("logsumexp", _normal(3, 2)), lambda x: cv.logsumexp(x, axis=1)),
    (_case("concatenate", _normal(2, 2)), lambda x: cv.concatenate([x, x * 2.0], axis=1)),
    (_case("stack", _normal(3)), lambda x: cv.stack([x, x * x])),
    (_case("flip", _normal(2, 3)), lambda x: cv.flip(x) * x),
    (_case("roll", _normal(4)), lambda x: cv.roll(x, 1) * x),
    (_case("pad", _normal(2, 2)), lambda x: cv.pad(x, 1, value=2.0)),
    (_case("tile", _normal(2)), lambda x: cv.tile(x, (2, 2))),
    (_case("repeat", _normal(3)), lambda x: cv.repeat(x, [1, 2, 0])),
    (_case("einsum", _normal(2, 3)), lambda x: cv.einsum("ij,kj->ik", x, x)),
    (_case("tensordot", _normal(2, 3)), lambda x: cv.tensordot(x, x, axes=([0], [0]))),
    (_case("outer", _normal(3)), lambda x: cv.outer(x, x)),
    (
        _case("getitem_mask", _normal(6)),
        lambda x: x[np.array([True, False, True, True, False, True])] * 3.0,
    ),
    (_case("getitem_ints", _normal(3, 2)), lambda x: x[[2, 0, 2]]),
    (_case("where", _normal(5)), lambda x: cv.where(x > 0, x * x, -x)),
    (_case("tan", lambda rng: ([rng.uniform(-1, 1, (4,))], {})), lambda x: cv.tan(x)),
    (_case("atan", lambda rng: ([rng.uniform(-3, 3, (4,))], {})), lambda x: cv.atan(x)),
    (_case("log1p", lambda rng: ([rng.uniform(0.1, 2, (4,))], {})), lambda x: cv.log1p(x)),
    (_case("expm1", _normal(4)), lambda x: cv.expm1(x)),
    (_case("hypot", _normal(4)), lambda x: cv.hypot(x, x * 0.5 + 1.0)),
    (
        _case("cumulative_prod", lambda rng: ([rng.uniform(0.5, 2, (5,))], {})),
        lambda x: cv.cumulative_prod(x),
    ),
]


@pytest.mark.parametrize(
    ("case", "function"), GRADIENT_CASES, ids=[c.id for c, _ in GRADIENT_CASES]
)
def test_composed_gradients_match_finite_differences(
    carrier: str, case: GradientCase, function: Any
) -> None:
    """Gradients flow through every differentiable composed function."""
    check_gradient(carrier_class(carrier), case, function=function)


NEW_PUBLIC_NAMES = sorted(
    {
        *composed.__all__,
        "PrintOptions",
        "array_api",
        "default_carrier",
        "get_default_carrier",
        "get_printoptions",
        "printoptions",
        "random",
        "set_default_carrier",
        "set_printoptions",
    }
    - {"sort"}  # cv.sort stays the dispatch name (values and indices)
)


@pytest.mark.parametrize("name", NEW_PUBLIC_NAMES)
def test_public_name_is_exported(name: str) -> None:
    """Each everyday function, option and module is in conveyor.__all__ and importable."""
    assert name in cv.__all__
    assert getattr(cv, name) is not None
