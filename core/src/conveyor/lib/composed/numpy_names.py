"""NumPy's spellings of everyday functions: ``cv.sum``, ``cv.max``, ``cv.clip``, ``cv.dot``, ...

Each is a NumPy signature over a planned name or a composed function that exists under the
library's own name (``reduce_sum``, ``clamp``, ``matmul``, ``unique_values``, ``concatenate``),
so code written for NumPy reads the same with ``cv.`` in front; the axis and bound checks are
the underlying function's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib.composed.contraction import tensordot
from conveyor.lib.composed.manipulation import concatenate
from conveyor.lib.composed.searching import unique_counts, unique_inverse, unique_values

__all__ = ["clip", "dot", "hstack", "max", "min", "sum", "transpose", "unique"]

_Axis = int | Sequence[int] | None


def sum(
    x: Tensor, axis: _Axis = None, dtype: Any = None, keepdims: bool = False
) -> Tensor:  # NumPy's name
    """``np.sum``: the sum over ``axis`` (integers widen to 64 bits), in ``dtype`` if given."""
    total: Tensor = F.reduce_sum(x, axis=axis, keepdims=keepdims)
    return total if dtype is None or total.dtype is dtype else total.astype(dtype)


def max(x: Tensor, axis: _Axis = None, keepdims: bool = False) -> Tensor:  # NumPy's name
    """``np.max``: the largest element over ``axis`` (NaN wins)."""
    return F.reduce_max(x, axis=axis, keepdims=keepdims)


def min(x: Tensor, axis: _Axis = None, keepdims: bool = False) -> Tensor:  # NumPy's name
    """``np.min``: the smallest element over ``axis`` (NaN wins)."""
    return F.reduce_min(x, axis=axis, keepdims=keepdims)


def clip(x: Tensor, /, min: Any = None, max: Any = None) -> Tensor:  # NumPy's names
    """``x`` limited to ``[min, max]`` (absent bounds are not applied; both absent: a copy)."""
    if min is None and max is None:
        return x.copy()
    return F.clamp(x, min, max)


def dot(a: Tensor, b: Tensor, /) -> Tensor:
    """``np.dot``: ``a @ b`` up to 2-D, else a sum over ``a``'s last and ``b``'s second-to-last
    axis (every other axis of both kept, ``a``'s first)."""
    if a.ndim == 0 or b.ndim == 0:
        return F.mul(a, b)
    if a.ndim <= 2 and b.ndim <= 2:
        return F.matmul(a, b)
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 2 if b.ndim > 1 else 0]))


def hstack(tensors: Sequence[Tensor], /) -> Tensor:
    """``np.hstack``: joined along axis 1, or axis 0 for 1-D tensors."""
    return concatenate(tensors, axis=0 if all(t.ndim <= 1 for t in tensors) else 1)


def transpose(x: Tensor, /, axes: Sequence[int] | None = None) -> Tensor:
    """``np.transpose``: the axes reversed, or in the order ``axes`` gives (a view)."""
    return x.transpose() if axes is None else F.permute(x, axes=tuple(axes))


def unique(
    x: Tensor, /, return_inverse: bool = False, return_counts: bool = False
) -> Tensor | tuple[Tensor, ...]:
    """``np.unique`` of the flattened tensor: sorted distinct values, and on request the inverse
    indices (shaped like ``x``) and the counts."""
    if not (return_inverse or return_counts):
        return unique_values(x)
    values = unique_values(x)
    extra: list[Tensor] = []
    if return_inverse:
        extra.append(unique_inverse(x).inverse_indices)
    if return_counts:
        extra.append(unique_counts(x).counts)
    return (values, *extra)
