"""The grown direct surface of TiledEvictable against Generic, on mixed residency, in budget.

Every elementwise name and activation (with Python scalars), every reduction (any axes,
keepdims) and mean, dense operands of the compute class that broadcast along whole tiles (a
column mean), the Gram matrix ``x.T @ x``, and the move routes in and out of tiles. Tile steps
run the primary's own kernels, so a CPU primary gives CPU's values (float32 stays float32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conveyor as cv
import conveyor_storage
from conveyor_generic import CPU, Generic
from conveyor_storage import FileBacked, TiledEvictable, TileState
from tests.storage.tiled import build, secondary_factory

RNG = np.random.default_rng(23)
_SHAPE, _TILE = (12, 6), (3, 2)
_UNARY = [
    "neg",
    "abs",
    "sign",
    "sqrt",
    "exp",
    "exp2",
    "log",
    "log2",
    "sin",
    "cos",
    "erf",
    "floor",
    "ceil",
    "round",
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "softplus",
    "elu",
    "leaky_relu",
    "recip",
    "rsqrt",
    "logical_not",
]
_BINARY = [
    "add",
    "sub",
    "mul",
    "elementwise_mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "rem",
    "eq",
    "ne",
    "lt",
    "le",
]
_REDUCTIONS = ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin"]
_AXES = (None, 0, 1, -1, (0, 1))


def _tiled(
    tmp_path: Path, values: np.ndarray[Any, Any], dtype: cv.DType = cv.float32, **kw: Any
) -> cv.Tensor:
    """A tiled tensor of ``values`` with mixed residency; ``values`` is zeroed in place on the
    ``implicit`` tiles, so it stays the reference."""
    kw.setdefault("budget_tiles", 2)
    x, expected = build(
        values,
        _TILE,
        primary=kw.pop("primary", CPU),
        secondary=secondary_factory(kw.pop("secondary", "file"), tmp_path),
        dtype=dtype,
        **kw,
    )
    values[...] = expected
    return x


def _close(got: cv.Tensor, want: cv.Tensor) -> None:
    assert got.dtype is want.dtype and got.shape == want.shape
    if want.dtype.is_floating:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-6)
    else:
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def _generic(values: np.ndarray[Any, Any], dtype: cv.DType = cv.float32) -> cv.Tensor:
    return cv.tensor(values, dtype=dtype, carrier=Generic)


def _within_budget(*xs: cv.Tensor) -> None:
    for x in xs:
        tiled: Any = x.carrier
        assert tiled.peak_resident_bytes <= tiled.max_resident_bytes + tiled.tile_bytes


@st.composite
def _elementwise_case(draw: Any) -> tuple[str, Any, bool, int, str]:
    name = draw(st.sampled_from(_UNARY + _BINARY))
    scalar = draw(st.sampled_from([None, 2.0, -1.5, 3]))
    scalar_first = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    secondary = draw(st.sampled_from(["file", "block"]))
    return name, scalar, scalar_first, seed, secondary


class TestElementwiseSurface:
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_elementwise_case())
    def test_every_elementwise_name_matches_generic(
        self, tmp_path_factory: pytest.TempPathFactory, case: Any
    ) -> None:
        """Unary names, and binary names with a tiled or Python scalar other operand (either
        side), equal Generic on mixed residency and stay within the budget."""
        name, scalar, scalar_first, seed, secondary = case
        rng = np.random.default_rng(seed)
        tmp = tmp_path_factory.mktemp("ew")
        values = (rng.standard_normal(_SHAPE) * 3).astype(np.float32)
        other = (rng.standard_normal(_SHAPE) * 3).astype(np.float32)
        x = _tiled(tmp, values, secondary=secondary, implicit=[(1, 1)])
        fn = getattr(cv, name)
        if name in _UNARY:
            got, want = fn(x), fn(_generic(values))
        elif scalar is None or name == "elementwise_mul":
            y = _tiled(tmp, other, secondary=secondary)
            got, want = fn(x, y), fn(_generic(values), _generic(other))
            _within_budget(y)
        else:
            args = (scalar, x) if scalar_first else (x, scalar)
            ref = (scalar, _generic(values)) if scalar_first else (_generic(values), scalar)
            got, want = fn(*args), fn(*ref)
        assert type(got.carrier) is CPU
        _close(got, want)
        _within_budget(x)

    def test_select_and_clamp(self, tmp_path: Path) -> None:
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        mask = _tiled(tmp_path, values > 0, cv.bool)
        g = _generic(values)
        _close(cv.select(mask, x, 0.0), cv.select(_generic(values > 0, cv.bool), g, 0.0))
        _close(cv.clamp(x, -0.5, 0.5), cv.clamp(g, -0.5, 0.5))
        _close(cv.clamp(x, None, 0.25), cv.clamp(g, None, 0.25))

    def test_tile_steps_run_the_primarys_kernel(self, tmp_path: Path) -> None:
        """A CPU primary computes float32 with CPU's own kernels: bit for bit CPU's values."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        dense = cv.tensor(values, dtype=cv.float32, carrier=CPU)
        for name in ("exp", "tanh", "gelu", "sigmoid"):
            got = getattr(cv, name)(x)
            assert got.dtype is cv.float32
            np.testing.assert_array_equal(got.numpy(), getattr(cv, name)(dense).numpy())


class TestReductionSurface:
    @pytest.mark.parametrize(
        ("name", "axis"),
        # argmax and argmin take one axis or None, so they get no tuple of axes.
        [
            (name, axis)
            for name in _REDUCTIONS
            for axis in _AXES
            if not (name.startswith("arg") and isinstance(axis, tuple))
        ],
    )
    @pytest.mark.parametrize("keepdims", [False, True])
    def test_every_reduction_matches_generic(
        self, tmp_path: Path, name: str, axis: Any, keepdims: bool
    ) -> None:
        """Sums, products, extrema and arg-extrema over any axes equal Generic, ties and NaN
        included (the first index wins)."""
        values = RNG.integers(-3, 4, _SHAPE).astype(np.float32) / 2  # many ties
        values[4, 3] = np.nan if name != "reduce_prod" else values[4, 3]
        x = _tiled(tmp_path, values, implicit=[(2, 0)])
        expected = np.array(values)
        expected[6:9, 0:2] = 0  # the implicit tile
        with cv.no_grad():
            got = getattr(cv, name)(x, axis=axis, keepdims=keepdims)
        want = getattr(cv, name)(_generic(expected), axis=axis, keepdims=keepdims)
        assert got.dtype is want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, equal_nan=True)
        _within_budget(x)

    @pytest.mark.parametrize("dtype", [cv.int32, cv.float16, cv.bool], ids=lambda d: d.name)
    def test_integer_half_and_bool_plans(self, tmp_path: Path, dtype: cv.DType) -> None:
        values = RNG.integers(-4, 5, _SHAPE).astype(dtype.numpy)
        x = _tiled(tmp_path, values, dtype)
        for name in ("reduce_sum", "reduce_max", "argmin"):
            if dtype is cv.bool and name == "reduce_sum":
                continue
            _close(getattr(cv, name)(x, axis=0), getattr(cv, name)(_generic(values, dtype), axis=0))

    @pytest.mark.parametrize("name", ["reduce_prod", "reduce_max", "reduce_min", "reduce_sum"])
    @pytest.mark.parametrize("axis", [None, 0, 1])
    def test_reduction_gradients_match_generic(self, tmp_path: Path, name: str, axis: Any) -> None:
        """The central rule runs on the tiled input through direct operations (ties split the
        gradient, a zero in a product slice is exact)."""
        values = RNG.integers(-2, 3, _SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values, requires_grad=True)
        g = _generic(values)
        g.requires_grad = True
        getattr(cv, name)(x, axis=axis).sum().backward()
        getattr(cv, name)(g, axis=axis).sum().backward()
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), g.grad.numpy(), rtol=1e-5)
        _within_budget(x)

    def test_mean_and_the_variance_pipeline(self, tmp_path: Path) -> None:
        """``((x - x.mean(0)) ** 2).mean(0)``: the column mean is a dense CPU vector that
        streams beside the tiles; every step equals Generic."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        g = _generic(values)
        _close(x.mean(0), g.mean(0))
        _close(((x - x.mean(0)) ** 2).mean(0), ((g - g.mean(0)) ** 2).mean(0))
        _close((x * 2.0 + 1.0).sum(), (g * 2.0 + 1.0).sum())
        _within_budget(x)


class TestDenseCompanions:
    @pytest.mark.parametrize("shape", [(6,), (1, 6), (12, 1), (), (12, 6)])
    def test_broadcasting_dense_operand_matches_generic(
        self, tmp_path: Path, shape: tuple[int, ...]
    ) -> None:
        """A dense CPU operand broadcasting along whole tiles, on either side, equals Generic."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        dense_values = RNG.standard_normal(shape).astype(np.float32)
        x = _tiled(tmp_path, values)
        d = cv.tensor(dense_values, dtype=cv.float32, carrier=CPU)
        g, gd = _generic(values), _generic(dense_values)
        _close(cv.sub(x, d), cv.sub(g, gd))
        _close(cv.mul(d, x), cv.mul(gd, g))
        _close(cv.maximum(x, d), cv.maximum(g, gd))

    def test_gradients_reach_both_operands(self, tmp_path: Path) -> None:
        """The central rule runs per tile; the dense operand's pieces are summed back."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values, requires_grad=True)
        d = cv.tensor(RNG.standard_normal(6).astype(np.float32), carrier=CPU, requires_grad=True)
        g = _generic(values)
        g.requires_grad = True
        gd = cv.tensor(d.numpy(), carrier=Generic, requires_grad=True)
        cv.reduce_sum(cv.mul(cv.sub(x, d), cv.sub(x, d))).backward()
        cv.reduce_sum(cv.mul(cv.sub(g, gd), cv.sub(g, gd))).backward()
        assert x.grad is not None and d.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), g.grad.numpy(), rtol=1e-5)
        np.testing.assert_allclose(d.grad.numpy(), gd.grad.numpy(), rtol=1e-5)
        _within_budget(x)

    def test_a_dense_operand_that_would_widen_the_result_is_refused(self, tmp_path: Path) -> None:
        """A dense operand larger than the tiled one is refused before work, naming the move."""
        x = _tiled(tmp_path, RNG.standard_normal((12, 1)).astype(np.float32)[:, [0] * 6])
        wide = cv.tensor(np.ones((2, 12, 6), np.float32), carrier=CPU)
        with pytest.raises(NotImplementedError, match=r"one shape and one tiling.*cv.move"):
            cv.add(x, wide)


class TestGramMatrix:
    def test_transposed_operand_matches_generic_forward_and_backward(self, tmp_path: Path) -> None:
        """``x.T @ x`` streams a transposed view of the same tiles, within the budget."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values, budget_tiles=4, implicit=[(0, 1)], requires_grad=True)
        expected = np.array(values)
        expected[0:3, 2:4] = 0
        g = _generic(expected)
        g.requires_grad = True
        gram = x.T @ x
        assert type(gram.carrier) is CPU
        _close(gram, g.T @ g)
        cv.reduce_sum(gram).backward()
        cv.reduce_sum(g.T @ g).backward()
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), g.grad.numpy(), rtol=1e-5)
        _within_budget(x)

    def test_transposed_operand_elsewhere_is_refused_naming_the_move(self, tmp_path: Path) -> None:
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        with pytest.raises(NotImplementedError, match=r"streams only into matmul.*cv.move"):
            cv.exp(x.T)
        np.testing.assert_allclose(cv.exp(cv.move(x.T, "cpu")).numpy(), np.exp(values.T), rtol=1e-6)


class TestMoveRoutes:
    def test_compute_to_tiles_and_back(self, tmp_path: Path) -> None:
        """CPU -> tiles keeps the budget (the rest goes to the file); tiles -> CPU and Generic
        give the values back, a transposed view too."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        dense = cv.tensor(values, carrier=CPU)
        tile_bytes = 3 * 2 * 4
        x = cv.move(
            dense,
            TiledEvictable,
            tile_shape=_TILE,
            max_resident_bytes=3 * tile_bytes,
            directory=str(tmp_path),
        )
        tiled: Any = x.carrier
        assert tiled.tile_shape == _TILE and tiled.resident_bytes <= 3 * tile_bytes
        assert len(tiled.secondary_tiles) == 12 - 3
        for target in (CPU, Generic):
            back = cv.move(x, target)
            assert type(back.carrier) is target
            np.testing.assert_array_equal(back.numpy(), values)
        np.testing.assert_array_equal(cv.move(x.T, "cpu").numpy(), values.T)

    def test_file_to_tiles_starts_every_tile_in_the_secondary(self, tmp_path: Path) -> None:
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        stored = cv.move(cv.tensor(values, carrier=CPU), FileBacked, directory=str(tmp_path))
        x = cv.move(stored, "tiled", tile_shape=(4, 6), max_resident_bytes=4 * 6 * 4)
        tiled: Any = x.carrier
        assert tiled.resident_bytes == 0 and len(tiled.secondary_tiles) == 3
        np.testing.assert_allclose(float(x.sum().numpy()), values.sum(), rtol=1e-5)

    def test_default_tiling_is_whole_rows(self) -> None:
        x = cv.move(cv.ones((7, 5), carrier=CPU), "tiled")
        assert x.carrier.tile_shape == (7, 5)  # type: ignore[attr-defined]

    def test_gradient_moves_back(self) -> None:
        dense = cv.tensor(RNG.standard_normal(_SHAPE).astype(np.float32), carrier=CPU)
        dense.requires_grad = True
        cv.reduce_sum(cv.mul(cv.move(dense, "tiled", tile_shape=_TILE), 3.0)).backward()
        assert dense.grad is not None
        np.testing.assert_array_equal(dense.grad.numpy(), np.full(_SHAPE, 3.0, np.float32))

    @pytest.mark.parametrize(
        ("options", "error", "match"),
        [
            ({"tile_shape": (5, 2)}, ValueError, "does not divide the shape"),
            ({"tile_shape": [3, 2]}, TypeError, "tile_shape must be a tuple"),
            ({"tiles": 3}, TypeError, "unexpected option"),
        ],
    )
    def test_bad_options_refused(self, options: Any, error: type, match: str) -> None:
        with pytest.raises(error, match=match):
            cv.move(cv.ones(_SHAPE, carrier=CPU), "tiled", **options)


class TestRefusalsNameWhatWorks:
    def test_mixed_storage_carrier_refusal_advises_a_working_move(self, tmp_path: Path) -> None:
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        stored = cv.move(cv.tensor(values, carrier=CPU), FileBacked, directory=str(tmp_path))
        with pytest.raises(TypeError, match=r"cv.move\(tensor, TiledEvictable\)"):
            cv.add(x, stored)
        moved = cv.move(stored, TiledEvictable, tile_shape=_TILE)
        np.testing.assert_allclose(cv.add(x, moved).numpy(), 2 * values, rtol=1e-6)


class TestMapTiles:
    def test_chain_stays_out_of_core_and_matches_generic(self, tmp_path: Path) -> None:
        """``map_tiles(fn, x)`` is lazy: nothing is stored until a reduction streams it; with
        ``lazy=False`` each tile is stored within the first operand's budget (the rest
        written to its file); values equal Generic both ways."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        rows = (3, 6)  # tiles of whole rows, so a column mean broadcasts against each tile
        x = cv.move(
            cv.tensor(values, carrier=CPU), "tiled", tile_shape=rows, max_resident_bytes=2 * 72
        )
        m = x.mean(0)
        g = _generic(values)
        y = conveyor_storage.map_tiles(lambda t: (t - m) ** 2, x)
        out: Any = y.carrier
        assert type(out) is TiledEvictable and out.tile_shape == rows
        assert not len(out.secondary_tiles) and not len(out.primary_tiles)
        assert out.tile_state((0, 0)) == TileState("lazy", False)
        _close(y.mean(0), ((g - g.mean(0)) ** 2).mean(0))
        assert out.peak_resident_bytes <= out.max_resident_bytes + out.tile_bytes
        eager = conveyor_storage.map_tiles(lambda t: (t - m) ** 2, x, lazy=False)
        stored: Any = eager.carrier
        assert stored.peak_resident_bytes <= stored.max_resident_bytes + stored.tile_bytes
        assert len(stored.secondary_tiles) == 4 - 2 and stored.resident_bytes == 2 * 72
        _close(eager.mean(0), ((g - g.mean(0)) ** 2).mean(0))
        _within_budget(x)
        assert "map_tiles" in conveyor_storage.__all__

    def test_two_operands_and_a_new_dtype(self, tmp_path: Path) -> None:
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x, y = _tiled(tmp_path, values), _tiled(tmp_path, -values)
        mask = conveyor_storage.map_tiles(cv.lt, x, y)
        assert mask.dtype is cv.bool
        np.testing.assert_array_equal(cv.move(mask, "cpu").numpy(), values < -values)

    def test_refusals_before_work(self, tmp_path: Path) -> None:
        """A dense operand and another tiling are refused before work, naming the fix; a wrong
        result shape is refused at the first tile, leaving the operands' values and no tile
        busy."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        tiled: Any = x.carrier
        before = {c: tiled.tile_state(c) for c in tiled._grid.coords()}
        dense = cv.tensor(values, carrier=CPU)
        with pytest.raises(TypeError, match=r"close over dense tensors in fn"):
            conveyor_storage.map_tiles(cv.add, x, dense)
        other = cv.move(dense, "tiled", tile_shape=(6, 6))
        with pytest.raises(ValueError, match=r"one tiling.*cv.move"):
            conveyor_storage.map_tiles(cv.add, x, other)
        assert {c: tiled.tile_state(c) for c in tiled._grid.coords()} == before
        with pytest.raises(TypeError, match=r"fn returned shape \(\)"):  # found while running
            conveyor_storage.map_tiles(cv.reduce_sum, x)
        assert not tiled._busy
        np.testing.assert_array_equal(cv.move(x, "cpu").numpy(), values)

    @pytest.mark.parametrize("dense_first", [False, True])
    def test_dense_matmul_operand_refusal_names_a_tiling_that_works(
        self, tmp_path: Path, dense_first: bool
    ) -> None:
        """matmul beside a dense operand is refused before work with the tile shape that lets
        the move stream; after that move the product equals NumPy's."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _tiled(tmp_path, values)
        dense_values = RNG.standard_normal((6, 4) if not dense_first else (5, 12))
        dense = cv.tensor(dense_values.astype(np.float32), carrier=CPU)
        args = (dense, x) if dense_first else (x, dense)
        with pytest.raises(NotImplementedError, match=r"matmul takes two tiled operands") as info:
            cv.matmul(*args)
        named = str(info.value).split("tile_shape=(", 1)[1].split(")", 1)[0]
        tile = tuple(int(n) for n in named.split(","))
        moved = cv.move(dense, "tiled", tile_shape=tile)
        got = cv.matmul(moved, x) if dense_first else cv.matmul(x, moved)
        want = dense.numpy() @ values if dense_first else values @ dense.numpy()
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


class TestDeepPanels:
    @pytest.mark.parametrize("budget_tiles", [3, 8, 40])
    @pytest.mark.parametrize("shapes", [((12, 6), (6, 10)), ((6, 12), (12, 4))])
    def test_panels_grow_along_the_inner_axis_within_the_budget(
        self, tmp_path: Path, budget_tiles: int, shapes: Any
    ) -> None:
        """A budget larger than one panel row makes the panel deeper (fewer, larger products);
        values equal Generic and both operands stay within their budgets."""
        from conveyor_storage._tiled_matmul import panel_depth, plan_gemm

        (sa, sb), tile = shapes, (3, 2)
        av = RNG.standard_normal(sa).astype(np.float32)
        bv = RNG.standard_normal(sb).astype(np.float32)
        a, _ = build(
            av,
            tile,
            primary=CPU,
            secondary=secondary_factory("file", tmp_path),
            dtype=cv.float32,
            budget_tiles=budget_tiles,
        )
        b, _ = build(
            bv,
            (2, 2),
            primary=CPU,
            secondary=secondary_factory("file", tmp_path),
            dtype=cv.float32,
            budget_tiles=budget_tiles,
        )
        hold_b, chunk = plan_gemm(a.carrier, b.carrier)  # type: ignore[arg-type]
        gk = a.carrier.grid_shape[1]  # type: ignore[attr-defined]
        depth = panel_depth(a.carrier, b.carrier, hold_b, chunk, gk)  # type: ignore[arg-type]
        assert depth == 1 if budget_tiles == 3 else depth >= 1
        assert depth > 1 or budget_tiles < 40  # a large budget always deepens the panel
        _close(a @ b, _generic(av) @ _generic(bv))
        _within_budget(a, b)
        _close(a.T @ a, _generic(av).T @ _generic(av))
        _within_budget(a)
