"""TiledEvictable projection and scatter, and the refusals of the direct surface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_storage import (
    AwaitProjection,
    TiledEvictable,
    TileSelection,
    project,
    scatter,
)
from tests.storage.tiled import PRIMARIES, SECONDARIES, build, secondary_factory

RNG = np.random.default_rng(7)


@pytest.fixture(params=PRIMARIES, ids=lambda c: c.__name__)
def primary(request: pytest.FixtureRequest) -> type[cv.Carrier]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=SECONDARIES)
def secondary(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return secondary_factory(request.param, tmp_path)


def _x(primary: Any, secondary: Any, **kw: Any) -> tuple[cv.Tensor, np.ndarray[Any, Any]]:
    values = RNG.standard_normal((12, 6)).astype(np.float32)
    return build(
        values,
        (3, 2),
        primary=primary,
        secondary=secondary,
        dtype=cv.float32,
        implicit=[(1, 1)],
        **kw,
    )


SELECTION = TileSelection(((3, 1), (0, 2)))


def _gathered(expected: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    rows = np.concatenate([expected[r * 3 : r * 3 + 3] for r in (3, 1)])
    return np.concatenate([rows[:, c * 2 : c * 2 + 2] for c in (0, 2)], axis=1)


class TestExecuteAfterExplicitProjection:
    """Scenario: Execute after explicit projection."""

    def test_compact_is_ordinary_compute_tensor(self, primary: Any, secondary: Any) -> None:
        """The waited projection lives on the compute class, and its next op dispatches there."""
        x, expected = _x(primary, secondary, budget_tiles=2)
        handle = project(x, SELECTION)
        assert isinstance(handle, AwaitProjection)
        compact = handle.wait(timeout=30)
        assert handle.done
        assert type(compact.carrier) is primary
        np.testing.assert_array_equal(compact.numpy(), _gathered(expected))
        x.requires_grad = True
        compact = project(x, SELECTION).wait(timeout=30)
        out = cv.exp(compact)  # not a direct name: it runs on the compute carrier
        assert out.grad_fn is not None
        assert out.grad_fn._dispatch_carrier_class is primary
        np.testing.assert_allclose(out.numpy(), np.exp(_gathered(expected)), rtol=1e-6)

    def test_one_gather_node_backward_scatter_adds(self, primary: Any, secondary: Any) -> None:
        """The gather node's backward returns a full tiled gradient, implicit zeros elsewhere."""
        x, expected = _x(primary, secondary, requires_grad=True)
        selection = TileSelection(((3, 3), (0,)))  # tile (3, 0) twice: gradients add
        compact = project(x, selection).wait(timeout=30)
        assert compact.grad_fn is not None and compact.grad_fn._operation_name == "project"
        cv.reduce_sum(cv.mul(compact, 2.0)).backward()
        grad = x.grad
        assert grad is not None and type(grad.carrier) is TiledEvictable
        want = np.zeros_like(expected)
        want[9:12, 0:2] = 4.0
        np.testing.assert_array_equal(grad.numpy(), want)
        assert grad.carrier.tile_state((0, 0)).residency == "implicit"

    def test_pending_handle_is_refused_as_operand(self, primary: Any, secondary: Any) -> None:
        """An AwaitProjection is not a tensor: passing it to an operation is a TypeError."""
        x, _ = _x(primary, secondary)
        handle = project(x, SELECTION)
        with pytest.raises(
            TypeError,
            match=r"add on TiledEvictable: operands must be Tensors or Python scalars, got "
            r"<AwaitProjection",
        ):
            cv.add(x, handle)
        handle.wait(timeout=30)

    def test_projection_reports_progress(self, primary: Any, secondary: Any) -> None:
        x, _ = _x(primary, secondary)
        seen: list[tuple[int, int, str]] = []
        with cv.progress(lambda d, t, label: seen.append((d, t, label))):
            project(x, SELECTION).wait(timeout=30)
        assert seen[-1] == (4, 4, "project tiles")


class TestScatter:
    @pytest.mark.parametrize("reduction", ["replace", "add"])
    def test_scatter_into_fresh_copy(self, primary: Any, secondary: Any, reduction: str) -> None:
        """scatter returns a fresh full tiled tensor; the template is unchanged."""
        x, expected = _x(primary, secondary, budget_tiles=3)
        compact = cv.tensor(np.ones((6, 4), np.float32), dtype=cv.float32, carrier=primary)
        out = scatter(compact, x, SELECTION, reduction=reduction)  # type: ignore[arg-type]
        assert type(out.carrier) is TiledEvictable and out.carrier is not x.carrier
        want = expected.copy()
        for r in (3, 1):
            for c in (0, 2):
                region = (slice(r * 3, r * 3 + 3), slice(c * 2, c * 2 + 2))
                want[region] = 1.0 if reduction == "replace" else want[region] + 1.0
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
        np.testing.assert_array_equal(x.numpy(), expected)
        assert out.carrier.tile_state((1, 1)).residency == "implicit"

    def test_refusals(self, primary: Any, secondary: Any) -> None:
        x, _ = _x(primary, secondary)
        compact = cv.tensor(np.ones((6, 4), np.float32), dtype=cv.float32, carrier=primary)
        with pytest.raises(ValueError, match="reduction must be 'replace' or 'add', got 'max'"):
            scatter(compact, x, SELECTION, reduction="max")  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=r"compact has shape \(6, 4\), the selection needs \(3, 2\)"
        ):
            scatter(compact, x, TileSelection(((0,), (0,))))
        wrong = cv.tensor(np.ones((6, 4)), dtype=cv.float64, carrier=primary)
        with pytest.raises(TypeError, match="compact is float64, the template float32; cast"):
            scatter(wrong, x, SELECTION)
        with pytest.raises(IndexError, match=r"tile \(9, 0\) is outside the grid \(4, 3\)"):
            scatter(compact, x, TileSelection(((9, 1), (0, 2))))


class TestRefusalsBeforeWork:
    def test_other_names_say_project_first(self, primary: Any, secondary: Any) -> None:
        """A name outside the direct surface is refused before work, naming project and the
        move to a compute carrier, both of which then work."""
        x, values = _x(primary, secondary)
        before = {c: x.carrier.tile_state(c) for c in x.carrier._grid.coords()}
        with pytest.raises(
            NotImplementedError,
            match=r"cumsum on TiledEvictable: not in the direct surface.*project.*"
            r"cv.move\(tensor, 'cpu'\)",
        ):
            cv.cumsum(x, axis=0)
        assert {c: x.carrier.tile_state(c) for c in x.carrier._grid.coords()} == before
        moved = cv.move(x, "cpu")
        np.testing.assert_allclose(
            cv.cumsum(moved, axis=0).numpy(), np.cumsum(values, 0), rtol=1e-5
        )

    def test_footprint_refused_before_work(self, primary: Any, secondary: Any) -> None:
        """A layout that remaps tiles (a transpose across a multi-tile grid) is a ValueError."""
        x, _ = _x(primary, secondary, budget_tiles=2)
        tiled: TiledEvictable = x.carrier  # type: ignore[assignment]
        before = ({c: tiled.tile_state(c) for c in tiled._grid.coords()}, tiled.resident_bytes)
        peak = tiled.peak_resident_bytes
        shifted = cv.Tensor(tiled, cv.Layout((6, 6), (6, 1), 36))  # omits tiles
        with pytest.raises(ValueError, match="does not cover the tiled shape"):
            cv.relu(shifted)
        flipped = cv.Tensor(tiled, cv.Layout((12, 6), (-6, 1), 66))  # remaps tile rows
        with pytest.raises(ValueError, match="spans, aliases, omits or remaps tiles"):
            cv.reduce_sum(flipped)
        after = ({c: tiled.tile_state(c) for c in tiled._grid.coords()}, tiled.resident_bytes)
        assert after == before and tiled.peak_resident_bytes == peak

    def test_in_tile_permutation_is_accepted(
        self, primary: Any, secondary: Any, tmp_path: Path
    ) -> None:
        """Reordering slots inside one tile (a flip of a one-tile axis) is footprint compatible."""
        values = RNG.standard_normal((4, 6)).astype(np.float32)
        x, expected = build(values, (4, 2), primary=primary, secondary=secondary, dtype=cv.float32)
        flipped = cv.Tensor(x.carrier, cv.Layout((4, 6), (-6, 1), 18))
        got = cv.mul(flipped, 1.0)
        np.testing.assert_array_equal(got.numpy(), expected[::-1])

    def test_budget_too_small_for_matmul_refused(self, primary: Any, secondary: Any) -> None:
        values = RNG.standard_normal((6, 6)).astype(np.float32)
        a, _ = build(
            values, (2, 2), primary=primary, secondary=secondary, dtype=cv.float32, budget_tiles=1
        )
        with pytest.raises(
            ValueError, match="holds no panel tile beside two streamed tiles; raise the budget"
        ):
            cv.matmul(a, a)

    def test_mismatched_tilings_are_unsupported(self, primary: Any, secondary: Any) -> None:
        values = RNG.standard_normal((12, 6)).astype(np.float32)
        a, _ = build(values, (3, 2), primary=primary, secondary=secondary, dtype=cv.float32)
        b, _ = build(values, (6, 3), primary=primary, secondary=secondary, dtype=cv.float32)
        with pytest.raises(NotImplementedError, match=r"one shape and one tiling.*project"):
            cv.add(a, b)

    def test_dense_operand_of_another_class_names_the_move(
        self, primary: Any, secondary: Any
    ) -> None:
        """A dense operand of the compute class streams beside the tiles; one of another class
        is refused before work, naming the move that then works."""
        x, values = _x(primary, secondary)
        other = Generic if primary is CPU else CPU
        dense = cv.tensor(np.ones((12, 6), np.float32), dtype=cv.float32, carrier=other)
        with pytest.raises(
            NotImplementedError,
            match=rf"add on TiledEvictable: a dense operand lives on {other.__name__}.*"
            rf"cv.move\(tensor, {primary.__name__}\)",
        ):
            cv.add(x, dense)
        got = cv.add(x, cv.move(dense, primary))
        np.testing.assert_allclose(got.numpy(), values + 1, rtol=1e-6)


def test_generic_is_reference_for_projection() -> None:
    """Sanity: the Generic class is one of the primaries exercised above."""
    assert Generic in PRIMARIES
