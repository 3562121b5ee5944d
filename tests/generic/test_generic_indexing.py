"""Generic gather, scatter and scatter_add against direct loops, and their refusals.

Indices follow torch.gather (same number of axes, smaller on the other axes allowed, values in
[0, extent), negatives refused); every refusal happens before any result is allocated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import conveyor as cv
from conveyor_generic import Generic
from tests.generic.oracle import HYPOTHESIS, arrays, cases, check, run, shapes


@st.composite
def indexed_problem(
    draw: st.DrawFn, name: str, dtype: cv.DType, index_dtype: Any
) -> tuple[list[Any], dict[str, Any]]:
    shape = draw(shapes(max_dims=3))
    x = draw(arrays(dtype, shape))
    ndim = max(len(shape), 1)
    axis = draw(st.integers(-ndim, ndim - 1))
    if not shape:
        index_shape: tuple[int, ...] = ()
        extent = 1
    else:
        along = axis % len(shape)
        extent = shape[along]
        index_shape = tuple(
            draw(st.integers(0, 4)) if d == along else draw(st.integers(0, e))
            for d, e in enumerate(shape)
        )
        if extent == 0:
            index_shape = tuple(0 if d == along else e for d, e in enumerate(index_shape))
    seed = draw(st.integers(0, 2**32 - 1))
    limit = min(extent, int(np.iinfo(index_dtype).max) + 1)
    index = np.random.default_rng(seed).integers(0, max(limit, 1), index_shape).astype(index_dtype)
    operands: list[Any] = [x, index]
    if name != "gather":
        src_shape = tuple(e + draw(st.integers(0, 1)) for e in index_shape)
        operands.append(
            draw(arrays(dtype, src_shape, bound=100.0 if name == "scatter_add" else None))
        )
    return operands, {"axis": axis}


@pytest.mark.parametrize(("name", "dtype"), cases("gather", "scatter", "scatter_add"))
@HYPOTHESIS
@given(data=st.data())
def test_indexing_matches_loops(name: str, dtype: cv.DType, data: st.DataObject) -> None:
    """Every index position reads or writes the addressed element; scatter's last write wins."""
    operands, fields = data.draw(indexed_problem(name, dtype, np.int64))
    check(Generic, name, operands, fields)


@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8, np.int32, np.uint64])
@pytest.mark.parametrize("name", ["gather", "scatter", "scatter_add"])
@HYPOTHESIS
@given(data=st.data())
def test_any_integer_index_dtype(name: str, index_dtype: Any, data: st.DataObject) -> None:
    """Index tensors of any integer dtype are converted to int64 by the plan."""
    operands, fields = data.draw(indexed_problem(name, cv.float32, index_dtype))
    check(Generic, name, operands, fields)


@pytest.fixture
def allocations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Generic storage creation (allocate and result wrapping both go through it)."""
    created: list[int] = []
    original = Generic._from_flat

    def counting(cls: type, flat: Any, dtype: cv.DType) -> Any:
        created.append(flat.size)
        return original.__func__(cls, flat, dtype)  # type: ignore[attr-defined]

    monkeypatch.setattr(Generic, "_from_flat", classmethod(counting))
    return created


class TestRefusalsBeforeAllocation:
    """Bad indices raise before any result storage exists."""

    @pytest.mark.parametrize("name", ["gather", "scatter", "scatter_add"])
    @pytest.mark.parametrize("bad", [3, -1])
    def test_out_of_range_index(self, name: str, bad: int, allocations: list[int]) -> None:
        x = cv.tensor(np.zeros((3, 2)), carrier=Generic)
        index = cv.tensor(np.array([[0, 1], [bad, 2]]), carrier=Generic)
        src = cv.tensor(np.ones((2, 2)), carrier=Generic)
        operands = (x, index) if name == "gather" else (x, index, src)
        allocations.clear()
        with pytest.raises(
            IndexError,
            match=rf"{name} on Generic: index {bad} is out of range for axis 0 with extent 3",
        ):
            getattr(cv, name)(*operands, axis=0)
        assert allocations == []

    def test_index_larger_than_input_off_axis(self, allocations: list[int]) -> None:
        x = cv.tensor(np.zeros((3, 2)), carrier=Generic)
        index = cv.tensor(np.zeros((1, 3), np.int64), carrier=Generic)
        allocations.clear()
        with pytest.raises(
            ValueError,
            match=r"gather on Generic: index shape \(1, 3\) exceeds input shape \(3, 2\) on axis 1",
        ):
            cv.gather(x, index, axis=0)
        assert allocations == []

    def test_index_with_other_rank(self) -> None:
        x = cv.tensor(np.zeros((3, 2)), carrier=Generic)
        index = cv.tensor(np.zeros(2, np.int64), carrier=Generic)
        with pytest.raises(ValueError, match="index has 1 axes but input has 2"):
            cv.gather(x, index, axis=0)

    def test_axis_out_of_range(self) -> None:
        x = cv.tensor(np.zeros((3, 2)), carrier=Generic)
        index = cv.tensor(np.zeros((1, 1), np.int64), carrier=Generic)
        with pytest.raises(IndexError, match="gather on Generic: axis 2 is out of range"):
            cv.gather(x, index, axis=2)

    def test_float_index_is_refused_by_the_plan(self) -> None:
        x = cv.tensor(np.zeros(3), carrier=Generic)
        with pytest.raises(TypeError, match="cast the index to int64"):
            cv.gather(x, cv.tensor(np.zeros(1), carrier=Generic), axis=0)


class TestSemantics:
    def test_scatter_is_functional(self) -> None:
        x = cv.tensor(np.zeros(3), carrier=Generic)
        out = cv.scatter(
            x,
            cv.tensor(np.array([1]), carrier=Generic),
            cv.tensor(np.ones(1), carrier=Generic),
            axis=0,
        )
        np.testing.assert_array_equal(x.numpy(), [0.0, 0.0, 0.0])
        np.testing.assert_array_equal(out.numpy(), [0.0, 1.0, 0.0])
        assert out.carrier is not x.carrier

    def test_scatter_last_duplicate_wins(self) -> None:
        (out,) = run(
            Generic,
            "scatter",
            [np.zeros(2), np.array([0, 1, 0, 0]), np.array([1.0, 2.0, 3.0, 4.0])],
            {"axis": 0},
        )
        np.testing.assert_array_equal(out, [4.0, 2.0])

    def test_scatter_add_accumulates_duplicates(self) -> None:
        (out,) = run(
            Generic,
            "scatter_add",
            [np.zeros(2), np.array([0, 1, 0, 0]), np.array([1.0, 2.0, 3.0, 4.0])],
            {"axis": 0},
        )
        np.testing.assert_array_equal(out, [8.0, 2.0])

    def test_gather_with_smaller_index(self) -> None:
        x = np.arange(12.0).reshape(3, 4)
        (out,) = run(Generic, "gather", [x, np.array([[2, 0], [1, 1]])], {"axis": 0})
        np.testing.assert_array_equal(out, [[8.0, 1.0], [4.0, 5.0]])
