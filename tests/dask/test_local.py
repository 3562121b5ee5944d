"""Dask's local schedulers: ``CONVEYOR_DASK_SCHEDULER=threads`` / ``synchronous``, no cluster.

The same graphs run in this process: no client, no worker, no port. A FileBacked tensor moves
as lazy chunk reads, so nothing is read before a value is needed. The autouse ``reconnect``
fixture puts the session cluster back after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster, _routes
from conveyor_generic import CPU
from conveyor_storage import FileBacked


def _handle(t: cv.Tensor) -> Any:
    return cv.storage_handle(t.carrier)


@pytest.fixture(params=_cluster.LOCAL_SCHEDULERS)
def local(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The scheduler named by ``CONVEYOR_DASK_SCHEDULER`` (read on first use after close)."""
    monkeypatch.setenv(_cluster.SCHEDULER_VARIABLE, request.param)
    _cluster.close()
    yield request.param
    _cluster.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[slice, ...]]:
    """The chunks of files read so far (the tasks run in this process, so a spy sees them)."""
    found: list[tuple[slice, ...]] = []
    original = _routes._read_block

    def spy(path: str, dtype: str, size: int, layout: Any, block: tuple[slice, ...]) -> Any:
        found.append(block)
        return original(path, dtype, size, layout, block)

    monkeypatch.setattr(_routes, "_read_block", spy)
    return found


class TestVariable:
    def test_variable_computes_in_this_process_without_a_client(self, local: str) -> None:
        """The variable selects a session with no client; operations and reads give CPU's
        values, and the carrier's repr names the scheduler."""
        values = np.arange(24.0, dtype=np.float32).reshape(4, 6)
        x = cv.tensor(values, carrier="dask")
        session = _cluster.active_session()
        assert session is not None and session.local and session.client is None
        assert x.carrier.scheduler_address == local
        y = F.matmul(x, F.permute(x, axes=(1, 0)))
        expected = cv.matmul(cv.tensor(values, carrier="cpu"), cv.tensor(values.T, carrier="cpu"))
        np.testing.assert_array_equal(y.numpy(), expected.numpy())
        assert F.reduce_sum(x).item() == float(values.sum())
        assert repr(y.carrier).endswith(f"scheduler={local}>")

    def test_connect_names_a_local_scheduler(self) -> None:
        """``DaskCarrier.connect("synchronous")`` switches to the local scheduler at once."""
        DaskCarrier.connect("synchronous")
        x = cv.tensor(np.arange(5.0), carrier="dask")
        assert x.carrier.scheduler_address == "synchronous"
        np.testing.assert_array_equal(F.mul(x, 2.0).numpy(), np.arange(5.0) * 2)

    def test_doctor_describes_the_local_scheduler(self, local: str) -> None:
        """``conveyor doctor``'s dask section names the scheduler and its threads."""
        cv.tensor(np.ones(2), carrier="dask")
        session = _cluster.active_session()
        assert session is not None
        lines = _cluster.describe(session)
        assert lines["scheduler"] == f"{local} (Dask's scheduler, in this process)"
        assert int(lines["threads"]) >= 1

    def test_values_are_copied_at_the_move(self, local: str) -> None:
        """Values sent from a CPU tensor are copied: a later write to it changes nothing."""
        source = cv.tensor(np.zeros(4), carrier="cpu")
        x = cv.move(source, DaskCarrier)
        source.carrier.write(0, 9.0)
        np.testing.assert_array_equal(x.numpy(), np.zeros(4))


class TestLaziness:
    def test_data_dependent_failure_surfaces_at_the_read(self, local: str) -> None:
        """``inv`` of a singular matrix returns; the read raises CPU's ValueError naming inv."""
        inverse = F.inv(cv.tensor(np.ones((3, 3)), carrier="dask"))
        with pytest.raises(ValueError, match=r"^inv on DaskCarrier: a matrix is singular"):
            inverse.numpy()

    def test_shape_errors_still_surface_at_the_call(self, local: str) -> None:
        """Binding and shape checks run at the call: a matmul of mismatched shapes raises
        there, before any graph is built."""
        a = cv.tensor(np.ones((2, 3)), carrier="dask")
        with pytest.raises(ValueError, match=r"matmul"):
            F.matmul(a, a)

    def test_gradients_build_graphs_and_match_cpu(self, local: str) -> None:
        """backward on a lazy graph gives lazy gradients with CPU's values."""
        values = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
        grads = []
        for carrier in (DaskCarrier, CPU):
            x = cv.tensor(values, carrier=carrier, requires_grad=True)
            F.reduce_sum(F.mul(F.tanh(x), x)).backward()
            assert x.grad is not None
            grads.append(x.grad)
        assert not _handle(grads[0]).stored
        np.testing.assert_allclose(grads[0].numpy(), grads[1].numpy(), rtol=1e-12)


class TestProgress:
    def test_reading_reports_through_cv_progress(self, local: str) -> None:
        """Inside ``cv.progress`` a read on a local scheduler reports (done, total) tasks from
        this thread, labelled with the operation it computes, ending complete."""
        import threading

        heard: list[tuple[int, int, str, Any]] = []
        x = cv.move(cv.tensor(np.ones((256, 256)), carrier="cpu"), DaskCarrier)  # shaped

        def listen(done: int, total: int, label: str) -> None:
            heard.append((done, total, label, threading.get_ident()))

        with cv.progress(listen):
            assert F.reduce_sum(F.mul(x, x)).item() == 256 * 256
        assert heard and {label for _, _, label, _ in heard} == {"reduce_sum on DaskCarrier"}
        assert {thread for *_, thread in heard} == {threading.get_ident()}
        done, total = heard[-1][:2]
        assert done == total >= 1 and all(d <= t for d, t, _, _ in heard)


class TestFileChunks:
    def _file(self, tmp_path: Any, values: np.ndarray[Any, Any]) -> cv.Tensor:
        return cv.move(cv.tensor(values, carrier="cpu"), FileBacked, directory=str(tmp_path))

    def test_move_reads_nothing_and_each_read_reads_each_chunk_once(
        self, local: str, tmp_path: Any, reads: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """FileBacked -> Dask stores nothing and reads no chunk; a pipeline over it reads
        every chunk once (none through FileBacked's own export), and gives CPU's value."""
        monkeypatch.setenv(_cluster.CHUNK_VARIABLE, "64KiB")  # 16 chunks of the 1 MiB file
        values = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
        source = self._file(tmp_path, values)
        monkeypatch.setattr(FileBacked, "export_span", _refuse)
        x = cv.move(source, DaskCarrier)
        assert reads == [] and not _handle(x).stored
        chunks = len(_handle(x).base.chunks[0]) * len(_handle(x).base.chunks[1])
        assert chunks == 16
        total = F.reduce_sum(F.add(F.mul(x, 2.0), 1.0)).item()
        assert len(reads) == chunks and len(set(map(str, reads))) == chunks
        monkeypatch.undo()
        expected = cv.reduce_sum(cv.tensor(values * np.float32(2) + np.float32(1), carrier="cpu"))
        assert total == pytest.approx(expected.item(), rel=1e-5)

    def test_file_is_read_when_the_values_are_computed(self, local: str, tmp_path: Any) -> None:
        """The chunks are read at the read, not at the move: a write to the file in between is
        seen (as documented); after ``persist`` the values no longer follow the file."""
        source = self._file(tmp_path, np.zeros(8, np.float32))
        x = cv.move(source, DaskCarrier)
        source.carrier.write(3, 5.0)
        assert x.numpy()[3] == 5.0
        DaskCarrier.persist(x)
        source.carrier.write(3, 7.0)
        assert x.numpy()[3] == 5.0

    def test_each_pass_over_a_file_reads_it_again_instead_of_holding_it(
        self, local: str, tmp_path: Any, reads: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``(x - x.mean(0))`` uses ``x`` twice: each use reads every chunk itself (twice in
        all), so no chunk is held between the passes; after ``persist`` nothing is read."""
        monkeypatch.setenv(_cluster.CHUNK_VARIABLE, "64KiB")
        values = np.random.default_rng(2).standard_normal((256, 512)).astype(np.float32)
        x = cv.move(self._file(tmp_path, values), DaskCarrier)
        chunks = len(_handle(x).base.chunks[0]) * len(_handle(x).base.chunks[1])
        centred = F.sub(x, x.mean(0)).numpy()
        assert len(reads) == 2 * chunks
        np.testing.assert_allclose(centred, values - values.mean(0), atol=1e-6)
        DaskCarrier.persist(x)
        reads.clear()
        F.sub(x, x.mean(0)).numpy()
        assert reads == []

    def test_values_handed_out_do_not_follow_the_file(self, local: str, tmp_path: Any) -> None:
        """Chunks stream as views of the mapped file, but ``numpy()`` hands out a copy: a
        later write to the file does not change it."""
        source = self._file(tmp_path, np.arange(8, dtype=np.float32))
        got = cv.move(source, DaskCarrier).numpy()
        source.carrier.write(0, 42.0)
        assert got[0] == 0.0 and not isinstance(got.base, np.memmap)

    def test_the_file_stays_while_a_lazy_read_needs_it(self, local: str, tmp_path: Any) -> None:
        """A FileBacked tensor dropped right after the move is kept alive by the graph, so
        its file is still there for the read."""
        import gc

        x = cv.move(self._file(tmp_path, np.arange(6, dtype=np.float32)), DaskCarrier)
        gc.collect()
        np.testing.assert_array_equal(x.numpy(), np.arange(6, dtype=np.float32))

    def test_views_of_a_file_read_their_own_values(self, local: str, tmp_path: Any) -> None:
        """A permuted FileBacked view moves as lazy reads of exactly its values."""
        values = np.arange(48.0, dtype=np.float32).reshape(6, 8)
        source = self._file(tmp_path, values)
        view = cv.Tensor(source.carrier, cv.Layout((8, 6), (1, 8)))  # the transpose
        np.testing.assert_array_equal(cv.move(view, DaskCarrier).numpy(), values.T)


def _refuse(*args: Any) -> None:
    raise AssertionError("the client read the file through FileBacked")


def test_training_steps_on_the_threaded_scheduler_agree_with_generic(local: str) -> None:
    """The 2-layer MLP's first steps run on lazy graphs and give Generic's losses."""
    from conveyor_generic import Generic
    from tests.dask.test_training import _train

    dask_losses, dask_plans = _train(DaskCarrier, 3)
    generic_losses, generic_plans = _train(Generic, 3)
    assert dask_plans == generic_plans
    np.testing.assert_allclose(dask_losses, generic_losses, rtol=1e-4)
