"""The conformance kit passes against ``--conveyor-carrier=dask`` (one plan per name, slow)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_conformance_kit_passes_on_dask(tmp_path: Path) -> None:
    """The kit's dispatch, capability and oracle checks pass on an embedded two-core cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
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
