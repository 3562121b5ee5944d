"""Composed shape manipulation: joining, splitting, reordering and repeating tensors.

Joins scatter each piece into a zero tensor of the joined shape (one ``scatter`` per piece, the
index a broadcast ``arange``), splits and flips are views, and repeats are ``gather`` with an
index ladder, so every function runs on any carrier planning those names and differentiates
through their gradients.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, full, zeros
from conveyor.lib.composed.creation import constant
from conveyor.types import dtypes

if TYPE_CHECKING:
    pass

__all__ = [
    "broadcast_arrays",
    "concatenate",
    "expand_dims",
    "flip",
    "moveaxis",
    "pad",
    "repeat",
    "roll",
    "split",
    "stack",
    "take",
    "take_along_axis",
    "tile",
    "unstack",
]


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        msg = f"{what}: axis {axis} is out of range for {ndim} axes"
        raise IndexError(msg)
    return axis % ndim


def _result_dtype(tensors: Sequence[Tensor]) -> dtypes.DType:
    result = tensors[0].dtype
    for t in tensors[1:]:
        result = dtypes.promote_types(result, t.dtype)
    return result


def _ladder(start: int, count: int, axis: int, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """``arange(start, start + count)`` laid along ``axis`` and broadcast to ``shape``."""
    import numpy as np

    line = [1] * len(shape)
    line[axis] = count
    index = constant(np.arange(start, start + count).reshape(line), dtypes.int64, like)
    return F.broadcast_to(index, shape=shape)


def concatenate(tensors: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    """The tensors joined along ``axis`` (``None``: flattened first), dtypes promoted.

    Raises:
        ValueError: no tensors, different numbers of axes, or extents differing off ``axis``.
    """
    tensors = list(tensors)
    if not tensors:
        msg = "concatenate: needs at least one tensor"
        raise ValueError(msg)
    if axis is None:
        tensors = [F.reshape(t, shape=(t.size,)) for t in tensors]
        axis = 0
    first = tensors[0]
    if first.ndim == 0:
        msg = "concatenate: 0-d tensors cannot be joined; use stack"
        raise ValueError(msg)
    axis = _axis(axis, first.ndim, "concatenate")
    for t in tensors[1:]:
        same = t.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=False)) if i != axis
        )
        if not same:
            msg = (
                f"concatenate: shapes {first.shape} and {t.shape} differ off axis {axis}; every "
                f"tensor needs the same extents except along the joined axis"
            )
            raise ValueError(msg)
    dtype = _result_dtype(tensors)
    tensors = [t if t.dtype is dtype else t.astype(dtype) for t in tensors]
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    out = zeros(tuple(shape), dtype, type(first.carrier))
    offset = 0
    for t in tensors:
        count = t.shape[axis]
        if t.size:
            out = F.scatter(out, _ladder(offset, count, axis, t.shape, t), t, axis=axis)
        offset += count
    return out


def stack(tensors: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    """The tensors (of one shape) joined along a new axis ``axis``."""
    tensors = list(tensors)
    if not tensors:
        msg = "stack: needs at least one tensor"
        raise ValueError(msg)
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        msg = f"stack: every tensor needs the same shape, got {sorted(shapes)}"
        raise ValueError(msg)
    axis = _axis(axis, tensors[0].ndim + 1, "stack")
    return concatenate([F.unsqueeze(t, axes=axis) for t in tensors], axis=axis)


def split(x: Tensor, indices_or_sections: int | Sequence[int], /, *, axis: int = 0) -> list[Tensor]:
    """Views of ``x`` cut along ``axis``: ``n`` equal parts, or at the given indices (NumPy)."""
    axis = _axis(axis, x.ndim, "split")
    extent = x.shape[axis]
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0 or extent % indices_or_sections:
            msg = (
                f"split: {extent} elements along axis {axis} do not divide into "
                f"{indices_or_sections} equal parts; pass the cut indices instead"
            )
            raise ValueError(msg)
        step = extent // indices_or_sections
        cuts = list(range(step, extent, step)) if step else [0] * (indices_or_sections - 1)
    else:
        # NumPy slices ``x[a:b]`` between consecutive cuts: a negative cut counts from the end
        # and a cut past either end is clamped to it.
        cuts = [min(max(c + extent if c < 0 else c, 0), extent) for c in indices_or_sections]
    bounds = [0, *cuts, extent]
    lead = (slice(None),) * axis
    return [x[(*lead, slice(lo, max(lo, hi)))] for lo, hi in itertools.pairwise(bounds)]


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The views ``x[..., i, ...]`` along ``axis``."""
    axis = _axis(axis, x.ndim, "unstack")
    lead = (slice(None),) * axis
    return tuple(x[(*lead, i)] for i in range(x.shape[axis]))


def expand_dims(x: Tensor, /, axis: int | Sequence[int] = 0) -> Tensor:
    """A view with unit axes inserted at ``axis`` (counted in the result)."""
    return F.unsqueeze(x, axes=axis)


def moveaxis(x: Tensor, source: int | Sequence[int], destination: int | Sequence[int], /) -> Tensor:
    """A view with axes ``source`` moved to ``destination`` (the others keep their order)."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        msg = f"moveaxis: {len(src)} source axes but {len(dst)} destinations"
        raise ValueError(msg)
    src = [_axis(a, x.ndim, "moveaxis") for a in src]
    dst = [_axis(a, x.ndim, "moveaxis") for a in dst]
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return F.permute(x, axes=tuple(order))


def flip(x: Tensor, /, *, axis: int | Sequence[int] | None = None) -> Tensor:
    """A view with the order of elements reversed along ``axis`` (``None``: every axis)."""
    axes = range(x.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    normalised = [_axis(a, x.ndim, "flip") for a in axes]
    chosen = set(normalised)
    if len(chosen) != len(normalised):
        msg = f"flip: repeated axis in {tuple(axes)!r}; name each axis once"
        raise ValueError(msg)
    key = tuple(slice(None, None, -1) if i in chosen else slice(None) for i in range(x.ndim))
    return x[key] if key else x


def roll(
    x: Tensor, /, shift: int | Sequence[int], *, axis: int | Sequence[int] | None = None
) -> Tensor:
    """Elements shifted by ``shift`` along ``axis``, wrapping around (``None``: flattened)."""
    if axis is None:
        flat = F.reshape(x, shape=(x.size,))
        return F.reshape(roll(flat, shift, axis=0), shape=x.shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        msg = f"roll: {len(shifts)} shifts for {len(axes)} axes"
        raise ValueError(msg)
    out = x
    for s, a in zip(shifts, axes, strict=True):
        a = _axis(a, x.ndim, "roll")
        n = x.shape[a]
        if n == 0 or s % n == 0:
            continue
        s %= n
        lead = (slice(None),) * a
        out = concatenate([out[(*lead, slice(n - s, None))], out[(*lead, slice(0, n - s))]], axis=a)
    return out


def pad(x: Tensor, pad_width: Any, /, *, value: Any = 0) -> Tensor:
    """``x`` padded with ``value`` (NumPy's ``pad_width``: an int, a pair, or a pair per axis)."""
    import numpy as np

    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    if (widths < 0).any():
        msg = f"pad: widths must be non-negative, got {pad_width!r}"
        raise ValueError(msg)
    out = x
    for a, (before, after) in enumerate(widths.tolist()):
        if not before and not after:
            continue
        pieces = []
        shape = list(out.shape)
        if before:
            shape[a] = before
            pieces.append(full(tuple(shape), value, x.dtype, type(x.carrier)))
        pieces.append(out)
        if after:
            shape[a] = after
            pieces.append(full(tuple(shape), value, x.dtype, type(x.carrier)))
        out = concatenate(pieces, axis=a)
    return out


def tile(x: Tensor, repetitions: Sequence[int] | int, /) -> Tensor:
    """``x`` repeated ``repetitions[i]`` times along each axis (NumPy's ``tile``)."""
    reps = [repetitions] if isinstance(repetitions, int) else list(repetitions)
    ndim = max(len(reps), x.ndim)
    reps = [1] * (ndim - len(reps)) + reps
    shape = [1] * (ndim - x.ndim) + list(x.shape)
    interleaved = [v for r, d in zip(reps, shape, strict=True) for v in (1, d)]
    spread = [v for r, d in zip(reps, shape, strict=True) for v in (r, d)]
    base = F.reshape(x, shape=tuple(interleaved))
    wide = F.broadcast_to(base, shape=tuple(spread))
    return F.reshape(wide, shape=tuple(r * d for r, d in zip(reps, shape, strict=True)))


def repeat(x: Tensor, repeats: Any, /, *, axis: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``axis`` (``None``: flattened first)."""
    import numpy as np

    if axis is None:
        x = F.reshape(x, shape=(x.size,))
        axis = 0
    axis = _axis(axis, x.ndim, "repeat")
    counts = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
    if (counts < 0).any():
        msg = f"repeat: repeats must be non-negative, got {repeats!r}"
        raise ValueError(msg)
    positions = np.repeat(np.arange(x.shape[axis]), counts)
    shape = list(x.shape)
    shape[axis] = positions.size
    if positions.size == 0 or x.size == 0:
        return zeros(tuple(shape), x.dtype, type(x.carrier))
    line = [1] * x.ndim
    line[axis] = positions.size
    index = F.broadcast_to(constant(positions.reshape(line), dtypes.int64, x), shape=tuple(shape))
    return F.gather(x, index, axis=axis)


def _wrap_negative(index: Tensor, extent: int) -> Tensor:
    return F.select(F.lt(index, 0), F.add(index, extent), index)


def take(x: Tensor, indices: Any, /, *, axis: int | None = None) -> Tensor:
    """Elements at 1-D ``indices`` along ``axis`` (negative indices count from the end)."""
    if axis is None:
        x = F.reshape(x, shape=(x.size,))
        axis = 0
    axis = _axis(axis, x.ndim, "take")
    index = indices if isinstance(indices, Tensor) else constant(indices, dtypes.int64, x)
    if index.ndim != 1:
        msg = f"take: indices must be 1-D, got shape {index.shape}"
        raise ValueError(msg)
    shape = list(x.shape)
    shape[axis] = index.size
    if index.size and x.size == 0:
        _refuse_out_of_range(x, index, axis)  # gather, which would, has no element to check
    if index.size == 0 or x.size == 0:
        return zeros(tuple(shape), x.dtype, type(x.carrier))
    line = [1] * x.ndim
    line[axis] = index.size
    index = _wrap_negative(F.reshape(index, shape=tuple(line)), x.shape[axis])
    return F.gather(x, F.broadcast_to(index, shape=tuple(shape)), axis=axis)


def _refuse_out_of_range(x: Tensor, index: Tensor, axis: int) -> None:
    """Refuse indices outside ``[-extent, extent)`` of ``x``'s ``axis`` (``IndexError``)."""
    values = index.numpy()
    extent = x.shape[axis]
    bad = values[(values < -extent) | (values >= extent)]
    if bad.size:
        msg = (
            f"take on {type(x.carrier).__name__}: index {bad[0].item()} is out of range for "
            f"axis {axis} with extent {extent}; indices must lie in [{-extent}, {extent})"
        )
        raise IndexError(msg)


def take_along_axis(x: Tensor, indices: Tensor, /, *, axis: int = -1) -> Tensor:
    """``x`` gathered along ``axis`` at ``indices`` (other axes broadcast against each other)."""
    import numpy as np

    axis = _axis(axis, x.ndim, "take_along_axis")
    if indices.ndim != x.ndim:
        msg = f"take_along_axis: indices need {x.ndim} axes, got shape {indices.shape}"
        raise ValueError(msg)
    off_x = [1 if i == axis else d for i, d in enumerate(x.shape)]
    off_i = [1 if i == axis else d for i, d in enumerate(indices.shape)]
    common = list(np.broadcast_shapes(tuple(off_x), tuple(off_i)))
    x_shape = tuple(x.shape[axis] if i == axis else d for i, d in enumerate(common))
    i_shape = tuple(indices.shape[axis] if i == axis else d for i, d in enumerate(common))
    if math.prod(i_shape) == 0:
        return zeros(i_shape, x.dtype, type(x.carrier))
    index = _wrap_negative(F.broadcast_to(indices, shape=i_shape), x.shape[axis])
    return F.gather(F.broadcast_to(x, shape=x_shape), index, axis=axis)


def broadcast_arrays(*tensors: Tensor) -> list[Tensor]:
    """Views of the tensors broadcast to their common shape."""
    import numpy as np

    shape = np.broadcast_shapes(*(t.shape for t in tensors))
    return [F.broadcast_to(t, shape=shape) for t in tensors]
