"""bfloat16 pointwise plans: computed in float32, rounded once to nearest even, as Generic.

Metal declares MSL 3.1 ``bfloat`` buffers; TileLang 0.1.15's C target cannot ("Cannot
convert type bfloat16 to C type"), so its twin reads and writes the uint16 bits and converts
through float32 by hand. These tests pin that conversion on the C target: ties round to even,
NaN stays NaN, infinities and signed zeros survive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import conveyor as cv
from conveyor_metal._engine import Engine
from conveyor_metal._surface import advertised

from .support import cpu_engine, operand, reference, run


@pytest.fixture(scope="module")
def engine(kernel_cache: Path) -> Engine:
    return cpu_engine(kernel_cache)


def _bf16(values: list[float]) -> np.ndarray:  # type: ignore[type-arg]  # ml_dtypes' dtype
    return np.asarray(values, dtype=cv.bfloat16.numpy)


class TestBfloat16Rounding:
    """The C twin's hand-written bfloat16 store rounds exactly as Generic's."""

    def test_ties_round_to_even_and_specials_survive(self, engine: Engine) -> None:
        ulp = 2.0**-7  # bfloat16's spacing in [1, 2)
        x = _bf16([1.0, 1.0 + ulp, 1.0, np.nan, np.inf, -0.0, 3.0, -np.inf])
        y = _bf16([ulp / 2, ulp / 2, ulp / 4, 1.0, 1.0, -0.0, 2.0**-9, np.inf])
        plan = cv.resolve_plan("add", cv.bfloat16, cv.bfloat16)
        options = cv.OperationExecutionOptions("add")
        operands = [operand(x, cv.bfloat16), operand(y, cv.bfloat16)]
        got = run(engine, plan, options, operands).astype(np.float64)
        want = reference(plan, options, operands).astype(np.float64)
        np.testing.assert_array_equal(got, want)
        expected = [1.0, 1.0 + 2 * ulp, 1.0, np.nan, np.inf, -0.0, 3.0, np.nan]
        np.testing.assert_array_equal(got, expected)
        assert np.signbit(got[5])

    def test_weak_scalar_bfloat16_plans_are_not_advertised(self) -> None:
        assert advertised(cv.resolve_plan("add", cv.bfloat16, cv.bfloat16))
        assert not advertised(cv.resolve_plan("add", cv.bfloat16, 1.5))
        assert not advertised(cv.resolve_plan("reduce_sum", cv.bfloat16))
