"""DaskCarrier against NumPy in memory and plain dask.array on the same cluster, in one run.

Run: ``.venv/bin/python benchmarks/dask.py``. A LocalCluster of two single-threaded worker
processes on 127.0.0.1 serves both Conveyor and plain dask.array, which runs over the very
blocks Conveyor holds (same data, chunks and workers). Every figure is the best of several
repeats (interference on a shared machine only ever adds time), each on a cluster that has
forgotten the previous repeat's tasks. ``vs dask`` is Conveyor's time over plain dask.array's
(the issue's goal: at most 1.1); ``vs numpy`` is Conveyor's time over NumPy's in this process.
The last part reduces a FileBacked tensor larger than one worker's memory limit on a second
cluster whose workers have a small limit.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Python puts this script's folder first on sys.path, where this file would shadow the dask
# package it benchmarks against; drop that entry before anything imports dask.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402  # after the sys.path fix

import conveyor as cv  # noqa: E402

N = 4096
REPEATS = 5


def _tasks(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def settle(client: Any, baseline: int) -> None:
    """Wait until the scheduler forgot the last call's tasks (at most 10 s).

    Dask names tasks by their inputs, so an identical call made while the previous result is
    still held would be answered from memory instead of computed; every timed call must compute.
    """
    deadline = time.monotonic() + 10
    while client.run_on_scheduler(_tasks) > baseline and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)


def best(fn: Callable[[], object], client: Any, repeats: int = REPEATS) -> float:
    """Best wall time of ``repeats`` calls, after one warm-up call, each on a settled cluster."""
    baseline = client.run_on_scheduler(_tasks)
    fn()
    settle(client, baseline)
    found = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        found = min(found, time.perf_counter() - start)
        settle(client, baseline)
    return found


def best_local(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Best wall time of ``repeats`` calls in this process, after one warm-up call."""
    fn()
    found = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        found = min(found, time.perf_counter() - start)
    return found


def per_call(
    fns: dict[str, Callable[[], object]], calls: int = 50
) -> dict[str, tuple[float, float]]:
    """Best (wall, calling-thread CPU) seconds per call of each function, loops interleaved.

    Five rounds, each running every function ``calls`` times in turn, so a burst of load on
    the shared machine hits all of them alike; the CPU figure is this thread's own work per
    call (building and submitting the graph, waiting), which load does not inflate.
    """
    found = {name: (math.inf, math.inf) for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(5):
        for name, fn in fns.items():
            start, cpu = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                fn()
            wall = (time.perf_counter() - start) / calls
            used = (time.thread_time() - cpu) / calls
            found[name] = (min(found[name][0], wall), min(found[name][1], used))
    return found


def row(name: str, conveyor: float, numpy: float | None, dask: float) -> None:
    shown = f"{numpy * 1e3:10.2f}" if numpy is not None else f"{'-':>10}"
    vs_numpy = f"{conveyor / numpy:9.2f}" if numpy is not None else f"{'-':>9}"
    print(
        f"{name:<28} {conveyor * 1e3:10.2f} {shown} {dask * 1e3:10.2f} "
        f"{conveyor / dask:8.2f} {vs_numpy}"
    )


def main() -> None:
    import dask.array as da
    import distributed

    from conveyor_dask import DaskCarrier

    print(f"machine: {os.cpu_count()} cores; load {os.getloadavg()} (shared machine)")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit="4GiB",
        ) as cluster,
        distributed.Client(cluster) as client,  # the default client of plain dask calls
    ):
        DaskCarrier.connect(cluster.scheduler_address)
        rng = np.random.default_rng(0)
        a = rng.standard_normal((N, N))
        x = cv.move(cv.tensor(a, carrier="cpu"), DaskCarrier)
        print(f"operand: {x.carrier!r}")
        # Plain dask.array over the very blocks Conveyor holds: same data, chunks and workers.
        plain = x.carrier._handle().base

        print(f"\n{'operation':<28} {'conveyor':>10} {'numpy':>10} {'dask':>10} {'vs dask':>8} "
              f"{'vs numpy':>9}   (ms)")  # fmt: skip
        row(
            f"reduce_sum {N}^2 float64",
            best(lambda: cv.reduce_sum(x).item(), client),
            best_local(lambda: a.sum()),
            best(lambda: client.compute(plain.sum()).result(), client),
        )

        # Operations are lazy: persisting computes and keeps the result on the workers, as
        # plain dask's persist-and-wait below does.
        def conveyor_matmul() -> None:
            DaskCarrier.persist(cv.matmul(x, x))

        def dask_matmul() -> None:
            distributed.wait(client.persist(plain @ plain))

        row(
            f"matmul {N}^2 float64",
            best(conveyor_matmul, client, 2),
            best_local(lambda: a @ a, 2),
            best(dask_matmul, client, 2),
        )

        # A different scalar per call, so no call is answered from a previous result.
        scalars = iter(range(10**9))
        tiny = cv.tensor(np.ones(4), carrier="dask")
        tiny_plain = client.persist(da.ones(4, chunks=4))
        distributed.wait(tiny_plain)
        tiny_cpu = cv.tensor(np.ones(4), carrier="cpu")
        tiny_cpu_carrier = per_call({"cpu": lambda: cv.add(tiny_cpu, 1.0)}, 2000)["cpu"]
        tiny = per_call(
            {
                "conveyor": lambda: DaskCarrier.persist(cv.add(tiny, float(next(scalars)))),
                "dask": lambda: distributed.wait(client.persist(tiny_plain + float(next(scalars)))),
            }
        )
        row("tiny add (4 elements)", tiny["conveyor"][0], tiny_cpu_carrier[0], tiny["dask"][0])
        print("  (the tiny add's numpy column is Conveyor's CPU carrier in this process)")
        ours, theirs = tiny["conveyor"][1], tiny["dask"][1]
        print(
            f"  tiny add, calling thread's CPU per call: conveyor {ours * 1e3:.2f} ms, "
            f"dask {theirs * 1e3:.2f} ms ({ours / theirs:.2f}x)"
        )
        DaskCarrier.close()

    file_backed_reduction()


def file_backed_reduction() -> None:
    """A FileBacked tensor larger than one worker's memory limit, moved and reduced."""
    import distributed

    from conveyor_dask import DaskCarrier
    from conveyor_storage import FileBacked

    limit = 512 << 20
    elements = (3 * limit // 2) // 8  # 768 MiB of float64: 1.5 worker memory limits
    with (
        tempfile.TemporaryDirectory() as folder,
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=limit,
        ) as cluster,
    ):
        DaskCarrier.connect(cluster.scheduler_address)
        values = np.arange(elements, dtype=np.float64) % 1000
        source = cv.move(cv.tensor(values, carrier="cpu"), FileBacked, directory=folder)
        expected = float(values.sum())
        del values
        start = time.perf_counter()
        there = cv.move(source, DaskCarrier)
        got = cv.reduce_sum(there).item()
        took = time.perf_counter() - start
        print(
            f"\nFileBacked reduce_sum: {elements * 8 / 2**20:.0f} MiB file, worker memory limit "
            f"{limit / 2**20:.0f} MiB, chunks {there.carrier.chunks}: {took:.2f} s, "
            f"{'correct' if got == expected else f'WRONG ({got} != {expected})'}"
        )
        DaskCarrier.close()


if __name__ == "__main__":
    main()
