"""Generic reductions, scans and sorting against NumPy and direct references.

Sums and products accumulate in the plan's accumulator and round once, so they are compared
with an error bound sized by the accumulator; max, min and the arg-reductions are exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.exceptions import AxisError

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_testkit._reference import wide
from tests.generic.oracle import (
    HYPOTHESIS,
    arrays,
    cases,
    check,
    dtypes,
    resolve,
    run,
    shapes,
    sum_atol,
)


def _axes(ndim: int) -> st.SearchStrategy[Any]:
    if ndim == 0:
        return st.sampled_from([None, 0, -1])
    one = st.integers(-ndim, ndim - 1)
    many = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(tuple)
    return st.none() | one | many


def _reduced(axis: Any, ndim: int) -> tuple[int, ...]:
    if ndim == 0:
        return ()
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


@pytest.mark.parametrize(("name", "dtype"), cases("reduce_sum", "reduce_prod"))
@HYPOTHESIS
@given(data=st.data())
def test_sum_and_prod_accumulate_then_round_once(
    name: str, dtype: cv.DType, data: st.DataObject
) -> None:
    """Integer plans wrap in 64 bits; floating plans accumulate in the accumulator dtype."""
    bound = 100.0 if name == "reduce_sum" else 2.0
    x = data.draw(arrays(dtype, data.draw(shapes()), bound=bound))
    fields: dict[str, Any] = {
        "axis": data.draw(_axes(x.ndim)),
        "keepdims": data.draw(st.booleans()),
    }
    if dtype.is_floating:
        fields["accumulator_dtype"] = data.draw(st.sampled_from([None, cv.float32, cv.float64]))
    plan = resolve(name, [x], fields)
    axes = _reduced(fields["axis"], x.ndim)
    count = int(np.prod([x.shape[a] for a in axes]))
    with np.errstate(all="ignore"):
        magnitude = np.abs(wide(x.astype(plan.operands[0].convert_to.numpy)))
        reduce = np.sum if name == "reduce_sum" else np.prod
        scale = reduce(magnitude, axis=axes, keepdims=fields["keepdims"])
    check(Generic, name, [x], fields, atol=sum_atol(scale, count, plan.accumulator_dtype))


@pytest.mark.parametrize(("name", "dtype"), cases("reduce_max", "reduce_min", "argmax", "argmin"))
@HYPOTHESIS
@given(data=st.data())
def test_extrema_let_nan_win(name: str, dtype: cv.DType, data: st.DataObject) -> None:
    """max / min propagate NaN; argmax / argmin return the first winner (the first NaN)."""
    x = data.draw(arrays(dtype, data.draw(shapes())))
    arg = name.startswith("arg")
    axis = data.draw(
        (st.none() | st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1)) if arg else _axes(x.ndim)
    )
    fields = {"axis": axis, "keepdims": data.draw(st.booleans())}
    reduced = _reduced(axis, x.ndim)
    if any(x.shape[a] == 0 for a in reduced) or (arg and axis is None and x.size == 0):
        with pytest.raises(ValueError, match=rf"{name} on Generic: .*extent 0"):
            run(Generic, name, [x], fields)
        return
    check(Generic, name, [x], fields)


@pytest.mark.parametrize("dtype", dtypes("cumsum"))
@HYPOTHESIS
@given(data=st.data())
def test_cumsum_is_inclusive(dtype: cv.DType, data: st.DataObject) -> None:
    """cumsum runs along one axis, or over the row-major flattening when axis is None."""
    x = data.draw(arrays(dtype, data.draw(shapes()), bound=100.0))
    axis = data.draw(st.none() | st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    plan = resolve("cumsum", [x], {"axis": axis})
    with np.errstate(all="ignore"):
        magnitude = np.abs(wide(x.astype(plan.operands[0].convert_to.numpy)))
    lane = magnitude.reshape(-1) if axis is None else magnitude
    along = 0 if axis is None or x.ndim == 0 else axis
    scale = np.cumsum(lane, axis=along) if lane.ndim else lane
    count = lane.shape[along] if lane.ndim else 1
    check(
        Generic, "cumsum", [x], {"axis": axis}, atol=sum_atol(scale, count, plan.accumulator_dtype)
    )


@pytest.mark.parametrize(("name", "dtype"), cases("sort", "topk"))
@HYPOTHESIS
@given(data=st.data())
def test_sort_and_topk_are_stable_with_nan_largest(
    name: str, dtype: cv.DType, data: st.DataObject
) -> None:
    """Values and int64 indices match a stable Python sort that ranks NaN above everything."""
    x = data.draw(arrays(dtype, data.draw(shapes())))
    # Ties are what stability is about: sometimes squeeze the values onto a few levels.
    if data.draw(st.booleans()) and x.size:
        x = x[...]
        x.reshape(-1)[:] = x.reshape(-1)[np.arange(x.size) % 2]
    ndim = max(x.ndim, 1)
    axis = data.draw(st.integers(-ndim, ndim - 1))
    if name == "sort":
        fields = {"axis": axis, "descending": data.draw(st.booleans())}
    else:
        extent = x.shape[axis] if x.ndim else 1
        fields = {
            "axis": axis,
            "k": data.draw(st.integers(0, extent)),
            "largest": data.draw(st.booleans()),
        }
    check(Generic, name, [x], fields)


class TestRefusals:
    def test_topk_larger_than_the_axis_is_refused(self) -> None:
        x = np.arange(3.0)
        with pytest.raises(ValueError, match=r"topk on Generic: k=4 is larger than axis 0"):
            run(Generic, "topk", [x], {"k": 4})

    @pytest.mark.parametrize("carrier", [Generic, CPU], ids=["Generic", "CPU"])
    @pytest.mark.parametrize(
        ("name", "options", "hint"),
        [
            ("reduce_sum", {"axis": 2}, "pass axes in [-2, 2)"),
            ("argmax", {"axis": -3}, "pass an axis in [-2, 2)"),
        ],
    )
    def test_axis_out_of_range_is_an_axis_error_naming_axis_and_rank(
        self, carrier: Any, name: str, options: dict[str, Any], hint: str
    ) -> None:
        """An axis beyond the rank raises NumPy's AxisError (an IndexError) naming both."""
        axis = options["axis"]
        with pytest.raises(AxisError) as info:
            run(carrier, name, [np.zeros((2, 2))], options)
        assert isinstance(info.value, IndexError)
        assert str(info.value) == (
            f"{name} on {carrier.__name__}: axis {axis} is out of range for 2 axes; {hint}"
        )

    def test_accumulator_for_integer_plans_is_refused(self) -> None:
        with pytest.raises(TypeError, match="accumulator_dtype"):
            run(Generic, "reduce_sum", [np.arange(3)], {"accumulator_dtype": cv.float64})


class TestSemantics:
    def test_half_sum_accumulates_in_float32(self) -> None:
        """2048 + 1 + 1 is 2050 with a float32 accumulator (float16 steps would stay at 2048)."""
        (out,) = run(Generic, "reduce_sum", [np.array([2048, 1, 1], np.float16)], {})
        assert out.dtype == np.float16 and out == 2050

    def test_small_integer_sums_widen_to_int64(self) -> None:
        (out,) = run(Generic, "reduce_sum", [np.array([100, 100], np.int8)], {})
        assert out.dtype == np.int64 and out == 200

    def test_descending_sort_puts_nan_first_and_keeps_ties_in_order(self) -> None:
        values, indices = run(
            Generic, "sort", [np.array([1.0, np.nan, 3.0, 1.0])], {"descending": True}
        )
        np.testing.assert_array_equal(values, [np.nan, 3.0, 1.0, 1.0])
        np.testing.assert_array_equal(indices, [1, 2, 0, 3])

    def test_argmax_returns_the_first_nan(self) -> None:
        (out,) = run(Generic, "argmax", [np.array([1.0, np.nan, 5.0, np.nan])], {})
        assert out == 1

    def test_topk_ties_go_to_the_lower_index(self) -> None:
        _, indices = run(Generic, "topk", [np.array([2.0, 5.0, 5.0, 1.0, 5.0])], {"k": 2})
        np.testing.assert_array_equal(indices, [1, 2])
