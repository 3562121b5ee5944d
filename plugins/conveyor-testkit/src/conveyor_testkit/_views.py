"""View operands: the same logical values as a case's operands, behind non-trivial layouts.

A kernel that reads a carrier's storage handle as if every operand were contiguous from slot 0
gives right answers on every freshly built tensor and wrong ones on ``a[1:]``, ``a.T`` or a
broadcast. So each oracle case is run again with its tensor operands rebuilt as views of a
larger buffer of the target carrier. The kinds, in the order they rotate over a plan's cases:

- ``offset``: a contiguous run starting three slots into its buffer (``a[3:]`` of a flat one);
- ``transposed``: a permuted view of the reversed-axes data (``b.T``); 0-d and 1-d operands get
  a stride-2 view instead (every other slot);
- ``negative-step``: every axis reversed over flipped data (``b[::-1, ::-1]``);
- ``broadcast``: the first operand read with stride 0 along its first axis of extent > 1 (its
  values change to one repeated slice, so the oracle recomputes the expected result);
- ``view-op result``: the result of the carrier's own dispatched view operations
  (``b[k::-1].T``): an offset, negative-stride, permuted tensor an earlier operation produced.

All but the last are built with ``cv.Tensor(carrier, layout)`` directly over the buffer, so they
need no view operation from the carrier; the last needs its ``view`` and ``permute``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

import conveyor as cv

__all__ = ["LAYOUT_KINDS", "VIEW_OP", "ViewKind", "applies", "view_tensor", "view_values"]

_Array = np.ndarray[Any, Any]
_Make = Callable[[Any, cv.DType], cv.Tensor]

_PAD: Final = 3  # slots before an offset view: odd, so the view is not aligned either


@dataclass(frozen=True)
class ViewKind:
    """One kind of view operand; ``label`` appears in failure reports."""

    name: str
    label: str


OFFSET: Final = ViewKind("offset", "offset view (3 slots into its buffer)")
TRANSPOSED: Final = ViewKind("transposed", "transposed view (or stride 2 below 2-D)")
NEGATIVE: Final = ViewKind("negative-step", "negative-step view (every axis reversed)")
BROADCAST: Final = ViewKind("broadcast", "broadcast view (stride 0) of the first operand")
VIEW_OP: Final = ViewKind("view-op result", "result of the carrier's view operations")
LAYOUT_KINDS: Final = (OFFSET, TRANSPOSED, NEGATIVE, BROADCAST)
"""The kinds built straight over a buffer, rotated over a plan's cases."""


def _broadcast_axis(shape: tuple[int, ...]) -> int | None:
    """The axis a broadcast view reads with stride 0: the first of extent > 1."""
    return next((i for i, n in enumerate(shape) if n > 1), None)


def applies(kind: ViewKind, arrays: list[_Array]) -> bool:
    """Whether ``kind`` changes anything for operands ``arrays`` (a broadcast needs an axis of
    extent > 1 in the first one; a 0-d operand has no axis to transpose or reverse)."""
    if not arrays:
        return False
    if kind is BROADCAST:
        return _broadcast_axis(arrays[0].shape) is not None
    if kind in (NEGATIVE, VIEW_OP):
        return any(a.ndim for a in arrays)
    return True


def view_values(kind: ViewKind, first: bool, values: _Array) -> _Array:
    """The logical values an operand (``first``: the first tensor operand) holds as a ``kind``
    view: only a broadcast changes them, to its first slice repeated along the broadcast axis."""
    axis = _broadcast_axis(values.shape)
    if kind is not BROADCAST or not first or axis is None:
        return values
    head = np.take(values, [0], axis=axis)
    return np.ascontiguousarray(np.broadcast_to(head, values.shape))


def _over(base: cv.Tensor, layout: cv.Layout) -> cv.Tensor:
    return cv.Tensor(base.carrier, layout)


def view_tensor(kind: ViewKind, first: bool, values: _Array, dtype: cv.DType, make: _Make) -> Any:
    """A tensor of the carrier ``make`` builds on, holding ``view_values(kind, first, values)``
    behind a ``kind`` layout.

    Raises:
        NotImplementedError: the carrier does not dispatch the view operations (``view-op
            result`` only).
    """
    shape, ndim = values.shape, values.ndim
    if kind is BROADCAST:
        axis = _broadcast_axis(shape)
        if not first or axis is None:
            return view_tensor(OFFSET, first, values, dtype, make)
        base = make(np.ascontiguousarray(np.take(values, [0], axis=axis)), dtype)
        return _over(base, base.layout.broadcast_to(shape))
    if kind is TRANSPOSED and ndim >= 2:
        order = tuple(range(ndim - 1, -1, -1))
        base = make(np.ascontiguousarray(values.transpose(order)), dtype)
        return _over(base, base.layout.permute(order))
    if kind is TRANSPOSED:  # 0-d or 1-d: every other slot of a two-column buffer
        columns = np.zeros((values.size, 2), values.dtype)
        columns[:, 0] = values.reshape(-1)
        base = make(columns, dtype)
        return _over(base, _reshaped(base.layout.index((slice(None), 0)), shape))
    if kind is NEGATIVE and ndim:
        base = make(np.ascontiguousarray(np.flip(values)), dtype)
        return _over(base, base.layout.index((slice(None, None, -1),) * ndim))
    if kind is VIEW_OP and ndim:
        return _view_op_result(values, dtype, make)
    # OFFSET (and the kinds a 0-d operand cannot take): a contiguous run inside a padded buffer.
    padded = np.zeros(values.size + _PAD + 2, values.dtype)
    padded[_PAD : _PAD + values.size] = values.reshape(-1)
    base = make(padded, dtype)
    return _over(base, _reshaped(base.layout.index(slice(_PAD, _PAD + values.size)), shape))


def _reshaped(layout: cv.Layout, shape: tuple[int, ...]) -> cv.Layout:
    """``layout`` (one axis) reshaped to ``shape`` as a view: always possible here, since the
    views reshaped are a contiguous run or a single strided element."""
    if layout.shape == shape:
        return layout
    found = layout.reshape(shape)
    assert found is not None  # see the docstring
    return found


def _view_op_result(values: _Array, dtype: cv.DType, make: _Make) -> cv.Tensor:
    """``values`` as ``b[k::-1].T`` of a buffer ``b``, through the carrier's own view names."""
    ndim = values.ndim
    order = tuple(range(ndim - 1, -1, -1))
    inner = values.transpose(order) if ndim >= 2 else values
    first = inner.shape[0]
    pad = np.zeros((1, *inner.shape[1:]), values.dtype)
    buffer = np.ascontiguousarray(np.concatenate([np.flip(inner, 0), pad]))
    base = make(buffer, dtype)
    key = slice(first - 1, None, -1) if first else slice(0, 0)
    view = base[key]  # dispatches the carrier's "view"
    return view.T if ndim >= 2 else view  # dispatches its "permute"
