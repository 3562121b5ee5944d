"""``conv_general`` as an implicit GEMM on the matmul tiling: its C twin against Generic.

The quick tier's sample plan of ``conv_general`` is the float16 one; these tests add the
float32 plan's Metal source (simdgroup matrices, binding, syntax) and a hypothesis test over
the options (window strides, padding, both dilations, feature groups, 1 or 2 spatial axes,
axis layouts) through the C twin, against Generic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conveyor as cv
from conveyor_metal._calls import run_plan
from conveyor_metal._engine import Engine, Operand

from .support import assert_close, cpu_engine, operand, random_values, reference, run
from .sweep import CountingEngine, RecordingLauncher, record
from .test_lowering import _check as check_lowering_and_binding

_FLOAT32 = cv.resolve_plan("conv_general", cv.float32, cv.float32)


@pytest.fixture(scope="module")
def engine(kernel_cache: Path) -> Engine:
    return cpu_engine(kernel_cache)


def _metal_engine(kernel_cache: Path) -> Engine:
    return Engine("cpu", RecordingLauncher("metal"), kernel_cache / "sources")


class TestMetalSource:
    """The float32 convolution lowers to simdgroup-matrix MSL that binds and passes syntax."""

    def test_float32_plan_lowers_binds_and_passes_syntax_check(
        self, kernel_cache: Path, tmp_path: Path
    ) -> None:
        check_lowering_and_binding([_FLOAT32], kernel_cache, tmp_path)

    def test_float_kernel_multiplies_with_simdgroup_matrices(self, kernel_cache: Path) -> None:
        launches = record(_metal_engine(kernel_cache), [_FLOAT32], parallel=False)
        assert launches
        for launch in launches:
            assert "simdgroup_multiply_accumulate" in launch.source


@st.composite
def _problems(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """(input shape, weight shape, options) of a valid grouped convolution, canonical axes."""
    d = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 2))
    per_in, per_out = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.sampled_from([1, 2]))
    extents = tuple(draw(st.sampled_from([1, 5, 9])) for _ in range(d))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(d))
    small = st.integers(1, 2)
    options = {
        "window_strides": tuple(draw(small) for _ in range(d)),
        "padding": tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(d)),
        "lhs_dilation": tuple(draw(small) for _ in range(d)),
        "rhs_dilation": tuple(draw(small) for _ in range(d)),
        "feature_group_count": groups,
    }
    return (n, per_in * groups, *extents), (per_out * groups, per_in, *kernel), options


class TestCTwin:
    """Every option, through the C twin of the tiled kernel, matches Generic."""

    @settings(
        max_examples=15,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(problem=_problems(), channels_last=st.booleans())
    def test_strides_padding_dilations_and_groups_match_generic(
        self,
        engine: Engine,
        problem: tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]],
        channels_last: bool,
    ) -> None:
        x_shape, w_shape, fields = problem
        rng = np.random.default_rng(sum(x_shape) * 7 + sum(w_shape))
        x = operand(random_values(x_shape, cv.float32, rng, "conv_general"), cv.float32)
        w = operand(random_values(w_shape, cv.float32, rng, "conv_general"), cv.float32)
        if channels_last:  # the same values read through permuted strides: no copy
            d = len(x_shape) - 2
            letters = "HW"[:d]
            fields["dimension_numbers"] = (f"N{letters}C", f"{letters}IO", f"N{letters}C")
            last = (0, *range(2, d + 2), 1)
            x = Operand(x.buffer, x.layout.permute(last))
            w = Operand(w.buffer, w.layout.permute((*range(2, d + 2), 1, 0)))
        options = cv.OperationExecutionOptions("conv_general", **fields)
        got = run(engine, _FLOAT32, options, [x, w])
        want = reference(_FLOAT32, options, [x, w])
        assert_close("conv_general", got, want)


def test_result_past_32_bit_indices_is_refused_before_anything_is_allocated(
    kernel_cache: Path,
) -> None:
    """A broadcast input of 2**31 + 5 positions: a ValueError, no buffer, no launch."""
    engine = CountingEngine(kernel_cache)
    one = operand(np.ones((1,), np.float32), cv.float32)
    x = Operand(one.buffer, cv.Layout((1, 1, 2**31 + 5), (0, 0, 0)))
    w = Operand(one.buffer, cv.Layout((1, 1, 1)))
    options = cv.OperationExecutionOptions("conv_general")
    with pytest.raises(
        ValueError,
        match=r"^conv_general on Metal: more than 2\*\*31 - 1 elements; split the operands$",
    ):
        run_plan(engine, _FLOAT32, options, [x, w], "Metal")
    assert engine.allocated == 0
    assert isinstance(engine.launcher, RecordingLauncher) and not engine.launcher.launches


def test_new_shapes_and_options_of_one_class_do_not_relower(kernel_cache: Path) -> None:
    """Kernels are cached per (plan, spatial rank): shapes and option values are meta words."""
    engine = _metal_engine(kernel_cache)
    rng = np.random.default_rng(0)
    for extent, step, groups in [(9, 1, 1), (70, 2, 2), (5, 3, 1)]:
        x = operand(random_values((2, 2, extent), cv.float32, rng, "conv"), cv.float32)
        w = operand(random_values((2, 2 // groups, 3), cv.float32, rng, "conv"), cv.float32)
        options = cv.OperationExecutionOptions(
            "conv_general", window_strides=(step,), feature_group_count=groups
        )
        run_plan(engine, _FLOAT32, options, [x, w], "Metal")
    assert engine.lowered == 1
