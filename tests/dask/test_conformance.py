"""The conformance kit passes against ``--conveyor-carrier=dask`` (one plan per name, slow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor_dask import _cluster


@pytest.mark.slow
def test_conformance_kit_passes_on_dask(tmp_path: Path, cluster: Any) -> None:
    """The kit's dispatch, capability and oracle checks pass on the two-worker test cluster.

    The kit's process connects to the session's LocalCluster (two worker processes on
    127.0.0.1) through ``CONVEYOR_DASK_SCHEDULER``: no second cluster start, and its scheduler
    runs in this (idle, waiting) process rather than beside the kit's own work.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env[_cluster.SCHEDULER_VARIABLE] = cluster.scheduler_address
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
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "result: conforms" in done.stdout and " 0 failed" in done.stdout
