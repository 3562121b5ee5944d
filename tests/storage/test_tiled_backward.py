"""TiledEvictable backward: the central VJP runs tile by tile, within the residency budget.

The backward of a direct operation re-promotes (or streams) the saved tiles it needs one step
at a time, so it holds no more than ``max_resident_bytes`` plus one tile of work space and never
copies a saved operand into one dense tensor; its gradients equal Generic's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_storage import FileBacked, TiledEvictable
from conveyor_storage._tiled_backward import TiledOperation
from tests.storage.tiled import build, secondary_factory

RNG = np.random.default_rng(1212)
_NAMES = ["add", "mul", "elementwise_mul", "relu", "reduce_sum", "matmul"]
_SHAPE, _TILE = (12, 6), (3, 2)


@pytest.fixture(params=[CPU, Generic], ids=lambda c: c.__name__)
def primary(request: pytest.FixtureRequest) -> type[cv.Carrier]:
    return request.param  # type: ignore[no-any-return]


@contextlib.contextmanager
def _watched(monkeypatch: pytest.MonkeyPatch, cls: type[cv.Carrier]) -> Iterator[dict[str, Any]]:
    """During each tiled backward: the sizes ``cls`` allocates, and every tiled carrier's
    peak resident bytes (from its own ledger, reset when the backward starts)."""
    seen: dict[str, Any] = {"sizes": [], "peaks": {}, "in": False}
    original_backward = TiledOperation.backward
    allocate = cls.__dict__["allocate"].__func__ if "allocate" in cls.__dict__ else None
    base = allocate or cv.Carrier.__dict__["allocate"].__func__

    def counting(klass: type, /, size: int, dtype: Any, **kwargs: Any) -> Any:
        if seen["in"]:
            seen["sizes"].append(size)
        return base(klass, size, dtype, **kwargs)

    def backward(op: TiledOperation, gradient: Any) -> Any:
        tiled: list[Any] = [x.carrier for x in op._saved or () if isinstance(x, cv.Tensor)]
        for carrier in tiled:
            carrier._ledger.peak = carrier._ledger.used
        seen["in"] = True
        try:
            return original_backward(op, gradient)
        finally:
            seen["in"] = False
            for carrier in tiled:
                seen["peaks"][id(carrier)] = carrier._ledger.peak

    monkeypatch.setattr(cls, "allocate", classmethod(counting))
    monkeypatch.setattr(TiledOperation, "backward", backward)
    yield seen


def _pair(name: str, primary: type[cv.Carrier], tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    shape_b, tile_b = ((6, 10), (2, 5)) if name == "matmul" else (_SHAPE, _TILE)
    made = [
        build(
            RNG.standard_normal(shape).astype(np.float32),
            tile,
            primary=primary,
            secondary=secondary_factory("file", tmp_path),
            dtype=cv.float32,
            implicit=[(0, 1)] if k == 0 else [],
            budget_tiles=2,
            requires_grad=True,
        )
        for k, (shape, tile) in enumerate(((_SHAPE, _TILE), (shape_b, tile_b)))
    ]
    (a, av), (b, bv) = made
    return a, av, b, bv


class TestBackwardWithinTheBudget:
    @pytest.mark.parametrize("name", _NAMES)
    def test_backward_holds_the_budget_and_copies_no_operand(
        self,
        primary: type[cv.Carrier],
        name: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Peak resident bytes during backward stay within budget plus one tile; the only
        allocations larger than a tile are the gradients themselves; values equal Generic's."""
        a, av, b, bv = _pair(name, primary, tmp_path)
        unary = name in ("relu", "reduce_sum")
        operands = (a,) if unary else (a, b)
        out = getattr(cv, name)(*operands)
        weights = RNG.standard_normal(out.shape).astype(np.float32)
        cotangent = cv.tensor(weights, dtype=cv.float32, carrier=primary)
        with _watched(monkeypatch, primary) as seen:
            out.backward(cotangent)
        for x in operands:
            limit = x.carrier.max_resident_bytes + x.carrier.tile_bytes
            assert seen["peaks"][id(x.carrier)] <= limit, (name, seen["peaks"])
        tile = max(x.carrier.tile_bytes // 4 for x in operands)  # float32 slots
        large = [s for s in seen["sizes"] if s > tile]
        assert len(large) <= len(operands), (name, seen["sizes"])

        ga, gb = (cv.tensor(v, cv.float32, carrier=Generic) for v in (av, bv))
        for g in (ga, gb):
            g.requires_grad = True
        ref = getattr(cv, name)(*((ga,) if unary else (ga, gb)))
        ref.backward(cv.tensor(weights, dtype=cv.float32, carrier=Generic))
        for x, g in zip(operands, (ga, gb), strict=False):
            assert x.grad is not None and g.grad is not None
            np.testing.assert_allclose(x.grad.numpy(), g.grad.numpy(), rtol=1e-5, atol=1e-5)

    def test_scalar_operand_gets_no_gradient_tiles(self, tmp_path: Path) -> None:
        """mul(tiled, scalar): the tiled input's gradient is the scalar times the cotangent."""
        a, av = build(
            RNG.standard_normal(_SHAPE).astype(np.float32),
            _TILE,
            primary=CPU,
            secondary=secondary_factory("file", tmp_path),
            dtype=cv.float32,
            budget_tiles=2,
            requires_grad=True,
        )
        out = cv.mul(a, 2.5)
        out.backward(cv.tensor(np.ones(_SHAPE, np.float32), carrier=CPU))
        assert a.grad is not None and av.shape == _SHAPE
        np.testing.assert_array_equal(a.grad.numpy(), np.full(_SHAPE, 2.5, np.float32))

    @pytest.mark.parametrize(("shape", "tile"), [((), ()), ((0, 3), (1, 3))], ids=["0-d", "empty"])
    @pytest.mark.parametrize("name", ["mul", "relu", "add", "reduce_sum"])
    def test_zero_dimensional_and_empty_grids(
        self, tmp_path: Path, shape: tuple[int, ...], tile: tuple[int, ...], name: str
    ) -> None:
        """A one-tile 0-d tensor and a grid with no tiles differentiate like Generic."""
        values = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
        grid = tuple(n // t for n, t in zip(shape, tile, strict=True))
        tiled = TiledEvictable(
            cv.tensor(values.reshape(-1), cv.float32, carrier=CPU).carrier,
            FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
            grid,
            tile,
        )
        x = cv.Tensor(tiled, cv.Layout(shape))
        ref = cv.tensor(values, cv.float32, carrier=Generic)
        grads = []
        for t, cls in ((x, CPU), (ref, Generic)):
            t.requires_grad = True
            out = getattr(cv, name)(*((t, t) if name in ("mul", "add") else (t,)))
            out.backward(cv.tensor(np.full(out.shape, 0.75, np.float32), carrier=cls))
            assert t.grad is not None
            grads.append(np.asarray(t.grad.numpy()))
        assert grads[0].shape == shape
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
