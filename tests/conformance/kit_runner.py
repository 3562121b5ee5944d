"""Running the conformance kit as vendors do (`pytest --pyargs conveyor_testkit`), in subprocesses.

The deliberately broken carriers of ``broken_plugin.py`` are installed as a throw-away
distribution (a dist-info folder on ``PYTHONPATH``). Runs go a few at a time, longest first; a
run that times out is recorded as such (its checks fail) instead of failing every other test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KitRun", "run_kit"]

_BROKEN_MODULE = "conveyor_kit_broken_carriers"
_TIMEOUT = 1200
_PARALLEL = 3  # kit runs at once: the machine running the suite may be small


@dataclass(frozen=True)
class KitRun:
    """The outcome of one kit subprocess (``returncode`` None: it timed out and was killed)."""

    returncode: int | None
    output: str

    def summary(self) -> str:
        marker = "conveyor conformance summary"
        return self.output[self.output.find(marker) :] if marker in self.output else ""


def _throwaway_site(root: Path) -> Path:
    """A folder holding the broken plugin module and a dist-info declaring its entry point."""
    site = root / "site"
    site.mkdir()
    shutil.copy(Path(__file__).with_name("broken_plugin.py"), site / f"{_BROKEN_MODULE}.py")
    info = site / "conveyor_kit_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: conveyor-kit-broken\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(f"[conveyor.plugins]\nkit_broken = {_BROKEN_MODULE}\n")
    return site


def _run_one(command: list[str], root: Path, env: dict[str, str]) -> KitRun:
    process = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        return KitRun(None, f"timed out after {_TIMEOUT} s\n{output}")
    return KitRun(process.returncode, output)


def run_kit(root: Path, runs: dict[str, list[str]]) -> dict[str, KitRun]:
    """Every run of ``runs`` (id -> extra pytest arguments), started from ``root``."""
    site = _throwaway_site(root)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    base = [sys.executable, "-m", "pytest", "--pyargs", "conveyor_testkit", "-q"]
    base += ["-p", "no:cacheprovider", "--color=no"]
    with ThreadPoolExecutor(_PARALLEL) as pool:
        futures = {
            run: pool.submit(_run_one, [*base, *extra], root, env) for run, extra in runs.items()
        }
        return {run: future.result() for run, future in futures.items()}
