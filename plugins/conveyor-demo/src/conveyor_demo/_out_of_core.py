"""Demo step: a float32 tensor several times larger than a memory budget, computed by streaming.

The data goes to a file first (chunk by chunk, so the demo itself never holds it), then a
``TiledEvictable`` over that file reduces it and multiplies it by a small matrix. Both are
direct operations: they stream the tiles through at most ``budget`` bytes of memory, reading the
next tile on a background thread while the current one computes. The figures set the streaming
rate beside the raw sequential read rate of the same file, and the peak resident bytes the
carrier counted beside the budget.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

import conveyor as cv
from conveyor import plugins

__all__ = ["stream_reduce_and_scale"]

_COLUMNS = 1024  # the tensor is (rows, 1024) float32, tiled in row bands
_OUTPUTS = 16  # columns of the small matrix it is multiplied by
_RESIDENT_TILES = 8  # the budget holds this many tiles
_PATTERN = (np.arange(_COLUMNS) % 4 * 0.25).astype(np.float32)  # every row: 0, .25, .5, .75, ...


def _disk_read_rate(path: str, nbytes: int) -> float:
    """Bytes per second of one sequential read of ``path`` in 8 MiB chunks (same cache state)."""
    chunk = bytearray(8 << 20)
    view = memoryview(chunk)
    fd = os.open(path, os.O_RDONLY)
    try:
        start, done = time.perf_counter(), 0
        while done < nbytes:
            got = os.preadv(fd, [view], done)
            if got == 0:
                break
            done += got
        return done / (time.perf_counter() - start)
    finally:
        os.close(fd)


def stream_reduce_and_scale(
    size: int, budget: int, directory: Path, bar: Callable[..., Any]
) -> dict[str, Any]:
    """Fill a tiled tensor on disk, then reduce and multiply it tile by tile within ``budget``."""
    host = plugins.host()
    try:
        # Any: classes looked up by name, so their constructors are not visible to the checker.
        cpu, file_backed, tiled_class = (
            cast(Any, host.carrier(n)) for n in ("cpu", "file", "tiled")
        )
    except (ValueError, plugins.PluginError):
        return {
            "skipped": "the 'tiled' carrier (TiledEvictable) is not installed",
            "fix": "pip install conveyor-storage",
        }
    tile_rows = max(1, budget // _RESIDENT_TILES // (_COLUMNS * 4))
    grid = max(1, size // (tile_rows * _COLUMNS * 4))
    rows = grid * tile_rows
    directory.mkdir(parents=True, exist_ok=True)
    stored = file_backed.allocate(rows * _COLUMNS, cv.float32, directory=str(directory))
    band = np.tile(_PATTERN, tile_rows)
    with bar(grid, "   write to disk", "tile") as progress:
        for i in range(grid):
            stored.import_span(cv.Layout((band.size,), offset=i * band.size), band)
            progress.update(1)
    stored.flush()
    tiled = tiled_class(
        cpu.allocate(0, cv.float32),
        stored,
        (grid, 1),
        (tile_rows, _COLUMNS),
        max_resident_bytes=budget,
    )
    x = cv.Tensor(tiled, cv.Layout(tiled.shape))
    weights = np.random.default_rng(3).standard_normal((_COLUMNS, _OUTPUTS)).astype(np.float32)
    w_primary = cpu.allocate(weights.size, cv.float32)
    w_primary.import_span(cv.Layout((weights.size,)), weights.reshape(-1))
    w_secondary = file_backed.allocate(0, cv.float32, directory=str(directory))
    w_tiled = tiled_class(w_primary, w_secondary, (1, 1), weights.shape)
    w = cv.Tensor(w_tiled, cv.Layout(weights.shape))

    def track(label: str) -> Any:
        progress = bar(grid, f"   {label}", "step")

        def report(done: int, total: int, _: str) -> None:
            # A stream reports its own steps (a tile, or a band of one), not the grid's tiles.
            if progress.total != total:
                progress.total = total
            progress.update(done - progress.n)

        return progress, cv.progress(report)

    progress, reporting = track("reduce_sum")
    with progress, reporting:
        start = time.perf_counter()
        total = cv.reduce_sum(x, accumulator_dtype=cv.float64)
        reduce_seconds = time.perf_counter() - start
    progress, reporting = track("matmul")
    with progress, reporting:
        start = time.perf_counter()
        product = cv.matmul(x, w).numpy()
        matmul_seconds = time.perf_counter() - start
    nbytes = rows * _COLUMNS * 4
    disk = _disk_read_rate(stored.path, nbytes)
    expected_row = _PATTERN.astype(np.float64) @ weights.astype(np.float64)
    figures = {
        "bytes": nbytes,
        "budget_bytes": budget,
        "tiles": grid,
        "tile_bytes": tile_rows * _COLUMNS * 4,
        "sum": float(total.numpy()),
        "expected_sum": float(_PATTERN.sum(dtype=np.float64) * rows),
        "matmul_max_error": float(np.max(np.abs(product - expected_row))),
        "throughput_mb_s": nbytes / reduce_seconds / 1e6,
        "matmul_mb_s": nbytes / matmul_seconds / 1e6,
        "disk_mb_s": disk / 1e6,
        "peak_resident_bytes": int(tiled.peak_resident_bytes),
    }
    # The carrier's promise: the budget of resident tiles plus one tile of work space.
    figures["within_budget"] = figures["peak_resident_bytes"] <= budget + figures["tile_bytes"]
    figures["correct"] = figures["sum"] == figures["expected_sum"] and bool(
        figures["matmul_max_error"] < 1e-3
    )
    for carrier in (tiled, w_tiled):
        carrier.release()
    return figures
