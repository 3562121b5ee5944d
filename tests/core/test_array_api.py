"""conveyor.array_api against array-api-strict, the standard's reference namespace.

Each function of the namespace is run on CPU and Generic with hypothesis-drawn inputs (shapes
with empty, unit and broadcast extents, 0-d, special values) and compared with the same call in
array-api-strict: same dtype, same shape, same values (NaN where NaN, tolerance for the
composed transcendental functions). ``array_api_compat`` must recognise the namespace.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat
import array_api_strict as xps
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
import conveyor.array_api as xp

CARRIERS = ["cpu", "generic"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))

FLOAT_DTYPES = ["float32", "float64"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, math.inf, -math.inf, math.nan, 1e-30, 1e30, 2.5]


def floats(dtype: str, *, shape: Any = None, special: bool = True) -> st.SearchStrategy[Any]:
    """Arrays of ``dtype`` mixing ordinary values with the IEEE special values."""
    width = 32 if dtype == "float32" else 64
    elements = st.floats(
        allow_nan=special, allow_infinity=special, width=width, min_value=None, max_value=None
    )
    if special:
        elements = st.one_of(elements, st.sampled_from(SPECIAL))
    shapes = (
        shape
        if shape is not None
        else hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
    return hnp.arrays(np.dtype(dtype), shapes, elements=elements)


def ints(dtype: str, *, shape: Any = None, low: int | None = None, high: int | None = None) -> Any:
    info = np.iinfo(dtype)
    elements = st.integers(
        info.min if low is None else max(low, info.min), info.max if high is None else high
    )
    shapes = (
        shape
        if shape is not None
        else hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
    return hnp.arrays(np.dtype(dtype), shapes, elements=elements)


def ours(values: np.ndarray[Any, Any], carrier: str) -> cv.Tensor:
    return xp.asarray(values, device=carrier)


def assert_agrees(got: Any, want: Any, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Same dtype name, same shape, same values (NaN for NaN, signed zeros for exact cases)."""
    want_np = np.asarray(want)
    got_np = got.numpy() if isinstance(got, cv.Tensor) else np.asarray(got)
    assert got_np.dtype == want_np.dtype, (got_np.dtype, want_np.dtype)
    assert got_np.shape == want_np.shape
    if rtol or atol:
        np.testing.assert_allclose(got_np, want_np, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got_np, want_np)


# -- element-wise ---------------------------------------------------------------------------

# Planned names: exact (up to the carrier's own rounding, a few ulps); composed names: a tolerance.
UNARY_FLOAT = {
    "abs": 0,
    "ceil": 0,
    "floor": 0,
    "trunc": 0,
    "round": 0,
    "negative": 0,
    "positive": 0,
    "square": 0,
    "sign": 0,
    "isnan": 0,
    "isinf": 0,
    "isfinite": 0,
    "signbit": 0,
    "sqrt": 2e-7,
    "exp": 2e-7,
    "log": 2e-7,
    "log2": 2e-7,
    "sin": 2e-7,
    "cos": 2e-7,
    "tanh": 2e-7,
    "reciprocal": 2e-7,
    "tan": 1e-5,
    "sinh": 1e-5,
    "cosh": 1e-5,
    "asinh": 1e-5,
    "acosh": 1e-5,
    "atanh": 1e-5,
    "atan": 1e-5,
    "asin": 1e-5,
    "acos": 1e-5,
    "log1p": 1e-5,
    "expm1": 1e-5,
    "log10": 1e-5,
}


def _positive_nan(values: Any) -> Any:
    """NaNs with a clear sign bit: no arithmetic can observe a NaN's sign, so signbit and
    copysign (composed from comparisons) treat every NaN as positive."""
    return np.where(np.isnan(values), np.abs(values), values)


def _moderate(name: str) -> bool:
    """Whether the case draws moderate values (sin/cos/tan lose meaning far from 0)."""
    return name in ("sin", "cos", "tan")


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unary_float_functions_agree_with_array_api_strict(
    name: str, dtype: str, carrier: str
) -> None:
    """Each unary function gives strict's dtype, shape and values, special values included."""
    tolerance = UNARY_FLOAT[name] * (1 if dtype == "float32" else 1e-3)
    strategy = floats(dtype)
    if _moderate(name):
        elements = st.floats(-100, 100, width=32 if dtype == "float32" else 64)
        strategy = hnp.arrays(
            np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=2, min_side=0), elements=elements
        )

    @SETTINGS
    @given(values=strategy)
    def check(values: np.ndarray[Any, Any]) -> None:
        if name == "signbit":
            values = _positive_nan(values)
        with np.errstate(all="ignore"):
            want = getattr(xps, name)(xps.asarray(values))
        got = getattr(xp, name)(ours(values, carrier))
        assert_agrees(got, want, rtol=tolerance, atol=tolerance * 1e-3 if tolerance else 0)

    check()


UNARY_INT = [
    "abs",
    "negative",
    "positive",
    "square",
    "sign",
    "bitwise_invert",
    "ceil",
    "floor",
    "trunc",
    "round",
]


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", UNARY_INT)
@pytest.mark.parametrize("dtype", ["int8", "int64", "uint8", "uint32"])
def test_unary_integer_functions_agree_with_array_api_strict(
    name: str, dtype: str, carrier: str
) -> None:
    """Integer element-wise functions wrap exactly as strict's do."""

    @SETTINGS
    @given(values=ints(dtype))
    def check(values: np.ndarray[Any, Any]) -> None:
        want = getattr(xps, name)(xps.asarray(values))
        assert_agrees(getattr(xp, name)(ours(values, carrier)), want)

    check()


BINARY_FLOAT = {
    "add": 0,
    "subtract": 0,
    "multiply": 0,
    "divide": 0,
    "maximum": 0,
    "minimum": 0,
    "equal": 0,
    "not_equal": 0,
    "less": 0,
    "less_equal": 0,
    "greater": 0,
    "greater_equal": 0,
    "remainder": 0,
    "floor_divide": 0,
    "copysign": 0,
    "nextafter": 0,
    "pow": 2e-7,
    "atan2": 1e-5,
    "hypot": 1e-5,
    "logaddexp": 1e-5,
}


def _pair(dtype: str, draw_ints: bool = False) -> st.SearchStrategy[tuple[Any, Any]]:
    """Two arrays whose shapes broadcast (unit extents, missing leading axes, empty)."""
    shapes = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4)

    def build(s: Any) -> Any:
        make = (
            (lambda shape: ints(dtype, shape=shape))
            if draw_ints
            else (lambda shape: floats(dtype, shape=shape))
        )
        return st.tuples(make(s.input_shapes[0]), make(s.input_shapes[1]))

    return shapes.flatmap(build)


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", sorted(BINARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_binary_float_functions_agree_with_array_api_strict(
    name: str, dtype: str, carrier: str
) -> None:
    """Binary functions broadcast, promote and treat special values as strict does."""
    tolerance = BINARY_FLOAT[name] * (1 if dtype == "float32" else 1e-3)

    @SETTINGS
    @given(pair=_pair(dtype))
    def check(pair: tuple[Any, Any]) -> None:
        a, b = pair
        if name in ("copysign", "nextafter"):
            b = _positive_nan(b)
        with np.errstate(all="ignore"):
            want = getattr(xps, name)(xps.asarray(a), xps.asarray(b))
        got = getattr(xp, name)(ours(a, carrier), ours(b, carrier))
        assert_agrees(got, want, rtol=tolerance, atol=tolerance * 1e-3 if tolerance else 0)

    check()


BINARY_INT = [
    "add",
    "subtract",
    "multiply",
    "remainder",
    "floor_divide",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "maximum",
    "minimum",
    "equal",
    "less",
]


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", BINARY_INT)
@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint16"])
def test_binary_integer_functions_agree_with_array_api_strict(
    name: str, dtype: str, carrier: str
) -> None:
    """Integer arithmetic and bitwise functions agree exactly (division by zero aside)."""

    @SETTINGS
    @given(pair=_pair(dtype, draw_ints=True))
    def check(pair: tuple[Any, Any]) -> None:
        a, b = pair
        if name in ("remainder", "floor_divide"):
            b = np.where(b == 0, 1, b).astype(dtype)  # the standard leaves x // 0 unspecified
        with np.errstate(all="ignore"):
            want = getattr(xps, name)(xps.asarray(a), xps.asarray(b))
        assert_agrees(getattr(xp, name)(ours(a, carrier), ours(b, carrier)), want)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "int64"])
def test_shifts_agree_with_array_api_strict(name: str, dtype: str, carrier: str) -> None:
    """Shifts by 0 .. bits-1 agree with strict, arithmetic for signed right shifts."""
    bits = np.iinfo(dtype).bits

    @SETTINGS
    @given(a=ints(dtype, shape=(5,)), b=ints(dtype, shape=(5,), low=0, high=bits - 1))
    def check(a: Any, b: Any) -> None:
        want = getattr(xps, name)(xps.asarray(a), xps.asarray(b))
        assert_agrees(getattr(xp, name)(ours(a, carrier), ours(b, carrier)), want)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize(
    "name",
    [
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "equal",
        "not_equal",
    ],
)
def test_bool_functions_agree_with_array_api_strict(name: str, carrier: str) -> None:
    """Logical and bitwise functions on bool arrays, broadcast."""
    shapes = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4)
    pairs = shapes.flatmap(
        lambda s: st.tuples(*(hnp.arrays(np.bool_, shape) for shape in s.input_shapes))
    )

    @SETTINGS
    @given(pair=pairs)
    def check(pair: tuple[Any, Any]) -> None:
        a, b = pair
        want = getattr(xps, name)(xps.asarray(a), xps.asarray(b))
        assert_agrees(getattr(xp, name)(ours(a, carrier), ours(b, carrier)), want)
        assert_agrees(xp.logical_not(ours(a, carrier)), xps.logical_not(xps.asarray(a)))

    check()


# -- statistical, utility, searching, sorting, sets ----------------------------------------

REDUCTIONS = {
    "sum": 1e-5,
    "prod": 1e-5,
    "max": 0,
    "min": 0,
    "mean": 1e-5,
    "std": 1e-4,
    "var": 1e-4,
    "all": 0,
    "any": 0,
    "count_nonzero": 0,
}


@st.composite
def _array_and_axis(draw: Any, dtype: str, nonempty: bool) -> tuple[Any, Any, bool]:
    shape = draw(
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1 if nonempty else 0, max_side=4)
    )
    values = draw(floats(dtype, shape=shape, special=False).map(lambda a: np.clip(a, -1e3, 1e3)))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    keepdims = draw(st.booleans())
    return values, axis, keepdims


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_agree_with_array_api_strict(name: str, carrier: str) -> None:
    """Reductions over any axis (or all), with and without keepdims, match strict."""
    nonempty = name in ("max", "min", "mean", "std", "var")

    @SETTINGS
    @given(case=_array_and_axis("float64", nonempty))
    def check(case: tuple[Any, Any, bool]) -> None:
        values, axis, keepdims = case
        with np.errstate(all="ignore"):
            want = getattr(xps, name)(xps.asarray(values), axis=axis, keepdims=keepdims)
        got = getattr(xp, name)(ours(values, carrier), axis=axis, keepdims=keepdims)
        assert_agrees(got, want, rtol=REDUCTIONS[name], atol=1e-9 if REDUCTIONS[name] else 0)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_statistics_with_correction_agree(carrier: str) -> None:
    """std and var honour the standard's ``correction``."""
    values = np.arange(12.0).reshape(3, 4) ** 1.5
    for name in ("std", "var"):
        want = getattr(xps, name)(xps.asarray(values), axis=1, correction=1)
        assert_agrees(
            getattr(xp, name)(ours(values, carrier), axis=1, correction=1), want, rtol=1e-12
        )


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_cumulative_functions_agree_with_array_api_strict(name: str, carrier: str) -> None:
    """Running sums and products (with include_initial) match strict."""

    @SETTINGS
    @given(
        values=floats(
            "float64", shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=6), special=False
        ).map(lambda a: np.clip(a, -3, 3)),
        initial=st.booleans(),
    )
    def check(values: Any, initial: bool) -> None:
        axis = values.ndim - 1
        want = getattr(xps, name)(xps.asarray(values), axis=axis, include_initial=initial)
        got = getattr(xp, name)(ours(values, carrier), axis=axis, include_initial=initial)
        assert_agrees(got, want, rtol=1e-10, atol=1e-12)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_searching_and_sorting_agree_with_array_api_strict(carrier: str) -> None:
    """argmax/argmin, sort/argsort (both directions), where, nonzero, searchsorted."""

    @SETTINGS
    @given(
        values=floats(
            "float64",
            shape=hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=5),
            special=False,
        )
    )
    def check(values: Any) -> None:
        a, s = ours(values, carrier), xps.asarray(values)
        for name in ("argmax", "argmin"):
            assert_agrees(getattr(xp, name)(a, axis=-1), getattr(xps, name)(s, axis=-1))
        for descending in (False, True):
            assert_agrees(xp.sort(a, descending=descending), xps.sort(s, descending=descending))
            assert_agrees(
                xp.argsort(a, descending=descending), xps.argsort(s, descending=descending)
            )
        mask = values > 0
        assert_agrees(xp.where(ours(mask, carrier), a, 0.0), xps.where(xps.asarray(mask), s, 0.0))
        for g, w in zip(xp.nonzero(a), xps.nonzero(s), strict=True):
            assert_agrees(g, w)
        line = np.sort(values.reshape(-1))
        for side in ("left", "right"):
            assert_agrees(
                xp.searchsorted(ours(line, carrier), a, side=side),
                xps.searchsorted(xps.asarray(line), s, side=side),
            )

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_set_functions_agree_with_array_api_strict(carrier: str) -> None:
    """unique_* give strict's values, counts, inverse and first indices; NaNs stay distinct."""

    @SETTINGS
    @given(
        values=hnp.arrays(
            np.float64, st.integers(0, 9), elements=st.sampled_from([0.0, 1.0, 2.0, -1.0, math.nan])
        )
    )
    def check(values: Any) -> None:
        a, s = ours(values, carrier), xps.asarray(values)
        assert_agrees(xp.unique_values(a), xps.unique_values(s))
        got, want = xp.unique_counts(a), xps.unique_counts(s)
        assert_agrees(got.counts, want.counts)
        got_all, want_all = xp.unique_all(a), xps.unique_all(s)
        assert_agrees(got_all.inverse_indices, want_all.inverse_indices)
        assert_agrees(got_all.indices, want_all.indices)

    check()


# -- manipulation, indexing, linear algebra, creation -------------------------------------


@pytest.mark.parametrize("carrier", CARRIERS)
def test_manipulation_functions_agree_with_array_api_strict(carrier: str) -> None:
    """concat, stack, flip, roll, tile, repeat, moveaxis, expand_dims, squeeze, permute_dims."""

    @SETTINGS
    @given(
        values=floats(
            "float32", shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)
        )
    )
    def check(values: Any) -> None:
        a, s = ours(values, carrier), xps.asarray(values)
        assert_agrees(xp.concat([a, a], axis=0), xps.concat([s, s], axis=0))
        assert_agrees(xp.concat([a, a], axis=None), xps.concat([s, s], axis=None))
        assert_agrees(xp.stack([a, a], axis=-1), xps.stack([s, s], axis=-1))
        assert_agrees(xp.flip(a), xps.flip(s))
        assert_agrees(xp.flip(a, axis=0), xps.flip(s, axis=0))
        assert_agrees(xp.roll(a, 2, axis=0), xps.roll(s, 2, axis=0))
        assert_agrees(xp.roll(a, -1), xps.roll(s, -1))
        assert_agrees(xp.tile(a, (2,) * a.ndim), xps.tile(s, (2,) * a.ndim))
        assert_agrees(xp.repeat(a, 2, axis=0), xps.repeat(s, 2, axis=0))
        assert_agrees(xp.expand_dims(a, axis=0), xps.expand_dims(s, axis=0))
        assert_agrees(xp.squeeze(xp.expand_dims(a, axis=1), axis=1), s)
        order = tuple(reversed(range(a.ndim)))
        assert_agrees(xp.permute_dims(a, order), xps.permute_dims(s, order))
        assert_agrees(xp.moveaxis(a, 0, -1), xps.moveaxis(s, 0, -1))
        assert_agrees(xp.reshape(a, (-1,)), xps.reshape(s, (-1,)))
        for g, w in zip(xp.unstack(a), xps.unstack(s), strict=True):
            assert_agrees(g, w)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_indexing_functions_agree_with_array_api_strict(carrier: str) -> None:
    """take (negative indices included) and take_along_axis."""
    values = np.arange(12.0).reshape(3, 4)
    a, s = ours(values, carrier), xps.asarray(values)
    index = np.array([3, 0, -1])
    assert_agrees(xp.take(a, ours(index, carrier), axis=1), xps.take(s, xps.asarray(index), axis=1))
    order = np.argsort(-values, axis=1)
    assert_agrees(
        xp.take_along_axis(a, ours(order, carrier), axis=1),
        xps.take_along_axis(s, xps.asarray(order), axis=1),
    )


@pytest.mark.parametrize("carrier", CARRIERS)
def test_linear_algebra_agrees_with_array_api_strict(carrier: str) -> None:
    """matmul, tensordot, vecdot, matrix_transpose and the linalg extension's products/norms."""
    rng = np.random.default_rng(0)
    m = rng.standard_normal((2, 3, 3))
    v = rng.standard_normal((3, 3))
    a, s = ours(m, carrier), xps.asarray(m)
    b, t = ours(v, carrier), xps.asarray(v)
    assert_agrees(xp.matmul(a, b), xps.matmul(s, t), rtol=1e-12)
    assert_agrees(xp.tensordot(a, b, axes=1), xps.tensordot(s, t, axes=1), rtol=1e-12)
    assert_agrees(xp.vecdot(a, b), xps.vecdot(s, t), rtol=1e-12)
    assert_agrees(xp.matrix_transpose(a), xps.matrix_transpose(s))
    linalg, ref = xp.linalg, xps.linalg
    assert_agrees(linalg.diagonal(a, offset=1), ref.diagonal(s, offset=1))
    assert_agrees(linalg.trace(a), ref.trace(s), rtol=1e-12)
    assert_agrees(linalg.outer(b[0], b[1]), ref.outer(t[0, :], t[1, :]), rtol=1e-12)
    assert_agrees(linalg.vector_norm(a, axis=-1), ref.vector_norm(s, axis=-1), rtol=1e-12)
    assert_agrees(linalg.vector_norm(a, ord=math.inf), ref.vector_norm(s, ord=math.inf))
    assert_agrees(linalg.matrix_norm(a), ref.matrix_norm(s), rtol=1e-12)
    assert_agrees(linalg.matrix_norm(a, ord=1), ref.matrix_norm(s, ord=1), rtol=1e-12)
    assert_agrees(linalg.cross(b, b[::-1]), ref.cross(t, xps.flip(t, axis=0)), rtol=1e-12)
    assert_agrees(linalg.matrix_power(b, 3), ref.matrix_power(t, 3), rtol=1e-10)


@pytest.mark.parametrize("carrier", CARRIERS)
def test_elimination_linalg_agrees_with_array_api_strict(carrier: str) -> None:
    """inv, solve, det, slogdet, cholesky (elimination) and qr (Householder) match strict."""

    @SETTINGS
    @given(
        values=hnp.arrays(
            np.float64,
            st.tuples(st.integers(1, 2), st.integers(1, 4)).map(lambda s: (s[0], s[1], s[1])),
            elements=st.floats(-3, 3),
        ),
    )
    def check(values: Any) -> None:
        values = values + np.eye(values.shape[-1]) * 8  # well conditioned
        a, s = ours(values, carrier), xps.asarray(values)
        linalg, ref = xp.linalg, xps.linalg
        assert_agrees(linalg.inv(a), ref.inv(s), rtol=1e-9, atol=1e-12)
        assert_agrees(linalg.det(a), ref.det(s), rtol=1e-9)
        got, want = linalg.slogdet(a), ref.slogdet(s)
        assert_agrees(got.sign, want.sign)
        assert_agrees(got.logabsdet, want.logabsdet, rtol=1e-9, atol=1e-12)
        rhs = values[..., :1] * 2 - 1
        assert_agrees(
            linalg.solve(a, ours(rhs, carrier)),
            ref.solve(s, xps.asarray(rhs)),
            rtol=1e-9,
            atol=1e-12,
        )
        for mode in ("reduced", "complete"):
            got_qr, want_qr = linalg.qr(a, mode=mode), ref.qr(s, mode=mode)
            assert_agrees(got_qr.Q, want_qr.Q, rtol=1e-9, atol=1e-12)
            assert_agrees(got_qr.R, want_qr.R, rtol=1e-9, atol=1e-12)
        wide = np.concatenate([values, values[..., :1]], axis=-1)
        got_qr, want_qr = linalg.qr(ours(wide, carrier)), ref.qr(xps.asarray(wide))
        assert_agrees(got_qr.R, want_qr.R, rtol=1e-9, atol=1e-12)
        spd = values @ np.swapaxes(values, -1, -2)
        assert_agrees(
            linalg.cholesky(ours(spd, carrier)),
            ref.cholesky(xps.asarray(spd)),
            rtol=1e-9,
            atol=1e-12,
        )
        assert_agrees(
            linalg.cholesky(ours(spd, carrier), upper=True),
            ref.cholesky(xps.asarray(spd), upper=True),
            rtol=1e-9,
            atol=1e-12,
        )

    check()


FFT_CASES = [
    ("fft", {}),
    ("fft", {"n": 5, "norm": "ortho"}),
    ("ifft", {"axis": 0, "norm": "forward"}),
    ("fftn", {}),
    ("ifftn", {"s": (2, 3), "axes": (0, 1)}),
    ("irfft", {}),
    ("irfft", {"n": 5}),
    ("hfft", {}),
    ("irfftn", {}),
]


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize(
    ("name", "options"), FFT_CASES, ids=[f"{n}-{sorted(o)}" for n, o in FFT_CASES]
)
def test_fft_agrees_with_array_api_strict(carrier: str, name: str, options: dict[str, Any]) -> None:
    """The fft extension's complex transforms match strict's."""

    @SETTINGS
    @given(
        values=hnp.arrays(
            np.complex128,
            st.tuples(st.integers(1, 3), st.integers(2, 6)),
            elements=st.complex_numbers(max_magnitude=10),
        )
    )
    def check(values: Any) -> None:
        want = getattr(xps.fft, name)(xps.asarray(values), **options)
        got = getattr(xp.fft, name)(ours(values, carrier), **options)
        assert_agrees(got, want, rtol=1e-9, atol=1e-9)

    check()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_real_fft_and_helpers_agree_with_array_api_strict(carrier: str) -> None:
    """rfft, rfftn, ihfft, the frequency helpers and the shifts match strict's."""
    values = np.random.default_rng(3).standard_normal((3, 6))
    a, s = ours(values, carrier), xps.asarray(values)
    fft, ref = xp.fft, xps.fft
    assert_agrees(fft.rfft(a), ref.rfft(s), rtol=1e-9, atol=1e-12)
    assert_agrees(fft.rfft(a, n=4, axis=0), ref.rfft(s, n=4, axis=0), rtol=1e-9, atol=1e-12)
    assert_agrees(fft.rfftn(a), ref.rfftn(s), rtol=1e-9, atol=1e-12)
    assert_agrees(fft.ihfft(a), ref.ihfft(s), rtol=1e-9, atol=1e-12)
    assert_agrees(fft.fftfreq(7, d=0.5, dtype=xp.float64), ref.fftfreq(7, d=0.5, dtype=xps.float64))
    assert_agrees(fft.rfftfreq(6, dtype=xp.float64), ref.rfftfreq(6, dtype=xps.float64))
    assert_agrees(fft.fftshift(a), ref.fftshift(s))
    assert_agrees(fft.ifftshift(a, axes=1), ref.ifftshift(s, axes=1))
    with pytest.raises(ValueError, match="norm must be one of"):
        fft.fft(a, norm="sideways")
    with pytest.raises(TypeError, match="rfft: needs real input, got complex128"):
        fft.rfft(fft.fft(a))


def test_elimination_refusals() -> None:
    """Non-square and integer matrices are refused with the reason."""
    with pytest.raises(
        ValueError,
        match=r"inv on CPU: input of shape \(2, 3\) is not a stack of square matrices",
    ):
        xp.linalg.inv(xp.zeros((2, 3)))
    with pytest.raises(TypeError, match="det: needs a floating dtype, got int64"):
        xp.linalg.det(xp.asarray([[1, 2], [3, 4]]))


@pytest.mark.parametrize("carrier", CARRIERS)
def test_creation_functions_agree_with_array_api_strict(carrier: str) -> None:
    """arange, linspace, eye, full/zeros/ones(_like), tril/triu, meshgrid (explicit dtypes)."""
    f64, sf64 = xp.float64, xps.float64
    assert_agrees(
        xp.arange(1, 10, 3, dtype=xp.int64, device=carrier), xps.arange(1, 10, 3, dtype=xps.int64)
    )
    assert_agrees(
        xp.linspace(0, 1, 7, dtype=f64, device=carrier), xps.linspace(0, 1, 7, dtype=sf64)
    )
    assert_agrees(
        xp.linspace(0, 1, 4, dtype=f64, endpoint=False),
        xps.linspace(0, 1, 4, dtype=sf64, endpoint=False),
    )
    assert_agrees(xp.eye(3, 4, k=1, dtype=f64, device=carrier), xps.eye(3, 4, k=1, dtype=sf64))
    assert_agrees(xp.full((2, 0), 3, dtype=xp.int16), xps.full((2, 0), 3, dtype=xps.int16))
    base = np.arange(12.0).reshape(3, 4)
    a, s = ours(base, carrier), xps.asarray(base)
    assert_agrees(xp.zeros_like(a), xps.zeros_like(s))
    assert_agrees(xp.ones_like(a, dtype=xp.int8), xps.ones_like(s, dtype=xps.int8))
    assert_agrees(xp.full_like(a, 7.5), xps.full_like(s, 7.5))
    assert_agrees(xp.tril(a, k=-1), xps.tril(s, k=-1))
    assert_agrees(xp.triu(a, k=1), xps.triu(s, k=1))
    for indexing in ("xy", "ij"):
        got = xp.meshgrid(a[0], a[:, 0], indexing=indexing)
        want = xps.meshgrid(s[0, :], s[:, 0], indexing=indexing)
        for g, w in zip(got, want, strict=True):
            assert_agrees(g, w)


def test_data_type_functions_agree_with_array_api_strict() -> None:
    """result_type, can_cast, isdtype, finfo and iinfo give strict's answers for every pair."""
    names = [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ]
    for a in names:
        for b in names:
            ours_a, ours_b = getattr(xp, a), getattr(xp, b)
            ref_a, ref_b = getattr(xps, a), getattr(xps, b)
            assert xp.can_cast(ours_a, ours_b) == xps.can_cast(ref_a, ref_b), (a, b)
            try:
                want = str(xps.result_type(ref_a, ref_b)).rsplit(".", 1)[-1]
            except TypeError:
                continue  # pairs outside the standard's table: Conveyor may promote them
            assert xp.result_type(ours_a, ours_b).name.rstrip("_") == want, (a, b)
        for kind in (
            "bool",
            "signed integer",
            "unsigned integer",
            "integral",
            "real floating",
            "complex floating",
            "numeric",
        ):
            assert xp.isdtype(getattr(xp, a), kind) == xps.isdtype(getattr(xps, a), kind), (a, kind)
    for name in ("float32", "float64"):
        got, want = xp.finfo(getattr(xp, name)), xps.finfo(getattr(xps, name))
        assert (got.bits, got.eps, got.max, got.min, got.smallest_normal) == (
            want.bits,
            want.eps,
            want.max,
            want.min,
            want.smallest_normal,
        )
    for name in INT_DTYPES:
        got_i, want_i = xp.iinfo(getattr(xp, name)), xps.iinfo(getattr(xps, name))
        assert (got_i.bits, got_i.max, got_i.min) == (want_i.bits, want_i.max, want_i.min)


def test_isin_and_broadcast_shapes_agree_with_array_api_strict() -> None:
    """The 2025.12 additions Conveyor provides: isin and broadcast_shapes."""
    values = np.array([[1, 2], [3, 4]])
    pool = np.array([4, 1, 9])
    assert_agrees(
        xp.isin(xp.asarray(values), xp.asarray(pool)),
        xps.isin(xps.asarray(values), xps.asarray(pool)),
    )
    assert xp.broadcast_shapes((2, 1), (1, 3), (3,)) == xps.broadcast_shapes((2, 1), (1, 3), (3,))


# -- namespace, devices and compatibility ---------------------------------------------------


class TestNamespace:
    def test_tensor_reports_the_namespace(self) -> None:
        """x.__array_namespace__() is conveyor.array_api, for every supported api_version."""
        x = xp.asarray([1.0])

        assert x.__array_namespace__() is xp
        assert x.__array_namespace__(api_version="2024.12") is xp
        assert xp.__array_api_version__ == "2024.12"

    def test_unknown_api_version_is_refused(self) -> None:
        """An api_version the namespace does not implement raises ValueError naming it."""
        with pytest.raises(ValueError, match=r"api_version '2019\.01' is not supported"):
            xp.asarray([1.0]).__array_namespace__(api_version="2019.01")

    def test_array_api_compat_recognises_the_namespace(self) -> None:
        """array_api_compat.array_namespace and its device helpers work with tensors."""
        x = xp.asarray([1.0, 2.0], device="generic")

        assert array_api_compat.array_namespace(x) is xp
        assert array_api_compat.device(x) is x.device
        assert array_api_compat.size(x) == 2

    def test_devices_are_the_installed_carriers(self) -> None:
        """The info namespace lists carrier classes as devices; to_device moves between them."""
        info = xp.__array_namespace_info__()
        devices = info.devices()
        x = xp.asarray([1.0, 2.0], device="cpu")
        moved = x.to_device("generic")

        assert x.device in devices and moved.device in devices
        assert moved.device.__name__ == "Generic"
        assert info.default_device() is x.device
        np.testing.assert_array_equal(moved.numpy(), [1.0, 2.0])
        assert x.to_device(x.device) is x

    def test_info_reports_default_and_supported_dtypes(self) -> None:
        """default_dtypes and dtypes(kind=) describe the standard's dtypes."""
        info = xp.__array_namespace_info__()

        assert info.default_dtypes()["real floating"] is xp.float32
        assert info.default_dtypes()["indexing"] is xp.int64
        assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
        assert set(info.dtypes(kind=("bool", "integral"))) == {"bool", *INT_DTYPES}
        assert info.capabilities()["boolean indexing"] is True

    def test_namespace_covers_array_api_strict(self) -> None:
        """Every name of strict's main namespace is present, except the ones listed as missing."""
        strict_only = {
            "ArrayAPIStrictFlags",
            "Device",
            "__version__",
            "get_array_api_strict_flags",
            "reset_array_api_strict_flags",
            "set_array_api_strict_flags",
        }
        missing = set(xps.__all__) - set(dir(xp)) - strict_only

        assert missing == set()
        assert set(xps.fft.__all__) - set(dir(xp.fft)) == set()
        assert set(xps.linalg.__all__) - set(dir(xp.linalg)) == set()

    def test_every_listed_name_exists(self) -> None:
        """Every name in conveyor.array_api.__all__ is an attribute, listed once, sorted."""
        assert all(hasattr(xp, name) for name in xp.__all__)
        assert len(set(xp.__all__)) == len(xp.__all__)


class TestCapabilityGate:
    def test_composed_function_refuses_a_missing_plan_by_name(self) -> None:
        """A composed function on a carrier lacking one plan raises UnsupportedOperationPlan."""
        from tests.core.carriers import ArrayCarrier, from_array

        a = from_array(np.array([1, 2], np.int16), cv.int16)
        assert type(a.carrier) is ArrayCarrier

        with pytest.raises(cv.UnsupportedOperationPlan) as error:
            cv.outer(a, a)

        assert error.value.operation == "mul"
        assert error.value.carrier is ArrayCarrier

    def test_composed_function_runs_where_its_plans_exist(self) -> None:
        """The same composed function runs on that carrier for a dtype it plans."""
        from tests.core.carriers import from_array

        a = from_array(np.array([1.0, 2.0]), cv.float64)

        np.testing.assert_array_equal(cv.outer(a, a).numpy(), [[1.0, 2.0], [2.0, 4.0]])


@pytest.mark.parametrize("carrier", CARRIERS)
def test_float_floor_divide_matches_numpy_past_2_to_the_52(carrier: str) -> None:
    """The quotient comes from the exact truncated remainder, as NumPy's divmod does.

    Hypothesis found ``-2.23290769e16 // 2.5`` one off when the floored remainder was subtracted.
    """
    a = np.array([-2.23290769e16, 2.23290769e16, -9e15 - 1, 1.0, -1.0, 7.5])
    for b in (2.5, -2.5, 0.1):
        np.testing.assert_array_equal(xp.floor_divide(ours(a, carrier), b).numpy(), a // b)
        np.testing.assert_array_equal(
            xp.floor_divide(ours(a, carrier), ours(np.full(6, b), carrier)).numpy(), a // b
        )


@pytest.mark.parametrize("carrier", CARRIERS)
def test_float_floor_divide_with_a_scalar_numerator(carrier: str) -> None:
    """``2.5 // t`` over zeros, infinities and both signs equals NumPy's (it raised TypeError)."""
    b = np.array([0.0, -0.0, np.inf, -np.inf, 3.0, -3.0, 0.1])
    with np.errstate(all="ignore"):
        want = np.floor_divide(2.5, b)
    got = xp.floor_divide(2.5, ours(b, carrier)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
