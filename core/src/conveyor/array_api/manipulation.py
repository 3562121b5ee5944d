"""Array API manipulation functions: views where the standard allows, composed joins otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C
from conveyor.types.layout import broadcast_shapes as broadcast_shapes_

__all__ = [
    "broadcast_arrays",
    "broadcast_shapes",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "tile",
    "unstack",
]

broadcast_arrays = C.broadcast_arrays
broadcast_shapes = broadcast_shapes_
moveaxis = C.moveaxis
tile = C.tile
unstack = C.unstack


def broadcast_to(x: Tensor, /, shape: Sequence[int]) -> Tensor:
    return F.broadcast_to(x, shape=tuple(shape))


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    return C.concatenate(arrays, axis=axis)


def expand_dims(x: Tensor, /, axis: int = 0) -> Tensor:
    if not -x.ndim - 1 <= axis <= x.ndim:
        msg = f"expand_dims: axis {axis} is out of range for {x.ndim} axes"
        raise IndexError(msg)
    return F.unsqueeze(x, axes=axis)


def flip(x: Tensor, /, *, axis: int | Sequence[int] | None = None) -> Tensor:
    return C.flip(x, axis=axis)


def permute_dims(x: Tensor, /, axes: Sequence[int]) -> Tensor:
    return F.permute(x, axes=tuple(axes))


def repeat(x: Tensor, repeats: Any, /, *, axis: int | None = None) -> Tensor:
    return C.repeat(x, repeats, axis=axis)


def reshape(x: Tensor, /, shape: Sequence[int], *, copy: bool | None = None) -> Tensor:
    """``x`` under ``shape``: a view when the layout allows, a copy otherwise.

    Raises:
        ValueError: ``copy=False`` but the layout cannot be viewed under ``shape``.
    """
    target = tuple(shape)
    if copy is False and x.layout.reshape(_resolved(target, x.size)) is None:
        msg = f"reshape: copy=False, but shape {target} cannot be a view of this layout"
        raise ValueError(msg)
    result = F.reshape(x, shape=target)
    return result.copy() if copy else result


def _resolved(shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    if -1 not in shape:
        return shape
    known = 1
    for d in shape:
        if d != -1:
            known *= d
    return tuple(size // known if d == -1 and known else d for d in shape)


def roll(
    x: Tensor, /, shift: int | Sequence[int], *, axis: int | Sequence[int] | None = None
) -> Tensor:
    return C.roll(x, shift, axis=axis)


def squeeze(x: Tensor, /, axis: int | Sequence[int]) -> Tensor:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            msg = f"squeeze: axis {a} is out of range for {x.ndim} axes"
            raise IndexError(msg)
        if x.shape[a] != 1:
            msg = f"squeeze: axis {a} has extent {x.shape[a]}, not 1"
            raise ValueError(msg)
    return F.squeeze(x, axes=axes)


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    return C.stack(arrays, axis=axis)
