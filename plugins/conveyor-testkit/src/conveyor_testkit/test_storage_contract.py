"""Indexing, assignment and moves: what every storing carrier must get exactly right.

Basic indexing must give NumPy's elements and NumPy's refusals; ``x[key] = value`` must write
exactly NumPy's elements; a move to CPU and back must be bit-exact for every storable dtype.
These run on any carrier the kit can allocate, including one that advertises no plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor import plugins
from conveyor_testkit._target import Target, make_tensor

_SHAPE = (3, 4, 5)
_KEYS: list[Any] = [
    0,
    -1,
    (1, 2),
    slice(1, 3),
    (slice(None), slice(None, None, -1)),
    (Ellipsis, 2),
    (None, 0, None),
    (slice(None, None, 2), Ellipsis, slice(3, 0, -2)),
    (2, -1, 4),
]
_BAD_KEYS: list[Any] = [3, (0, 4), (0, 0, 0, 0), (-4,)]


def _values(dtype: cv.DType, shape: tuple[int, ...], seed: int) -> Any:
    """Arbitrary bit patterns of ``dtype`` (every value, NaN payloads included)."""
    itemsize = np.dtype(dtype.numpy).itemsize
    count = int(np.prod(shape))
    raw = np.random.default_rng(seed).integers(0, 256, count * itemsize, dtype=np.uint8)
    if dtype is cv.bool:  # only 0 and 1 are bools; other bytes would be non-canonical
        return (raw[:count] & 1).astype(np.bool_).reshape(shape)
    return raw.view(dtype.numpy).reshape(shape)


def _bits(values: Any) -> bytes:
    return np.ascontiguousarray(values).tobytes()


def _dtypes(target: Target) -> list[cv.DType]:
    preferred = [cv.float32, cv.float64, cv.int32, cv.bool]
    found = [d for d in preferred if d in target.storable] or sorted(
        target.storable, key=lambda d: d.name
    )[:1]
    return found


def _problems_indexing(target: Target, dtype: cv.DType) -> Iterator[str]:
    values = _values(dtype, _SHAPE, 1)
    t = make_tensor(target.cls, values, dtype)
    for key in _KEYS:
        try:
            got = t[key]
            array = np.array(got.numpy())
        except Exception as exc:
            yield f"{dtype.name} x[{key!r}] raised {type(exc).__name__}: {exc}"
            continue
        want = values[key]
        if array.shape != want.shape or _bits(array) != _bits(want):
            yield f"{dtype.name} x[{key!r}] gave other elements than NumPy's x[{key!r}]"
        elif type(got.carrier) is not target.cls:
            yield f"{dtype.name} x[{key!r}] lives on {type(got.carrier).__name__}"
    for key in _BAD_KEYS:
        try:
            t[key]
        except IndexError:
            continue
        except Exception as exc:
            yield f"{dtype.name} x[{key!r}] raised {type(exc).__name__}, NumPy raises IndexError"
            continue
        yield f"{dtype.name} x[{key!r}] was accepted; NumPy refuses it with IndexError"
    views: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = [
        ("x.T", lambda x: x.T, lambda v: v.T),
        ("x.reshape(4, 15)", lambda x: x.reshape(4, 15), lambda v: v.reshape(4, 15)),
        ("x.permute(2, 0, 1)", lambda x: x.permute(2, 0, 1), lambda v: v.transpose(2, 0, 1)),
        ("x.T.reshape(-1)", lambda x: x.T.reshape(-1), lambda v: v.T.reshape(-1)),
        ("x[:, ::2].clone()", lambda x: x[:, ::2].clone(), lambda v: v[:, ::2]),
    ]
    for label, view, expect in views:
        try:
            array = np.array(view(t).numpy())
        except Exception as exc:
            yield f"{dtype.name} {label} raised {type(exc).__name__}: {exc}"
            continue
        if _bits(array) != _bits(expect(values)) or array.shape != expect(values).shape:
            yield f"{dtype.name} {label} gave other elements than NumPy"


def _problems_assignment(target: Target, dtype: cv.DType) -> Iterator[str]:
    for n, key in enumerate(_KEYS):
        values = _values(dtype, _SHAPE, 2)
        t = make_tensor(target.cls, values, dtype)
        if target.surface is not None:
            target.surface.writable(t)  # a tiled tensor is written in its resident tiles
        new = _values(dtype, np.shape(values[key]), 3 + n)
        expected = values.copy()
        expected[key] = new
        version = t.version
        try:
            t[key] = new
            array = np.array(t.numpy())
        except Exception as exc:
            yield f"{dtype.name} x[{key!r}] = v raised {type(exc).__name__}: {exc}"
            continue
        if _bits(array) != _bits(expected):
            yield f"{dtype.name} x[{key!r}] = v wrote other elements than NumPy's assignment"
        elif t.version == version:
            yield f"{dtype.name} x[{key!r}] = v did not bump the tensor's version"


def _problems_views_refused(target: Target, dtype: cv.DType) -> Iterator[str]:
    """A composite with a direct surface refuses every view (project first), bit for bit
    leaving the tensor as it was."""
    assert target.surface is not None
    values = _values(dtype, _SHAPE, 1)
    t = make_tensor(target.cls, values, dtype)
    for key in _KEYS:
        try:
            t[key]
        except NotImplementedError as exc:
            if target.surface.hint not in str(exc):
                yield f"{dtype.name} x[{key!r}]: the refusal does not say to project: {exc}"
            continue
        except Exception as exc:
            yield f"{dtype.name} x[{key!r}] raised {type(exc).__name__}, not NotImplementedError"
            continue
        yield f"{dtype.name} x[{key!r}] gave a view; a direct surface takes the full tensor only"
    if _bits(t.numpy()) != _bits(values):
        yield f"{dtype.name}: a refused view changed the tensor"


class TestIndexingAndAssignment:
    def test_indexing_matches_numpy(self, conveyor_target: Target) -> None:
        """Basic indexing and the tensor views give NumPy's elements and refusals, bit-exact
        (a composite with a direct surface refuses them, telling to project first)."""
        problems_of = (
            _problems_indexing if conveyor_target.surface is None else _problems_views_refused
        )
        problems = [p for d in _dtypes(conveyor_target) for p in problems_of(conveyor_target, d)]
        if problems:
            listed = "\n  ".join(problems[:8])
            pytest.fail(
                f"broken indexing on {conveyor_target.cls.__name__}:\n  {listed}", pytrace=False
            )

    def test_assignment_matches_numpy(self, conveyor_target: Target) -> None:
        """``x[key] = value`` writes exactly NumPy's elements and bumps the version."""
        problems = [
            p for d in _dtypes(conveyor_target) for p in _problems_assignment(conveyor_target, d)
        ]
        if problems:
            listed = "\n  ".join(problems[:8])
            pytest.fail(
                f"broken assignment on {conveyor_target.cls.__name__}:\n  {listed}", pytrace=False
            )


class TestMoves:
    def test_round_trip_with_cpu_is_bit_exact(self, conveyor_target: Target) -> None:
        """Every storable dtype moves to CPU and back (and from CPU) without changing a bit
        (CPU itself: to Generic and back)."""
        cls, problems = conveyor_target.cls, []
        if conveyor_target.surface is not None:
            pytest.skip(
                f"{cls.__name__} exchanges values with compute tensors through project and "
                f"scatter (checked by TestDirectSurface), not through cv.move"
            )
        try:  # CPU's own round trip goes through Generic
            cpu = plugins.host().carrier("generic" if conveyor_target.name == "cpu" else "cpu")
        except ValueError:
            pytest.skip("the round trip needs the 'cpu' carrier: install conveyor-generic")
        for dtype in sorted(conveyor_target.storable, key=lambda d: d.name):
            values = _values(dtype, (3, 5), 4)
            try:
                source = make_tensor(cls, values, dtype)
                there = cv.move(source[:, ::-2], cpu)
                back = cv.move(there, cls)
                arrived = cv.move(cv.tensor(values, dtype, carrier=cpu), cls)
            except Exception as exc:
                problems.append(f"{dtype.name}: {type(exc).__name__}: {exc}")
                continue
            want = _bits(values[:, ::-2])
            if type(there.carrier) is not cpu or _bits(there.numpy()) != want:
                problems.append(f"{dtype.name}: the move to CPU changed the values")
            elif type(back.carrier) is not cls or _bits(back.numpy()) != want:
                problems.append(f"{dtype.name}: the move back from CPU changed the values")
            elif _bits(arrived.numpy()) != _bits(values):
                problems.append(f"{dtype.name}: a CPU tensor moved in arrived changed")
        if problems:
            listed = "\n  ".join(problems[:8])
            pytest.fail(f"broken moves between {cls.__name__} and CPU:\n  {listed}", pytrace=False)
