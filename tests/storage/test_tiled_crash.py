"""TiledEvictable crash safety: kill -9 in the middle of a tile eviction.

A child process commits three tiles to a FileBacked secondary, then starts evicting a fourth
and stops half-way through writing it; the parent kills it with SIGKILL and reads the file:
every committed tile still holds its value, because an eviction writes only its own tile's
region of the secondary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable, TiledResidencyFacet

    directory = sys.argv[1]
    tile = 1 << 16
    secondary = FileBacked.allocate(8 * tile, cv.float32, directory=directory)
    print(secondary.path, flush=True)
    tiled = TiledEvictable(CPU.allocate(0, cv.float32), secondary, (8,), (tile,))
    res = tiled.require_facet(TiledResidencyFacet)
    res.promote([(i,) for i in range(4)])
    for i in range(4):
        tiled.import_span(cv.Layout((tile,), None, i * tile), np.full(tile, i + 1, np.float32))
    res.evict([(0,), (1,), (2,)])
    tiled.flush()
    original = secondary.import_span

    def half_then_hang(layout, values):
        half = layout.size // 2
        original(cv.Layout((half,), None, layout.offset), values[:half])
        print("evicting", flush=True)
        time.sleep(120)

    secondary.import_span = half_then_hang
    res.evict([(3,)])
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_kill_during_eviction_keeps_committed_tiles(tmp_path: Path) -> None:
    """After SIGKILL mid-eviction, tiles committed before it read back unchanged."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")},
    )
    try:
        assert child.stdout is not None
        path = child.stdout.readline().strip()
        assert child.stdout.readline().strip() == "evicting"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    tile = 1 << 16
    data = np.fromfile(path, dtype="<f4")
    for i in range(3):
        np.testing.assert_array_equal(data[i * tile : (i + 1) * tile], float(i + 1))
    # The interrupted tile was never committed; tiles after it were never written.
    np.testing.assert_array_equal(data[4 * tile :], 0.0)
