"""The conformance kit passes against ``--conveyor-carrier=dask`` (one plan per name, slow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor_dask import _cluster

# The whole kit on dask's threaded scheduler (its every check, ~20 s), and the oracle of every
# name on the LocalCluster's worker processes, where blocks and plans are pickled (~50 s). The
# whole kit on the cluster took 300 s: each view and size case is a round trip to the workers.
_RUNS = {
    "threads": ("threads", []),
    "cluster": (None, ["-k", "TestAdvertisedPlansMatchTheOracle"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(_RUNS))
def test_conformance_kit_passes_on_dask(tmp_path: Path, cluster: Any, run: str) -> None:
    """The kit's checks pass with dask's threads, and its oracle on the two-worker cluster.

    The cluster run connects to the session's LocalCluster (two worker processes on
    127.0.0.1) through ``CONVEYOR_DASK_SCHEDULER``: no second cluster start, and its scheduler
    runs in this (idle, waiting) process rather than beside the kit's own work.
    """
    scheduler, extra = _RUNS[run]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env[_cluster.SCHEDULER_VARIABLE] = scheduler or cluster.scheduler_address
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "conveyor_testkit",
        "--conveyor-carrier=dask",
        "--conveyor-max-plans=1",
        "-q",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "result: conforms" in done.stdout and " 0 failed" in done.stdout
