"""The Dask test cluster: one LocalCluster of two worker processes on 127.0.0.1 per session.

Every test of this area computes on it (the autouse fixture connects DaskCarrier to it), so the
worker start-up cost is paid once. Tests that need another cluster connect to it themselves and
reconnect to this one when they finish (``reconnect``). The cluster is always closed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

distributed = pytest.importorskip("distributed", reason="the Dask tests need dask[distributed]")

from conveyor_dask import DaskCarrier  # noqa: E402  # after the importorskip


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """Two single-threaded worker processes on loopback, closed at the end of the session."""
    found = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        memory_limit="1GiB",
    )
    try:
        DaskCarrier.connect(found.scheduler_address)
        yield found
    finally:
        DaskCarrier.close()
        found.close()


@pytest.fixture(autouse=True)
def reconnect(cluster: Any) -> Iterator[Any]:
    """Every test starts on the session cluster and leaves it connected."""
    from conveyor_dask import _cluster

    active = _cluster.active_session()
    if active is None or active.address != cluster.scheduler_address:
        DaskCarrier.connect(cluster.scheduler_address)
    yield cluster
    active = _cluster.active_session()
    if active is None or active.address != cluster.scheduler_address:
        DaskCarrier.connect(cluster.scheduler_address)


@pytest.fixture
def client(cluster: Any) -> Iterator[Any]:
    """A client of the session cluster for inspecting workers and data."""
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as found:
        yield found
