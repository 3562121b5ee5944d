"""Chunk boundaries: with tiny chunks, odd shapes and views still give Generic's values.

``CONVEYOR_DASK_CHUNK`` is set to 4 KiB so even small tensors span many chunks; hypothesis draws
shapes from the sizes that break blocking code (empty, 1, 7, 64, 65, 1000, 4097), broadcasts,
permuted views and special float values.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor import functional as F
from conveyor_dask import DaskCarrier, _cluster
from conveyor_generic import Generic
from tests.generic.oracle import HYPOTHESIS, assert_matches

_SIZES = (0, 1, 7, 64, 65, 1000, 4097)


@pytest.fixture(autouse=True)
def _tiny_chunks() -> Iterator[None]:
    os.environ[_cluster.CHUNK_VARIABLE] = "4KiB"
    try:
        yield
    finally:
        del os.environ[_cluster.CHUNK_VARIABLE]


@st.composite
def _matrix(draw: Any) -> np.ndarray[Any, Any]:
    rows = draw(st.sampled_from(_SIZES[:5]))
    cols = draw(st.sampled_from(_SIZES))
    if rows * cols > 70_000:
        cols = 65
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.int64]))
    if np.dtype(dtype).kind == "f":
        elements = st.floats(width=32, allow_nan=True, allow_infinity=True)
    else:
        elements = st.integers(-1000, 1000)
    return draw(hnp.arrays(dtype, (rows, cols), elements=elements, fill=elements))  # type: ignore[no-any-return]


def _both(fn: Any, *arrays: Any) -> tuple[Any, Any]:
    outs = []
    for carrier in (Generic, DaskCarrier):
        tensors = [cv.tensor(a, carrier=carrier) for a in arrays]
        outs.append(fn(*tensors))
    return outs[0], outs[1]


@settings(HYPOTHESIS, max_examples=12)
@given(x=_matrix(), axis=st.sampled_from([0, 1]))
def test_odd_shapes_across_many_chunks_match_generic(x: np.ndarray[Any, Any], axis: int) -> None:
    """Broadcast add, a permuted product, a reduction and a scan agree with Generic exactly."""
    dtype = cv.dtypes.from_numpy(x.dtype)
    row = x[:1] if x.shape[0] else x

    def program(t: Any, r: Any) -> list[Any]:
        s = F.add(t, r)  # broadcast over the rows
        p = F.mul(F.permute(s, axes=(1, 0)), 2)
        return [s, p, F.reduce_max(t, axis=axis) if t.shape[axis] else s, F.cumsum(t, axis=axis)]

    want, got = _both(program, x, row)
    for g, w in zip(got, want, strict=True):
        assert type(g.carrier) is DaskCarrier
        assert_matches(g.numpy(), w.numpy(), w.dtype, ulps=0 if w.dtype is dtype else 2)
