"""TiledEvictable residency: tile states, the LRU budget, atomic transitions, async requests."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
import conveyor_storage
from conveyor_generic import CPU
from conveyor_storage import (
    FileBacked,
    ResidencyPlan,
    TiledEvictable,
    TiledResidencyFacet,
    TileSelection,
    TileSet,
    TileState,
    scatter,
)
from tests.storage.tiled import PRIMARIES, SECONDARIES, build, secondary_factory, tile_box

RNG = np.random.default_rng(3)


@pytest.fixture(params=PRIMARIES, ids=lambda c: c.__name__)
def primary(request: pytest.FixtureRequest) -> type[cv.Carrier]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=SECONDARIES)
def secondary(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return secondary_factory(request.param, tmp_path)


def _empty(primary: Any, secondary: Any, budget_tiles: int | None = None) -> TiledEvictable:
    tile_bytes = 4 * 5 * 4
    return TiledEvictable(
        primary.allocate(0, cv.float32),
        secondary(cv.float32),
        (2, 3),
        (4, 5),
        max_resident_bytes=None if budget_tiles is None else budget_tiles * tile_bytes,
    )


def _write(tiled: TiledEvictable, coord: tuple[int, int], value: float) -> None:
    tiled.import_span(tile_box(tiled, coord), np.full((4, 5), value, np.float32))


def _states(tiled: TiledEvictable) -> dict[Any, TileState]:
    return {c: tiled.tile_state(c) for c in tiled._grid.coords()}


class TestTileStates:
    def test_every_residency_and_dirty_flag(self, primary: Any, secondary: Any) -> None:
        """implicit -> primary dirty -> secondary -> primary clean; the sets follow."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        assert tiled.tile_state((0, 0)) == TileState("implicit", False)
        res.promote([(0, 0), (0, 1)])
        _write(tiled, (0, 0), 3.0)
        assert tiled.tile_state((0, 0)) == TileState("primary", True)
        res.evict([(0, 0)])
        assert tiled.tile_state((0, 0)) == TileState("secondary", False)
        res.promote([(0, 0)])
        assert tiled.tile_state((0, 0)) == TileState("primary", False)
        assert tiled.primary_tiles == TileSet([(0, 0), (0, 1)])
        assert tiled.dirty_tiles == TileSet([(0, 1)])
        assert tiled.secondary_tiles == TileSet([(0, 0)])
        tiled.discard([(1, 2)])
        assert tiled.tile_state((1, 2)) == TileState("invalid", False)
        assert (1, 2) not in tiled.valid_tiles
        with pytest.raises(
            RuntimeError, match=r"tile \(1, 2\) is invalid \(its value was discarded\)"
        ):
            cv.Tensor(tiled, cv.Layout(tiled.shape)).numpy()

    def test_clean_tile_evicted_without_copying(self, primary: Any, secondary: Any) -> None:
        """A clean tile whose secondary copy is current moves no bytes when evicted."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        res.promote([(1, 1)])
        _write(tiled, (1, 1), 5.0)
        res.evict([(1, 1)])
        res.promote([(1, 1)])
        store = tiled.secondary
        assert store is not None
        calls: list[Any] = []
        original = store.import_span
        store.import_span = lambda layout, values: calls.append(layout) or original(layout, values)  # type: ignore[method-assign]
        res.evict([(1, 1)])
        assert calls == []
        assert tiled.tile_state((1, 1)) == TileState("secondary", False)
        np.testing.assert_array_equal(
            cv.Tensor(tiled, cv.Layout(tiled.shape)).numpy()[4:8, 5:10], 5.0
        )

    def test_lru_under_budget(self, primary: Any, secondary: Any) -> None:
        """With room for two tiles the least recently used one leaves first, values intact."""
        tiled = _empty(primary, secondary, budget_tiles=2)
        res = tiled.require_facet(TiledResidencyFacet)
        for i, coord in enumerate([(0, 0), (0, 1)]):
            res.promote([coord])
            _write(tiled, coord, float(i + 1))
        res.promote([(0, 0)])  # touched: (0, 1) is now the oldest
        res.promote([(1, 0)])
        assert tiled.primary_tiles == TileSet([(0, 0), (1, 0)])
        assert tiled.tile_state((0, 1)) == TileState("secondary", False)
        assert tiled.peak_resident_bytes <= 2 * tiled.tile_bytes
        dense = cv.Tensor(tiled, cv.Layout(tiled.shape)).numpy()
        assert dense[0, 5] == 2.0 and dense[0, 0] == 1.0

    def test_promote_more_than_budget_refused_before_work(
        self, primary: Any, secondary: Any
    ) -> None:
        tiled = _empty(primary, secondary, budget_tiles=2)
        before = _states(tiled)
        with pytest.raises(
            ValueError, match="3 tiles of 80 bytes exceed max_resident_bytes=160; promote fewer"
        ):
            tiled.require_facet(TiledResidencyFacet).promote([(0, 0), (0, 1), (0, 2)])
        assert _states(tiled) == before and tiled.resident_bytes == 0


class TestAtomicTransitions:
    def test_failed_eviction_commits_nothing(self, primary: Any, secondary: Any) -> None:
        """A move failing half-way leaves every tile in the primary, dirty, with its value."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        coords = [(0, 0), (0, 1), (0, 2)]
        res.promote(coords)
        for i, coord in enumerate(coords):
            _write(tiled, coord, float(i + 7))
        res.evict([(1, 0)])  # allocates the secondary (an implicit tile moves nothing)
        store = tiled._secondary_for("test")
        original, count = store.import_span, [0]

        def flaky(layout: cv.Layout, values: Any) -> None:
            count[0] += 1
            if count[0] == 2:
                raise OSError(5, "injected media error")
            original(layout, values)

        store.import_span = flaky  # type: ignore[method-assign]
        before = _states(tiled)
        with pytest.raises(OSError, match="injected media error"):
            res.evict(coords)
        assert _states(tiled) == before
        assert all(tiled.tile_state(c) == TileState("primary", True) for c in coords)
        dense = cv.Tensor(tiled, cv.Layout(tiled.shape)).numpy()
        assert [dense[0, 5 * i] for i in range(3)] == [7.0, 8.0, 9.0]
        assert tiled.resident_bytes == 3 * tiled.tile_bytes

    def test_multi_tile_write_failing_half_way_changes_no_tile(
        self, primary: Any, secondary: Any
    ) -> None:
        """Issue 25 item 15: a write spanning tiles is all-or-nothing, values and dirty flags."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        row = [(0, 0), (0, 1), (0, 2)]
        res.promote(row)
        for i, coord in enumerate(row):
            _write(tiled, coord, float(i + 1))
        res.evict([(0, 0)])
        res.promote([(0, 0)])  # clean: its secondary copy is current
        victim = tiled._resident[(0, 2)]
        original = victim.import_span

        def broken(layout: cv.Layout, values: Any) -> None:
            raise OSError(28, "injected: no space left on device")

        victim.import_span = broken  # type: ignore[method-assign]
        x = cv.Tensor(tiled, cv.Layout(tiled.shape))
        before_states, before_values = _states(tiled), x.numpy().copy()
        with pytest.raises(OSError, match="injected"):
            tiled.import_span(cv.Layout((15,)), np.full(15, -1.0, np.float32))  # row 0, 3 tiles
        victim.import_span = original  # type: ignore[method-assign]
        assert _states(tiled) == before_states
        assert tiled.tile_state((0, 0)) == TileState("primary", False)
        np.testing.assert_array_equal(x.numpy(), before_values)

    def test_failed_promotion_commits_nothing(self, primary: Any, secondary: Any) -> None:
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        allocate, count = tiled._new_tile, [0]

        def scarce(size: int, dtype: cv.DType) -> cv.Carrier:
            count[0] += 1
            if count[0] == 2:
                raise MemoryError("injected out-of-memory")
            return allocate(size, dtype)

        tiled._new_tile = scarce
        before = _states(tiled)
        with pytest.raises(MemoryError, match="injected out-of-memory"):
            res.promote([(0, 0), (1, 1)])
        assert _states(tiled) == before and tiled.resident_bytes == 0


class TestAsyncRequests:
    def test_pending_tile_refused_then_done(self, primary: Any, secondary: Any) -> None:
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        gate, allocate = threading.Event(), tiled._new_tile

        def slow(size: int, dtype: cv.DType) -> cv.Carrier:
            assert gate.wait(30)
            return allocate(size, dtype)

        tiled._new_tile = slow
        handle = res.promote_async([(0, 0)])
        assert not handle.done
        with pytest.raises(
            TimeoutError, match=r"promote on TiledEvictable: not finished after 0\.01 s"
        ):
            handle.wait(timeout=0.01)
        with pytest.raises(
            RuntimeError, match=r"tiles \[\(0, 0\)\] have a pending residency request"
        ):
            res.evict([(0, 0)])
        gate.set()
        handle.wait(timeout=30)
        assert handle.done and tiled.tile_state((0, 0)).residency == "primary"
        res.evict_async([(0, 0)]).wait(timeout=30)
        assert tiled.tile_state((0, 0)).residency == "secondary"

    def test_concurrent_disjoint_promote_and_evict(self, primary: Any, secondary: Any) -> None:
        """Threads promoting and evicting disjoint tile sets all succeed, values intact."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        row0, row1 = [(0, j) for j in range(3)], [(1, j) for j in range(3)]
        res.promote(row0)
        for j, coord in enumerate(row0):
            _write(tiled, coord, float(j + 1))
        errors: list[BaseException] = []

        def run(action: Any, tiles: Any) -> None:
            try:
                for _ in range(20):
                    action(tiles)
            except BaseException as exc:  # reported below
                errors.append(exc)

        def churn(tiles: Any) -> None:
            res.evict(tiles)
            res.promote(tiles)

        threads = [
            threading.Thread(target=run, args=(churn, row0)),
            threading.Thread(target=run, args=(res.promote, row1)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        dense = cv.Tensor(tiled, cv.Layout(tiled.shape)).numpy()
        assert [dense[0, 5 * j] for j in range(3)] == [1.0, 2.0, 3.0]
        assert tiled.primary_tiles == TileSet(row0 + row1)


def _race(*actions: Any, seconds: float = 0.5, rounds: int = 2000) -> list[BaseException]:
    """Run each action in a loop on its own thread, switching threads every microsecond.

    Bounded: each loop stops after ``rounds``, at ``seconds`` or at the first error, and every
    thread is joined under a timeout. Returns what the threads raised.
    """
    errors: list[BaseException] = []
    deadline = time.monotonic() + seconds

    def run(action: Any) -> None:
        try:
            for _ in range(rounds):
                if errors or time.monotonic() > deadline:
                    return
                action()
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    return errors


def _row_grid(primary: Any, secondary: Any, width: int = 32) -> TiledEvictable:
    """Two rows of ``width`` one-slot tiles, every tile resident."""
    tiled = TiledEvictable(
        primary.allocate(0, cv.float32), secondary(cv.float32), (2, width), (1, 1)
    )
    tiled.require_facet(TiledResidencyFacet).promote(tiled._grid.coords())
    return tiled


class TestResidencySnapshotUnderTheLock:
    """The resident-tile snapshot policies and transitions read is taken under the carrier's lock.

    Building a ``TileSet`` iterates the resident dict in Python code; before the fix a
    transition committing on another thread changed it mid-iteration and the reader raised
    ``RuntimeError: dictionary changed size during iteration``.
    """

    def test_snapshot_waits_while_another_thread_holds_the_lock(
        self, primary: Any, secondary: Any
    ) -> None:
        tiled = _empty(primary, secondary)
        tiled.require_facet(TiledResidencyFacet).promote([(0, 0)])
        view = tiled._policy.view
        assert view is not None
        snapshots: list[TileSet] = []
        reader = threading.Thread(target=lambda: snapshots.append(view.resident()))
        with tiled._lock:
            reader.start()
            reader.join(timeout=0.2)
            assert snapshots == []  # still waiting for the lock
        reader.join(timeout=30)
        assert snapshots == [TileSet([(0, 0)])]

    def test_promote_beside_a_churning_disjoint_row_never_sees_the_dict_change(
        self, primary: Any, secondary: Any
    ) -> None:
        """One thread evicts and promotes row 0 while another promotes resident row 1 (which
        only reads the snapshot). Before the fix this failed in 20 of 20 runs."""
        tiled = _row_grid(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        row0, row1 = [(0, j) for j in range(32)], [(1, j) for j in range(32)]

        def churn() -> None:
            res.evict(row0)
            res.promote(row0)

        assert _race(churn, lambda: res.promote(row1)) == []
        assert tiled.primary_tiles == TileSet(row0 + row1)


class TestStorageAccessBesideTransitions:
    """Reads and writes through the storage contract against evictions on other threads.

    Reads copy tiles under the carrier's lock; writes run under it and refuse tiles with a
    transition in flight, so no acknowledged write is dropped with an evicted primary.
    """

    def test_write_after_an_evictions_copy_is_refused_and_changes_nothing(
        self, primary: Any, secondary: Any
    ) -> None:
        """Before the fix the write returned and was then lost with the primary."""
        tiled = _empty(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        res.promote([(0, 0)])
        _write(tiled, (0, 0), 1.0)
        copied, go = threading.Event(), threading.Event()

        def pause(done: int, total: int, label: str) -> None:
            if label == "evict tiles":
                copied.set()
                assert go.wait(30)

        def evict() -> None:
            with cv.progress(pause):
                res.evict([(0, 0)])

        evicting = threading.Thread(target=evict)
        evicting.start()
        try:
            assert copied.wait(30)
            with pytest.raises(
                RuntimeError,
                match=r"import_span on TiledEvictable: tiles \[\(0, 0\)\] have a pending "
                r"residency request or operation; wait for it first",
            ):
                _write(tiled, (0, 0), 2.0)
        finally:
            go.set()
            evicting.join(timeout=30)
        assert not evicting.is_alive()
        assert tiled.tile_state((0, 0)) == TileState("secondary", False)
        assert tiled._busy == set()
        res.promote([(0, 0)])
        assert (tiled.export_span(tile_box(tiled, (0, 0))) == 1.0).all()

    def test_reads_and_scatter_beside_churning_evictions_see_every_value(
        self, primary: Any, secondary: Any
    ) -> None:
        """Before the fix a read found a resident tile that an eviction then released:
        ``RuntimeError: export_span on <primary>: the carrier was released``."""
        tiled = _row_grid(primary, secondary)
        res = tiled.require_facet(TiledResidencyFacet)
        row0 = [(0, j) for j in range(32)]
        for j in range(32):
            tiled.write(j, float(j))  # row 0 holds 0..31, row 1 zeros
        expected = np.zeros((2, 32), np.float32)
        expected[0] = np.arange(32)
        x = cv.Tensor(tiled, cv.Layout(tiled.shape))
        selection = TileSelection(((1,), (0,)))
        compact = cv.tensor(np.full((1, 1), 7.0, np.float32))

        def churn() -> None:
            res.evict(row0)
            res.promote(row0)

        def read() -> None:
            assert (x.numpy() == expected).all()
            assert tiled.read(31) == 31.0

        def scatter_into_a_copy() -> None:
            out = scatter(compact, x, selection).numpy()
            assert out[1, 0] == 7.0 and (out[0] == expected[0]).all()

        assert _race(churn, read, scatter_into_a_copy) == []


class TestBudgetNeverExceeded:
    """Every direct operation with a budget of a few tiles stays under budget plus one tile."""

    @pytest.mark.parametrize(
        "name", ["add", "mul", "elementwise_mul", "relu", "reduce_sum", "matmul"]
    )
    def test_peak_resident_bytes(self, primary: Any, secondary: Any, name: str) -> None:
        values = RNG.standard_normal((12, 12)).astype(np.float32)
        x, _ = build(
            values, (3, 3), primary=primary, secondary=secondary, dtype=cv.float32, budget_tiles=3
        )
        y, _ = build(
            values, (3, 3), primary=primary, secondary=secondary, dtype=cv.float32, budget_tiles=3
        )
        for t in (x, y):
            assert t.carrier.peak_resident_bytes <= 3 * t.carrier.tile_bytes
        if name in ("relu", "reduce_sum"):
            getattr(cv, name)(x)
        else:
            getattr(cv, name)(x, y)
        for t in (x, y):
            limit = t.carrier.max_resident_bytes + t.carrier.tile_bytes
            assert 0 < t.carrier.peak_resident_bytes <= limit

    def test_direct_operation_reports_progress(self, primary: Any, secondary: Any) -> None:
        values = RNG.standard_normal((12, 12)).astype(np.float32)
        x, _ = build(values, (3, 3), primary=primary, secondary=secondary, dtype=cv.float32)
        seen: list[tuple[int, int, str]] = []
        with cv.progress(lambda d, t, label: seen.append((d, t, label))):
            cv.reduce_sum(x)
        assert seen[-1] == (16, 16, "reduce_sum")

    def test_direct_operation_moves_the_progress_bar(
        self, primary: Any, secondary: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """cv.progress("bar") shows a tiled reduction's tiles as a tqdm bar on stderr."""
        values = RNG.standard_normal((12, 12)).astype(np.float32)
        x, _ = build(values, (3, 3), primary=primary, secondary=secondary, dtype=cv.float32)
        with cv.progress("bar"):
            total = cv.reduce_sum(x)
        assert float(total) == pytest.approx(float(values.sum()), rel=1e-5, abs=1e-4)
        assert "reduce_sum" in capsys.readouterr().err


class TestConstructionAndPublicSurface:
    def test_refusals(self, tmp_path: Path) -> None:
        cpu, file = (
            CPU.allocate(0, cv.float32),
            FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
        )
        with pytest.raises(TypeError, match="grid_shape must be a tuple of non-negative ints, got"):
            TiledEvictable(cpu, file, [2], (3,))  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match="the primary holds 5 slots; give 0 or the full extent of 6"
        ):
            TiledEvictable(CPU.allocate(5, cv.float32), file, (2,), (3,))
        with pytest.raises(TypeError, match="the tiers store different dtypes"):
            TiledEvictable(CPU.allocate(0, cv.float64), file, (2,), (3,))
        with pytest.raises(
            ValueError, match="max_resident_bytes=4 cannot hold one tile of 12 bytes"
        ):
            TiledEvictable(cpu, file, (2,), (3,), max_resident_bytes=4)

    def test_grid_whose_bookkeeping_cannot_fit_is_refused_with_the_tile_count(
        self, tmp_path: Path
    ) -> None:
        """Issue 25 item 10: a 10^6 x 10^6 grid is a ValueError giving the tile count, at once."""
        cpu = CPU.allocate(0, cv.float32)
        file = FileBacked.allocate(0, cv.float32, directory=str(tmp_path))
        with pytest.raises(
            ValueError,
            match=r"a grid of 1,000,000,000,000 tiles needs about .* MiB of per-tile "
            r"bookkeeping .*; use larger tiles",
        ):
            TiledEvictable(cpu, file, (10**6, 10**6), (1, 1))
        assert cpu.size == 0 and file.size == 0
        tiled = TiledEvictable(cpu, file, (10, 10), (1, 1))  # the tiers are still usable
        assert tiled.size == 100

    def test_bookkeeping_is_measured_against_the_memory_available(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from conveyor_storage import _memory

        monkeypatch.setattr(_memory, "available_bytes", lambda: 40 * 1024)

        def tiled(grid: tuple[int, ...]) -> TiledEvictable:
            file = FileBacked.allocate(0, cv.float32, directory=str(tmp_path))
            return TiledEvictable(CPU.allocate(0, cv.float32), file, grid, (1, 1))

        with pytest.raises(ValueError, match=r"a grid of 100 tiles .* at most 40 tiles"):
            tiled((10, 10))
        assert tiled((5, 8)).size == 40
        monkeypatch.setattr(_memory, "available_bytes", lambda: None)  # unknown: no refusal
        assert tiled((10, 10)).size == 100

    def test_closed_and_registered(self) -> None:
        with pytest.raises(
            TypeError, match="cannot subclass TiledEvictable: it is a closed carrier"
        ):
            type("Mine", (TiledEvictable,), {})
        assert cv.plugins.host().carrier("tiled") is TiledEvictable

    @pytest.mark.parametrize(
        "name",
        [
            "TiledEvictable",
            "TileSelection",
            "TileSet",
            "ResidencyPlan",
            "TiledResidencyFacet",
            "AwaitProjection",
            "AwaitResidency",
            "project",
            "scatter",
            "TileState",
            "LRUPolicy",
            "ResidencyPolicy",
        ],
    )
    def test_public_name_exported(self, name: str) -> None:
        assert name in conveyor_storage.__all__ and hasattr(conveyor_storage, name)

    def test_custom_policy_plan_is_checked(self, tmp_path: Path) -> None:
        """A policy that drops a required tile is refused: policies never define correctness."""

        class Dropper(conveyor_storage.ResidencyPolicy):
            def plan(self, required: TileSet, purpose: Any, room: int = 0) -> ResidencyPlan:
                return ResidencyPlan(TileSet(()), TileSet(()), required)

        tiled = TiledEvictable(
            CPU.allocate(0, cv.float32),
            FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
            (2,),
            (3,),
            residency_policy=Dropper(),
        )
        with pytest.raises(
            RuntimeError, match=r"the residency policy's plan .* drops required tiles"
        ):
            tiled.require_facet(TiledResidencyFacet).promote([(0,)])
        assert tiled.tile_state((0,)).residency == "implicit"

    def test_residency_policy_written_from_the_docs_with_two_arguments_streams(
        self, tmp_path: Path
    ) -> None:
        """Issue 25 item 15: a ``plan(required, purpose)`` policy serves promotion and streaming."""
        calls: list[str] = []

        class TwoArguments(conveyor_storage.ResidencyPolicy):
            def plan(self, required: TileSet, purpose: Any) -> ResidencyPlan:
                calls.append(purpose)
                resident = self.view.resident() if self.view else TileSet(())
                promote = required - resident if purpose == "promote" else TileSet(())
                return ResidencyPlan(promote, required & resident, TileSet(()))

        values = RNG.standard_normal((6, 6)).astype(np.float32)
        tile_bytes = 9 * 4
        tiled = TiledEvictable(
            CPU.allocate(0, cv.float32),
            FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
            (2, 2),
            (3, 3),
            residency_policy=TwoArguments(),
            max_resident_bytes=2 * tile_bytes,
        )
        x = cv.Tensor(tiled, cv.Layout(tiled.shape))
        residency = tiled.require_facet(TiledResidencyFacet)
        for coord in tiled._grid.coords():
            residency.promote([coord])
            region = tiled._grid.region(coord)
            tiled.import_span(tile_box(tiled, coord), np.ascontiguousarray(values[region]))
            residency.evict([coord])  # this policy never frees room itself
        residency.promote([(0, 0), (1, 1)])
        total = cv.reduce_sum(cv.add(x, x))
        np.testing.assert_allclose(total.numpy(), (values + values).sum(), rtol=1e-5)
        assert "promote" in calls and "stream" in calls
        assert tiled.peak_resident_bytes <= 3 * tile_bytes

    def test_residency_policy_whose_plan_takes_neither_form_is_refused_unbound(
        self, tmp_path: Path
    ) -> None:
        class OneArgument(conveyor_storage.ResidencyPolicy):
            def plan(self, required: TileSet) -> ResidencyPlan:  # type: ignore[override]
                return ResidencyPlan(required, TileSet(()), TileSet(()))

        policy = OneArgument()
        with pytest.raises(TypeError, match=r"OneArgument.* takes \(required, purpose\)"):
            TiledEvictable(
                CPU.allocate(0, cv.float32),
                FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
                (2,),
                (3,),
                residency_policy=policy,
            )
        assert policy.view is None


def test_pickling_a_tiled_tensor_names_the_wrapper_and_says_what_to_pickle(tmp_path: Path) -> None:
    """Issue 25 item 14: the refusal names TiledEvictable (not its secondary); the advice works.

    (``cv.move`` has no route out of TiledEvictable, so the advice is ``tensor.numpy()``.)
    """
    import pickle

    values = RNG.standard_normal((6, 6)).astype(np.float32)
    x, expected = build(
        values, (3, 3), primary=CPU, secondary=secondary_factory("file", tmp_path), dtype=cv.float32
    )
    with pytest.raises(
        TypeError, match=r"^pickle on TiledEvictable: .*pickle tensor\.numpy\(\) instead"
    ):
        pickle.dumps(x)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(x.numpy())), expected)
