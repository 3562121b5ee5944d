"""Torn-tile marks: one byte per tile, beside a kept file secondary, set while it is written.

A tile's write-back is many positional writes (a tile of a 2-D grid is strided in the file), so
a process killed half-way leaves a tile that is neither its old nor its new value. Before the
first byte of a tile is written its mark is set, and it is cleared after the last: writes of a
killed process that returned are in the page cache in order, so a mark still set afterwards
names exactly the tiles that may be torn. The next ``TiledEvictable`` over the file treats
them as invalid (reading one is an error naming the crash), never as values. ``flush`` syncs
the marks with the data, so the same holds across a power loss after a flush.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final, final

from conveyor_storage._tiles import Coord, Grid

__all__ = ["TileJournal", "journal_path", "torn_tiles"]

_HEADER: Final = 4096  # bytes: a JSON header padded with spaces, then one mark byte per tile
_SET, _CLEAR = b"\x01", b"\x00"


def journal_path(path: str) -> str:
    return f"{path}.tiles"


def _header(grid: Grid) -> bytes:
    import json  # ~3 ms at every discovery otherwise; only a journal's creation needs it

    text = json.dumps({"grid": list(grid.grid_shape), "tile": list(grid.tile_shape)})
    return text.encode().ljust(_HEADER)


def _index(grid: Grid, coord: Coord) -> int:
    index = 0
    for c, g in zip(coord, grid.grid_shape, strict=True):
        index = index * g + c
    return index


def torn_tiles(path: str, grid: Grid) -> frozenset[Coord]:
    """The tiles a killed process left marked in ``path``'s journal (none when it has none).

    Raises:
        ValueError: the journal marks tiles of another tiling, so this one cannot tell which of
            its tiles are torn.
    """
    try:
        with open(journal_path(path), "rb") as journal:
            header, marks = journal.read(_HEADER), journal.read()
    except FileNotFoundError:
        return frozenset()
    coords = list(grid.coords())
    if header != _header(grid):
        if _SET in marks:
            msg = (
                f"TiledEvictable: a process died while writing tiles of another tiling into "
                f"{path} ({header.decode(errors='replace').strip()}); open it with that grid and "
                f"tile shape to see which tiles are torn, or delete {journal_path(path)} to accept "
                "the file as it is"
            )
            raise ValueError(msg)
        return frozenset()
    return frozenset(c for c, mark in zip(coords, marks, strict=False) if mark)


@final
class TileJournal:
    """The open journal of one secondary file: ``writing(coord)`` before, ``written`` after."""

    def __init__(self, path: str, grid: Grid) -> None:
        self._path, self._grid = journal_path(path), grid
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size != _HEADER + grid.count or os.pread(fd, _HEADER, 0) != _header(grid):
                os.ftruncate(fd, 0)  # no marks of this tiling: start clear
                os.pwrite(fd, _header(grid), 0)
                os.ftruncate(fd, _HEADER + grid.count)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def writing(self, coord: Coord) -> None:
        assert self._fd is not None  # open until the carrier is released
        os.pwrite(self._fd, _SET, _HEADER + _index(self._grid, coord))

    def written(self, coord: Coord) -> None:
        assert self._fd is not None
        os.pwrite(self._fd, _CLEAR, _HEADER + _index(self._grid, coord))

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self, data_kept: bool) -> None:
        """Close; delete the journal when no mark is set or the data file itself is gone."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            clean = _SET not in os.pread(fd, self._grid.count, _HEADER)
        finally:
            os.close(fd)
        if clean or not data_kept:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
