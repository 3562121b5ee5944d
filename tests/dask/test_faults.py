"""Faults: a lost worker, a failing task. Never a wrong result, never a half-published one."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster
from conveyor_generic import Generic
from conveyor_storage import FileBacked

_DEADLINE_S = 120


def _failing_block(*blocks: Any, **kwargs: Any) -> Any:
    """A block function that fails on the worker the way a reference kernel refuses."""
    from conveyor_generic.kernels import KernelValueError

    raise KernelValueError("injected failure")


def _run_while_killing(client: Any, work: Any) -> tuple[Any, str | None]:
    """Run ``work()`` in a thread and SIGKILL one worker process once tasks are running.

    Returns what ``work`` returned or raised, and the address of the killed worker (``None``
    when the work finished before any task was seen running).
    """
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            outcome.append(exc)

    pids: dict[str, int] = client.run(os.getpid)
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    killed = None
    deadline = time.monotonic() + _DEADLINE_S
    while thread.is_alive() and killed is None and time.monotonic() < deadline:
        busy = [w for w, tasks in client.processing().items() if tasks and w in pids]
        if busy:
            killed = busy[0]
            os.kill(pids[killed], signal.SIGKILL)
        else:
            time.sleep(0.005)
    thread.join(timeout=max(deadline - time.monotonic(), 1))
    assert not thread.is_alive(), "the operation did not finish within the deadline"
    return outcome[0], killed


@pytest.fixture(scope="module")
def _fault_cluster() -> Iterator[Any]:
    """A separate two-worker cluster, so killing a worker does not disturb other tests.

    Started once for the module: its nannies restart a killed worker, and ``fault_cluster``
    waits for both workers before each test.
    """
    import distributed
    import psutil

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    try:
        with distributed.Client(cluster.scheduler_address, set_as_default=False) as client:
            yield client
    finally:  # by now the autouse ``reconnect`` has moved DaskCarrier back to the session cluster
        pids = [p.process.pid for p in cluster.workers.values() if p.process is not None]
        cluster.close()
        assert not [p for p in pids if psutil.pid_exists(p)], "worker processes outlived the test"


@pytest.fixture
def fault_cluster(_fault_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fault cluster with both workers up, connected, with small chunks (many tasks)."""
    monkeypatch.setenv(_cluster.CHUNK_VARIABLE, "512KiB")  # many tasks, so the kill lands mid-way
    _fault_cluster.wait_for_workers(2, timeout=60)
    DaskCarrier.connect(_fault_cluster.scheduler.address)
    return _fault_cluster


@pytest.mark.parametrize("source", ["scattered", "file"])
def test_killed_worker_gives_the_right_sum_or_names_the_worker(
    fault_cluster: Any, source: str, tmp_path: Any
) -> None:
    """A worker killed during a large reduction: the correct sum, or RuntimeError naming it.

    Chunks read from a file can be recomputed on the surviving worker; chunks scattered from
    this process are gone with their worker, so that case may fail, but only loudly.
    """
    rng = np.random.default_rng(3)
    values = rng.standard_normal((1024, 2048))  # 16 MiB in 32 chunks of 512 KiB
    if source == "file":
        tensor = cv.move(cv.tensor(values, carrier="cpu"), FileBacked, directory=str(tmp_path))
        x = cv.move(tensor, DaskCarrier)
    else:
        x = cv.move(cv.tensor(values, carrier="cpu"), DaskCarrier)
    expected = float(np.sum(np.maximum(values, 0) * values))

    def work() -> float:
        return float(F.reduce_sum(F.mul(F.relu(x), x)).item())

    result, killed = _run_while_killing(fault_cluster, work)
    if isinstance(result, RuntimeError):
        # The operations were lazy: the fault is found by item(), which names the operation
        # whose result it was computing.
        assert killed is not None and killed in str(result), result
        assert str(result).startswith("reduce_sum on DaskCarrier: the cluster lost"), result
        assert "lost worker" in str(result) and "no value was read" in str(result)
    else:
        assert not isinstance(result, BaseException), result
        assert result == pytest.approx(expected, rel=1e-9)
    if source == "file":
        assert not isinstance(result, BaseException), "file chunks are recomputable"


class TestTaskErrors:
    @pytest.mark.parametrize("name", ["gather", "scatter"])
    def test_out_of_range_index_surfaces_at_the_read_naming_the_operation(self, name: str) -> None:
        """An index outside the input is found by the task, at the read, as Generic's
        IndexError named for DaskCarrier: the call does not fail, and every read raises."""
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier="dask")
        index = cv.tensor(np.array([[0, 5]]), carrier="dask")
        extra = (cv.tensor(np.ones((1, 2)), carrier="dask"),) if name == "scatter" else ()
        call = getattr(F, name)
        with pytest.raises(IndexError) as generic_error:
            call(*(cv.move(t, Generic) for t in (x, index, *extra)), axis=1)
        result = call(x, index, *extra, axis=1)  # lazy: the call builds the graph only
        for _ in range(2):
            with pytest.raises(IndexError) as dask_error:
                result.numpy()
            assert str(dask_error.value) == str(generic_error.value).replace(
                "Generic", "DaskCarrier"
            )
        assert str(dask_error.value).startswith(f"{name} on DaskCarrier: ")

    def test_out_of_range_gather_in_eager_mode_raises_at_the_call(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CONVEYOR_DASK_EAGER", "1")
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier="dask")
        index = cv.tensor(np.array([[0, 5]]), carrier="dask")
        with pytest.raises(IndexError, match=r"^gather on DaskCarrier: index 5 is out of range"):
            F.gather(x, index, axis=1)

    def test_failing_task_in_eager_mode_publishes_nothing(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With ``CONVEYOR_DASK_EAGER=1`` a kernel failing on a worker raises at the call,
        named, and publishes nothing: no result is allocated, the operand is untouched."""
        from conveyor_dask import _kernels, _storage

        released: list[Any] = []
        original = _storage.DaskStorage.release

        def spy(self: Any, handle: Any) -> None:
            released.append(handle)
            original(self, handle)

        x = cv.tensor(np.arange(4.0), carrier="dask")
        monkeypatch.setenv(_cluster.EAGER_VARIABLE, "1")
        monkeypatch.setattr(_storage.DaskStorage, "release", spy)
        # The graph names its block function by reference, so the workers run this one.
        monkeypatch.setattr(_kernels, "_elementwise_block", _failing_block)
        with pytest.raises(ValueError, match=r"^relu on DaskCarrier: injected failure$"):
            F.relu(x)
        # Nothing published: the operand is untouched and no result carrier survived.
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0))
        assert released == []  # the failure came before any result was allocated

    def test_data_dependent_failure_surfaces_at_the_read_naming_its_operation(self) -> None:
        """Lazy: ``inv`` of a singular matrix returns at once; reading the result (or a result
        computed from it) raises CPU's ValueError naming ``inv``, every time, and the operand
        is untouched. Eager mode raises the same error at the call."""
        singular = np.ones((3, 3))
        x = cv.tensor(singular, carrier="dask")
        inverse = F.inv(x)  # returns: the failure is in the values, not the call
        later = F.add(inverse, 1.0)
        with pytest.raises(ValueError) as cpu_error:
            F.inv(cv.tensor(singular, carrier="cpu"))
        expected = str(cpu_error.value).replace("CPU", "DaskCarrier")
        assert expected.startswith("inv on DaskCarrier: a matrix is singular")
        for result in (inverse, later, inverse):
            with pytest.raises(ValueError) as error:
                result.numpy()
            assert str(error.value) == expected
        np.testing.assert_array_equal(x.numpy(), singular)
        with pytest.raises(ValueError) as error:
            DaskCarrier.persist(later)
        assert str(error.value) == expected
        assert not cv.storage_handle(later.carrier).stored

    def test_data_dependent_failure_in_eager_mode_surfaces_at_the_call(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``CONVEYOR_DASK_EAGER=1``: the same singular ``inv`` raises at the call."""
        x = cv.tensor(np.ones((3, 3)), carrier="dask")
        monkeypatch.setenv(_cluster.EAGER_VARIABLE, "1")
        with pytest.raises(ValueError, match=r"^inv on DaskCarrier: a matrix is singular"):
            F.inv(x)


def test_values_lost_with_their_worker_say_they_are_lost_and_how_to_send_them_again(
    fault_cluster: Any,
) -> None:
    """Values sent from this process live only on the worker that received them: once it is
    killed, an operation on them is a RuntimeError saying the data is lost and to send it again
    (not to run the operation again, which fails the same way); sending again works."""
    import distributed

    rng = np.random.default_rng(5)
    values = rng.standard_normal((1024, 2048))  # 16 MiB: scattered, in 32 chunks of 512 KiB
    x = cv.move(cv.tensor(values, carrier="cpu"), DaskCarrier)
    assert F.reduce_sum(x).item() == pytest.approx(float(values.sum()), rel=1e-9)

    chunks = distributed.futures_of(cv.storage_handle(x.carrier).base)
    holders = sorted({w for ws in fault_cluster.who_has(chunks).values() for w in ws})
    pids: dict[str, int] = fault_cluster.run(os.getpid)
    victim = holders[0]
    os.kill(pids[victim], signal.SIGKILL)
    deadline = time.monotonic() + _DEADLINE_S
    while victim in fault_cluster.scheduler_info()["workers"]:  # the scheduler notices
        assert time.monotonic() < deadline, "the scheduler never noticed the killed worker"
        time.sleep(0.1)
    fault_cluster.wait_for_workers(2, timeout=_DEADLINE_S)  # its nanny starts a new one

    with pytest.raises(RuntimeError) as error:
        F.add(x, 1.0).numpy()
    message = str(error.value)
    assert message.startswith(f"add on DaskCarrier: the cluster lost worker {victim} "), message
    assert "no value was read" in message and "so they are lost" in message
    assert "Send the values again (cv.tensor(values, carrier='dask')" in message
    assert "run the operation again" not in message
    with pytest.raises(RuntimeError, match=r"running the operation again on these tensors fails"):
        F.add(x, 1.0).numpy()  # as the message says

    y = cv.tensor(values, carrier="dask")  # the advice works
    np.testing.assert_array_equal(F.add(y, 1.0).numpy(), values + 1.0)
