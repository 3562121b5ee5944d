"""A real cluster: ``dask scheduler`` and two ``dask worker`` processes on loopback.

Selected with ``CONVEYOR_DASK_SCHEDULER``, the cluster computes like the embedded one; when its
scheduler goes away, the next operation fails with RuntimeError naming the address and saying
how to reconnect. Every process the test starts is killed at the end. An address where no Dask
scheduler answers (an HTTP server, a server sending garbage, no port) is a RuntimeError naming
it, from real servers on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import http.server
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster

_DASK = shutil.which("dask", path=str(Path(sys.executable).parent))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture
def command_line_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """(address, scheduler process) of a scheduler and two workers started by the dask CLI."""
    if _DASK is None:
        pytest.skip("needs the `dask` command of dask[distributed] next to this Python")
    address = f"tcp://127.0.0.1:{_free_port()}"
    port = address.rsplit(":", 1)[1]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [_DASK, "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"], **quiet
    )
    processes = [scheduler]
    try:
        for _ in range(2):
            worker = [_DASK, "worker", address, "--host", "127.0.0.1", "--nthreads", "1"]
            processes.append(subprocess.Popen([*worker, "--no-dashboard"], **quiet))
        import distributed

        deadline = time.monotonic() + 60
        while True:  # the scheduler needs a moment before it accepts connections
            try:
                with distributed.Client(address, timeout="5s", set_as_default=False) as client:
                    client.wait_for_workers(2, timeout=60)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        monkeypatch.setenv(_cluster.SCHEDULER_VARIABLE, address)
        _cluster.close()  # the next use reads the variable
        yield address, scheduler
    finally:
        _cluster.close()
        _stop(processes)
        assert all(p.poll() is not None for p in processes)


def test_variable_selects_the_cluster_and_its_loss_is_reported(command_line_cluster: Any) -> None:
    """``CONVEYOR_DASK_SCHEDULER`` selects the cluster; once its scheduler dies, the next read
    raises RuntimeError naming the operation, the address and how to reconnect (one cluster
    start serves both halves)."""
    address, scheduler = command_line_cluster
    values = np.arange(20.0).reshape(4, 5)
    x = cv.tensor(values, carrier="dask")
    assert x.carrier.scheduler_address == address
    y = F.matmul(x, F.permute(x, axes=(1, 0)))
    np.testing.assert_allclose(y.numpy(), values @ values.T)
    assert F.reduce_sum(x).item() == float(values.sum())

    scheduler.kill()
    scheduler.wait(timeout=15)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as error:
        for _ in range(100):  # the client may take a moment to notice; each try is bounded
            F.add(x, 1.0).numpy()  # lazy: the read is what reaches the scheduler
            time.sleep(0.2)
    message = str(error.value)
    assert message.startswith("add on DaskCarrier: the Dask scheduler at " + address)
    assert f"DaskCarrier.connect({address!r})" in message
    assert time.monotonic() - start < 60


def test_connect_to_nothing_is_a_runtime_error() -> None:
    """``DaskCarrier.connect`` to a port nobody listens on fails fast, naming the address."""
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(RuntimeError, match=r"connect on DaskCarrier: the Dask scheduler at "):
        DaskCarrier.connect(address, timeout=1.0)


def test_connect_refuses_an_empty_address() -> None:
    """An empty address is a ValueError that shows the expected form."""
    with pytest.raises(ValueError, match=r"tcp://127.0.0.1:8786"):
        DaskCarrier.connect("")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Garbage(socketserver.BaseRequestHandler):
    """Answers every connection with bytes that are no Dask frame."""

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            self.request.sendall(b"\xff\xfe\xfd not dask \x00\x01\x02\x03" * 64)
            self.request.recv(1 << 16)


@pytest.fixture
def not_a_scheduler(request: pytest.FixtureRequest) -> Iterator[str]:
    """The address of something that is not a Dask scheduler, running on 127.0.0.1."""
    if request.param == "no port":
        yield "tcp://127.0.0.1"
        return
    if request.param == "http":
        server: socketserver.TCPServer = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    else:
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Garbage)
        server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _bounded(work: Any) -> BaseException:
    """What ``work()`` raised, waiting at most two minutes (before the probe it could hang)."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(AssertionError("no error"))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert outcome, "the attempt did not end within two minutes"
    return outcome[0]


@pytest.mark.parametrize("not_a_scheduler", ["http", "garbage", "no port"], indirect=True)
def test_scheduler_variable_naming_a_non_scheduler_is_a_runtime_error(
    not_a_scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CONVEYOR_DASK_SCHEDULER`` at an HTTP server, at a server sending garbage, or without a
    port: RuntimeError naming the address and the variable (not MemoryError or ValueError from
    Dask's frame reader), and no session or Dask client is left behind."""
    import distributed.client

    address = not_a_scheduler
    monkeypatch.setattr(_cluster, "_CONNECT_TIMEOUT_S", 3.0)  # a bound on the HTTP server's wait
    monkeypatch.setenv(_cluster.SCHEDULER_VARIABLE, address)
    _cluster.close()  # the next use reads the variable; ``reconnect`` restores the session
    clients = dict(distributed.client._global_clients)
    error = _bounded(lambda: cv.tensor(np.arange(3.0), carrier="dask"))
    assert isinstance(error, RuntimeError), repr(error)
    message = str(error)
    assert message.startswith(
        f"connect on DaskCarrier: {_cluster.SCHEDULER_VARIABLE}={address!r} is not a Dask "
        "scheduler ("
    ), message
    assert "unset it to use the embedded cluster" in message
    assert _cluster.active_session() is None
    assert dict(distributed.client._global_clients) == clients


@pytest.mark.parametrize("not_a_scheduler", ["http", "garbage", "no port"], indirect=True)
def test_connect_to_a_non_scheduler_is_a_runtime_error_and_keeps_the_session(
    not_a_scheduler: str, cluster: Any
) -> None:
    """``DaskCarrier.connect`` to the same addresses: RuntimeError naming the address and the
    form ``CONVEYOR_DASK_SCHEDULER`` takes, and the cluster in use stays in use."""
    address = not_a_scheduler
    before = _cluster.active_session()
    error = _bounded(lambda: DaskCarrier.connect(address, timeout=3.0))
    assert isinstance(error, RuntimeError), repr(error)
    message = str(error)
    assert message.startswith(
        f"connect on DaskCarrier: the address {address!r} given to DaskCarrier.connect is not "
        "a Dask scheduler ("
    ), message
    assert _cluster.SCHEDULER_VARIABLE in message
    assert _cluster.active_session() is before
    np.testing.assert_array_equal(cv.tensor(np.arange(3.0), carrier="dask").numpy(), [0, 1, 2])
