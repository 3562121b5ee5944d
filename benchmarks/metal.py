"""Metal carrier against torch on MPS (macOS), or the kernels' C-target path (elsewhere).

Run: ``.venv/bin/python benchmarks/metal.py``. On macOS arm64 with MPS it times add and exp on
16M float32, reduce_sum of 16M, a 2048x2048 float32 matmul, and sort and topk of 16M against
``torch`` on the same device, as ratios (torch's time over conveyor's: above 1, conveyor is
faster). Elsewhere it prints "needs MPS" and then times the same TileLang kernels lowered for
the C target beside the CPU carrier on smaller inputs: that is a correctness path (serial C
loops at -O0), not a speed figure, and is labelled so.
Each figure is the best of several runs (interference on a shared machine only adds time).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from cpu import median as best  # the same best-of-N timer as the CPU benchmark

import conveyor as cv
from conveyor_generic import CPU
from conveyor_metal._platform import unavailable_reason


def on_device() -> None:
    import torch

    from conveyor_metal import Metal

    n = 1 << 24
    values = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = cv.tensor(values, carrier=Metal)
    t = torch.from_numpy(values).to("mps")

    def sync(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            out = fn()
            torch.mps.synchronize()
            return out

        return run

    square = np.random.default_rng(1).standard_normal((2048, 2048)).astype(np.float32)
    a2, t2 = cv.tensor(square, carrier=Metal), torch.from_numpy(square).to("mps")
    rows = [
        ("add 16M f32", sync(lambda: x + x), sync(lambda: t + t)),
        ("exp 16M f32", sync(lambda: cv.exp(x)), sync(lambda: torch.exp(t))),
        ("reduce_sum 16M f32", sync(lambda: cv.reduce_sum(x)), sync(lambda: t.sum())),
        ("matmul 2048^2 f32", sync(lambda: cv.matmul(a2, a2)), sync(lambda: t2 @ t2)),
    ]
    rows += [
        ("sort 16M f32", sync(lambda: cv.sort(x)), sync(lambda: torch.sort(t, stable=True))),
        ("topk 16M f32, k=100", sync(lambda: cv.topk(x, k=100)), sync(lambda: torch.topk(t, 100))),
    ]
    print(f"{'operation':24} {'conveyor s':>11} {'torch mps s':>12} {'ratio':>7}")
    for name, ours, theirs in rows:
        a, b = best(ours), best(theirs)
        print(f"{name:24} {a:11.5f} {b:12.5f} {b / a:7.2f}")


def correctness_path() -> None:
    from conveyor_metal._calls import run_plan
    from conveyor_metal._engine import Engine, Operand
    from conveyor_metal._launch import CLauncher
    from conveyor_metal._storage import _tensor

    cache = Path(tempfile.gettempdir()) / "conveyor-metal-bench"
    engine = Engine("cpu", CLauncher(cache / "c"), cache / "sources")
    n = 1 << 20
    values = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    flat = Operand(_tensor(values, cv.float32), cv.Layout((n,)))
    x = cv.tensor(values, carrier=CPU)
    square = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    sq = Operand(_tensor(square, cv.float32), cv.Layout((256, 256)))
    s = cv.tensor(square, carrier=CPU)

    def kernel(name: str, *operands: object) -> Callable[[], object]:
        plan = cv.resolve_plan(name, *(cv.float32 for _ in operands))
        options = cv.OperationExecutionOptions(name)
        return lambda: run_plan(engine, plan, options, list(operands), "Metal")

    rows = [
        ("add 1M f32", kernel("add", flat, flat), lambda: x + x),
        ("exp 1M f32", kernel("exp", flat), lambda: cv.exp(x)),
        ("reduce_sum 1M f32", kernel("reduce_sum", flat), lambda: cv.reduce_sum(x)),
        ("matmul 256^2 f32", kernel("matmul", sq, sq), lambda: cv.matmul(s, s)),
    ]
    m = 1 << 16  # the C-target sort is serial loops at -O0: a smaller row
    short, y = Operand(flat.buffer, cv.Layout((m,))), cv.tensor(values[:m], carrier=CPU)
    rows += [
        ("sort 64K f32", kernel("sort", short), lambda: cv.sort(y)),
    ]
    print("C-target correctness path (serial C, -O0), not a speed figure:")
    print(f"{'operation':24} {'C target s':>11} {'CPU carrier s':>14} {'CPU/C':>7}")
    for name, ours, theirs in rows:
        a, b = best(ours, 3), best(theirs, 3)
        print(f"{name:24} {a:11.5f} {b:14.5f} {b / a:7.2f}")


def main() -> int:
    reason = unavailable_reason()
    if reason is None:
        import torch

        if torch.backends.mps.is_available():
            on_device()
            return 0
        reason = "torch sees no MPS device"
    print(f"needs MPS ({reason}); the Metal figures are not measured on this machine")
    correctness_path()
    return 0


if __name__ == "__main__":
    sys.exit(main())
