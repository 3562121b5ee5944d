"""gather / scatter / scatter_add on Metal's engine: refusals first, duplicates, any shape.

The kernels run through TileLang's C target (``support.cpu_engine``) and are compared with
Generic. Every refusal is checked for the reference's exception type and message, and for
leaving nothing allocated, lowered or launched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.exceptions import AxisError

import conveyor as cv
from conveyor_metal._calls import run_plan
from conveyor_metal._engine import Engine, Operand

from .support import assert_close, cpu_engine, index_operands, operand, random_values, reference
from .support import run as run_engine
from .sweep import C_TARGET_EXAMPLES, CountingEngine, RecordingLauncher


@pytest.fixture(scope="module")
def engine(kernel_cache: Path) -> Engine:
    return cpu_engine(kernel_cache)


def _operands(name: str, entries: list[int], axis_extent: int = 4) -> list[Any]:
    x = operand(np.arange(axis_extent, dtype=np.float32), cv.float32)
    index = operand(np.asarray(entries, dtype=np.int32), cv.int32)
    src = operand(np.arange(len(entries), dtype=np.float32) + 10, cv.float32)
    return [x, index] if name == "gather" else [x, index, src]


def _plan(name: str) -> cv.OperationPlan:
    types = [cv.float32, cv.int32] + ([] if name == "gather" else [cv.float32])
    return cv.resolve_plan(name, *types)


def _refused(
    kernel_cache: Path, name: str, operands: list[Any], axis: int
) -> pytest.ExceptionInfo[IndexError]:
    counting = CountingEngine(kernel_cache, "c")
    options = cv.OperationExecutionOptions(name, axis=axis)
    with pytest.raises(IndexError) as info:
        run_plan(counting, _plan(name), options, operands, "Metal")
    assert counting.allocated == 0 and counting.lowered == 0
    assert isinstance(counting.launcher, RecordingLauncher) and not counting.launcher.launches
    return info


_NAMES = ["gather", "scatter", "scatter_add"]


class TestIndexRefusals:
    """Out-of-range indices and axes are refused as Generic refuses them, before any work."""

    @pytest.mark.parametrize("name", _NAMES)
    def test_index_past_extent_raises_index_error_before_allocation(
        self, kernel_cache: Path, name: str
    ) -> None:
        info = _refused(kernel_cache, name, _operands(name, [0, 4, 1]), 0)
        assert type(info.value) is IndexError
        assert str(info.value) == (
            f"{name} on Metal: index 4 is out of range for axis 0 with extent 4; indices must "
            f"lie in [0, 4) (negative indices are not counted from the end)"
        )

    @pytest.mark.parametrize("name", _NAMES)
    def test_negative_index_raises_index_error_before_allocation(
        self, kernel_cache: Path, name: str
    ) -> None:
        info = _refused(kernel_cache, name, _operands(name, [1, -1]), 0)
        assert type(info.value) is IndexError
        assert "index -1 is out of range for axis 0 with extent 4" in str(info.value)

    @pytest.mark.parametrize("name", _NAMES)
    def test_axis_out_of_range_raises_axis_error_before_allocation(
        self, kernel_cache: Path, name: str
    ) -> None:
        info = _refused(kernel_cache, name, _operands(name, [1, 2]), 1)
        assert type(info.value) is AxisError
        assert str(info.value).startswith(f"{name} on Metal: ")
        assert "pass an axis in [-1, 1)" in str(info.value)

    def test_index_larger_than_input_off_axis_raises_value_error(self, kernel_cache: Path) -> None:
        counting = CountingEngine(kernel_cache, "c")
        x = operand(np.zeros((2, 3), np.float32), cv.float32)
        index = operand(np.zeros((3, 3), np.int32), cv.int32)
        options = cv.OperationExecutionOptions("gather", axis=1)
        with pytest.raises(ValueError, match=r"^gather on Metal: index shape \(3, 3\) exceeds"):
            run_plan(counting, _plan("gather"), options, [x, index], "Metal")
        assert counting.allocated == 0 and counting.lowered == 0

    def test_errors_match_generic_type_and_text(self, kernel_cache: Path) -> None:
        from conveyor_generic import Generic

        operands = _operands("scatter", [5])
        info = _refused(kernel_cache, "scatter", operands, 0)
        tensors = [
            cv.tensor(np.asarray(o.buffer), dtype=dtype, carrier=Generic)
            for o, dtype in zip(operands, (cv.float32, cv.int32, cv.float32), strict=True)
        ]
        op = Generic.allocate(0, cv.float32).dispatch_op("scatter")
        with pytest.raises(IndexError) as generic:
            op.forward(*tensors, options=cv.OperationExecutionOptions("scatter", axis=0))
        assert type(generic.value) is type(info.value)
        assert str(info.value).split(": ", 1)[1] == str(generic.value).split(": ", 1)[1]


class TestDuplicateTargets:
    """Duplicate indices: scatter keeps the last write in index order, scatter_add adds all."""

    def test_scatter_duplicates_keep_last_write_in_index_order(self, engine: Engine) -> None:
        plan, options = _plan("scatter"), cv.OperationExecutionOptions("scatter", axis=0)
        operands = _operands("scatter", [2, 0, 2, 2, 0])
        got = run_engine(engine, plan, options, operands)
        np.testing.assert_array_equal(got, [14.0, 1.0, 13.0, 3.0])  # src is 10 + position
        np.testing.assert_array_equal(got, reference(plan, options, operands))

    def test_scatter_add_duplicates_accumulate_every_entry(self, engine: Engine) -> None:
        plan = _plan("scatter_add")
        options = cv.OperationExecutionOptions("scatter_add", axis=0)
        operands = _operands("scatter_add", [2, 0, 2, 2, 0])
        got = run_engine(engine, plan, options, operands)
        np.testing.assert_array_equal(got, [0 + 11 + 14, 1, 2 + 10 + 12 + 13, 3])
        np.testing.assert_array_equal(got, reference(plan, options, operands))

    def test_float_scatter_add_sums_in_index_order_like_generic(self, engine: Engine) -> None:
        """Each thread adds its matches in index order: float32 sums equal Generic's bits."""
        rng = np.random.default_rng(3)
        plan = _plan("scatter_add")
        options = cv.OperationExecutionOptions("scatter_add", axis=0)
        x = operand(rng.standard_normal(7).astype(np.float32) * 1e4, cv.float32)
        index = operand(rng.integers(0, 7, 4097).astype(np.int32), cv.int32)
        src = operand(rng.standard_normal(4097).astype(np.float32), cv.float32)
        got = run_engine(engine, plan, options, [x, index, src])
        np.testing.assert_array_equal(got, reference(plan, options, [x, index, src]))


def test_new_shape_of_same_rank_does_not_relower(kernel_cache: Path) -> None:
    """Indexing kernels are cached per (plan, rank): new 1-d shapes reuse one kernel."""
    counting = CountingEngine(kernel_cache, "c")
    plan = _plan("gather")
    rng = np.random.default_rng(0)
    for size in (1, 7, 4097):
        x = operand(random_values((size,), cv.float32, rng, "gather"), cv.float32)
        run_plan(counting, plan, cv.OperationExecutionOptions("gather", axis=0),
                 index_operands(plan, rng, x, (size + 3,), 0), "Metal")  # fmt: skip
    assert counting.lowered == 1


_SIZES = st.sampled_from([1, 2, 7, 64, 65])


class TestShapesOnTheCTarget:
    """Any 1-d or 2-d shape, axis, transposed input and smaller index matches Generic."""

    @C_TARGET_EXAMPLES
    @given(
        name=st.sampled_from(_NAMES),
        shape=st.lists(_SIZES, min_size=1, max_size=2).map(tuple),
        axis=st.integers(0, 1),
        lanes=_SIZES,
        transpose=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def test_shapes_axes_and_layouts_match_generic(
        self,
        engine: Engine,
        name: str,
        shape: tuple[int, ...],
        axis: int,
        lanes: int,
        transpose: bool,
        seed: int,
    ) -> None:
        rng = np.random.default_rng(seed)
        axis = min(axis, len(shape) - 1)
        plan = _plan(name)
        x = operand(random_values(shape[::-1], cv.float32, rng, name), cv.float32)
        if transpose and len(shape) == 2:
            x = Operand(x.buffer, cv.Layout(shape[::-1]).permute((1, 0)))
        else:
            x = operand(random_values(shape, cv.float32, rng, name), cv.float32)
        index_shape = tuple(lanes if d == axis else max(e - 1, 1) for d, e in enumerate(shape))
        operands = index_operands(plan, rng, x, index_shape, axis)
        options = cv.OperationExecutionOptions(name, axis=axis)
        got = run_engine(engine, plan, options, operands)
        assert_close(name, got, reference(plan, options, operands))
