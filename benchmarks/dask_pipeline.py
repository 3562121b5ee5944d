"""Conveyor's Dask carrier against plain dask.array on a float32 file, time and peak memory.

Run: ``.venv/bin/python benchmarks/dask_pipeline.py [--size 512M] [--directory DIR]``. Two
pipelines over one float32 file of ``--size`` bytes (a 2-D array of 8192 columns):

- ``var``: ``((X - X.mean(0)) ** 2).mean(0)``
- ``affine``: ``(X * 2.0 + 1.0).sum()``

each computed four ways, every one in a fresh subprocess so its peak memory is its own:

- ``conveyor threads``: ``CONVEYOR_DASK_SCHEDULER=threads``, ``FileBacked.open`` moved to
  ``DaskCarrier`` (lazy chunk reads), the pipeline, ``numpy()``;
- ``dask threads``: ``dask.array.from_array(np.memmap(...))`` with the same chunks, the same
  pipeline, ``compute(scheduler="threads")``;
- ``conveyor cluster`` / ``dask cluster``: the same on a LocalCluster of two single-threaded
  worker processes started inside the subprocess (plain dask reading each chunk in its task
  with ``map_blocks``: a memmap in a graph would be pickled whole).

First it times what one task costs: the kernel a Dask task runs (``run_cpu_kernel``) on a
64 MiB float32 block against NumPy's own expression, and the reference kernel tasks ran
before (the goal: at most 1.2x NumPy).

Peak memory is the sampled (every 10 ms) sum of ``RssAnon`` over the subprocess and its
children during one run after a warm-up, minus the figure before it: anonymous memory, the
data and temporaries, not the file's page cache (which a memmap maps and so counts in plain
RSS); each side in a process of its own. The time is the best of ``--repeats`` runs of each
side after a warm-up, the two sides alternating in one process, so load on a shared machine
hits both alike (the file is in the page cache: this compares the pipelines, not the disk).
``vs dask`` is Conveyor's figure over plain dask.array's on the same scheduler (the goals:
time at most 1.2x with threads and 1.5x on the cluster, memory at most 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# Python puts this script's folder first on sys.path, where benchmarks/dask.py would shadow
# the dask package; drop that entry before anything imports dask.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import numpy as np  # noqa: E402  # after the sys.path fix

_COLUMNS = 8192
_PIPELINES = ("var", "affine")


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _anon() -> int:
    """Bytes of anonymous memory of this process and its children (RssAnon)."""
    import psutil

    total = 0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1]) * 1024
        except OSError:  # a child that just ended
            continue
    return total


class _Peak:
    """Samples ``_anon`` every 10 ms on a thread; ``peak`` is the highest seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _anon())
            time.sleep(0.01)

    def __enter__(self) -> _Peak:
        self.peak = _anon()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _anon())


def conveyor_pipeline(
    path: str, rows: int, pipeline: str, columns: int = _COLUMNS
) -> tuple[Any, Any]:
    """(a function computing ``pipeline`` with Conveyor, the chunks it reads)."""
    import conveyor as cv
    from conveyor_dask import DaskCarrier
    from conveyor_storage import FileBacked

    source = cv.Tensor(
        FileBacked.open(path, cv.float32, size=rows * columns), cv.Layout((rows, columns))
    )

    def run() -> Any:
        x = cv.move(source, DaskCarrier)  # lazy: each task reads its chunk of the file
        if pipeline == "var":
            return (((x - x.mean(0)) ** 2).mean(0)).numpy()
        return (x * 2.0 + 1.0).sum().numpy()

    chunks = cv.move(source, DaskCarrier).carrier.chunks
    return run, chunks


def _read_chunk(path: str, rows: int, columns: int, block_info: Any = None) -> Any:
    """One chunk of the file, for plain dask on a cluster (a memmap cannot travel in a graph)."""
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, columns))
    return np.array(mapped[r0:r1, c0:c1])


def dask_pipeline(
    path: str, rows: int, pipeline: str, chunks: Any, scheduler: str, columns: int = _COLUMNS
) -> Any:
    """Plain dask.array: ``from_array`` over a memmap in this process (zero-copy chunks), or on
    a cluster per-chunk reads on the workers (pickling a memmap would ship the whole file)."""
    import dask.array as da

    def run() -> Any:
        if scheduler == "threads":
            mapped = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, columns))
            # name=False: a random name, not a hash of the file's 512 MiB (which ``from_array``
            # computes by default, about 1 s, and is no part of the pipeline).
            x = da.from_array(mapped, chunks=chunks, name=False)
        else:
            x = da.map_blocks(
                _read_chunk,
                path,
                rows,
                columns,
                chunks=da.core.normalize_chunks(chunks, (rows, columns)),
                dtype=np.float32,
                meta=np.empty((0, 0), np.float32),
            )
        y = ((x - x.mean(0)) ** 2).mean(0) if pipeline == "var" else (x * 2.0 + 1.0).sum()
        return y.compute(scheduler="threads") if scheduler == "threads" else y.compute()

    return run


def scheduler_for(where: str) -> tuple[Any, Any]:
    """Set this process up for ``where``: ``threads`` (Conveyor's Dask carrier on dask's local
    threads), or ``cluster`` (a LocalCluster of two single-threaded worker processes on
    127.0.0.1, the default client of plain dask calls and Conveyor's carrier connected to it);
    (cluster, client), both ``None`` for threads."""
    if where != "cluster":
        os.environ["CONVEYOR_DASK_SCHEDULER"] = "threads"
        return None, None
    import distributed

    from conveyor_dask import DaskCarrier

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster)
    DaskCarrier.connect(cluster.scheduler_address)
    return cluster, client


def _case(arguments: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this (fresh) process.

    ``mode="memory"``: one side, a warm-up run, then the peak of one run. ``mode="time"``:
    both sides, their runs alternating, the best of ``repeats`` each, so a burst of load on
    the shared machine hits both alike.
    """
    path, rows, pipeline = arguments["path"], arguments["rows"], arguments["pipeline"]
    where = arguments["where"]
    cluster, client = scheduler_for(where)
    try:
        conveyor, chunks = conveyor_pipeline(path, rows, pipeline)
        scheduler = "threads" if where == "threads" else ""
        runs = {
            "conveyor": conveyor,
            "dask": dask_pipeline(path, rows, pipeline, chunks, scheduler),
        }
        if arguments["mode"] == "memory":
            run = runs[arguments["side"]]
            run()  # warm-up: imports, worker start-up, page cache
            with _Peak() as sampled:
                base = sampled.peak
                value = run()
            return {"peak": sampled.peak - base, "value": float(np.sum(value)), "chunks": chunks}
        best = dict.fromkeys(runs, float("inf"))
        for run in runs.values():
            run()  # warm-up
        for _ in range(arguments["repeats"]):
            for side, run in runs.items():
                start = time.perf_counter()
                run()
                best[side] = min(best[side], time.perf_counter() - start)
        return best
    finally:
        if client is not None:
            client.close()
            cluster.close()


def _measure(case: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--case", json.dumps(case)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        print(done.stderr[-2000:])
        raise SystemExit(f"case {case} failed")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _best(fn: Any, repeats: int = 7) -> float:
    fn()
    found = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        found = min(found, time.perf_counter() - start)
    return found


def per_block() -> None:
    """What one task costs: the kernel a Dask task runs on a 64 MiB float32 block, vs NumPy."""
    import conveyor as cv
    from conveyor_dask import DaskCarrier
    from conveyor_generic import KERNELS, run_cpu_kernel

    x = np.random.default_rng(0).standard_normal(16 << 20, dtype=np.float32)
    mul = cv.resolve_plan("mul", cv.float32, 2.0)
    sub = cv.resolve_plan("sub", cv.float32, 1)
    power = cv.resolve_plan("pow", cv.float32, 2)
    options = {name: cv.OperationExecutionOptions(name) for name in ("mul", "sub", "pow")}

    def run(plan: Any, *operands: Any) -> Any:
        return run_cpu_kernel(DaskCarrier, plan, options[plan.operation], operands)

    def ref(plan: Any, *operands: Any) -> Any:
        return KERNELS[plan.operation](plan, options[plan.operation], *operands)

    cases = {
        "x * 2.0": (
            lambda: run(mul, x, 2.0),
            lambda: x * np.float32(2.0),
            lambda: ref(mul, x, 2.0),
        ),
        "(x - 1) ** 2": (
            lambda: run(power, run(sub, x, 1), 2),
            lambda: (x - np.float32(1)) ** 2,
            lambda: ref(power, ref(sub, x, 1), 2),
        ),
        # NumPy squares its own temporary in place (temporary elision); two kernels cannot.
        "  same, numpy by op": (
            lambda: run(power, run(sub, x, 1), 2),
            lambda: np.square(np.subtract(x, np.float32(1))),
            lambda: ref(power, ref(sub, x, 1), 2),
        ),
    }
    print(f"\n{'per block (64 MiB)':<20} {'task ms':>8} {'numpy ms':>9} {'ratio':>6} {'ref ms':>7}")
    for label, (task, numpy, reference) in cases.items():
        ours, theirs, before = _best(task), _best(numpy), _best(reference)
        print(
            f"{label:<20} {ours * 1e3:8.1f} {theirs * 1e3:9.1f} {ours / theirs:6.2f} "
            f"{before * 1e3:7.1f}"
        )


def _write(path: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    mapped = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, _COLUMNS))
    step = 1024
    for start in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - start), _COLUMNS), dtype=np.float32)
        mapped[start : start + step] = block
    mapped.flush()
    del mapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="512M", help="file size in bytes (e.g. 512M, 4G)")
    parser.add_argument("--directory", default=None, help="where to write the file")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--where", default="threads,cluster", help="schedulers to run: threads, cluster or both"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one measurement (JSON)
    options = parser.parse_args()
    if options.case:
        print(json.dumps(_case(json.loads(options.case))))
        return
    rows = max(1, _size(options.size) // (4 * _COLUMNS))
    print(f"machine: {os.cpu_count()} cores; load {os.getloadavg()} (shared machine)")
    per_block()
    with tempfile.TemporaryDirectory(dir=options.directory) as folder:
        path = os.path.join(folder, "x.f32")
        _write(path, rows)
        print(f"file: {rows} x {_COLUMNS} float32, {rows * _COLUMNS * 4 / 2**20:.0f} MiB")
        print(f"\n{'pipeline':<8} {'scheduler':<9} {'side':<9} {'time s':>8} {'peak MiB':>9}")
        for where in options.where.split(","):
            for pipeline in _PIPELINES:
                case = {"path": path, "rows": rows, "pipeline": pipeline, "where": where}
                times = _measure({**case, "mode": "time", "repeats": options.repeats})
                found = {
                    side: _measure({**case, "mode": "memory", "side": side})
                    for side in ("conveyor", "dask")
                }
                for side, r in found.items():
                    print(
                        f"{pipeline:<8} {where:<9} {side:<9} {times[side]:8.3f} "
                        f"{r['peak'] / 2**20:9.0f}"
                    )
                ours, theirs = found["conveyor"], found["dask"]
                agree = np.isclose(ours["value"], theirs["value"], rtol=1e-3)
                print(
                    f"{'':<8} {'':<9} {'vs dask':<9} {times['conveyor'] / times['dask']:8.2f} "
                    f"{ours['peak'] / max(theirs['peak'], 1):9.2f}   chunks {ours['chunks']}, "
                    f"{'values agree' if agree else 'VALUES DIFFER'}"
                )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
