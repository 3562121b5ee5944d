"""CPU carrier against NumPy and PyTorch (CPU build), every target of the CPU issue, in one run.

Run: ``.venv/bin/python benchmarks/cpu.py`` (``make bench`` installs torch==2.13.0 first; without
PyTorch its columns print ``-``). Each line times the same work on the same inputs with
``time.perf_counter``: tiny operations as the best of several loops of many calls, large ones
as the best of repeated calls (interference on a shared machine only ever adds time).
``ratio`` is the peer's time over conveyor's (above 1: conveyor is faster); the goal column
restates the issue's target for that ratio. OPENBLAS_* variables are left as they are set.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import conveyor as cv
from conveyor_generic import CPU

try:
    import torch
except ImportError:  # PyTorch is an optional benchmark peer
    torch = None

THREADS = os.cpu_count() or 1
VIEW = "<= 1.5 us"
ROWS: list[tuple[str, str, str, str, str, str]] = []


def per_call(fn: Callable[[], object], calls: int, repeats: int = 7) -> float:
    """Best per-call time of ``repeats`` loops of ``calls`` calls (tiny operations)."""
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def paired(
    ours: Callable[[], object],
    peer: Callable[[], object],
    calls: int,
    rounds: int = 7,
    settle: float = 0.0,
) -> tuple[float, float]:
    """Best per-call times of ``ours`` and ``peer``, measured in alternating loops.

    Alternating makes both sides of a ratio see the same background load. ``settle`` seconds
    of sleep before each loop let the other side's worker threads stop spinning first
    (OpenBLAS' and PyTorch's threads busy-wait after work; on two cores that halves whoever
    runs next, which made the MLP row read 0.06x after the conv and sort rows).
    """
    ours()
    peer()
    best = [math.inf, math.inf]
    for _ in range(rounds):
        for side, fn in enumerate((ours, peer)):
            time.sleep(settle)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[side] = min(best[side], (time.perf_counter() - start) / calls)
    return best[0], best[1]


def median(fn: Callable[[], object], repeats: int = 9) -> float:
    """Best time of ``repeats`` calls after one warm-up (large operations).

    The best, not the median: this machine is shared, and interference only ever adds time
    (both sides of every ratio are measured the same way).
    """
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def row(
    name: str, ours: float, peer: str, theirs: float | None, goal: str, extra: str = ""
) -> None:
    """Record one line; ratio = their time / our time (above 1: conveyor faster)."""
    if theirs is None:
        ROWS.append((name, fmt_time(ours), peer, "-", "-", goal + extra))
        return
    ratio = theirs / ours
    ROWS.append((name, fmt_time(ours), peer, fmt_time(theirs), f"{ratio:.2f}x", goal + extra))


def tiny() -> None:
    a = cv.tensor(np.arange(8, dtype=np.float32), carrier=CPU)
    b = cv.tensor(np.ones(8, np.float32), carrier=CPU)
    ag = cv.tensor(np.arange(8, dtype=np.float32), carrier=CPU, requires_grad=True)
    x, y = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    ours, peer = paired(lambda: a + b, lambda: np.add(x, y), 20000)
    row("tiny add (8 f32)", ours, "numpy", peer, "info")

    def step() -> None:
        (ag + b).sum().backward()

    if torch is None:
        row("tiny add (8 f32)", ours, "torch", None, ">= 0.67x (1.5x slower at most)")
        row("tiny add, grad tracked", per_call(lambda: ag + b, 20000), "torch", None, ">= 0.67x")
        row("tiny (a+b).sum().backward()", per_call(step, 2000), "torch", None, "> 1x")
        return
    ta, tb = torch.arange(8, dtype=torch.float32), torch.ones(8)
    tg = torch.arange(8, dtype=torch.float32, requires_grad=True)

    def torch_step() -> None:
        (tg + tb).sum().backward()

    for name, ours_fn, torch_fn, calls, goal in (
        ("tiny add (8 f32)", lambda: a + b, lambda: ta + tb, 20000, ">= 0.67x"),
        ("tiny add, grad tracked", lambda: ag + b, lambda: tg + tb, 20000, ">= 0.67x"),
        ("tiny (a+b).sum().backward()", step, torch_step, 2000, "> 1x"),
        ("view reshape (8 f32)", lambda: a.reshape(2, 4), lambda: ta.reshape(2, 4), 20000, VIEW),
        ("view unsqueeze (8 f32)", lambda: a.unsqueeze(0), lambda: ta.unsqueeze(0), 20000, VIEW),
        (
            "view broadcast_to (8 f32)",
            lambda: a.broadcast_to((3, 8)),
            lambda: ta.broadcast_to((3, 8)),
            20000,
            VIEW,
        ),
    ):
        ours, theirs = paired(ours_fn, torch_fn, calls)
        row(name, ours, "torch", theirs, goal)


def python_calls() -> None:
    """Python-level calls of one steady-state tiny add (sys.setprofile; C calls not counted)."""
    a = cv.tensor(np.arange(8, dtype=np.float32), carrier=CPU)
    b = cv.tensor(np.ones(8, np.float32), carrier=CPU)
    for _ in range(3):
        a + b
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    a + b
    sys.setprofile(None)
    print(f"steady-state tiny add: {len(calls)} Python-level calls ({', '.join(calls)})")


def sizes() -> None:
    """Elementwise add by size against np.add allocating (the per-call cost that remains)."""
    rng = np.random.default_rng(4)
    for n in (1024, 64 * 1024, 1024 * 1024):
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        a, b = cv.tensor(x, carrier=CPU), cv.tensor(y, carrier=CPU)
        calls = max(20, 2_000_000 // n)
        ours = per_call(lambda: a + b, calls)  # noqa: B023  # timed before the next round
        theirs = per_call(lambda: np.add(x, y), calls)  # noqa: B023
        goal = {1024: "info", 64 * 1024: ">= 0.8x"}.get(n, ">= 0.95x")
        row(f"add {n} f32", ours, "np.add", theirs, goal)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    a, b = cv.tensor(x, carrier=CPU), cv.tensor(y, carrier=CPU)
    row(
        "broadcast add 64x64 + 64",
        per_call(lambda: a + b, 5000),
        "np.add",
        per_call(lambda: np.add(x, y), 5000),
        "info",
    )


def _split(n: int) -> list[slice]:
    step = -(-n // THREADS)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def bandwidth() -> None:
    n = 16 * 1024 * 1024
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    pool = ThreadPoolExecutor(THREADS)
    parts = _split(n)

    def copy_all() -> None:
        list(pool.map(lambda s: np.copyto(out[s], x[s]), parts))

    copy_time = median(copy_all)
    copy_gbs = 2 * x.nbytes / copy_time / 1e9
    a, b = cv.tensor(x, carrier=CPU), cv.tensor(y, carrier=CPU)
    tanh_scale = math.sqrt(2.0 / math.pi)

    def numpy_gelu() -> Any:
        # The usual NumPy gelu (tanh form; NumPy has no erf), one thread, temporaries.
        return 0.5 * x * (1.0 + np.tanh(tanh_scale * (x + 0.044715 * x**3)))

    cases: list[tuple[str, Callable[[], object], Callable[[], object], int]] = [
        ("add", lambda: a + b, lambda: np.add(x, y, out=out), 3),
        ("mul", lambda: a * b, lambda: np.multiply(x, y, out=out), 3),
        ("exp", lambda: cv.exp(a), lambda: np.exp(x, out=out), 2),
        ("gelu tanh", lambda: cv.gelu(a, approximate="tanh"), numpy_gelu, 2),
        ("gelu (erf)", lambda: cv.gelu(a), numpy_gelu, 2),
    ]
    for name, ours_fn, numpy_fn, arrays in cases:
        ours = median(ours_fn)
        gbs = arrays * x.nbytes / ours / 1e9
        extra = ""
        if name == "add":
            extra = f"; {gbs:.1f} GB/s vs copyto {copy_gbs:.1f} GB/s ({gbs / copy_gbs:.0%}, >= 80%)"
        else:
            extra = f"; {gbs:.1f} GB/s"
        row(f"16M f32 {name}", ours, "numpy 1 thread", median(numpy_fn), ">= 1.5x", extra)

    def threaded_add() -> None:
        list(pool.map(lambda s: np.add(x[s], y[s], out=out[s]), parts))

    row(
        "16M f32 add (allocating)",
        median(lambda: a + b),
        f"numpy out=, {THREADS} threads",
        median(threaded_add),
        ">= ~1x: recycled buffers",
    )
    pool.shutdown()
    activations(a, x)


def activations(a: cv.Tensor, x: np.ndarray[Any, Any]) -> None:
    """The transcendental activations on 16M float32 against PyTorch, in alternating calls."""
    if torch is None:
        return
    tx = torch.from_numpy(x)
    nn = torch.nn.functional
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("erf", lambda: cv.erf(a), lambda: torch.erf(tx)),
        ("gelu (erf)", lambda: cv.gelu(a), lambda: nn.gelu(tx)),
        (
            "gelu tanh",
            lambda: cv.gelu(a, approximate="tanh"),
            lambda: nn.gelu(tx, approximate="tanh"),
        ),
        ("silu", lambda: cv.silu(a), lambda: nn.silu(tx)),
        ("softplus", lambda: cv.softplus(a), lambda: nn.softplus(tx)),
        ("elu", lambda: cv.elu(a), lambda: nn.elu(tx)),
        ("sigmoid", lambda: cv.sigmoid(a), lambda: torch.sigmoid(tx)),
        ("tanh", lambda: cv.tanh(a), lambda: torch.tanh(tx)),
    ]
    for name, ours_fn, torch_fn in cases:
        ours, theirs = paired(ours_fn, torch_fn, 1, rounds=5)
        row(f"16M f32 {name}", ours, "torch", theirs, ">= 1x")


def contractions() -> None:
    rng = np.random.default_rng(1)
    m = rng.standard_normal((2048, 2048)).astype(np.float32)
    w = rng.standard_normal((2048, 2048)).astype(np.float32)
    a, b = cv.tensor(m, carrier=CPU), cv.tensor(w, carrier=CPU)
    ours = median(lambda: cv.matmul(a, b), 5)
    gflops = 2 * 2048**3 / ours / 1e9
    row(
        "matmul 2048^2 f32",
        ours,
        "numpy",
        median(lambda: m @ w, 5),
        ">= 0.95x",
        f"; {gflops:.0f} GFLOP/s",
    )
    big = rng.standard_normal((4096, 4096)).astype(np.float32)
    t = cv.tensor(big, carrier=CPU)
    for axis in (0, 1):
        row(
            f"reduce_sum 4096^2 axis={axis}",
            median(lambda axis=axis: cv.reduce_sum(t, axis=axis)),
            "numpy",
            median(lambda axis=axis: np.sum(big, axis=axis)),
            ">= 1x",
        )
    # (name, input shape, weight shape, stride, padding): the 3x3 case of the issue, a 1x1
    # projection and a strided 7x7 stem.
    for name, x_shape, k_shape, stride, pad in (
        ("conv 8x64x56x56, 64x3x3", (8, 64, 56, 56), (64, 64, 3, 3), 1, 1),
        ("conv 8x256x56x56, 64x1x1", (8, 256, 56, 56), (64, 256, 1, 1), 1, 0),
        ("conv 8x3x224x224, 64x7x7 s2", (8, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ):
        x = rng.standard_normal(x_shape).astype(np.float32)
        k = (rng.standard_normal(k_shape) / 24).astype(np.float32)
        cx, ck = cv.tensor(x, carrier=CPU), cv.tensor(k, carrier=CPU)
        options = {"window_strides": (stride, stride), "padding": ((pad, pad), (pad, pad))}

        def ours_fn(cx: cv.Tensor = cx, ck: cv.Tensor = ck, options: Any = options) -> Any:
            return cv.conv_general(cx, ck, **options)

        if torch is None:
            row(name, median(ours_fn, 5), "torch", None, ">= 1x")
            continue
        tx, tk = torch.from_numpy(x), torch.from_numpy(k)

        def torch_fn(tx: Any = tx, tk: Any = tk, stride: int = stride, pad: int = pad) -> Any:
            return torch.nn.functional.conv2d(tx, tk, stride=stride, padding=pad)

        ours, theirs = paired(ours_fn, torch_fn, 1, rounds=5, settle=0.2)
        row(name, ours, "torch", theirs, ">= 1x")


def sorting() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(16 * 1024 * 1024).astype(np.float32)
    t = cv.tensor(x, carrier=CPU)
    ours = median(lambda: cv.sort(t), 3)
    row("sort 16M f32 (+indices)", ours, "np.sort", median(lambda: np.sort(x), 3), ">= 0.6x")
    row(
        "sort 16M f32 (+indices)",
        ours,
        "np.argsort stable",
        median(lambda: np.argsort(x, kind="stable"), 1),
        "info (same output)",
    )
    ours = median(lambda: cv.topk(t, k=10), 5)
    row(
        "topk k=10 of 16M f32",
        ours,
        "np.argpartition",
        median(lambda: np.argpartition(x, -10)[-10:], 5),
        ">= 1x",
    )
    if torch is not None:
        tx = torch.from_numpy(x)
        row(
            "sort 16M f32 (+indices)",
            median(lambda: cv.sort(t), 3),
            "torch.sort stable",
            median(lambda: torch.sort(tx, stable=True), 3),
            "info",
        )
        row(
            "topk k=10 of 16M f32",
            median(lambda: cv.topk(t, k=10), 5),
            "torch.topk",
            median(lambda: torch.topk(tx, 10), 5),
            "info",
        )


def mlp() -> None:
    rng = np.random.default_rng(3)
    values = {
        "x": rng.standard_normal((64, 784)).astype(np.float32),
        "y": rng.standard_normal((64, 10)).astype(np.float32),
        "w1": (rng.standard_normal((784, 256)) / 28).astype(np.float32),
        "b1": np.zeros(256, np.float32),
        "w2": (rng.standard_normal((256, 10)) / 16).astype(np.float32),
        "b2": np.zeros(10, np.float32),
    }
    grad = {"w1", "b1", "w2", "b2"}
    p = {k: cv.tensor(v, carrier=CPU, requires_grad=k in grad) for k, v in values.items()}

    def step() -> None:
        for k in grad:
            p[k].grad = None
        h = cv.relu(cv.matmul(p["x"], p["w1"]) + p["b1"])
        diff = cv.matmul(h, p["w2"]) + p["b2"] - p["y"]
        (diff * diff).mean().backward()

    if torch is None:
        row("MLP 784-256-10 b64 fwd+bwd", per_call(step, 200), "torch", None, ">= 0.8x")
        return
    q = {k: torch.from_numpy(v.copy()).requires_grad_(k in grad) for k, v in values.items()}

    def torch_step() -> None:
        for k in grad:
            q[k].grad = None
        h = torch.relu(q["x"] @ q["w1"] + q["b1"])
        diff = h @ q["w2"] + q["b2"] - q["y"]
        (diff * diff).mean().backward()

    ours, theirs = paired(step, torch_step, 50, rounds=9, settle=0.3)
    row("MLP 784-256-10 b64 fwd+bwd", ours, "torch", theirs, ">= 0.8x")


def main() -> None:
    peers = f"numpy {np.__version__}, " + (f"torch {torch.__version__}" if torch else "no torch")
    print(f"conveyor CPU benchmark: {THREADS} cores, {peers}, python {sys.version.split()[0]}")
    python_calls()
    for part in (tiny, sizes, bandwidth, contractions, sorting, mlp):
        part()
    headers = ("workload", "conveyor", "peer", "peer time", "ratio", "goal / notes")
    widths = [max(len(r[i]) for r in (headers, *ROWS)) for i in range(len(headers))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for r in ROWS:
        print(line.format(*r))
    print("ratio = peer time / conveyor time: above 1 conveyor is faster.")


if __name__ == "__main__":
    main()
