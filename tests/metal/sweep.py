"""Running many plans through one engine with all kernels lowered and built up front.

Lowering is the slow step (about half a second to a few seconds a kernel, all of it in
TileLang's passes, and proportional to the number of kernels): so ``prelower`` first lowers
the plans' kernels for both targets in one worker process per CPU, into the disk cache the
test engines read. A sweep then runs every case through a launcher that only records the
sources (reading them from that cache), builds every C source at once (``_c_build``), and
then runs for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
from hypothesis import HealthCheck, settings

import conveyor as cv
from conveyor_metal._c_build import parallel_jobs
from conveyor_metal._engine import Engine
from conveyor_metal._launch import CLauncher, Launch
from conveyor_metal._surface import advertised_plans

from .support import cases, run


@attrs.define
class Recorded:
    source: str
    buffers: dict[str, Any]
    scalars: dict[str, int]
    launch: Launch


class RecordingLauncher:
    """A launcher for ``target`` that records each launch instead of running it."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.launches: list[Recorded] = []

    def run(
        self,
        source: str,
        buffers: Mapping[str, Any],
        scalars: Mapping[str, int],
        launch: Launch,
    ) -> None:
        self.launches.append(Recorded(source, dict(buffers), dict(scalars), launch))


class CountingEngine(Engine):
    """An engine on CPU buffers that records ``target`` launches instead of running them and
    counts the buffers it allocates (for "refused before anything is allocated" tests)."""

    def __init__(self, kernel_cache: Path, target: str = "metal") -> None:
        super().__init__("cpu", RecordingLauncher(target), kernel_cache / "sources")
        self.allocated = 0

    def empty(self, size: int, dtype: cv.DType) -> Any:
        self.allocated += 1
        return super().empty(size, dtype)


_TARGETS: Final = ("metal", "c")
_ROOT: Final = Path(__file__).parents[2]
#: How long the workers may lower before they are stopped. A worker lowers several hundred
#: kernels: on a cold cache the full sweep's share took about 30 min on the idle 2-core
#: development machine, and far longer under load. Stopping them is never an error: what they
#: did not lower, the caller lowers itself, so the bound only keeps a stuck compiler from
#: holding the run (the caller's own lowering then reports it).
_WORKER_TIMEOUT_S: Final = 3600


# Hypothesis settings for the C-target shape tests: few, repeatable examples (each lowers or
# runs kernels), no example database, and the per-test engine fixtures allowed.
C_TARGET_EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def sample_plans() -> list[cv.OperationPlan]:
    """One plan per advertised name (the first in policy order): the quick tier's plans.

    Both quick checks use the same sample, so its kernels are lowered once for both targets.
    """
    seen: dict[str, cv.OperationPlan] = {}
    for plan in advertised_plans():
        seen.setdefault(plan.operation, plan)
    return list(seen.values())


def prelower(plans: Sequence[cv.OperationPlan], cache_dir: Path) -> None:
    """Lower the plans' kernels for both targets into ``cache_dir``, one worker per CPU.

    Plans of one name share kernels, so a name's plans go to one worker; names are dealt to
    the least-loaded worker, largest first. Purely a speed-up: a worker that fails leaves its
    kernels unlowered, and the caller then lowers them itself (and reports any real error).
    """
    index = {plan: i for i, plan in enumerate(advertised_plans())}
    by_name: dict[str, list[int]] = {}
    for plan in plans:
        by_name.setdefault(plan.operation, []).append(index[plan])
    jobs = min(parallel_jobs(), len(by_name))
    if jobs < 2:
        return
    shares: list[list[list[Any]]] = [[] for _ in range(jobs)]
    for indices in sorted(by_name.values(), key=len, reverse=True):
        share = min(shares, key=len)
        share.extend([target, i] for target in _TARGETS for i in indices)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.metal.prelower", str(cache_dir)],
            cwd=_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in shares
    ]
    try:
        for worker, share in zip(workers, shares, strict=True):
            assert worker.stdin is not None
            worker.stdin.write(json.dumps(share).encode())
            worker.stdin.close()
        deadline = time.monotonic() + _WORKER_TIMEOUT_S
        for worker in workers:
            try:
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break  # the rest is lowered by the caller, as after a failed worker
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def record(
    engine: Engine, plans: Sequence[cv.OperationPlan], *, parallel: bool = True
) -> list[Recorded]:
    """Every launch the plans' cases make, recorded (and every kernel lowered) on ``engine``.

    With ``parallel`` and a disk cache, the kernels are first lowered by ``prelower``.
    """
    if parallel and engine.cache_dir is not None:
        prelower(plans, engine.cache_dir)
    real = engine.launcher
    recorder = RecordingLauncher(real.target)
    engine.launcher = recorder
    try:
        for plan in plans:
            for _, operands, options in cases(plan):
                run(engine, plan, options, operands)
    finally:
        engine.launcher = real
    return recorder.launches


def prepare_c(engine: Engine, plans: Sequence[cv.OperationPlan]) -> None:
    """Lower every kernel the plans' cases need and build them all at once."""
    launches = record(engine, plans)
    launcher = engine.launcher
    assert isinstance(launcher, CLauncher)
    launcher.prepare([r.source for r in launches])
