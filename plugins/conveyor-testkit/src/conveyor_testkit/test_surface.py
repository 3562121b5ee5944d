"""The contract of a composite with a direct surface (a tiled target), against Generic.

Collected only for such a target: every other name is refused at dispatch with the hint to
project first, layouts that break tiles are refused before any work, projection and scatter
move exactly the selected tiles, residency transitions keep every bit, each direct operation
stays within a budget of a few tiles, and the projection's gradient reaches the tiles.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.sdk import registered_operations
from conveyor_testkit._probe import record_work
from conveyor_testkit._surface import Surface
from conveyor_testkit._target import Target

_SHAPE = (4, 6)
_TILE = (2, 3)
# Direct operations on a budget of two tiles: name -> (operand shapes, option fields).
_CALLS: dict[str, tuple[list[tuple[int, ...]], dict[str, Any]]] = {
    "add": ([_SHAPE, _SHAPE], {}),
    "elementwise_mul": ([_SHAPE, _SHAPE], {}),
    "mul": ([_SHAPE, ()], {}),
    "relu": ([_SHAPE], {}),
    "reduce_sum": ([_SHAPE], {"axis": 0, "keepdims": True}),
    "matmul": ([(4, 6), (6, 4)], {}),
}


def _surface(target: Target) -> Surface:
    assert target.surface is not None  # collected only for targets with a direct surface
    return target.surface


def _values(shape: tuple[int, ...], seed: int) -> Any:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _tiled(surface: Surface, values: Any) -> cv.Tensor:
    built: cv.Tensor = surface.build(values, cv.float32, tile=_TILE)
    return built


# Layouts over the 4x6 tiled tensor that break its 2x3 tiles: name -> (shape, strides, offset).
_BREAKING: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {
    "a part (rows 0..1)": ((2, 6), (6, 1), 0),
    "column-major (remaps tiles)": ((4, 6), (1, 4), 0),
    "rows reversed (remaps tiles)": ((4, 6), (-6, 1), 18),
    "columns reversed (remaps tiles)": ((4, 6), (6, -1), 5),
    "rows broadcast (aliases tiles)": ((4, 6), (0, 1), 0),
}


def _composite(x: Any) -> Any:
    """The tiled carrier of ``x``: the kit knows its class only by name, so untyped."""
    return x.carrier


def _generic(name: str, operands: list[Any], fields: dict[str, Any]) -> Any:
    inputs = [cv.tensor(v, cv.float32, carrier="generic") if np.ndim(v) else v for v in operands]
    options = cv.OperationExecutionOptions(name, **fields) if fields else None
    first = next(t for t in inputs if isinstance(t, cv.Tensor))
    return np.asarray(first.carrier.dispatch_op(name).forward(*inputs, options=options).numpy())


class TestDirectSurface:
    def test_other_names_refused_at_dispatch_with_the_hint(self, conveyor_target: Target) -> None:
        """Every planned name off the direct surface raises NotImplementedError at dispatch,
        saying to project first, and allocates nothing."""
        surface, failures = _surface(conveyor_target), []
        x = surface.build(_values(_SHAPE, 0), cv.float32)
        advertised = set(conveyor_target.supported_names())
        for name in registered_operations():
            if name in advertised:
                continue
            with record_work(conveyor_target.cls, None) as work:
                try:
                    x.carrier.dispatch_op(name)
                except NotImplementedError as exc:
                    if surface.hint not in str(exc):
                        failures.append(f"{name}: the refusal does not say to project: {exc}")
                else:
                    failures.append(f"{name}: dispatched, but it is not in the direct surface")
            if work:
                failures.append(f"{name}: work before the refusal: {', '.join(work)}")
        assert not failures, "\n".join(failures[:10])

    @pytest.mark.parametrize("layout", sorted(_BREAKING))
    def test_layouts_breaking_tiles_refused_before_work(
        self, conveyor_target: Target, layout: str
    ) -> None:
        """A tensor whose layout spans, aliases, omits or remaps tiles is refused with
        ValueError by every direct operation, before any allocation."""
        surface = _surface(conveyor_target)
        x = _tiled(surface, _values(_SHAPE, 1))
        shape, strides, offset = _BREAKING[layout]
        v = cv.Tensor(x.carrier, cv.Layout(shape, strides, offset))
        for name, operands in (("reduce_sum", (v,)), ("add", (v, x)), ("relu", (v,))):
            operation = x.carrier.dispatch_op(name)
            with record_work(conveyor_target.cls, None) as work, pytest.raises(ValueError):
                operation.forward(*operands)
            assert not work, f"{name} on {layout}: work before the refusal: {work}"

    def test_project_and_scatter_move_exactly_the_selected_tiles(
        self, conveyor_target: Target
    ) -> None:
        """project gathers the selection in order; scatter replaces or adds it into a copy."""
        surface, api = _surface(conveyor_target), _surface(conveyor_target).api
        values = _values(_SHAPE, 2)
        x = _tiled(surface, values)
        selection = api["TileSelection"](((1, 0), (1,)))
        compact = api["project"](x, selection).wait()
        want = np.concatenate([values[2:4, 3:6], values[0:2, 3:6]])
        assert type(compact.carrier) is surface.results
        assert np.array_equal(compact.numpy(), want)
        patch = _values(want.shape, 3)
        delta = cv.tensor(patch, cv.float32, carrier=surface.results)
        replaced = api["scatter"](delta, x, selection, reduction="replace")
        added = api["scatter"](delta, x, selection, reduction="add")
        expect_replace, expect_add = values.copy(), values.copy()
        expect_replace[2:4, 3:6], expect_replace[0:2, 3:6] = patch[:2], patch[2:]
        expect_add[2:4, 3:6] += patch[:2]
        expect_add[0:2, 3:6] += patch[2:]
        assert np.array_equal(replaced.numpy(), expect_replace)
        assert np.allclose(added.numpy(), expect_add)
        assert np.array_equal(x.numpy(), values), "scatter changed its template"

    def test_residency_transitions_keep_every_bit(self, conveyor_target: Target) -> None:
        """Evicting and promoting any tiles changes their states, never their values."""
        surface = _surface(conveyor_target)
        values = _values(_SHAPE, 4)
        x = _tiled(surface, values)
        facet, tiled = surface.api["facet"](x), _composite(x)
        tiles = sorted(tiled.valid_tiles)
        facet.evict(tiles)
        assert not len(tiled.primary_tiles)
        assert np.array_equal(x.numpy(), values)
        facet.promote(tiles[1:3])
        assert {tiled.tile_state(c).residency for c in tiles[1:3]} == {"primary"}
        assert np.array_equal(x.numpy(), values)

    @pytest.mark.parametrize("name", sorted(_CALLS))
    def test_direct_operation_within_a_two_tile_budget(
        self, conveyor_target: Target, name: str
    ) -> None:
        """Each direct operation gives Generic's values with at most two tiles (plus one of
        work space) resident in each operand."""
        if name not in conveyor_target.supported_names():
            pytest.skip(f"{conveyor_target.cls.__name__} does not advertise {name}")
        surface = _surface(conveyor_target)
        shapes, fields = _CALLS[name]
        operands = [_values(s, 5 + i) if s else 1.5 for i, s in enumerate(shapes)]
        tile = (_TILE, (_TILE[1], 2)) if name == "matmul" else (_TILE, _TILE)
        inputs = [
            surface.build(v, cv.float32, budget_tiles=2, tile=t) if np.ndim(v) else v
            for v, t in zip(operands, tile, strict=False)
        ]
        options = cv.OperationExecutionOptions(name, **fields) if fields else None
        first = _composite(inputs[0])
        with cv.no_grad():
            out = first.dispatch_op(name).forward(*inputs, options=options)
        assert np.allclose(out.numpy(), _generic(name, operands, fields), rtol=1e-5, atol=1e-5)
        for x in inputs:
            if isinstance(x, cv.Tensor):
                tiled = _composite(x)
                limit = tiled.max_resident_bytes + tiled.tile_bytes
                assert tiled.peak_resident_bytes <= limit, (name, tiled.peak_resident_bytes)

    def test_projection_gradient_reaches_the_selected_tiles(self, conveyor_target: Target) -> None:
        """d sum(project(x, selection)) / dx is one on the selected tiles and zero elsewhere."""
        surface, api = _surface(conveyor_target), _surface(conveyor_target).api
        x = _tiled(surface, _values(_SHAPE, 6))
        x.requires_grad = True
        compact = api["project"](x, api["TileSelection"](((0,), (1,)))).wait()
        cv.reduce_sum(compact).backward()
        assert x.grad is not None
        want = np.zeros(_SHAPE, np.float32)
        want[0:2, 3:6] = 1
        assert np.array_equal(x.grad.numpy(), want)
