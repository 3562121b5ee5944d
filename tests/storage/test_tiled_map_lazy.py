"""The lazy ``map_tiles``: a following direct reduction streams the operands through ``fn``.

Values are checked against Generic (and NumPy) for the two pipelines of issue 23 — the column
variance ``((x - x.mean(0)) ** 2).mean(0)`` and ``(x * 2.0 + 1.0).sum()`` — on small tensors
of several tiles with every kind of residency, whole tiles and row chunks (including a ragged
last chunk of each tile); errors ``fn`` raises surface where the tile is read; a lazy result
read whole, moved or materialised equals the eager one; and the carriers' own byte ledgers
stay within the budget plus one tile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_storage import FileBacked, TiledEvictable, TileState, _streaming, map_tiles
from tests.storage.tiled import build, facet, secondary_factory

RNG = np.random.default_rng(2323)
_SHAPE, _ROWS = (40, 16), (10, 16)  # four tiles of whole rows


def _mixed(tmp_path: Path, values: np.ndarray[Any, Any], primary: Any = CPU) -> Any:
    """Four row tiles: secondary, clean and dirty primary, and one implicit zero tile."""
    x, expected = build(
        values,
        _ROWS,
        primary=primary,
        secondary=secondary_factory("file", tmp_path),
        dtype=cv.float32,
        implicit=[(2, 0)],
        budget_tiles=2,
    )
    return x, expected


def _file_tiled(tmp_path: Path, values: np.ndarray[Any, Any], budget_tiles: int = 2) -> Any:
    """A tiled tensor over an existing float32 file: every tile in the secondary, as in the
    out-of-core benchmark."""
    path = tmp_path / "x.f32"
    values.astype("<f4").tofile(path)
    tile_bytes = _ROWS[0] * _ROWS[1] * 4
    tiled = TiledEvictable(
        CPU.allocate(0, cv.float32),
        FileBacked.open(str(path), cv.float32),
        (values.shape[0] // _ROWS[0], 1),
        _ROWS,
        max_resident_bytes=budget_tiles * tile_bytes,
    )
    return cv.Tensor(tiled, cv.Layout(tiled.shape))


@pytest.fixture(params=["whole", "chunks"])
def chunks(request: Any, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Row chunks of 3 rows of a 10-row tile (the last chunk ragged), or whole tiles."""
    if request.param == "chunks":
        monkeypatch.setattr(_streaming, "READ_CHUNK_BYTES", 3 * _ROWS[1] * 4)
    return request.param == "chunks"


def _variance(x: cv.Tensor, rowwise: bool) -> cv.Tensor:
    m = x.mean(0)
    return map_tiles(lambda t: (t - m) ** 2, x, rowwise=rowwise).mean(0)


def _affine(x: cv.Tensor, rowwise: bool) -> cv.Tensor:
    return map_tiles(lambda t: t * 2.0 + 1.0, x, rowwise=rowwise).sum()


def _close(got: cv.Tensor, want: cv.Tensor) -> None:
    assert got.dtype is want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("source", ["mixed", "file"])
def test_pipelines_match_generic(tmp_path: Path, chunks: bool, rowwise: bool, source: str) -> None:
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    if source == "mixed":
        x, expected = _mixed(tmp_path, values)
    else:
        x, expected = _file_tiled(tmp_path, values), values
    g = cv.tensor(expected, carrier=Generic)
    variance = _variance(x, rowwise)
    assert type(variance.carrier) is CPU and variance.dtype is cv.float32
    _close(variance, ((g - g.mean(0)) ** 2).mean(0))
    np.testing.assert_allclose(variance.numpy(), expected.var(0), rtol=1e-4, atol=1e-5)
    affine = _affine(x, rowwise)
    _close(affine, (g * 2.0 + 1.0).sum())
    tiled: Any = x.carrier
    assert tiled.peak_resident_bytes <= tiled.max_resident_bytes + tiled.tile_bytes
    assert not tiled._busy


def test_the_reduction_streams_and_stores_nothing(tmp_path: Path, chunks: bool) -> None:
    """Over a file: the lazy result never gets a secondary or a resident tile, and both
    ledgers stay within the budget plus one tile; fn sees row chunks only when rowwise."""
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x = _file_tiled(tmp_path, values, budget_tiles=1)
    seen: list[tuple[int, ...]] = []

    def fn(t: cv.Tensor) -> cv.Tensor:
        seen.append(t.shape)
        return t * 2.0 + 1.0

    lazy = map_tiles(fn, x, rowwise=True)
    out: Any = lazy.carrier
    assert out.tile_state((1, 0)) == TileState("lazy", False) and "lazy" in repr(out)
    total = lazy.sum()
    np.testing.assert_allclose(float(total.numpy()), float((values * 2 + 1).sum()), rtol=1e-5)
    assert out.secondary is None and not len(out.primary_tiles) and out.resident_bytes == 0
    assert out.peak_resident_bytes <= out.max_resident_bytes + out.tile_bytes
    source: Any = x.carrier
    assert source.peak_resident_bytes <= source.max_resident_bytes + source.tile_bytes
    assert source.resident_bytes == 0
    rows = {s[0] for s in seen[1:]}  # after the probe call
    assert rows == ({3, 1} if chunks else {10})
    assert all(s[1:] == (16,) for s in seen)
    wholes = map_tiles(fn, x)  # not rowwise: whole tiles, whatever the chunking
    seen.clear()
    wholes.sum()
    assert {s[0] for s in seen} == {10}


def test_chunks_reuse_the_compute_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fn's results die before its next call, so CPU's pool hands their buffers back: a second
    stream of 16 chunks allocates (almost) no fresh pooled buffers."""
    from conveyor_generic.kernels import cpu_runtime

    shape, rows = (1024, 256), (256, 256)  # 256 KiB tiles, 64 KiB rows: pooled sizes
    values = RNG.standard_normal(shape).astype(np.float32)
    path = tmp_path / "big.f32"
    values.tofile(path)
    tiled = TiledEvictable(
        CPU.allocate(0, cv.float32),
        FileBacked.open(str(path), cv.float32),
        (4, 1),
        rows,
        max_resident_bytes=256 * 256 * 4,
    )
    x = cv.Tensor(tiled, cv.Layout(tiled.shape))
    monkeypatch.setattr(_streaming, "READ_CHUNK_BYTES", 64 * 256 * 4)  # 16 chunks of 64 KiB
    monkeypatch.setattr(cpu_runtime, "POOL_MIN_BYTES", 16 << 10)
    m = x.mean(0)
    _variance(x, True)  # the first stream fills the pool
    before = cpu_runtime.fresh_buffers()
    got = map_tiles(lambda t: (t - m) ** 2, x, rowwise=True).mean(0)
    assert cpu_runtime.fresh_buffers() - before <= 4
    np.testing.assert_allclose(got.numpy(), values.var(0), rtol=1e-4, atol=1e-5)


def test_errors_from_fn_surface_where_the_tile_is_read(tmp_path: Path, chunks: bool) -> None:
    """fn runs once at map_tiles (the first tile); an error on a later tile surfaces from the
    reduction, with no tile left busy, and the operand stays usable."""
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x, expected = _mixed(tmp_path, values)
    calls = []

    def fn(t: cv.Tensor) -> cv.Tensor:
        calls.append(t.shape)
        if len(calls) == 3:
            raise ArithmeticError("fn failed on a later tile")
        return t + 1.0

    lazy = map_tiles(fn, x, rowwise=True)
    with pytest.raises(ArithmeticError, match="later tile"):
        lazy.sum()
    source: Any = x.carrier
    assert not source._busy and not lazy.carrier._busy  # type: ignore[attr-defined]
    assert source.resident_bytes <= source.max_resident_bytes
    np.testing.assert_array_equal(cv.move(x, "cpu").numpy(), expected)
    with pytest.raises(ZeroDivisionError):
        map_tiles(lambda t: 1 / 0, x)  # the first tile: at map_tiles itself
    with pytest.raises(TypeError, match=r"fn must return a CPU tensor"):
        map_tiles(lambda t: t.numpy(), x)
    flip = iter([cv.float32, cv.float64, cv.float64, cv.float64, cv.float64])
    odd = map_tiles(lambda t: t.astype(next(flip)), x)
    with pytest.raises(TypeError, match=r"one dtype for every tile"):
        odd.sum()


@pytest.mark.parametrize("primary", [CPU, Generic])
def test_read_whole_moved_or_materialised_equals_eager(
    tmp_path: Path, chunks: bool, primary: Any
) -> None:
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x, expected = _mixed(tmp_path, values, primary)
    m = x.mean(0)

    def fn(t: cv.Tensor) -> cv.Tensor:
        return (t - m) ** 2

    eager = map_tiles(fn, x, lazy=False)
    stored: Any = eager.carrier
    assert stored._recipe is None and stored.tile_state((0, 0)).residency == "primary"
    want = eager.numpy()
    np.testing.assert_allclose(want, (expected - expected.mean(0)) ** 2, rtol=1e-5, atol=1e-6)
    lazy = map_tiles(fn, x, rowwise=True)
    np.testing.assert_array_equal(lazy.numpy(), want)
    moved = cv.move(lazy, "cpu" if primary is CPU else Generic)
    np.testing.assert_array_equal(moved.numpy(), want)
    np.testing.assert_array_equal((lazy * 1.0).numpy(), want)  # an elementwise direct name
    carrier: Any = lazy.carrier
    assert carrier.tile_state((3, 0)).residency == "lazy"
    carrier.materialize()
    assert carrier._recipe is None and carrier.tile_state((0, 0)).residency == "primary"
    assert carrier.peak_resident_bytes <= carrier.max_resident_bytes + carrier.tile_bytes
    np.testing.assert_array_equal(lazy.numpy(), want)
    _close(lazy.mean(0), eager.mean(0))


def test_residency_requests_and_matmul_materialise(tmp_path: Path) -> None:
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x, expected = _mixed(tmp_path, values)
    lazy = map_tiles(lambda t: t * 3.0, x)
    facet(lazy).evict([(0, 0)])
    assert lazy.carrier.tile_state((0, 0)).residency == "secondary"  # type: ignore[attr-defined]
    np.testing.assert_allclose(lazy.numpy(), expected * 3, rtol=1e-6)
    other = map_tiles(lambda t: t * 3.0, x)
    gram = cv.matmul(cv.permute(other, (1, 0)), other)
    assert other.carrier._recipe is None  # type: ignore[attr-defined]
    np.testing.assert_allclose(gram.numpy(), (3 * expected).T @ (3 * expected), rtol=1e-4)


def test_an_operand_written_after_map_tiles_is_refused(tmp_path: Path) -> None:
    """The lazy tiles read their operands when streamed: a write to an operand in between
    would change them, so reading raises, naming materialize; materialising first keeps the
    values of the time of the call."""
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x, expected = _mixed(tmp_path, values)
    lazy = map_tiles(lambda t: t + 1.0, x)
    kept = map_tiles(lambda t: t + 1.0, x)
    kept.carrier.materialize()  # type: ignore[attr-defined]
    facet(x).evict([(1, 0)])  # residency changes and reads change no value: still lazy
    x.mean(0)
    facet(x).promote([(0, 0)])
    np.testing.assert_allclose(lazy.numpy(), expected + 1, rtol=1e-6)
    x.carrier.import_span(cv.Layout((1,)), np.array([100.0], np.float32))
    with pytest.raises(RuntimeError, match=r"written after map_tiles.*materialize"):
        lazy.sum()
    np.testing.assert_allclose(kept.numpy(), expected + 1, rtol=1e-6)


def test_lazy_of_lazy_and_two_operands(tmp_path: Path, chunks: bool) -> None:
    values = RNG.standard_normal(_SHAPE).astype(np.float32)
    x, expected = _mixed(tmp_path, values)
    y = _file_tiled(tmp_path, -values)
    inner = map_tiles(lambda a, b: a * b, x, y, rowwise=True)
    outer = map_tiles(lambda t: t + 1.0, inner, rowwise=True)
    g = cv.tensor(expected * -values + 1.0, carrier=Generic)
    _close(outer.sum(), g.sum())
    _close(outer.mean(0), g.mean(0))
    mask = map_tiles(cv.lt, x, y)
    assert mask.dtype is cv.bool
    np.testing.assert_array_equal(mask.numpy(), expected < -values)
