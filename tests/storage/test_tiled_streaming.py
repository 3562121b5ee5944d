"""Streaming reads from a FileBacked secondary land in a few reused buffers.

Tiles whose box is one contiguous byte range of the file (tiles spanning whole rows) are read
with one positional read each into buffers the operation reuses, so a long stream faults in no
fresh memory per tile; values stay exact and a failed read gives back what it took.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU
from conveyor_storage import FileBacked, TiledEvictable, TiledResidencyFacet, _streaming

RNG = np.random.default_rng(2024)
_SHAPE, _TILE = (16, 6), (2, 6)  # eight tiles of whole rows: each one contiguous in the file


def _evicted(tmp_path: Path, values: np.ndarray[Any, Any]) -> cv.Tensor:
    tiled = TiledEvictable(
        cv.tensor(values.reshape(-1), cv.float32, carrier=CPU).carrier,
        FileBacked.allocate(0, cv.float32, directory=str(tmp_path)),
        (_SHAPE[0] // _TILE[0], 1),
        _TILE,
        max_resident_bytes=2 * _TILE[0] * _TILE[1] * 4,
    )
    x = cv.Tensor(tiled, cv.Layout(_SHAPE))
    x.carrier.require_facet(TiledResidencyFacet).evict(tiled.primary_tiles)
    return x


@pytest.fixture
def buffers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every read buffer a direct operation allocates."""
    made: list[int] = []
    original = _streaming._new_buffer

    def counting(carrier: Any, nbytes: int) -> Any:
        made.append(nbytes)
        return original(carrier, nbytes)

    monkeypatch.setattr(_streaming, "_new_buffer", counting)
    monkeypatch.setattr(_streaming, "_spare", {})  # none spared by earlier streams
    return made


class TestReusedReadBuffers:
    @pytest.mark.parametrize("name", ["reduce_sum", "add", "relu"])
    def test_stream_reuses_a_few_buffers_and_stays_exact(
        self, tmp_path: Path, buffers: list[int], name: str
    ) -> None:
        """Eight evicted tiles stream through at most three buffers (current, prefetched,
        one returning), and the result equals NumPy's."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _evicted(tmp_path, values)
        if name == "reduce_sum":
            got, want = cv.reduce_sum(x, axis=1), values.sum(axis=1)
        elif name == "add":
            got, want = cv.add(x, x), values + values
        else:
            got, want = cv.relu(x), np.maximum(values, 0)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        assert 1 <= len(buffers) <= 3, buffers
        assert set(buffers) == {x.carrier.tile_bytes}

    def test_failed_read_gives_back_its_bytes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A positional read that fails raises its OSError; the ledger and the busy marks are
        as before the call, and the next call succeeds."""
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _evicted(tmp_path, values)
        tiled: Any = x.carrier
        before = tiled.resident_bytes
        secondary = tiled.secondary

        def failing(what: str, buffer: Any, offset: int) -> None:
            raise OSError(5, "injected read failure")

        monkeypatch.setattr(secondary, "_pread", failing)
        with pytest.raises(OSError, match="injected read failure"):
            cv.reduce_sum(x)
        assert tiled.resident_bytes == before and not tiled._busy
        monkeypatch.undo()
        np.testing.assert_allclose(float(cv.reduce_sum(x).numpy()), values.sum(), rtol=1e-5)


class TestRowChunks:
    @pytest.mark.parametrize("name", ["reduce_sum", "argmax", "add", "sub_mean"])
    def test_tiles_stream_in_row_chunks(
        self, tmp_path: Path, buffers: list[int], monkeypatch: pytest.MonkeyPatch, name: str
    ) -> None:
        """With chunks smaller than a tile, each file tile is read one row chunk at a time into
        chunk-sized buffers, and the values are exact (a dense companion included)."""
        monkeypatch.setattr(_streaming, "READ_CHUNK_BYTES", 6 * 4)  # one row of a 2-row tile
        values = RNG.standard_normal(_SHAPE).astype(np.float32)
        x = _evicted(tmp_path, values)
        if name == "reduce_sum":
            got, want = cv.reduce_sum(x, axis=0), values.sum(axis=0)
        elif name == "argmax":
            got, want = cv.argmax(x, axis=1), values.argmax(axis=1)
        elif name == "add":
            got, want = cv.add(x, x), values + values
        else:
            got, want = x - x.mean(0), values - values.mean(0)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        assert buffers and set(buffers) == {6 * 4}
