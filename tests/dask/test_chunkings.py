"""Values do not depend on chunking: odd, mismatched chunkings per operand against Generic.

Each operand gets its own chunking, either the carrier's (under a tiny ``CONVEYOR_DASK_CHUNK``
of a few bytes, so blocks hold a handful of elements) or an irregular one drawn per axis, and
operands are drawn with broadcasting shapes (extent-1 axes, missing axes, empty and 0-d
shapes, Python scalars). Every call must give Generic's values, or Generic's exception. Values
are small integers, so float sums are exact in any order and the comparison is exact.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.types.dtypes import from_numpy
from conveyor_dask import DaskCarrier, _cluster, _storage
from conveyor_generic import Generic
from tests.generic.oracle import HYPOTHESIS, assert_matches, make_tensor
from tests.generic.test_generic_contraction import matmul_shapes

# Few examples, each a handful of round trips to the session cluster: fast, but every run
# meets mismatched chunks, extent-1 axes and empty shapes (derandomized, so always the same).
_SETTINGS = settings(
    HYPOTHESIS,
    max_examples=12,
    suppress_health_check=[*HYPOTHESIS.suppress_health_check, HealthCheck.function_scoped_fixture],
)
# The client's event-loop thread (heartbeats with jitter) draws from the global ``random``
# while hypothesis draws, which hypothesis reports; the test's own draws use no ``random``.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"
)
_DTYPES = (cv.float64, cv.int32)
# Chunk byte limits: a few elements per block, or the carrier's own choice (None).
_LIMITS = st.sampled_from(["8B", "24B", "40B", "96B", None])


@contextlib.contextmanager
def _chunk_limit(limit: str | None) -> Iterator[None]:
    saved = os.environ.pop(_cluster.CHUNK_VARIABLE, None)
    if limit is not None:
        os.environ[_cluster.CHUNK_VARIABLE] = limit
    try:
        yield
    finally:
        os.environ.pop(_cluster.CHUNK_VARIABLE, None)
        if saved is not None:
            os.environ[_cluster.CHUNK_VARIABLE] = saved


@st.composite
def _axis_chunks(draw: st.DrawFn, extent: int) -> tuple[int, ...]:
    """An irregular split of ``extent`` into positive parts (one empty part for extent 0)."""
    if extent <= 1:
        return (extent,)
    cuts = draw(st.sets(st.integers(1, extent - 1), max_size=extent - 1))
    edges = [0, *sorted(cuts), extent]
    return tuple(b - a for a, b in itertools.pairwise(edges))


@st.composite
def _chunking(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """(byte limit, explicit chunks or None) for one operand."""
    explicit = draw(st.booleans())
    chunks = tuple(draw(_axis_chunks(n)) for n in shape) if explicit and shape else None
    return draw(_LIMITS), chunks


@st.composite
def _operand(draw: st.DrawFn, shape: tuple[int, ...], dtype: cv.DType) -> Any:
    """Small integer values of ``dtype`` and ``shape``, with a chunking for the Dask copy."""
    elements = st.booleans() if dtype.is_bool else st.integers(-4, 4)
    values = draw(hnp.arrays(dtype.numpy, shape, elements=elements))
    return values, draw(_chunking(shape))


def _on(carrier: type, operand: Any) -> Any:
    """``operand`` as a tensor of ``carrier``; on Dask, stored under its drawn chunking."""
    if not isinstance(operand, tuple):
        return operand  # a Python scalar
    values, (limit, chunks) = operand
    if carrier is not DaskCarrier:
        return make_tensor(values, from_numpy(values.dtype), carrier)
    with _chunk_limit(limit):
        tensor = make_tensor(values, from_numpy(values.dtype), carrier)
        handle = cv.storage_handle(tensor.carrier)
        if chunks is not None and tensor.layout == cv.Layout.contiguous(values.shape):
            base = _storage.logical(handle, tensor.layout).rechunk(chunks)
            (handle.base,) = _storage.persist("rechunk", [base], handle.session)
            assert handle.base.chunks == chunks
    return tensor


def _run(carrier: type, call: Any, operands: list[Any]) -> Any:
    """``call`` on ``carrier``'s copies of ``operands``: its outputs as NumPy, or its error."""
    tensors = [_on(carrier, o) for o in operands]
    try:
        result = call(*tensors)
    except Exception as exc:
        return exc
    outputs = result if isinstance(result, tuple) else (result,)
    assert all(type(out.carrier) is carrier for out in outputs)
    return [(np.array(out.numpy()), out.dtype) for out in outputs]


def _check(call: Any, operands: list[Any]) -> None:
    """Dask gives Generic's outputs exactly, or Generic's exception type and message."""
    want = _run(Generic, call, operands)
    with _chunk_limit(None):
        got = _run(DaskCarrier, call, operands)
    if isinstance(want, Exception):
        assert type(got) is type(want), (got, want)
        assert str(got).replace("DaskCarrier", "Generic") == str(want)
        return
    assert not isinstance(got, Exception), got
    assert len(got) == len(want)
    for (actual, dtype), (expected, expected_dtype) in zip(got, want, strict=True):
        assert dtype is expected_dtype
        assert_matches(actual, expected, dtype, ulps=0)


_SHAPES = {"max_dims": 3, "min_side": 0, "max_side": 5}


@_SETTINGS
@given(data=st.data())
def test_elementwise_over_mismatched_chunks_matches_generic(data: st.DataObject) -> None:
    """Binary names and select broadcast blocks of differently chunked operands correctly."""
    name = data.draw(st.sampled_from(["add", "mul", "maximum", "lt", "select"]))
    count = 3 if name == "select" else 2
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=count, **_SHAPES))
    dtype = data.draw(st.sampled_from(_DTYPES))
    operands: list[Any] = []
    for index, shape in enumerate(shapes.input_shapes):
        kind = cv.bool if name == "select" and index == 0 else dtype
        if index and data.draw(st.integers(0, 4)) == 0:
            operands.append(data.draw(st.integers(-3, 3)))  # a weak Python scalar
        else:
            operands.append(data.draw(_operand(shape, kind)))
    _check(getattr(F, name), operands)


@_SETTINGS
@given(data=st.data())
def test_reductions_and_lanes_over_odd_chunks_match_generic(data: st.DataObject) -> None:
    """Tree reductions and whole-lane kernels give Generic's values on any chunking."""
    name = data.draw(st.sampled_from(["reduce_sum", "reduce_max", "argmin", "cumsum", "sort"]))
    shape = data.draw(hnp.array_shapes(min_dims=0, **_SHAPES))
    operand = data.draw(_operand(shape, data.draw(st.sampled_from(_DTYPES))))
    axes = list(range(-len(shape), len(shape)))
    fields: dict[str, Any] = {}
    if name in ("reduce_sum", "reduce_max"):
        fields["keepdims"] = data.draw(st.booleans())
        fields["axis"] = data.draw(
            st.none() | st.sampled_from(axes or [0]) | st.lists(st.sampled_from(axes or [0]),
                                                              unique=True).map(tuple)
        )  # fmt: skip
    elif name == "argmin":
        fields["axis"] = data.draw(st.none() | st.sampled_from(axes or [0]))
    else:
        fields["axis"] = data.draw(st.sampled_from(axes or [0]))
    _check(lambda x: getattr(F, name)(x, **fields), [operand])


@_SETTINGS
@given(data=st.data())
def test_matmul_over_odd_chunks_matches_generic(data: st.DataObject) -> None:
    """Blocked products of operands chunked differently along the contracted axis."""
    a_shape, b_shape = data.draw(matmul_shapes())
    dtype = data.draw(st.sampled_from(_DTYPES))
    _check(F.matmul, [data.draw(_operand(a_shape, dtype)), data.draw(_operand(b_shape, dtype))])


@_SETTINGS
@given(data=st.data())
def test_views_of_odd_chunks_match_generic(data: st.DataObject) -> None:
    """Views (permute, slicing, broadcast, squeeze) of chunked data, used with another operand."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    x = data.draw(_operand(shape, cv.float64))
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    key = tuple(
        data.draw(st.sampled_from([slice(None), slice(1, None, 2), slice(None, None, -1), 0]))
        for _ in shape
    )
    result_shape = np.empty(shape).transpose(perm)[key].shape
    other = data.draw(_operand((2, *result_shape) if data.draw(st.booleans()) else result_shape,
                               cv.float64))  # fmt: skip

    def call(x: Any, y: Any) -> Any:
        view = F.permute(x, axes=perm)[key]
        view = F.squeeze(F.unsqueeze(view, axes=(0,)), axes=(0,))
        return F.add(F.broadcast_to(view, shape=y.shape), y), view

    _check(call, [x, other])


def test_row_broadcast_over_mismatched_chunks_matches_numpy() -> None:
    """The case that once failed: (64, 64) in 32x32 blocks with a 64x64 block and a (1, 64) row."""
    rng = np.random.default_rng(7)
    a, b, row = (
        rng.standard_normal((64, 64)),
        rng.standard_normal((64, 64)),
        rng.standard_normal(64),
    )
    x = _on(DaskCarrier, (a, (None, ((32, 32), (32, 32)))))
    y = _on(DaskCarrier, (b, (None, ((64,), (64,)))))
    r = _on(DaskCarrier, (row.reshape(1, 64), ("96B", None)))
    np.testing.assert_array_equal(F.add(x, y).numpy(), a + b)
    np.testing.assert_array_equal(F.mul(F.add(x, r), y).numpy(), (a + row) * b)
