"""``sort`` and ``topk`` on Metal: refusals, the bitonic launch sequence, the kernel cache, and
float32 (NaN, signed zeros, ties) on the C target beside the quick tier's bool sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import conveyor as cv
from conveyor_metal._calls import run_plan
from conveyor_metal._engine import Engine, Operand
from conveyor_metal.kernels.sorting import TILE

from .support import assert_close, cases, cpu_engine, operand, random_values, reference, run
from .sweep import C_TARGET_EXAMPLES, RecordingLauncher


def _recording(kernel_cache: Path) -> tuple[Engine, RecordingLauncher]:
    launcher = RecordingLauncher("metal")
    return Engine("cpu", launcher, kernel_cache / "sources"), launcher


def _counting_empty(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every result buffer ``engine`` allocates (to show a refusal allocates none)."""
    sizes: list[int] = []
    real = engine.empty

    def empty(size: int, dtype: cv.DType) -> Any:
        sizes.append(size)
        return real(size, dtype)

    monkeypatch.setattr(engine, "empty", empty)
    return sizes


@pytest.fixture(scope="module")
def c_engine(kernel_cache: Path) -> Engine:
    return cpu_engine(kernel_cache)


class TestRefusals:
    """Refusals match Generic's types and messages, before anything is allocated or launched."""

    @pytest.mark.parametrize(
        ("shape", "k", "message"),
        [
            ((3, 4), 5, r"topk on Metal: k=5 is larger than axis 1 of extent 4 "
                        r"\(shape \(3, 4\)\); pass k <= 4"),
            ((), 2, r"topk on Metal: k=2 is larger than the 1 element of a 0-d input; pass k <= 1"),
        ],
    )  # fmt: skip
    def test_topk_k_beyond_the_axis_is_a_value_error_before_allocation(
        self,
        kernel_cache: Path,
        monkeypatch: pytest.MonkeyPatch,
        shape: tuple[int, ...],
        k: int,
        message: str,
    ) -> None:
        engine, launcher = _recording(kernel_cache)
        allocated = _counting_empty(engine, monkeypatch)
        plan = cv.resolve_plan("topk", cv.float32)
        x = operand(np.zeros(shape, np.float32), cv.float32)
        options = cv.OperationExecutionOptions("topk", k=k)
        with pytest.raises(ValueError, match=message):
            run_plan(engine, plan, options, [x], "Metal")
        assert allocated == [] and launcher.launches == [] and engine.lowered == 0

    def test_sort_axis_out_of_range_is_an_index_error_before_allocation(
        self, kernel_cache: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        engine, launcher = _recording(kernel_cache)
        allocated = _counting_empty(engine, monkeypatch)
        plan = cv.resolve_plan("sort", cv.int32)
        x = operand(np.zeros((2, 3), np.int32), cv.int32)
        options = cv.OperationExecutionOptions("sort", axis=2)
        with pytest.raises(IndexError, match=r"sort on Metal: .*; pass an axis in \[-2, 2\)"):
            run_plan(engine, plan, options, [x], "Metal")
        assert allocated == [] and launcher.launches == [] and engine.lowered == 0


class TestBitonicLaunches:
    """Rows beyond a tile take global steps and one merge per stage; kernels are shared."""

    def test_long_row_runs_tile_sort_then_steps_and_merges_per_stage(
        self, kernel_cache: Path
    ) -> None:
        engine, launcher = _recording(kernel_cache)
        plan = cv.resolve_plan("sort", cv.bool)
        x = operand(np.zeros(4097, np.bool_), cv.bool)
        run_plan(engine, plan, cv.OperationExecutionOptions("sort"), [x], "Metal")
        got = [
            (r.scalars["stage"], r.scalars.get("j"), r.scalars.get("final"))
            for r in launcher.launches
        ]
        want: list[tuple[int, int | None, int | None]] = [(0, None, 0)]
        stage = 2 * TILE
        while stage <= 8192:  # 4097 pads to 8192
            j = stage // 2
            while j >= TILE:
                want.append((stage, j, None))
                j //= 2
            want.append((stage, None, int(stage == 8192)))
            stage *= 2
        assert got == want
        assert all(r.scalars["width"] == 8192 for r in launcher.launches)

    def test_new_lengths_of_one_layout_class_reuse_the_two_kernels(
        self, kernel_cache: Path
    ) -> None:
        engine, _ = _recording(kernel_cache)
        plan = cv.resolve_plan("sort", cv.bool)
        for size in (7, 65, 4097, 1000):
            x = operand(np.zeros(size, np.bool_), cv.bool)
            run_plan(engine, plan, cv.OperationExecutionOptions("sort"), [x], "Metal")
            topk = cv.resolve_plan("topk", cv.bool)
            options = cv.OperationExecutionOptions("topk", k=size // 2)
            run_plan(engine, topk, options, [x], "Metal")
        assert engine.lowered == 2  # the local kernel and the global step, shared by topk


class TestFloat32OnTheCTarget:
    """float32 sort and topk match Generic: NaN, signed zeros, infinities, ties, long rows."""

    @pytest.mark.parametrize("name", ["sort", "topk"])
    def test_float32_cases_match_generic(self, c_engine: Engine, name: str) -> None:
        plan = cv.resolve_plan(name, cv.float32)
        for label, operands, options in cases(plan, seed=3):
            try:
                assert_close(
                    name, run(c_engine, plan, options, operands), reference(plan, options, operands)
                )
            except AssertionError as exc:
                raise AssertionError(f"{name} on {label} operands: {exc}") from None

    def test_middle_axis_of_3_d_input_reads_two_kept_axes_in_place(self, c_engine: Engine) -> None:
        plan = cv.resolve_plan("sort", cv.float32)
        rng = np.random.default_rng(4)
        x = operand(random_values((3, 70, 4), cv.float32, rng, "sort"), cv.float32)
        options = cv.OperationExecutionOptions("sort", axis=1, descending=True)
        assert_close("sort", run(c_engine, plan, options, [x]), reference(plan, options, [x]))

    @C_TARGET_EXAMPLES
    @given(
        length=st.integers(1, 1100),
        offset=st.integers(0, 3),
        fraction=st.floats(0, 1),
        largest=st.booleans(),
        pool=st.sampled_from([3, 1000]),
    )
    def test_topk_of_any_length_and_offset_matches_generic(
        self, c_engine: Engine, length: int, offset: int, fraction: float, largest: bool, pool: int
    ) -> None:
        rng = np.random.default_rng(length)
        values = rng.integers(0, pool, size=offset + length).astype(np.float32)
        values[rng.random(values.size) < 0.05] = np.nan
        x = Operand(operand(values, cv.float32).buffer, cv.Layout((length,), offset=offset))
        plan = cv.resolve_plan("topk", cv.float32)
        options = cv.OperationExecutionOptions("topk", k=int(fraction * length), largest=largest)
        assert_close("topk", run(c_engine, plan, options, [x]), reference(plan, options, [x]))
