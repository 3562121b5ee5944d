"""Composed scans: running sums and products, and finite differences along an axis.

``cumulative_prod`` has no dispatch name; it is a Hillis-Steele scan, ``log2(n)`` rounds that
each multiply by the tensor shifted ``2**k`` places (padded with ones), so it stays exact for
zeros and negative values and differentiates through ``mul``.
"""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, full
from conveyor.lib.composed.manipulation import _axis, concatenate
from conveyor.types.dtypes import DType

__all__ = ["cumulative_prod", "cumulative_sum", "diff"]


def _scan_axis(x: Tensor, axis: int | None, what: str) -> int:
    if axis is None:
        if x.ndim > 1:
            msg = f"{what}: axis is required for a tensor of {x.ndim} axes"
            raise ValueError(msg)
        return 0
    return _axis(axis, max(x.ndim, 1), what)


def _initial(x: Tensor, out: Tensor, axis: int, value: Any) -> Tensor:
    shape = list(out.shape)
    shape[axis] = 1
    return concatenate([full(tuple(shape), value, out.dtype, type(x.carrier)), out], axis=axis)


def cumulative_sum(
    x: Tensor,
    /,
    *,
    axis: int | None = None,
    dtype: DType | None = None,
    include_initial: bool = False,
) -> Tensor:
    """Running sums along ``axis`` (a leading zero with ``include_initial``)."""
    a = _scan_axis(x, axis, "cumulative_sum")
    if dtype is not None and dtype is not x.dtype:
        x = x.astype(dtype)
    out = F.cumsum(x, axis=a) if x.ndim else F.reshape(x, shape=(1,))
    if dtype is not None and out.dtype is not dtype:
        out = out.astype(dtype)
    return _initial(x, out, a, 0) if include_initial else out


def cumulative_prod(
    x: Tensor,
    /,
    *,
    axis: int | None = None,
    dtype: DType | None = None,
    include_initial: bool = False,
) -> Tensor:
    """Running products along ``axis`` (a leading one with ``include_initial``)."""
    a = _scan_axis(x, axis, "cumulative_prod")
    if x.ndim == 0:
        x = F.reshape(x, shape=(1,))
    target = dtype or F.reduce_prod(x, axis=()).dtype
    out = x if x.dtype is target else x.astype(target)
    n = out.shape[a]
    lead = (slice(None),) * a
    step = 1
    while step < n:
        shape = list(out.shape)
        shape[a] = step
        ones = full(tuple(shape), 1, target, type(x.carrier))
        shifted = concatenate([ones, out[(*lead, slice(0, n - step))]], axis=a)
        out = F.mul(out, shifted)
        step *= 2
    if out is x:
        out = out.copy()
    return _initial(x, out, a, 1) if include_initial else out


def diff(
    x: Tensor,
    /,
    *,
    axis: int = -1,
    n: int = 1,
    prepend: Tensor | None = None,
    append: Tensor | None = None,
) -> Tensor:
    """The ``n``-th forward difference ``x[i+1] - x[i]`` along ``axis``."""
    a = _axis(axis, x.ndim, "diff")
    if n < 0:
        msg = f"diff: n must be non-negative, got {n}"
        raise ValueError(msg)
    parts = [p for p in (prepend, x, append) if p is not None]
    out = concatenate(parts, axis=a) if len(parts) > 1 else x
    lead = (slice(None),) * a
    for _ in range(n):
        out = F.sub(out[(*lead, slice(1, None))], out[(*lead, slice(None, -1))])
    return out
