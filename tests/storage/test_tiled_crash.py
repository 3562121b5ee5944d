"""TiledEvictable crash safety: kill -9 in the middle of a tile eviction.

A child process commits three tiles to a FileBacked secondary, then starts evicting a fourth
and stops half-way through writing it; the parent kills it with SIGKILL and reads the file:
every committed tile still holds its value, because an eviction writes only its own tile's
region of the secondary. A tile the killed process was rewriting is torn in the file; its mark
in the journal beside the file makes the next TiledEvictable over it refuse to read it.
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
    path = _killed_mid_write(CHILD, tmp_path)
    tile = 1 << 16
    data = np.fromfile(path, dtype="<f4")
    for i in range(3):
        np.testing.assert_array_equal(data[i * tile : (i + 1) * tile], float(i + 1))
    # The interrupted tile was never committed; tiles after it were never written.
    np.testing.assert_array_equal(data[4 * tile :], 0.0)


REWRITE_CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable, TiledResidencyFacet

    directory, side = sys.argv[1], 256
    secondary = FileBacked.allocate(4 * side * side, cv.float32, directory=directory)
    print(secondary.path, flush=True)
    tiled = TiledEvictable(CPU.allocate(0, cv.float32), secondary, (2, 2), (side, side))
    res = tiled.require_facet(TiledResidencyFacet)
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    res.promote(coords)
    x = cv.Tensor(tiled, cv.Layout(tiled.shape))
    for i, (r, c) in enumerate(coords):
        box = cv.Layout((side, side), (2 * side, 1), r * 2 * side * side + c * side)
        tiled.import_span(box, np.full((side, side), i + 1, np.float32))
    res.evict(coords)
    tiled.flush()
    res.promote([(1, 1)])
    box = cv.Layout((side, side), (2 * side, 1), 2 * side * side + side)
    tiled.import_span(box, np.full((side, side), 9, np.float32))  # a new value, dirty
    original = secondary.import_span

    def half_then_hang(layout, values):
        rows = layout.shape[0] // 2
        half = cv.Layout((rows, side), layout.strides, layout.offset)
        original(half, np.ascontiguousarray(np.asarray(values).reshape(side, side)[:rows]))
        print("evicting", flush=True)
        time.sleep(120)

    secondary.import_span = half_then_hang
    res.evict([(1, 1)])
    """
)


def _killed_mid_write(child_source: str, tmp_path: Path) -> str:
    """Run ``child_source``, kill it with SIGKILL once it says "evicting"; the file's path."""
    child = subprocess.Popen(
        [sys.executable, "-c", child_source, str(tmp_path)],
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
    return path


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_kill_while_rewriting_a_tile_leaves_it_torn_and_refused_never_read(
    tmp_path: Path,
) -> None:
    """Issue 25 item 7: a tile half rewritten by a killed process is an error, not a value.

    The file really holds a torn tile (half 9s, half the committed 4s); reopened, the tile is
    invalid and reading it raises naming the crash, while the other tiles read their values.
    """
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable

    path = _killed_mid_write(REWRITE_CHILD, tmp_path)
    side = 256
    data = np.fromfile(path, dtype="<f4").reshape(2 * side, 2 * side)
    torn = data[side:, side:]
    assert (torn[: side // 2] == 9).all() and (torn[side // 2 :] == 4).all()  # really torn
    assert os.path.exists(f"{path}.tiles")

    tiled = TiledEvictable(
        CPU.allocate(0, cv.float32), FileBacked.open(path, cv.float32), (2, 2), (side, side)
    )
    assert (1, 1) not in tiled.valid_tiles and len(tiled.valid_tiles) == 3
    x = cv.Tensor(tiled, cv.Layout(tiled.shape))
    with pytest.raises(RuntimeError, match=r"tile \(1, 1\) is torn \(a process died"):
        x.numpy()
    width = 2 * side
    corners = {(0, 0): 0, (0, 1): side, (1, 0): side * width, (1, 1): side * width + side}
    for value, coord in enumerate([(0, 0), (0, 1), (1, 0)], 1):  # the committed tiles read
        first = corners[coord]
        assert tiled.read(first) == tiled.read(first + (side - 1) * width + side - 1) == value
    with pytest.raises(RuntimeError, match=r"tile \(1, 1\) is torn"):
        tiled.read(corners[(1, 1)])


def test_a_clean_release_leaves_no_journal_and_a_private_secondary_none(tmp_path: Path) -> None:
    """The journal lives beside a kept secondary only while its carrier does."""
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable, TiledResidencyFacet

    def evicted_once(secondary: cv.Carrier) -> TiledEvictable:
        tiled = TiledEvictable(CPU.allocate(0, cv.float32), secondary, (2,), (4,))
        res = tiled.require_facet(TiledResidencyFacet)
        res.promote([(0,)])
        tiled.import_span(cv.Layout((4,)), np.arange(4, dtype=np.float32))
        res.evict([(0,)])
        assert tiled.read(3) == 3.0
        return tiled

    secondary = FileBacked.allocate(8, cv.float32, directory=str(tmp_path))
    tiled = evicted_once(secondary)
    assert os.path.exists(f"{secondary.path}.tiles")  # open while the carrier lives
    tiled.release()
    assert not any(p.name.endswith(".tiles") for p in tmp_path.iterdir())

    private = evicted_once(FileBacked.allocate(0, cv.float32))  # a temporary file: no journal
    assert private._owned["journal"] is None and private._owned["secondary"] is not None
    private.release()


def test_torn_marks_of_another_tiling_are_refused_with_what_to_do(tmp_path: Path) -> None:
    """Marks naming tiles of another grid cannot be mapped: a ValueError, not a guess."""
    import conveyor as cv
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked, TiledEvictable, TileSet
    from conveyor_storage._tile_journal import TileJournal
    from conveyor_storage._tiles import Grid

    path = str(tmp_path / "values.f32")
    np.zeros(16, "<f4").tofile(path)
    journal = TileJournal(path, Grid((4,), (4,)))
    journal.writing((2,))  # as a killed process leaves it
    journal.close(data_kept=True)
    with pytest.raises(ValueError, match=r"another tiling .* delete .*values\.f32\.tiles"):
        TiledEvictable(CPU.allocate(0, cv.float32), FileBacked.open(path, cv.float32), (2,), (8,))
    tiled = TiledEvictable(
        CPU.allocate(0, cv.float32), FileBacked.open(path, cv.float32), (4,), (4,)
    )
    assert tiled.valid_tiles == TileSet([(0,), (1,), (3,)])
