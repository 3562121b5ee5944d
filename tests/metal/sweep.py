"""Running many plans through one engine with all kernels lowered and built up front.

Lowering is the slow step (about half a second a kernel on an idle machine), building C is
slow per compiler start: so a sweep first runs every case through a launcher that only
records the sources, builds every C source in one compiler run, and then runs for real.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

import conveyor as cv
from conveyor_metal._engine import Engine
from conveyor_metal._launch import CLauncher, Launch

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


def record(engine: Engine, plans: Iterable[cv.OperationPlan]) -> list[Recorded]:
    """Every launch the plans' cases make, recorded (and every kernel lowered) on ``engine``."""
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


def prepare_c(engine: Engine, plans: Iterable[cv.OperationPlan]) -> None:
    """Lower every kernel the plans' cases need and build them all in one compiler run."""
    launches = record(engine, plans)
    launcher = engine.launcher
    assert isinstance(launcher, CLauncher)
    launcher.prepare([r.source for r in launches])
