"""The matmul kernel: simdgroup matrices on Metal with guarded edges, its C twin against Generic.

The quick tier's sample plan of ``matmul`` is the int32 one (the shared-memory looped kernel);
these tests add the floating kernels to the quick tier: the float32 plan's Metal source uses
simdgroup matrices and writes its result only through the bounds-checked threadgroup tile,
binds and passes the syntax check, and its C twin (same tiling, a k-loop instead of
``T.gemm``) matches Generic. A hypothesis test varies the shapes around the tile sizes.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import conveyor as cv
from conveyor_metal._calls import run_plan
from conveyor_metal._engine import Engine, Operand
from conveyor_metal.kernels.matmul import TILE_M, TILE_N

from .support import assert_close, cases, cpu_engine, operand, random_values, reference, run
from .sweep import C_TARGET_EXAMPLES, CountingEngine, RecordingLauncher, prepare_c, record
from .test_lowering import _check as check_lowering_and_binding

_FLOAT32 = cv.resolve_plan("matmul", cv.float32, cv.float32)
_INT32 = cv.resolve_plan("matmul", cv.int32, cv.int32)
_OPTIONS = cv.OperationExecutionOptions("matmul")


@pytest.fixture(scope="module")
def engine(kernel_cache: Path) -> Engine:
    engine = cpu_engine(kernel_cache)
    prepare_c(engine, [_FLOAT32])
    return engine


def _metal_engine(kernel_cache: Path) -> Engine:
    return Engine("cpu", RecordingLauncher("metal"), kernel_cache / "sources")


class TestMetalSource:
    """What the lowered MSL does: simdgroup matrices for floats, guarded result writes."""

    def test_float32_plan_lowers_binds_and_passes_syntax_check(
        self, kernel_cache: Path, tmp_path: Path
    ) -> None:
        check_lowering_and_binding([_FLOAT32], kernel_cache, tmp_path)

    def test_float_kernel_multiplies_with_simdgroup_matrices_and_guards_its_stores(
        self, kernel_cache: Path
    ) -> None:
        launches = record(_metal_engine(kernel_cache), [_FLOAT32], parallel=False)
        sources = {launch.source for launch in launches}
        assert sources
        for source in sources:
            assert "simdgroup_multiply_accumulate" in source
            # simdgroup_store only fills the threadgroup tile; Y is written under a bounds check.
            targets = re.findall(r"simdgroup_store\(C\[\d+\], \(&\((\w+)\[", source)
            assert targets and set(targets) == {"Cs"}
            lines = source.splitlines()
            writes = [i for i, line in enumerate(lines) if line.lstrip().startswith("Y[")]
            assert writes and all(lines[i - 1].lstrip().startswith("if (") for i in writes)

    def test_int32_kernel_uses_no_simdgroup_matrix(self, kernel_cache: Path) -> None:
        launches = record(_metal_engine(kernel_cache), [_INT32], parallel=False)
        assert launches
        for launch in launches:
            assert "simdgroup_multiply_accumulate" not in launch.source
            assert "simdgroup_store" not in launch.source

    def test_grid_covers_every_output_tile_of_every_batch_entry(self, kernel_cache: Path) -> None:
        launches = record(_metal_engine(kernel_cache), [_FLOAT32], parallel=False)
        for launch in launches:
            m, n, batch = (launch.scalars[k] for k in ("M", "N", "batch"))
            assert launch.launch.grid == (math.ceil(n / TILE_N), math.ceil(m / TILE_M), batch)


class TestCTwin:
    """The float kernel's C twin (same tiles, staging and k-loop) matches Generic."""

    def test_float32_plan_matches_generic_on_every_case(self, engine: Engine) -> None:
        for label, operands, options in cases(_FLOAT32, seed=3):
            got = run(engine, _FLOAT32, options, operands)
            want = reference(_FLOAT32, options, operands)
            try:
                assert_close("matmul", got, want)
            except AssertionError as exc:
                raise AssertionError(f"float32 matmul on {label} operands: {exc}") from None

    @C_TARGET_EXAMPLES
    @given(
        dtype=st.sampled_from([cv.float32, cv.int32]),
        m=st.sampled_from([1, 7, 64, 65]),
        n=st.sampled_from([1, 7, 64, 65]),
        k=st.sampled_from([1, 7, 32, 33, 65]),
        batch=st.sampled_from([(), (2,), (1, 3)]),
        broadcast_b=st.booleans(),
        transpose_a=st.booleans(),
    )
    def test_shapes_around_the_tile_sizes_match_generic(
        self,
        engine: Engine,
        dtype: cv.DType,
        m: int,
        n: int,
        k: int,
        batch: tuple[int, ...],
        broadcast_b: bool,
        transpose_a: bool,
    ) -> None:
        rng = np.random.default_rng(m * 1000 + n * 10 + k)
        plan = cv.resolve_plan("matmul", dtype, dtype)
        a = operand(random_values((*batch, k, m), dtype, rng, "matmul"), dtype)
        a_layout = cv.Layout((*batch, k, m))
        if transpose_a:
            order = (*range(len(batch)), len(batch) + 1, len(batch))
            a = Operand(a.buffer, a_layout.permute(order))
        else:
            a = operand(random_values((*batch, m, k), dtype, rng, "matmul"), dtype)
        b_shape = (k, n) if broadcast_b else (*batch, k, n)
        b = operand(random_values(b_shape, dtype, rng, "matmul"), dtype)
        got = run(engine, plan, _OPTIONS, [a, b])
        want = reference(plan, _OPTIONS, [a, b])
        assert_close("matmul", got, want)


def test_result_past_32_bit_indices_is_refused_before_anything_is_allocated(
    kernel_cache: Path,
) -> None:
    """(70000, 1) @ (1, 70000) has 4.9e9 entries: a ValueError, no buffer, no launch."""
    engine = CountingEngine(kernel_cache)
    one = operand(np.ones((1,), np.float32), cv.float32)
    a = Operand(one.buffer, cv.Layout((70000, 1), (0, 0)))
    b = Operand(one.buffer, cv.Layout((1, 70000), (0, 0)))
    with pytest.raises(
        ValueError, match=r"^matmul on Metal: more than 2\*\*31 - 1 elements; split the operands$"
    ):
        run_plan(engine, _FLOAT32, _OPTIONS, [a, b], "Metal")
    assert engine.allocated == 0
    assert isinstance(engine.launcher, RecordingLauncher) and not engine.launcher.launches


def test_new_shapes_of_one_batch_class_do_not_relower(kernel_cache: Path) -> None:
    """Kernels are cached per (plan, batch class): new M, N, K and strides reuse the kernel."""
    engine = _metal_engine(kernel_cache)
    rng = np.random.default_rng(0)
    for m, k, n in [(7, 3, 5), (65, 70, 66), (1, 129, 2)]:
        a = operand(random_values((m, k), cv.float32, rng, "matmul"), cv.float32)
        b = operand(random_values((n, k), cv.float32, rng, "matmul"), cv.float32)
        b = Operand(b.buffer, cv.Layout((n, k)).permute((1, 0)))
        run_plan(engine, _FLOAT32, _OPTIONS, [a, b], "Metal")
    assert engine.lowered == 1
