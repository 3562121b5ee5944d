"""CPU's float32 activation formulas against Generic on long inputs (many blocks, both cores).

The hypothesis families of ``test_cpu_kernels.py`` draw tensors of a few elements; these cases
run the blockwise formulas of ``cpu_activations`` past ``BLOCK`` and ``PARALLEL_MIN``, over
dense grids and random values with the special values mixed in, and hold the names whose
formula reaches it to the oracle's 2-ulp bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_generic.kernels import cpu_activations as act
from tests.generic.oracle import assert_matches, run

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 3.4e38, -3.4e38]


def grid(low: float, high: float) -> np.ndarray[Any, Any]:
    """Dense float32 points over [low, high], random normal values and the special values."""
    rng = np.random.default_rng(26)
    count = 3 * act.BLOCK + 17  # several blocks and a ragged last one
    values = np.concatenate(
        [
            np.linspace(low, high, count),
            rng.standard_normal(count) * 4,
            10.0 ** rng.uniform(-40, 1, 4096) * rng.choice([-1, 1], 4096),
            SPECIAL,
        ]
    )
    return values.astype(np.float32)


@pytest.mark.parametrize(
    ("name", "fields", "low", "high"),
    [
        ("erf", {}, -6.0, 6.0),
        ("softplus", {}, -100.0, 100.0),
        ("elu", {"alpha": 1.5}, -20.0, 20.0),
        ("leaky_relu", {"negative_slope": 1.5}, -20.0, 20.0),
        ("leaky_relu", {"negative_slope": -0.25}, -20.0, 20.0),
        ("sigmoid", {}, -100.0, 100.0),
    ],
)
def test_float32_formula_is_within_2_ulps_of_generic(
    name: str, fields: dict[str, Any], low: float, high: float
) -> None:
    """erf (tanh form), softplus, elu, leaky_relu and sigmoid meet the oracle's 2-ulp bound."""
    x = grid(low, high)
    (want,) = run(Generic, name, [x], fields)
    (got,) = run(CPU, name, [x], fields)
    assert_matches(got, want, cv.float32, ulps=2.0)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float32_gelu_over_many_blocks_matches_generic(approximate: str) -> None:
    """Both gelu forms, past one block, match Generic within the CPU kernels' tolerance."""
    x = grid(-20.0, 20.0)
    (want,) = run(Generic, "gelu", [x], {"approximate": approximate})
    (got,) = run(CPU, "gelu", [x], {"approximate": approximate})
    assert_matches(got, want, cv.float32, ulps=8.0, atol=1e-6)


def test_erf_is_exactly_odd_and_saturates_at_one() -> None:
    """erf(-x) == -erf(x) bit for bit, and erf is exactly +-1 from |x| = 4 on (as in float32)."""
    x = np.linspace(0.0, 10.0, 20001, dtype=np.float32)
    positive = cv.erf(cv.tensor(x, carrier=CPU)).numpy()
    negative = cv.erf(cv.tensor(-x, carrier=CPU)).numpy()
    np.testing.assert_array_equal(negative, -positive)
    assert (positive[x >= 4.0] == 1.0).all()


def test_no_formula_uses_a_masked_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Branches are arithmetic: np.copyto(where=) cost 9.5 ns an element on random signs."""
    calls: list[Any] = []
    original = np.copyto

    def spy(*args: Any, **kwargs: Any) -> Any:
        if "where" in kwargs:
            calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(np, "copyto", spy)
    x = np.random.default_rng(1).standard_normal(act.BLOCK + 3).astype(np.float32)
    out = np.empty_like(x)
    for name, options in [
        ("sigmoid", None),
        ("silu", None),
        ("elu", cv.OperationExecutionOptions("elu", alpha=2.0)),
        ("leaky_relu", cv.OperationExecutionOptions("leaky_relu", negative_slope=3.0)),
        ("gelu", None),
        ("erf", None),
        ("softplus", None),
    ]:
        act.step(name, options, np.dtype(np.float32))(out, x)
    assert calls == []
