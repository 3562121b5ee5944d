"""Generic elementwise names against NumPy: unary functions, activations, binary ops, select, clamp.

One hypothesis test per family, parametrized over (name, dtype) for every dtype the name's
plans accept; shapes include 0-sized and broadcast ones, values NaN, +-inf, +-0 and extremes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor.types.policy import operation_spec
from conveyor_generic import Generic
from tests.generic.oracle import (
    BINARY,
    HYPOTHESIS,
    HYPOTHESIS_SAMPLE,
    HYPOTHESIS_WIDE,
    UNARY,
    arrays,
    cases,
    check,
    clamp_operands,
    dtypes,
    resolve,
    run,
    scalars,
    shapes,
)

FIELDS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "gelu": st.fixed_dictionaries({"approximate": st.sampled_from(["none", "tanh"])}),
    "elu": st.fixed_dictionaries({"alpha": st.floats(0.1, 3.0)}),
    "leaky_relu": st.fixed_dictionaries({"negative_slope": st.floats(0.0, 0.5)}),
}


@pytest.mark.parametrize(("name", "dtype"), cases(*UNARY))
@HYPOTHESIS_WIDE
@given(data=st.data())
def test_unary_matches_numpy(name: str, dtype: cv.DType, data: st.DataObject) -> None:
    """Every unary function and activation agrees with its float64 NumPy reference."""
    x = data.draw(arrays(dtype, data.draw(shapes())))
    fields = data.draw(FIELDS.get(name, st.just({})))
    check(Generic, name, [x], fields)


def _binary_operands(name: str, dtype: cv.DType, data: st.DataObject) -> list[Any]:
    pair = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a, b = (data.draw(arrays(dtype, shape)) for shape in pair.input_shapes)
    operands: list[Any] = [a, b]
    if operation_spec(name).scalar_roles:
        side = data.draw(st.sampled_from([None, 0, 1]))
        if side is not None:
            operands[side] = data.draw(scalars(data.draw(st.sampled_from([bool, int, float]))))
    return operands


@pytest.mark.parametrize(("name", "dtype"), cases(*BINARY))
@HYPOTHESIS_WIDE
@given(data=st.data())
def test_binary_matches_numpy(name: str, dtype: cv.DType, data: st.DataObject) -> None:
    """Binary names broadcast, take weak scalars on either side and match NumPy."""
    operands = _binary_operands(name, dtype, data)
    try:
        resolve(name, operands, {})
    except TypeError:
        with pytest.raises(TypeError):
            run(Generic, name, operands, {})
        return
    check(Generic, name, operands, {})


def _mixed_pairs() -> list[Any]:
    """A spread of two-tensor promotion pairs (every 7th accepted pair of each name)."""
    from conveyor.types.policy import enumerate_plans

    found = []
    for name in BINARY:
        pairs = sorted(
            {
                (p.operands[0].dtype.name, p.operands[1].dtype.name)
                for p in enumerate_plans(name)
                if not any(o.weak for o in p.operands)
                and p.operands[0].dtype is not p.operands[1].dtype
            }
        )
        found += [
            pytest.param(name, cv.dtype(a), cv.dtype(b), id=f"{name}-{a}-{b}")
            for a, b in pairs[::7]
        ]
    return found


@pytest.mark.parametrize(("name", "left", "right"), _mixed_pairs())
@HYPOTHESIS_SAMPLE
@given(data=st.data())
def test_binary_promotes_like_the_plan(
    name: str, left: cv.DType, right: cv.DType, data: st.DataObject
) -> None:
    """Mixed-dtype operands convert per the plan, compute, and round once."""
    pair = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a = data.draw(arrays(left, pair.input_shapes[0]))
    b = data.draw(arrays(right, pair.input_shapes[1]))
    check(Generic, name, [a, b], {})


@pytest.mark.parametrize("dtype", dtypes("select"))
@HYPOTHESIS
@given(data=st.data())
def test_select_matches_where(dtype: cv.DType, data: st.DataObject) -> None:
    """select reads the chosen branch of each element; scalars may stand for either branch."""
    trio = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=4))
    condition = data.draw(arrays(cv.bool, trio.input_shapes[0]))
    a, b = (data.draw(arrays(dtype, shape)) for shape in trio.input_shapes[1:])
    operands: list[Any] = [condition, a, b]
    side = data.draw(st.sampled_from([None, 1, 2]))
    if side is not None:
        operands[side] = data.draw(scalars(data.draw(st.sampled_from([bool, int, float]))))
    try:
        resolve("select", operands, {})
    except TypeError:
        return
    check(Generic, "select", operands, {})


@pytest.mark.parametrize("dtype", dtypes("clamp"))
@HYPOTHESIS
@given(data=st.data())
def test_clamp_matches_minimum_of_maximum(dtype: cv.DType, data: st.DataObject) -> None:
    """Each bound may be a tensor, a scalar or absent; NaN anywhere gives NaN."""
    operands = clamp_operands(data, dtype)
    check(Generic, "clamp", operands, {})


class TestSemantics:
    """Fixed examples of the semantics docs/operations.md states."""

    def test_rem_takes_the_sign_of_the_divisor(self) -> None:
        (out,) = run(
            Generic, "rem", [np.array([7.0, -7.0, 7.0, -7.0]), np.array([2.0, 2.0, -2.0, -2.0])], {}
        )
        np.testing.assert_array_equal(out, [1.0, 1.0, -1.0, -1.0])

    def test_round_is_half_to_even(self) -> None:
        (out,) = run(Generic, "round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5])], {})
        np.testing.assert_array_equal(out, [0.0, 2.0, 2.0, -0.0, -2.0])

    def test_integer_arithmetic_wraps(self) -> None:
        (out,) = run(
            Generic, "add", [np.array([127, -128], np.int8), np.array([1, -1], np.int8)], {}
        )
        np.testing.assert_array_equal(out, np.array([-128, 127], np.int8))

    def test_integer_scalar_wraps_into_the_tensor_dtype(self) -> None:
        (out,) = run(Generic, "add", [np.array([1], np.int8), 300], {})
        np.testing.assert_array_equal(out, np.array([45], np.int8))

    def test_integer_division_is_true_division_in_float32(self) -> None:
        (out,) = run(Generic, "div", [np.array([7, -7], np.int32), np.array([2, 2], np.int32)], {})
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, [3.5, -3.5])

    def test_integer_pow_with_negative_exponent_truncates(self) -> None:
        base = np.array([1, -1, -1, 2, 0], np.int64)
        exponent = np.array([-3, -3, -2, -1, -1], np.int64)
        (out,) = run(Generic, "pow", [base, exponent], {})
        np.testing.assert_array_equal(out, [1, -1, 1, 0, 0])

    def test_gelu_and_silu_limits_at_minus_infinity(self) -> None:
        x = np.array([-np.inf, np.inf])
        for name, fields in (("gelu", {}), ("gelu", {"approximate": "tanh"}), ("silu", {})):
            (out,) = run(Generic, name, [x], fields)
            np.testing.assert_array_equal(out, [0.0, np.inf])

    def test_bool_add_is_logical_or(self) -> None:
        (out,) = run(
            Generic, "add", [np.array([True, True, False]), np.array([True, False, False])], {}
        )
        np.testing.assert_array_equal(out, [True, True, False])

    def test_half_precision_rounds_once(self) -> None:
        """float16 compute rounds the exact result once (no float16 intermediate)."""
        (out,) = run(Generic, "gelu", [np.array([1.0], np.float16)], {})
        exact = 1.0 * 0.5 * (1 + 0.6826894921370859)
        assert out[0] == np.float16(exact)
