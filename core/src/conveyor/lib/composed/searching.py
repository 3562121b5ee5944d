"""Composed searching, sorting and set functions over ``select``, ``sort`` and comparisons.

Functions whose result shape depends on the data (``nonzero``, the ``unique_*`` family) compute
a mask on the carrier and read only that mask to size their result, as ``item()`` reads a value;
every value they return is still gathered on the carrier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, zeros
from conveyor.lib.composed.creation import constant
from conveyor.lib.composed.logic import logical_and, logical_or, truth
from conveyor.lib.composed.manipulation import concatenate
from conveyor.lib.composed.predicates import isnan
from conveyor.types import dtypes
from conveyor.types.layout import normalize_axis

if TYPE_CHECKING:
    pass

__all__ = [
    "UniqueAllResult",
    "UniqueCountsResult",
    "UniqueInverseResult",
    "argsort",
    "nonzero",
    "searchsorted",
    "sort",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "where",
]


def where(condition: Tensor, a: Any, b: Any, /) -> Tensor:
    """``a`` where ``condition`` holds, else ``b`` (broadcast); one-argument form: ``nonzero``."""
    return F.select(truth(condition), a, b)


def sort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The values sorted along ``axis`` (NaN last ascending)."""
    if x.ndim == 0:
        _zero_d_axis("sort", x, axis)
        return x.copy()
    values, _ = F.sort(x, axis=axis, descending=descending, stable=stable)
    return values


def argsort(
    x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True
) -> Tensor:
    """The int64 indices that sort ``x`` along ``axis`` (stable: ties keep their order)."""
    if x.ndim == 0:
        _zero_d_axis("argsort", x, axis)
        return zeros((), dtypes.int64, type(x.carrier))
    _, indices = F.sort(x, axis=axis, descending=descending, stable=stable)
    return indices


def _zero_d_axis(what: str, x: Tensor, axis: int) -> None:
    """Refuse an axis a 0-d tensor does not answer to (only 0 and -1), as ``sort`` does."""
    try:
        normalize_axis(axis, 0)
    except IndexError as exc:
        msg = f"{what} on {type(x.carrier).__name__}: {exc}; pass an axis in [-1, 1)"
        raise type(exc)(msg) from None


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    """One int64 tensor of positions per axis where ``x`` is non-zero (row-major order)."""
    import numpy as np

    if x.ndim == 0:
        msg = "nonzero: 0-d tensors are not supported; use x[None]"
        raise ValueError(msg)
    mask = truth(x).numpy()
    return tuple(constant(p, dtypes.int64, x) for p in np.nonzero(mask))


def searchsorted(
    sorted_values: Tensor, x: Any, /, *, side: str = "left", sorter: Tensor | None = None
) -> Tensor:
    """Insertion positions of ``x`` in the 1-D ascending ``sorted_values`` (int64).

    Counted with one broadcast comparison: the number of entries below ``x`` (``side='left'``)
    or not above it (``'right'``). NaN sorts after every number, as ``sort`` puts it (and
    NumPy 2 counts it): a NaN ``x`` goes after the numbers, and NaN entries are above them.
    """
    if side not in ("left", "right"):
        msg = f"searchsorted: side must be 'left' or 'right', got {side!r}"
        raise ValueError(msg)
    if sorted_values.ndim != 1:
        msg = f"searchsorted: sorted_values must be 1-D, got shape {sorted_values.shape}"
        raise ValueError(msg)
    if sorter is not None:
        from conveyor.lib.composed.manipulation import take

        sorted_values = take(sorted_values, sorter)
    values = x if isinstance(x, Tensor) else constant(x, sorted_values.dtype, sorted_values)
    column = F.unsqueeze(values, axes=values.ndim)
    compare = F.lt if side == "left" else F.le
    below = compare(sorted_values, column)
    if sorted_values.dtype.is_floating or values.dtype.is_floating:
        # Comparisons with NaN are false; in sort order NaN is the greatest value.
        nan_x = isnan(column)
        below = logical_or(
            below,
            nan_x if side == "right" else logical_and(nan_x, F.logical_not(isnan(sorted_values))),
        )
    return F.reduce_sum(below, axis=-1)


class UniqueAllResult(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def unique_all(x: Tensor, /) -> UniqueAllResult:
    """Sorted distinct values, first positions, inverse indices and counts (NaNs each distinct)."""
    import numpy as np

    flat = F.reshape(x, shape=(x.size,))
    if x.size == 0:
        empty = zeros((0,), dtypes.int64, type(x.carrier))
        return UniqueAllResult(flat, empty, F.reshape(empty, shape=x.shape), empty)
    values, order = F.sort(flat, axis=0, stable=True)
    # A run starts where a value differs from its predecessor (NaN differs from everything).
    starts = concatenate([constant([True], dtypes.bool_, x), F.ne(values[1:], values[:-1])], axis=0)
    start_positions = np.flatnonzero(starts.numpy())
    first = constant(start_positions, dtypes.int64, x)
    unique = F.gather(values, first, axis=0)
    indices = F.gather(order, first, axis=0)
    run = F.sub(F.cumsum(starts.astype(dtypes.int64), axis=0), 1)
    inverse = F.scatter(zeros((x.size,), dtypes.int64, type(x.carrier)), order, run, axis=0)
    ends = np.append(start_positions[1:], x.size)
    counts = constant(ends - start_positions, dtypes.int64, x)
    return UniqueAllResult(unique, indices, F.reshape(inverse, shape=x.shape), counts)


def unique_counts(x: Tensor, /) -> UniqueCountsResult:
    """Sorted distinct values and how often each occurs."""
    result = unique_all(x)
    return UniqueCountsResult(result.values, result.counts)


def unique_inverse(x: Tensor, /) -> UniqueInverseResult:
    """Sorted distinct values and, per element of ``x``, the index of its value among them."""
    result = unique_all(x)
    return UniqueInverseResult(result.values, result.inverse_indices)


def unique_values(x: Tensor, /) -> Tensor:
    """Sorted distinct values."""
    return unique_all(x).values
