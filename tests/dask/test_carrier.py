"""DaskCarrier as a carrier: registration, storage on the cluster, chunking, repr and moves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster
from conveyor_generic import CPU, Generic
from conveyor_storage import FileBacked


def _handle(t: cv.Tensor) -> Any:
    return cv.storage_handle(t.carrier)


class TestNamedCarrier:
    def test_tensor_with_the_dask_name_lives_on_the_cluster(self, client: Any) -> None:
        """``cv.tensor(data, carrier="dask")`` stores the values as chunks on the workers."""
        import distributed

        t = cv.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=cv.float32, carrier="dask")
        assert type(t.carrier) is DaskCarrier
        futures = distributed.futures_of(_handle(t).base)
        for future in futures:  # small values are submitted, not waited for
            future.result(timeout=60)
        assert futures and all(f.status == "finished" for f in futures)
        assert set(client.who_has(futures)) == {f.key for f in futures}
        np.testing.assert_array_equal(t.numpy(), [[1.0, 2.0], [3.0, 4.0]])

    def test_public_name_is_exported(self) -> None:
        """``DaskCarrier`` is the package's one public name."""
        import conveyor_dask

        assert conveyor_dask.__all__ == ["DaskCarrier"]

    def test_carrier_is_open(self) -> None:
        """Vendors may build on it: DaskCarrier is not closed."""
        assert not cv.is_closed_carrier(DaskCarrier)

    def test_bfloat16_storage_is_refused_before_allocation(self) -> None:
        """A dtype the storage does not hold raises TypeError naming it and the carrier."""
        with pytest.raises(TypeError, match=r"allocate on DaskCarrier: .* bfloat16"):
            DaskCarrier.allocate(4, cv.bfloat16)


class TestResults:
    def test_result_is_a_lazy_graph_until_read(self, client: Any) -> None:
        """An operation returns a graph of its own tasks (nothing computed, nothing kept on the
        workers); reading computes it, and leaves it lazy."""
        import distributed

        x = cv.tensor(np.arange(12.0).reshape(3, 4), carrier="dask")
        y = F.add(x, x)
        handle = _handle(y)
        assert not handle.stored and handle.origin == "add"
        assert any(str(name).startswith("add-") for name in handle.base.dask.layers)
        assert distributed.futures_of(handle.base) == distributed.futures_of(_handle(x).base)
        np.testing.assert_array_equal(y.numpy(), 2 * np.arange(12.0).reshape(3, 4))
        assert F.reduce_sum(y).item() == 132.0
        assert not handle.stored

    def test_persist_keeps_the_values_on_the_workers(self, client: Any) -> None:
        """``DaskCarrier.persist`` computes lazy results in place: their arrays become finished
        futures held by the workers, and the values are unchanged."""
        import distributed

        values = np.arange(12.0).reshape(3, 4)
        x = cv.tensor(values, carrier="dask")
        y, z = F.mul(x, 2.0), F.add(x, 1.0)
        DaskCarrier.persist(y, z, y)  # a tensor named twice is computed once
        for tensor in (y, z):
            handle = _handle(tensor)
            futures = distributed.futures_of(handle.base)
            assert handle.stored and futures and all(f.status == "finished" for f in futures)
            assert set(client.who_has(futures)) == {f.key for f in futures}
        np.testing.assert_array_equal(y.numpy(), values * 2)
        np.testing.assert_array_equal(z.numpy(), values + 1)

    def test_persist_refuses_a_tensor_of_another_carrier_computing_nothing(self) -> None:
        """A CPU tensor among the arguments is a TypeError naming its carrier; the Dask tensors
        before it stay lazy."""
        y = F.add(cv.tensor(np.ones(3), carrier="dask"), 1.0)
        expected = (
            r"^persist on DaskCarrier: expected tensors on a DaskCarrier, got CPU; move it with "
            r"cv.move\(tensor, DaskCarrier\) first$"
        )
        with pytest.raises(TypeError, match=expected):
            DaskCarrier.persist(y, cv.tensor(np.ones(3), carrier="cpu"))
        assert not _handle(y).stored

    def test_eager_variable_computes_every_result_at_its_call(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``CONVEYOR_DASK_EAGER=1``: every result is persisted and waited for before the call
        returns (finished futures), as before laziness."""
        import distributed

        monkeypatch.setenv(_cluster.EAGER_VARIABLE, "1")
        y = F.add(cv.tensor(np.arange(6.0), carrier="dask"), 1.0)
        futures = distributed.futures_of(_handle(y).base)
        assert _handle(y).stored and futures and all(f.status == "finished" for f in futures)
        np.testing.assert_array_equal(y.numpy(), np.arange(6.0) + 1)

    def test_bad_eager_variable_is_refused_at_the_call(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A value of ``CONVEYOR_DASK_EAGER`` other than 0 or 1 is a ValueError naming it."""
        x = cv.tensor(np.arange(3.0), carrier="dask")
        monkeypatch.setenv(_cluster.EAGER_VARIABLE, "yes")
        with pytest.raises(ValueError, match=r"CONVEYOR_DASK_EAGER='yes' must be '1'"):
            F.add(x, 1.0)

    def test_graphs_past_the_layer_bound_are_persisted(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A chain whose graph grows past ``CONVEYOR_DASK_MAX_LAYERS`` is persisted at the call
        that crosses it, so the graph starts again from stored values; 0 never persists."""
        monkeypatch.setenv(_cluster.LAYERS_VARIABLE, "8")
        x = cv.tensor(np.zeros(4), carrier="dask")
        y, stored_at = x, []
        for step in range(20):
            y = F.add(y, 1.0)
            if _handle(y).stored:
                stored_at.append(step)
            assert len(_handle(y).base.dask.layers) <= 9
        assert stored_at and stored_at[0] >= 6
        np.testing.assert_array_equal(y.numpy(), np.full(4, 20.0))
        monkeypatch.setenv(_cluster.LAYERS_VARIABLE, "0")
        for _ in range(20):
            y = F.add(y, 1.0)
        assert not _handle(y).stored and len(_handle(y).base.dask.layers) > 20
        monkeypatch.setenv(_cluster.LAYERS_VARIABLE, "many")
        with pytest.raises(ValueError, match=r"CONVEYOR_DASK_MAX_LAYERS='many' must be a whole"):
            F.add(y, 1.0)

    def test_views_alias_the_distributed_storage(self) -> None:
        """permute, reshape and broadcast_to share the carrier and read the right values."""
        values = np.arange(24.0).reshape(2, 3, 4)
        x = cv.tensor(values, carrier="dask")
        p = F.permute(x, axes=(2, 0, 1))
        assert p.carrier is x.carrier
        np.testing.assert_array_equal(p.numpy(), values.transpose(2, 0, 1))
        r = F.reshape(x, shape=(6, 4))
        np.testing.assert_array_equal(r.numpy(), values.reshape(6, 4))
        b = F.broadcast_to(cv.tensor(np.arange(4.0), carrier="dask"), shape=(3, 4))
        np.testing.assert_array_equal(b.numpy(), np.broadcast_to(np.arange(4.0), (3, 4)))
        np.testing.assert_array_equal(F.add(p, 1.0).numpy(), values.transpose(2, 0, 1) + 1)

    def test_write_and_read_single_slots(self) -> None:
        """``write`` replaces one slot on the cluster and bumps the version; ``read`` sees it."""
        carrier = DaskCarrier.allocate(5, cv.int32)
        before = carrier.version
        carrier.write(3, 7)
        assert carrier.read(3) == 7 and carrier.read(0) == 0
        assert carrier.version == before + 1


class TestChunks:
    def test_repr_names_chunks_limit_and_scheduler(self, cluster: Any) -> None:
        """``repr`` shows the chunk shape, the byte limit and the scheduler address."""
        t = F.add(cv.tensor(np.zeros((8, 8)), carrier="dask"), 1.0)
        text = repr(t.carrier)
        assert "chunks=(8, 8)" in text and "chunk_limit=" in text
        assert cluster.scheduler_address in text

    def test_large_operands_are_split_across_workers(self) -> None:
        """Chunks follow the operand size: a 4 MiB array gets several chunks, under the limit."""
        t = cv.move(cv.tensor(np.ones((1024, 1024), np.float32)), DaskCarrier)
        handle = _handle(t)
        assert len(handle.base.chunks[0]) * len(handle.base.chunks[1]) > 1
        assert np.prod(t.carrier.chunks) * 4 <= t.carrier.chunk_limit

    def test_flat_data_takes_its_shape_on_first_use(self) -> None:
        """Values that arrived flat are kept in the tensor's shape once a kernel reads them."""
        t = cv.tensor(np.ones((64, 32), np.float32), carrier="dask")
        assert _handle(t).base.ndim == 1
        F.add(t, t)
        assert _handle(t).base.shape == (64, 32)

    def test_chunk_variable_overrides_the_limit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``CONVEYOR_DASK_CHUNK`` sets the byte limit, and repr shows it."""
        monkeypatch.setenv(_cluster.CHUNK_VARIABLE, "64KiB")
        t = cv.tensor(np.ones((256, 256), np.float64), carrier="dask")
        assert t.carrier.chunk_limit == 64 * 1024
        assert np.prod(t.carrier.chunks) * 8 <= 64 * 1024
        assert "chunk_limit=64.00 kiB" in repr(t.carrier)
        np.testing.assert_array_equal(F.reduce_sum(t).item(), 256 * 256)

    def test_bad_chunk_variable_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A malformed ``CONVEYOR_DASK_CHUNK`` raises ValueError naming it, allocating nothing."""
        monkeypatch.setenv(_cluster.CHUNK_VARIABLE, "lots")
        with pytest.raises(ValueError, match=r"CONVEYOR_DASK_CHUNK='lots' is not a positive"):
            DaskCarrier.allocate(4, cv.float32)


class TestRoundTrips:
    def test_small_values_cost_no_wait_of_their_own(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Storing small values and reshaping them on first use only submit work: the first
        read's wait is the one blocking round trip, and it sees the right values."""
        waits: list[str] = []
        original = _cluster.wait

        def counting(operation: str, *args: Any, **kwargs: Any) -> None:
            waits.append(operation)
            original(operation, *args, **kwargs)

        monkeypatch.setattr(_cluster, "wait", counting)
        values = np.arange(2048.0).reshape(64, 32)
        t = cv.tensor(values, carrier="dask")
        assert waits == []
        y = F.add(t, t)
        assert waits == []  # lazy: the add waits for nothing either
        np.testing.assert_array_equal(y.numpy(), 2 * values)
        assert waits == ["add"]  # the read, named after the operation it computes

    def test_large_values_are_scattered_to_the_workers(self, client: Any) -> None:
        """Values over 1 MiB go straight to the workers (scattered), not through the graph,
        held by a one-layer array (its layers count toward the bound of every result)."""
        import distributed

        t = cv.tensor(np.ones((512, 512)), carrier="dask")  # 2 MiB of float64
        futures = distributed.futures_of(_handle(t).base)
        assert futures and all(f.status == "finished" for f in futures)
        assert all(str(f.key).startswith("ndarray-") for f in futures), [f.key for f in futures]
        assert len(_handle(t).base.dask.layers) == 1 and _handle(t).base.npartitions > 1
        assert F.reduce_sum(t).item() == 512 * 512


class TestMoves:
    @pytest.mark.parametrize("other", [CPU, Generic])
    def test_round_trip_keeps_values_shape_and_dtype(self, other: type) -> None:
        """CPU/Generic -> Dask -> CPU/Generic copies the values exactly."""
        values = np.arange(35, dtype=np.int16).reshape(5, 7)
        source = cv.tensor(values, carrier=other)
        there = cv.move(source, DaskCarrier)
        assert type(there.carrier) is DaskCarrier and there.shape == (5, 7)
        back = cv.move(there, other)
        assert type(back.carrier) is other and back.dtype is cv.int16
        np.testing.assert_array_equal(back.numpy(), values)

    def test_move_of_a_view_copies_its_logical_values(self) -> None:
        """Moving a permuted Dask view gives the permuted values, contiguous."""
        values = np.arange(12.0).reshape(3, 4)
        view = F.permute(cv.tensor(values, carrier="dask"), axes=(1, 0))
        np.testing.assert_array_equal(cv.move(view, "cpu").numpy(), values.T)
        same = cv.move(view, DaskCarrier)
        assert same.carrier is not view.carrier
        np.testing.assert_array_equal(same.numpy(), values.T)

    def test_file_backed_moves_without_the_client(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """FileBacked -> Dask: the workers read the file; this process never reads its values."""
        values = np.arange(4096, dtype=np.float32).reshape(64, 64)
        source = cv.move(cv.tensor(values, carrier="cpu"), FileBacked, directory=str(tmp_path))

        def refuse(*args: Any) -> None:
            raise AssertionError("the client read the file")

        monkeypatch.setattr(FileBacked, "export_span", refuse)
        monkeypatch.setattr(FileBacked, "read", refuse)
        there = cv.move(source, DaskCarrier)
        monkeypatch.undo()
        np.testing.assert_array_equal(there.numpy(), values)
        assert F.reduce_sum(there).item() == float(values.sum())


class TestEmbeddedDefault:
    def test_first_use_starts_and_closes_a_local_cluster(self, tmp_path: Any) -> None:
        """With no configuration a program computes on an embedded cluster and exits cleanly."""
        script = tmp_path / "program.py"
        script.write_text(
            textwrap.dedent(
                """
                import conveyor as cv
                from conveyor_dask import DaskCarrier

                if __name__ == "__main__":
                    t = cv.tensor([1.0, 2.0, 3.0], carrier="dask")
                    print(cv.reduce_sum(t).item())
                    print(DaskCarrier.dashboard_link() is not None, t.carrier.scheduler_address)
                """
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        first, second = done.stdout.splitlines()[:2]
        assert first == "6.0"
        assert second.startswith("True tls://127.0.0.1:")  # TLS only: see test_security.py


class TestProgress:
    def test_long_computation_reports_through_cv_progress(self) -> None:
        """Inside ``cv.progress`` reading a Dask result reports (done, total) tasks, ending
        complete, labelled with the operation that made it."""
        heard: list[tuple[int, int, str]] = []
        x = cv.move(cv.tensor(np.ones((512, 512))), DaskCarrier)
        with cv.progress(lambda done, total, label: heard.append((done, total, label))):
            total = F.reduce_sum(F.mul(x, x)).item()
        assert total == 512 * 512
        # The operations are lazy: item() computes the whole graph, and reports under the
        # name of the operation whose result it reads.
        assert {label for _, _, label in heard} == {"reduce_sum on DaskCarrier"}, heard
        done, last_total = heard[-1][:2]
        assert done == last_total >= 1
        assert all(d <= t for d, t, _ in heard)

    def test_nobody_listening_starts_no_feed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without an active ``cv.progress`` block no progress feed is opened."""
        import distributed.diagnostics.progressbar as bars

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a progress feed was opened")

        monkeypatch.setattr(bars.ProgressBar, "__init__", refuse)
        x = cv.tensor(np.ones(16), carrier="dask")
        assert F.reduce_sum(x).item() == 16.0
