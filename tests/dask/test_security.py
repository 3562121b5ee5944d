"""Only this process can use its embedded cluster: TLS with a per-process certificate.

Another process on the same machine that connects with ``distributed.Client(address)`` (plain,
over ``tcp://`` at the same port, or over TLS with a certificate of its own) cannot run a
function in a worker; the same process given this one's credentials can, which shows the
credentials alone make the difference. Conveyor's own client keeps computing. A TLS cluster a
user starts is reached with ``DaskCarrier.connect(address, security=...)``.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster, _tls

# Run by a separate Python: one connection attempt per way in, each bounded by a thread join
# (a client can wait on a handshake without a limit), the outcomes as one JSON line. A function
# that runs in a worker leaves a file behind, so "ran" is also visible outside the process.
_INTRUDER = r"""
import json, os, pathlib, sys, threading

import distributed

from conveyor_dask import _tls

address, folder = sys.argv[1], pathlib.Path(sys.argv[2])


def touch(path):
    pathlib.Path(path).write_text("ran")
    return "ran"


def attempt(name, target, security):
    outcome = []

    def run():
        try:
            with distributed.Client(
                target, timeout=5, security=security, set_as_default=False
            ) as client:
                future = client.submit(touch, str(folder / ("ran-" + name)), pure=False)
                outcome.append(future.result(timeout=60))
        except Exception as exc:
            outcome.append("refused: " + type(exc).__name__ + ": " + str(exc)[:200])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(90)
    return outcome[0] if outcome else "refused: no answer within 90 s"


own = distributed.Security(
    tls_ca_file=str(folder / "ca.pem"),
    tls_client_cert=str(folder / "cert.pem"),
    tls_client_key=str(folder / "key.pem"),
    require_encryption=True,
)
report = {
    "plain tcp": attempt("plain-tcp", address.replace("tls://", "tcp://", 1), None),
    "plain": attempt("plain", address, None),
    "foreign certificate": attempt("foreign", address, _tls.security()),
    "this process's credentials": attempt("own", address, own),
}
print(json.dumps(report), flush=True)
os._exit(0)  # daemon threads of refused clients may still be waiting
"""


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The embedded cluster Conveyor starts with no configuration (closed afterwards)."""
    monkeypatch.delenv(_cluster.SCHEDULER_VARIABLE, raising=False)
    _cluster.close()  # the autouse ``reconnect`` returns to the session cluster afterwards
    try:
        found = _cluster.session()
        assert found.cluster is not None, "expected the embedded cluster"
        yield found
    finally:
        _cluster.close()


def test_embedded_cluster_runs_nothing_for_another_process_and_computes_for_this_one(
    embedded: Any, tmp_path: Path
) -> None:
    """A separate process cannot run a function on the embedded cluster without this process's
    credentials (plain TCP, a bare TLS client, a certificate of its own); with them it can, and
    Conveyor's own client computes the right values before and after."""
    address = embedded.address
    assert address.startswith("tls://127.0.0.1:"), address
    info = embedded.client.scheduler_info()
    listening = [*info["workers"], *(w.get("nanny") for w in info["workers"].values())]
    assert listening and all(str(a).startswith("tls://") for a in listening), listening

    values = np.arange(20.0).reshape(4, 5)
    x = cv.tensor(values, carrier="dask")
    assert x.carrier.scheduler_address == address
    np.testing.assert_allclose(F.matmul(x, F.permute(x, axes=(1, 0))).numpy(), values @ values.T)

    security = embedded.security
    (tmp_path / "ca.pem").write_text(security.tls_ca_file)
    (tmp_path / "cert.pem").write_text(security.tls_client_cert)
    (tmp_path / "key.pem").write_text(security.tls_client_key)
    done = subprocess.run(
        [sys.executable, "-c", _INTRUDER, address, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for way in ("plain tcp", "plain", "foreign certificate"):
        assert report[way].startswith("refused"), (way, report[way])
    assert report["this process's credentials"] == "ran", report
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-own"]

    assert F.reduce_sum(x).item() == float(values.sum())  # still served after the attempts


@pytest.fixture
def tls_cluster() -> Iterator[tuple[str, Any]]:
    """(address, security) of a one-worker TLS LocalCluster started as a user would."""
    import distributed

    security = _tls.security()
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        protocol="tls://",
        security=security,
        dashboard_address="127.0.0.1:0",
    )
    try:
        yield cluster.scheduler_address, security
    finally:
        _cluster.close()
        cluster.close()


def test_connect_with_security_reaches_a_tls_cluster_and_without_it_is_refused(
    tls_cluster: tuple[str, Any],
) -> None:
    """``DaskCarrier.connect(address, security=...)`` computes on a user's TLS cluster; without
    credentials, or with a certificate of another authority, the connect is a RuntimeError that
    says how to give them, and the cluster in use stays in use."""
    address, security = tls_cluster
    before = _cluster.active_session()
    with pytest.raises(RuntimeError) as error:
        DaskCarrier.connect(address, timeout=5.0)
    message = str(error.value)
    assert message.startswith(
        f"connect on DaskCarrier: the address {address!r} given to DaskCarrier.connect is a TLS "
        "scheduler address, but no TLS credentials were given; pass security=distributed."
    ), message
    assert "distributed.comm.tls.ca-file" in message
    assert _cluster.active_session() is before
    with pytest.raises(RuntimeError, match=r"is a TLS scheduler address, but its TLS handshake"):
        DaskCarrier.connect(address, timeout=5.0, security=_tls.security())  # not its CA
    assert _cluster.active_session() is before

    DaskCarrier.connect(address, security=security)
    values = np.arange(6.0)
    x = cv.tensor(values, carrier="dask")
    assert x.carrier.scheduler_address == address
    np.testing.assert_array_equal(F.mul(x, 2.0).numpy(), values * 2.0)


def _handshake(server_pem: tuple[str, str], client_pem: tuple[str, str]) -> str | None:
    """Mutual TLS between two contexts, each trusting only its own certificate, as Dask sets
    them up; None when both sides accept, else the first side's error."""

    def context(pem: tuple[str, str], purpose: ssl.Purpose) -> ssl.SSLContext:
        found = ssl.create_default_context(purpose, cadata=pem[0])
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "c.pem").write_text(pem[0])
            Path(folder, "k.pem").write_text(pem[1])
            found.load_cert_chain(Path(folder, "c.pem"), Path(folder, "k.pem"))
        found.verify_mode = ssl.CERT_REQUIRED
        found.check_hostname = False
        return found

    server = context(server_pem, ssl.Purpose.CLIENT_AUTH)
    client = context(client_pem, ssl.Purpose.SERVER_AUTH)
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(left, server_side=True) as wrapped:
                wrapped.sendall(wrapped.recv(5))
        except (OSError, ssl.SSLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with client.wrap_socket(right) as wrapped:
            wrapped.sendall(b"hello")
            assert wrapped.recv(5) == b"hello"
    except (OSError, ssl.SSLError) as exc:
        errors.append(exc)
    finally:
        right.close()
    thread.join(timeout=30)
    left.close()
    return None if not errors else f"{type(errors[0]).__name__}: {errors[0]}"


def test_standard_library_certificate_completes_mutual_tls_and_a_foreign_one_does_not() -> None:
    """The certificate ``_tls.self_signed`` builds (used when ``cryptography`` is absent) passes
    OpenSSL's checks as both sides' certificate and authority; another such certificate, made
    separately, is refused."""
    ours, theirs = _tls.self_signed(), _tls.self_signed()
    assert ours != theirs
    assert _handshake(ours, ours) is None
    assert _handshake(ours, theirs) is not None
    assert _handshake(theirs, ours) is not None
    assert "BEGIN CERTIFICATE" in ours[0] and "BEGIN EC PRIVATE KEY" in ours[1]
