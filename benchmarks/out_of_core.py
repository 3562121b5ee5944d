"""Out-of-core TiledEvictable against NumPy on the same files, ratios from one run.

Measures:

- ``reduce_sum`` of a ``--sum-size`` (default 4 GiB) float32 file as a TiledEvictable over an
  empty CPU primary and the FileBacked file, with ``--sum-budget`` (default 256 MiB) of
  resident tiles, against a chunked ``np.memmap`` sum of the same file and against the raw
  sequential read rate of the file (``readinto`` in 8 MiB blocks, as ``dd`` does). Cold runs
  drop the file's pages first (``posix_fadvise(DONTNEED)``); warm runs read it once before.
  Targets: >= 0.9x the memmap loop, >= 0.8x the raw read.
- Two pipelines on the same file, NumPy by hand over a chunked ``np.memmap`` against Conveyor
  the way ``docs/storage.md`` recommends: the variance ``((x - x.mean(0)) ** 2).mean(0)``
  (``map_tiles(..., rowwise=True)`` for the centred squares: a lazy result whose reduction
  streams the file's row chunks through ``fn``, no intermediate) and ``(x * 2.0 + 1.0).sum()``
  (also through ``map_tiles``), each also timed as the plain dense expression (its
  intermediates are whole dense copies). Target: within 1.5x the memmap loop.
  Beside them, on the same file: plain ``dask.array`` (lazy, over a memmap, threads) and
  Conveyor's Dask carrier (``FileBacked`` moved to Dask: lazy chunk reads) on dask's threads,
  then both on a LocalCluster of two worker processes (plain dask reading each chunk in its
  task), as ``benchmarks/dask_pipeline.py`` builds them (targets: 1.2x dask's time with
  threads, 1.5x on the cluster). Every pipeline case runs under ``RLIMIT_DATA`` of
  ``--pipeline-limit`` (default 1.25 GiB, below the 4 GiB data; worker processes inherit it):
  the last column says whether it completed within it (if not, it is rerun without the limit
  for its time). The Dask rows time one run after a warm-up run (imports, worker start-up).
- Out-of-core ``matmul`` of two ``--matmul-n`` square float32 FileBacked operands with a
  ``--matmul-budget`` (default 512 MiB) against ``np.matmul`` on the same arrays in memory
  (target >= 0.8x the in-memory GFLOP/s).

Each case runs in a fresh subprocess so its peak RSS (``VmHWM``) and its peak anonymous
memory (sampled ``RssAnon``: what is not file cache) are its own; mapped file pages count in
``VmHWM`` for both the memmap loop and FileBacked, so ``RssAnon`` is the figure to hold
against the budget; it is summed over the case's worker processes for the cluster rows.
ratio = baseline time / conveyor time (above 1.0: faster). The files are deleted at the end.

    python benchmarks/out_of_core.py [--sum-size 4G] [--matmul-n 8192] [--directory DIR]
    python benchmarks/out_of_core.py --only-pipelines --sum-size 1G  # the pipeline table alone
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_BLOCK = 8 << 20
_ROW = 16384  # float32 columns of the sum file: one 64 KiB row


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    return 0


def _anon() -> int:
    """RssAnon of this process and its children (a LocalCluster's worker processes)."""
    import psutil  # a dependency of dask.distributed

    total = _status("RssAnon")
    for child in psutil.Process().children(recursive=True):
        try:
            with open(f"/proc/{child.pid}/status") as handle:
                total += sum(int(ln.split()[1]) << 10 for ln in handle if ln.startswith("RssAnon:"))
        except OSError:  # a child that just ended
            continue
    return total


class _AnonPeak:
    """Samples RssAnon every 20 ms on a thread: the peak of non-file memory of the case."""

    def __init__(self) -> None:
        self.peak = _anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _anon())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        return max(self.peak, _anon())


def _drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _warm(path: str) -> None:
    _raw_read(path)  # the page cache now holds the file


def _raw_read(path: str) -> float:
    buffer = bytearray(_BLOCK)
    view = memoryview(buffer)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(view):
            pass
    return time.perf_counter() - start


def _memmap_sum(path: str) -> float:
    start = time.perf_counter()
    data = np.memmap(path, dtype="<f4", mode="r")
    step = 64 << 20 >> 2
    total = np.float32(0)
    for first in range(0, data.size, step):
        total += np.sum(data[first : first + step], dtype=np.float32)
    return time.perf_counter() - start


def _tiled_sum(path: str, budget: int) -> float:
    import conveyor as cv

    x = _tiled_file(path, budget)
    _warm_up(cv.reduce_sum)
    start = time.perf_counter()  # the file is opened and the carrier built: time the sum
    total = cv.reduce_sum(x)
    elapsed = time.perf_counter() - start
    assert np.isfinite(float(total.numpy()))
    return elapsed


def _warm_up(pipeline: Callable[[Any], Any]) -> None:
    """Run ``pipeline`` once on a tiny tiled tensor of the same width: the first call of a
    name in a process seals its capabilities and builds its dispatch (about 1.5 s on the
    shared machine), a one-time cost the memmap loop does not have."""
    import conveyor as cv
    from conveyor_generic import CPU

    tiny = cv.move(cv.ones((2, _ROW), carrier=CPU), "tiled", tile_shape=(1, _ROW))
    pipeline(tiny)


def _memmap_rows(path: str) -> Any:
    data = np.memmap(path, dtype="<f4", mode="r")
    return data.reshape(-1, _ROW)


def _memmap_variance(path: str) -> float:
    start = time.perf_counter()
    rows = _memmap_rows(path)
    step = (64 << 20) // (_ROW * 4)
    total = np.zeros(_ROW, np.float32)
    for first in range(0, rows.shape[0], step):
        total += rows[first : first + step].sum(axis=0, dtype=np.float32)
    mean = total / rows.shape[0]
    squares = np.zeros(_ROW, np.float32)
    for first in range(0, rows.shape[0], step):
        squares += ((rows[first : first + step] - mean) ** 2).sum(axis=0, dtype=np.float32)
    result = squares / rows.shape[0]
    elapsed = time.perf_counter() - start
    assert np.isfinite(result).all()
    return elapsed


def _memmap_affine(path: str) -> float:
    start = time.perf_counter()
    rows = _memmap_rows(path)
    step = (64 << 20) // (_ROW * 4)
    total = np.float32(0)
    for first in range(0, rows.shape[0], step):
        total += np.sum(rows[first : first + step] * np.float32(2.0) + np.float32(1.0))
    elapsed = time.perf_counter() - start
    assert np.isfinite(total)
    return elapsed


def _tiled_file(path: str, budget: int) -> Any:
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable

    secondary = FileBacked.open(path, cv.float32)
    rows = secondary.size // _ROW
    tile_rows = 1024  # 64 MiB tiles of whole rows: a column mean broadcasts against each
    tiled = TiledEvictable(
        CPU.allocate(0, cv.float32),
        secondary,
        (rows // tile_rows, 1),
        (tile_rows, _ROW),
        max_resident_bytes=budget,
    )
    return cv.Tensor(tiled, cv.Layout(tiled.shape))


def _variance(x: Any, dense: bool) -> Any:
    """The column variance as docs/storage.md recommends (map_tiles), or as plain dense steps."""
    from conveyor_storage import map_tiles

    if dense:
        return ((x - x.mean(0)) ** 2).mean(0)
    m = x.mean(0)
    return map_tiles(lambda t: (t - m) ** 2, x, rowwise=True).mean(0)


def _affine(x: Any, dense: bool) -> Any:
    from conveyor_storage import map_tiles

    shifted = x * 2.0 + 1.0 if dense else map_tiles(lambda t: t * 2.0 + 1.0, x, rowwise=True)
    return shifted.sum()


def _tiled_pipeline(path: str, budget: int, pipeline: Callable[[Any], Any]) -> float:
    x = _tiled_file(path, budget)
    _warm_up(pipeline)
    start = time.perf_counter()
    result = pipeline(x)
    elapsed = time.perf_counter() - start
    assert np.isfinite(result.numpy()).all()
    return elapsed


def _dask_pipelines() -> Any:
    """``benchmarks/dask_pipeline.py`` as a module (it also drops this folder from sys.path,
    where ``benchmarks/dask.py`` would shadow the dask package)."""
    spec = importlib.util.spec_from_file_location(
        "dask_pipeline", Path(__file__).with_name("dask_pipeline.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dask_case(path: str, label: str, side: str, where: str) -> float:
    """One pipeline by Conveyor's Dask carrier or plain dask.array: a warm-up, then a timed run."""
    pipelines = _dask_pipelines()
    rows = os.path.getsize(path) // (_ROW * 4)
    name = "var" if label == "variance" else "affine"
    cluster, client = pipelines.scheduler_for(where)
    try:
        run, chunks = pipelines.conveyor_pipeline(path, rows, name, _ROW)
        if side == "dask":
            scheduler = "threads" if where == "threads" else ""
            run = pipelines.dask_pipeline(path, rows, name, chunks, scheduler, _ROW)
        run()
        start = time.perf_counter()
        value = run()
        elapsed = time.perf_counter() - start
        assert np.isfinite(value).all()
        return elapsed
    finally:
        if client is not None:
            client.close()
            cluster.close()


def _operand(path: str, n: int) -> np.ndarray[Any, Any]:
    return np.fromfile(path, dtype="<f4").reshape(n, n)


def _memory_matmul(a_path: str, b_path: str, n: int) -> float:
    a, b = _operand(a_path, n), _operand(b_path, n)
    start = time.perf_counter()
    c = a @ b
    elapsed = time.perf_counter() - start
    assert c.shape == (n, n)
    return elapsed


def _tiled_matmul(a_path: str, b_path: str, n: int, budget: int, tile: int) -> float:
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable

    def tiled(path: str) -> cv.Tensor:
        carrier = TiledEvictable(
            CPU.allocate(0, cv.float32),
            FileBacked.open(path, cv.float32),
            (n // tile, n // tile),
            (tile, tile),
            max_resident_bytes=budget,
        )
        return cv.Tensor(carrier, cv.Layout(carrier.shape))

    a, b = tiled(a_path), tiled(b_path)
    start = time.perf_counter()
    c = cv.matmul(a, b)
    elapsed = time.perf_counter() - start
    assert c.shape == (n, n)
    return elapsed


def _case(args: argparse.Namespace) -> None:
    """One measured case in this (fresh) process; prints a JSON line."""
    if args.cold:
        for path in args.paths:
            _drop_cache(path)
    else:
        for path in args.paths:
            _warm(path)
    cases: dict[str, Callable[[], float]] = {
        "raw": lambda: _raw_read(args.paths[0]),
        "memmap": lambda: _memmap_sum(args.paths[0]),
        "tiled_sum": lambda: _tiled_sum(args.paths[0], args.budget),
        "memmap_variance": lambda: _memmap_variance(args.paths[0]),
        "tiled_variance": lambda: _tiled_pipeline(
            args.paths[0], args.budget, lambda x: _variance(x, False)
        ),
        "dense_variance": lambda: _tiled_pipeline(
            args.paths[0], args.budget, lambda x: _variance(x, True)
        ),
        "memmap_affine": lambda: _memmap_affine(args.paths[0]),
        "tiled_affine": lambda: _tiled_pipeline(
            args.paths[0], args.budget, lambda x: _affine(x, False)
        ),
        "dense_affine": lambda: _tiled_pipeline(
            args.paths[0], args.budget, lambda x: _affine(x, True)
        ),
        **{
            f"{side}-{where}_{label}": lambda side=side, where=where, label=label: _dask_case(
                args.paths[0], label, side, where
            )
            for side in ("dask", "conveyor")
            for where in ("threads", "cluster")
            for label in ("variance", "affine")
        },
        "memory_matmul": lambda: _memory_matmul(args.paths[0], args.paths[1], args.n),
        "tiled_matmul": lambda: _tiled_matmul(*args.paths, args.n, args.budget, args.tile),
    }
    anon = _AnonPeak()
    elapsed = cases[args.case]()  # each case times its own work, not imports or set-up
    print(json.dumps({"seconds": elapsed, "hwm": _status("VmHWM"), "anon": anon.stop()}))


def _run(
    case: str, paths: list[str], cold: bool, limit: int | None = None, **extra: Any
) -> dict[str, float]:
    """One case in a fresh process, under ``RLIMIT_DATA`` of ``limit`` bytes when given; a case
    that fails within the limit is run again without it (``completed`` says which)."""
    command = [sys.executable, __file__, "--case", case, "--paths", *paths]
    command += ["--cold"] if cold else []
    for key, value in extra.items():
        command += [f"--{key}", str(value)]

    def limited() -> None:
        assert limit is not None
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=3600,
        preexec_fn=limited if limit is not None else None,
        check=limit is None,
    )
    if out.returncode:
        failed = _run(case, paths, cold, **extra)
        return {**failed, "completed": False}
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "completed": True}


def _make_file(path: str, nbytes: int) -> None:
    step = 64 << 20 >> 2
    pattern = (np.arange(step, dtype=np.float32) % 1024) / 1024
    with open(path, "wb") as handle:
        for _ in range(nbytes // (step * 4)):
            pattern.tofile(handle)
    os.sync()


def _mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sum-size", default="4G")
    parser.add_argument("--sum-budget", default="256M")
    parser.add_argument("--pipeline-limit", default="1.25G", help="RLIMIT_DATA of each case")
    parser.add_argument("--matmul-n", type=int, nargs="*", default=[8192])  # none: skip
    parser.add_argument("--matmul-budget", default="512M")
    parser.add_argument("--matmul-tile", type=int, default=2048)
    parser.add_argument("--directory", default=None)
    parser.add_argument("--skip-sum", action="store_true")
    parser.add_argument("--skip-pipelines", action="store_true")
    parser.add_argument(
        "--only-pipelines", action="store_true", help="the pipeline table alone (no sum, matmul)"
    )
    # internal: one case in a fresh process
    parser.add_argument("--case", default=None)
    parser.add_argument("--paths", nargs="*", default=[])
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--tile", type=int, default=0)
    args = parser.parse_args()
    if args.case:
        _case(args)
        return
    if args.only_pipelines:
        args.skip_sum, args.skip_pipelines, args.matmul_n = True, False, []
    with open("/proc/loadavg") as handle:
        load = handle.read().split()[:3]
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(load)} (shared machine)")
    work = tempfile.mkdtemp(prefix="conveyor-ooc-", dir=args.directory)
    try:
        if not args.skip_sum:
            _sum_table(work, _size(args.sum_size), _size(args.sum_budget))
        if not args.skip_pipelines:
            _pipeline_table(
                work, _size(args.sum_size), _size(args.sum_budget), _size(args.pipeline_limit)
            )
        for n in args.matmul_n:
            _matmul_table(work, n, _size(args.matmul_budget), args.matmul_tile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open("/proc/loadavg") as handle:
        print(f"load average after: {' '.join(handle.read().split()[:3])}")


def _sum_table(work: str, nbytes: int, budget: int) -> None:
    path = os.path.join(work, "sum.f32")
    nbytes -= nbytes % (_ROW * 4 * 1024)
    _make_file(path, nbytes)
    print(f"\nreduce_sum of {_mib(nbytes)} float32, budget {_mib(budget)}")
    header = (
        f"{'case':<8}{'method':<16}{'s':>8}{'GiB/s':>8}{'ratio':>8}{'VmHWM':>11}{'RssAnon':>10}"
    )
    print(header)
    for cold in (True, False):
        label = "cold" if cold else "warm"
        found = {c: _run(c, [path], cold, budget=budget) for c in ("raw", "memmap", "tiled_sum")}
        ours = found["tiled_sum"]["seconds"]
        for case, result in found.items():
            ratio = result["seconds"] / ours if case != "tiled_sum" else 1.0
            rate = nbytes / result["seconds"] / (1 << 30)
            print(
                f"{label:<8}{case:<16}{result['seconds']:>8.2f}{rate:>8.2f}{ratio:>8.2f}"
                f"{_mib(result['hwm']):>11}{_mib(result['anon']):>10}"
            )
        print(
            f"{label:<8}tiled vs memmap {found['memmap']['seconds'] / ours:.2f}x, vs raw read "
            f"{found['raw']['seconds'] / ours:.2f}x"
        )
    os.unlink(path)


_PIPELINE_METHODS: dict[str, str] = {  # case prefix -> how the table names it
    "memmap": "memmap by hand",
    "tiled": "tiled map_tiles",
    "dense": "tiled dense",
    "dask-threads": "dask.array threads",
    "conveyor-threads": "conveyor dask threads",
    "dask-cluster": "dask.array cluster",
    "conveyor-cluster": "conveyor dask cluster",
}


def _pipeline_table(work: str, nbytes: int, budget: int, limit: int) -> None:
    path = os.path.join(work, "pipeline.f32")
    nbytes -= nbytes % (_ROW * 4 * 1024)
    _make_file(path, nbytes)
    print(
        f"\npipelines over {_mib(nbytes)} float32 (warm), tiled budget {_mib(budget)}, "
        f"every case under a {_mib(limit)} data limit"
    )
    print(
        f"{'pipeline':<10}{'method':<23}{'s':>7}{'vs memmap':>10}{'vs dask':>8}"
        f"{'RssAnon':>10}{'in limit':>9}"
    )
    for label in ("variance", "affine"):
        found = {
            method: _run(f"{method}_{label}", [path], False, limit=limit, budget=budget)
            for method in _PIPELINE_METHODS
        }
        baseline = found["memmap"]["seconds"]
        for method, result in found.items():
            # Conveyor's Dask rows beside plain dask on the same scheduler: ours / theirs.
            versus = ""
            if method.startswith("conveyor-"):
                peer = found[method.replace("conveyor-", "dask-")]
                versus = f"{result['seconds'] / peer['seconds']:.2f}"
            print(
                f"{label:<10}{_PIPELINE_METHODS[method]:<23}{result['seconds']:>7.2f}"
                f"{baseline / result['seconds']:>10.2f}{versus:>8}{_mib(result['anon']):>10}"
                f"{'yes' if result['completed'] else 'NO':>9}"
            )
    os.unlink(path)


def _matmul_table(work: str, n: int, budget: int, tile: int) -> None:
    tile = min(tile, n)
    paths = [os.path.join(work, f"{name}.f32") for name in ("a", "b")]
    rng = np.random.default_rng(0)
    for path in paths:
        rng.standard_normal((n, n), dtype=np.float32).tofile(path)
    os.sync()
    flops = 2.0 * n**3
    print(f"\nmatmul {n}x{n} float32 (operands {_mib(n * n * 4)} each), budget {_mib(budget)}")
    print(f"{'method':<16}{'s':>8}{'GFLOP/s':>9}{'ratio':>8}{'VmHWM':>11}{'RssAnon':>10}")
    memory = _run("memory_matmul", paths, False, n=n)
    ours = _run("tiled_matmul", paths, False, n=n, budget=budget, tile=tile)
    for name, result in (("in-memory BLAS", memory), (f"tiled {tile}^2", ours)):
        print(
            f"{name:<16}{result['seconds']:>8.2f}{flops / result['seconds'] / 1e9:>9.1f}"
            f"{memory['seconds'] / result['seconds']:>8.2f}{_mib(result['hwm']):>11}"
            f"{_mib(result['anon']):>10}"
        )
    for path in paths:
        os.unlink(path)


if __name__ == "__main__":
    main()
