"""TiledEvictable direct operations: the spec's tiled scenarios, against dense Generic references.

Every direct operation consumes the full logical tensor (whatever each tile's residency),
returns the dense compute-carrier result with one visible outer node, and differentiates
through the central VJP only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.sdk import DefinitionOperation
from conveyor_generic import Generic
from conveyor_storage import TiledEvictable
from tests.storage.tiled import PRIMARIES, SECONDARIES, build, secondary_factory

RNG = np.random.default_rng(12)


@pytest.fixture(params=PRIMARIES, ids=lambda c: c.__name__)
def primary(request: pytest.FixtureRequest) -> type[cv.Carrier]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=SECONDARIES)
def secondary(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return secondary_factory(request.param, tmp_path)


def _values(shape: tuple[int, ...], dtype: cv.DType) -> np.ndarray[Any, Any]:
    if dtype.is_integer:
        return RNG.integers(-50, 50, shape).astype(dtype.numpy)
    return RNG.standard_normal(shape).astype(dtype.numpy)


def _generic(values: np.ndarray[Any, Any], dtype: cv.DType, grad: bool = False) -> cv.Tensor:
    return cv.tensor(values, dtype=dtype, carrier=Generic, requires_grad=grad)


def _close(got: cv.Tensor, want: cv.Tensor, dtype: cv.DType) -> None:
    assert got.shape == want.shape
    assert got.dtype is want.dtype
    if dtype.is_integer:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


GRIDS = [((8, 15), (4, 5), [(1, 1)]), ((7,), (7,), []), ((12, 6), (3, 2), [(0, 0), (3, 2)])]


class TestExecuteDirectlyOnFullTiledTensor:
    """Scenario: Execute directly on a full tiled Tensor."""

    @pytest.mark.parametrize(("shape", "tile", "implicit"), GRIDS)
    @pytest.mark.parametrize("dtype", [cv.float32, cv.int32], ids=lambda d: d.name)
    @pytest.mark.parametrize("name", ["add", "mul", "elementwise_mul"])
    def test_binary_consumes_full_tensor_one_node(
        self,
        primary: Any,
        secondary: Any,
        shape: Any,
        tile: Any,
        implicit: Any,
        dtype: Any,
        name: str,
    ) -> None:
        """Two tiled operands with mixed residency give the dense Generic value, one node."""
        x, xv = build(
            _values(shape, dtype),
            tile,
            primary=primary,
            secondary=secondary,
            dtype=dtype,
            implicit=implicit,
            budget_tiles=3,
        )
        y, yv = build(
            _values(shape, dtype),
            tile,
            primary=primary,
            secondary=secondary,
            dtype=dtype,
            budget_tiles=3,
        )
        x.requires_grad = y.requires_grad = dtype.is_floating
        states = {x.carrier.tile_state(c).residency for c in x.carrier._grid.coords()}
        out = getattr(cv, name)(x, y)
        assert type(out.carrier) is primary
        _close(out, getattr(cv, name)(_generic(xv, dtype), _generic(yv, dtype)), dtype)
        if dtype.is_floating:
            node = out.grad_fn
            assert isinstance(node, DefinitionOperation)
            assert node._dispatch_carrier_class is TiledEvictable
            assert node._operation_name == name
            assert node._grad_inputs == (x, y)
        if implicit:
            assert "implicit" in states

    @pytest.mark.parametrize("scalar_first", [False, True])
    def test_mul_scalar_and_add_scalar(
        self, primary: Any, secondary: Any, scalar_first: bool
    ) -> None:
        """Tensor-scalar and scalar-tensor forms follow the plan like Generic."""
        x, xv = build(
            _values((8, 15), cv.float32),
            (4, 5),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            implicit=[(0, 2)],
        )
        g = _generic(xv, cv.float32)
        for name in ("mul", "add"):
            args = (2.5, x) if scalar_first else (x, 2.5)
            ref = (2.5, g) if scalar_first else (g, 2.5)
            _close(getattr(cv, name)(*args), getattr(cv, name)(*ref), cv.float32)

    def test_relu(self, primary: Any, secondary: Any) -> None:
        x, xv = build(
            _values((12, 6), cv.float32),
            (3, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            implicit=[(1, 1)],
            budget_tiles=2,
        )
        _close(cv.relu(x), cv.relu(_generic(xv, cv.float32)), cv.float32)

    @pytest.mark.parametrize("axis", [None, 0, 1, (0, 1), -1])
    @pytest.mark.parametrize("keepdims", [False, True])
    @pytest.mark.parametrize("dtype", [cv.float32, cv.int32, cv.float16], ids=lambda d: d.name)
    def test_reduce_sum_every_axis(
        self, primary: Any, secondary: Any, axis: Any, keepdims: bool, dtype: Any
    ) -> None:
        """reduce_sum accumulates tile by tile in the plan's accumulator, for every axis form."""
        x, xv = build(
            _values((12, 6), dtype),
            (3, 2),
            primary=primary,
            secondary=secondary,
            dtype=dtype,
            implicit=[(2, 1)],
            budget_tiles=2,
        )
        got = cv.reduce_sum(x, axis=axis, keepdims=keepdims)
        want = cv.reduce_sum(_generic(xv, dtype), axis=axis, keepdims=keepdims)
        assert got.dtype is want.dtype
        np.testing.assert_allclose(
            got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-3
        )

    def test_reduce_sum_float64_accumulator(self, primary: Any, secondary: Any) -> None:
        x, xv = build(
            _values((8, 15), cv.float32),
            (4, 5),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
        )
        got = cv.reduce_sum(x, accumulator_dtype=cv.float64)
        want = cv.reduce_sum(_generic(xv, cv.float32), accumulator_dtype=cv.float64)
        _close(got, want, cv.float32)

    @pytest.mark.parametrize("budget", [None, 3])
    def test_matmul_blocked(self, primary: Any, secondary: Any, budget: Any) -> None:
        """A blocked out-of-core GEMM equals Generic's matmul."""
        a, av = build(
            _values((12, 6), cv.float32),
            (3, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            implicit=[(1, 0)],
            budget_tiles=budget,
        )
        b, bv = build(
            _values((6, 10), cv.float32),
            (2, 5),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            implicit=[(2, 1)],
            budget_tiles=budget,
        )
        _close(
            cv.matmul(a, b),
            cv.matmul(_generic(av, cv.float32), _generic(bv, cv.float32)),
            cv.float32,
        )

    def test_matmul_one_carrier_twice(self, primary: Any, secondary: Any) -> None:
        a, av = build(
            _values((6, 6), cv.float32),
            (2, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            budget_tiles=4,
        )
        g = _generic(av, cv.float32)
        _close(cv.matmul(a, a), cv.matmul(g, g), cv.float32)


class TestGradientsFromCentralVjp:
    """The VJP of each direct name, against Generic, over grids with every residency."""

    @pytest.mark.parametrize(
        "name", ["add", "mul", "elementwise_mul", "matmul", "relu", "reduce_sum"]
    )
    def test_vjp_matches_generic(self, primary: Any, secondary: Any, name: str) -> None:
        shape_b = (6, 10) if name == "matmul" else (12, 6)
        tile_b = (2, 5) if name == "matmul" else (3, 2)
        a, av = build(
            _values((12, 6), cv.float32),
            (3, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            implicit=[(0, 1)],
            budget_tiles=3,
            requires_grad=True,
        )
        b, bv = build(
            _values(shape_b, cv.float32),
            tile_b,
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            budget_tiles=3,
            requires_grad=True,
        )
        ga, gb = _generic(av, cv.float32, True), _generic(bv, cv.float32, True)
        unary = name in ("relu", "reduce_sum")
        out = getattr(cv, name)(a) if unary else getattr(cv, name)(a, b)
        ref = getattr(cv, name)(ga) if unary else getattr(cv, name)(ga, gb)
        weights = _values(ref.shape, cv.float32)
        cv.reduce_sum(cv.mul(out, cv.tensor(weights, dtype=cv.float32, carrier=primary))).backward()
        cv.reduce_sum(cv.mul(ref, _generic(weights, cv.float32))).backward()
        assert a.grad is not None and ga.grad is not None
        np.testing.assert_allclose(
            np.asarray(a.grad.numpy()), ga.grad.numpy(), rtol=1e-5, atol=1e-5
        )
        if not unary:
            assert b.grad is not None and gb.grad is not None
            np.testing.assert_allclose(b.grad.numpy(), gb.grad.numpy(), rtol=1e-5, atol=1e-5)

    def test_backward_keeps_budget_for_tiles(self, primary: Any, secondary: Any) -> None:
        """Lowering saved tiles for the VJP streams them: the tile budget still holds."""
        a, _ = build(
            _values((12, 6), cv.float32),
            (3, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            budget_tiles=2,
            requires_grad=True,
        )
        cv.reduce_sum(cv.relu(a)).backward()
        assert a.carrier.peak_resident_bytes <= 3 * a.carrier.tile_bytes


class TestBlockedGemmOrder:
    def test_holds_the_panel_that_reads_fewer_bytes(self, primary: Any, secondary: Any) -> None:
        """A wide B with a short A: the A column panel is held, B streams past it once."""
        from conveyor_storage._tiled_matmul import plan_gemm as _plan_gemm

        a, av = build(
            _values((4, 4), cv.float32),
            (2, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            budget_tiles=3,
        )
        b, bv = build(
            _values((4, 16), cv.float32),
            (2, 2),
            primary=primary,
            secondary=secondary,
            dtype=cv.float32,
            budget_tiles=3,
        )
        assert _plan_gemm(a.carrier, b.carrier) == (False, 2)  # type: ignore[arg-type]
        reads: list[int] = []
        store = b.carrier.secondary
        assert store is not None
        original = store.export_span
        store.export_span = lambda layout: reads.append(1) or original(layout)  # type: ignore[method-assign]
        out = cv.matmul(a, b)
        _close(out, cv.matmul(_generic(av, cv.float32), _generic(bv, cv.float32)), cv.float32)
        assert len(reads) <= 16  # every B tile read at most once (resident ones not at all)
        for t in (a, b):
            assert t.carrier.peak_resident_bytes <= 4 * t.carrier.tile_bytes
