"""Only this process can use its embedded cluster: TLS with a per-process certificate.

Another process on the same machine that connects with ``distributed.Client(address)`` (plain,
over ``tcp://`` at the same port, or over TLS with a certificate of its own) cannot run a
function in a worker; the same process given this one's credentials can, which shows the
credentials alone make the difference. Conveyor's own client keeps computing. A TLS cluster a
user starts is reached with ``DaskCarrier.connect(address, security=...)``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster

# Run by a separate Python: one connection attempt per way in, each bounded by a thread join
# (a client can wait on a handshake without a limit), the outcomes as one JSON line. A function
# that runs in a worker leaves a file behind, so "ran" is also visible outside the process.
_INTRUDER = r"""
import json, os, pathlib, sys, threading

import distributed

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
    "foreign certificate": attempt("foreign", address, distributed.Security.temporary()),
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
    security = distributed.Security.temporary()
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
        foreign = distributed.Security.temporary()  # a certificate of another authority
        DaskCarrier.connect(address, timeout=5.0, security=foreign)
    assert _cluster.active_session() is before

    DaskCarrier.connect(address, security=security)
    values = np.arange(6.0)
    x = cv.tensor(values, carrier="dask")
    assert x.carrier.scheduler_address == address
    np.testing.assert_array_equal(F.mul(x, 2.0).numpy(), values * 2.0)
