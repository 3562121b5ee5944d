"""TiledEvictable against Generic over random tilings, dtypes and special values (hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_storage import FileBacked, TiledEvictable, TiledResidencyFacet

DTYPES = (cv.float32, cv.float64, cv.int32, cv.int64, cv.float16)
SPECIAL = (0.0, -0.0, 1.0, np.inf, -np.inf, np.nan)


@st.composite
def _case(draw: Any) -> tuple[Any, ...]:
    ndim = draw(st.integers(1, 3))
    grid = tuple(draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim)))
    extents = [1, 7, 64, 65, 1000, 4097] if ndim == 1 else [1, 2, 7]
    tile = tuple(draw(st.lists(st.sampled_from(extents), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    special = draw(st.booleans()) and not dtype.is_integer
    evicted = draw(st.booleans())
    return grid, tile, dtype, seed, special, evicted


def _tiled(values: np.ndarray[Any, Any], grid: Any, tile: Any, dtype: Any, evicted: bool) -> Any:
    full = CPU.allocate(values.size, dtype)
    if values.size:
        full.import_span(cv.Layout((values.size,)), values.reshape(-1))
    tile_bytes = max(1, int(np.prod(tile))) * dtype.itemsize
    tiled = TiledEvictable(
        full, FileBacked.allocate(0, dtype), grid, tile, max_resident_bytes=2 * tile_bytes
    )
    if evicted:
        tiled.require_facet(TiledResidencyFacet).evict(tiled.primary_tiles)
    return cv.Tensor(tiled, cv.Layout(tiled.shape))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_direct_surface_matches_generic(case: tuple[Any, ...]) -> None:
    """add, mul, relu and reduce_sum over any tiling (1-D tiles up to 4097) equal Generic."""
    grid, tile, dtype, seed, special, evicted = case
    shape = tuple(g * t for g, t in zip(grid, tile, strict=True))
    rng = np.random.default_rng(seed)
    if dtype.is_integer:
        values = rng.integers(-1000, 1000, shape).astype(dtype.numpy)
    else:
        values = rng.standard_normal(shape).astype(dtype.numpy)
        if special and values.size:
            values.reshape(-1)[: len(SPECIAL)] = np.array(SPECIAL[: values.size], dtype.numpy)
    x = _tiled(values, grid, tile, dtype, evicted)
    y = _tiled(values[::-1].copy() if values.ndim else values, grid, tile, dtype, not evicted)
    gx = cv.tensor(values, dtype=dtype, carrier=Generic)
    gy = cv.tensor(y.numpy(), dtype=dtype, carrier=Generic)
    pairs = [
        (cv.add(x, y), cv.add(gx, gy)),
        (cv.mul(x, 3), cv.mul(gx, 3)),
        (cv.relu(x), cv.relu(gx)),
        (cv.reduce_sum(x, axis=0), cv.reduce_sum(gx, axis=0)),
    ]
    for got, want in pairs:
        assert got.dtype is want.dtype and got.shape == want.shape
        np.testing.assert_allclose(
            got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=2e-3, atol=1e-3
        )
    for t in (x, y):
        assert t.carrier.peak_resident_bytes <= 3 * t.carrier.tile_bytes
