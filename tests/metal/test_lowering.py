"""Linux checks 1 and 2: every kernel lowers to MSL that passes a C++ syntax check, and the
arguments the launcher passes match what the generated source declares.

A recording launcher stands in for ``torch.mps.compile_shader``: the engine makes exactly the
launches Metal would (same kernels, layout classes, buffers, dynamic sizes and geometry), and
each is checked against the binding parsed from its own source. Then every distinct source is
compiled with ``g++ -fsyntax-only -x c++`` against the Metal stub headers in ``stub/``
(each source in a namespace of its own, many per compiler run, one run per CPU).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

import conveyor as cv
from conveyor_metal._binding import bind, parse_metal
from conveyor_metal._c_build import parallel_jobs, unit
from conveyor_metal._engine import Engine
from conveyor_metal._surface import advertised_plans
from conveyor_metal.kernels.sorting import TILE

from .sweep import Recorded, RecordingLauncher, record, sample_plans

_STUB = Path(__file__).parent / "stub"
_ELEMENT = {
    "float": torch.float32,
    "half": torch.float16,
    "bfloat": torch.bfloat16,
    "int": torch.int32,
    "long": torch.int64,
    "bool": torch.bool,
    "char": torch.bool,  # TileLang's Metal codegen declares bool buffers as char
}
_MAX_THREADS = re.compile(r"max_total_threads_per_threadgroup\((\d+)\)")

_PLANS = advertised_plans()
_SAMPLE = sample_plans()


def _engine(kernel_cache: Path) -> Engine:
    return Engine("cpu", RecordingLauncher("metal"), kernel_cache / "sources")


def _check_binding(launch: Recorded) -> None:
    binding = parse_metal(launch.source)
    packed = object()
    arguments = bind(binding, launch.buffers, launch.scalars, packed)  # raises on a wrong name
    for parameter in binding.buffers:
        tensor = launch.buffers[parameter.name]
        assert arguments[parameter.index] is tensor
        assert tensor.dtype == _ELEMENT[parameter.element], (parameter, tensor.dtype)
    if binding.scalar_slot is not None:
        assert arguments[binding.scalar_slot] is packed
    (threads,) = _MAX_THREADS.findall(launch.source)
    assert launch.launch.threads == (int(threads), 1, 1)
    if "width" in launch.scalars:  # sorting: one threadgroup per tile of each row
        tiles = -(-launch.scalars["width"] // TILE)
        assert launch.launch.grid == (tiles, launch.scalars["rows"], 1)
    if "Y" in launch.buffers and launch.launch.grid[0] > 0:
        size = launch.scalars.get("n")
        if size is not None:  # pointwise: one thread per output element, the grid covers it
            assert (
                (launch.launch.grid[0] - 1) * int(threads)
                < size
                <= launch.launch.grid[0] * int(threads)
            )


def _syntax_check(sources: list[str], folder: Path, kernel_cache: Path) -> None:
    """``g++ -fsyntax-only`` over every source not yet checked against the current stubs.

    The sources are joined into one translation unit per CPU (``unit``: includes hoisted,
    each source in a namespace of its own) and the units are checked concurrently; each
    passing source leaves a marker under the kernel cache, keyed by its text and the stubs.
    """
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("needs g++ for the MSL syntax check")
    stubs = "".join(p.read_text() for p in sorted(_STUB.iterdir()))
    passed = kernel_cache / "syntax-passed"
    marks = {s: passed / hashlib.sha256((stubs + s).encode()).hexdigest()[:32] for s in sources}
    todo = sorted(s for s, mark in marks.items() if not mark.exists())
    if not todo:
        return
    folder.mkdir(parents=True, exist_ok=True)
    jobs = min(parallel_jobs(), len(todo))
    checks = []
    for number in range(jobs):
        path = folder / f"unit{number}.metal"
        path.write_text(unit(todo[number::jobs]))
        command = [
            compiler, "-fsyntax-only", "-x", "c++", "-std=c++17", "-Wno-attributes",
            "-Wno-unknown-pragmas", "-Wno-literal-suffix", "-I", str(_STUB), str(path),
        ]  # fmt: skip
        checks.append(subprocess.Popen(command, stderr=subprocess.PIPE, text=True))
    failures = []
    try:
        for check in checks:
            _, stderr = check.communicate(timeout=900)
            if check.returncode != 0:
                failures.append(stderr[-6000:])
    finally:
        for check in checks:
            if check.poll() is None:
                check.kill()
                check.wait()
    assert not failures, "\n".join(failures)
    passed.mkdir(parents=True, exist_ok=True)
    for source in todo:
        marks[source].touch()


def _check(plans: list[cv.OperationPlan], kernel_cache: Path, tmp_path: Path) -> None:
    launches = record(_engine(kernel_cache), plans)
    assert launches, "the plans' cases made no launch"
    for launch in launches:
        _check_binding(launch)
    _syntax_check([launch.source for launch in launches], tmp_path, kernel_cache)


class TestLoweringAndBinding:
    """One plan of every advertised name: MSL syntax and name-bound arguments."""

    def test_sample_plans_lower_bind_and_pass_syntax_check(
        self, kernel_cache: Path, tmp_path: Path
    ) -> None:
        _check(_SAMPLE, kernel_cache, tmp_path)


@pytest.mark.metal_sweep
class TestEveryAdvertisedPlanLowers:
    """Every advertised plan: MSL syntax and name-bound arguments (the full sweep)."""

    def test_every_plan_lowers_binds_and_passes_syntax_check(
        self, kernel_cache: Path, tmp_path: Path
    ) -> None:
        _check(_PLANS, kernel_cache, tmp_path)


def test_new_shape_of_same_layout_class_does_not_relower(kernel_cache: Path) -> None:
    """Kernels are cached per (plan, layout class): a new contiguous shape reuses the kernel."""
    import numpy as np

    from conveyor_metal._calls import run_plan

    from .support import operand, random_values

    engine = _engine(kernel_cache)
    plan = cv.resolve_plan("add", cv.float32, cv.float32)
    rng = np.random.default_rng(0)
    for shape in [(7,), (64, 65), (4097,)]:
        x = operand(random_values(shape, cv.float32, rng, "add"), cv.float32)
        run_plan(engine, plan, cv.OperationExecutionOptions("add"), [x, x], "Metal")
    assert engine.lowered == 1


__all__: list[Any] = []
