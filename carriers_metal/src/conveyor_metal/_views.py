"""The eight representation-preserving operations on Metal: layout algebra on one buffer.

A view shares the input's buffer whenever a layout can express it (the core's
``view_layout``); only ``reshape`` / ``rearrange`` of a layout no strides can express copy,
once, on the device. Gradients are the inverse views, dispatched by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor import functional as F
from conveyor.layout import normalize_axes, rearrange_plan, view_layout
from conveyor.tensor import Tensor
from conveyor_metal._storage import TorchStorage

__all__ = ["VIEW_OPERATIONS"]


def _options(op: cv.Operation, options: cv.OperationExecutionOptions | None) -> Any:
    if options is not None:
        return options
    name = op._operation_name
    assert name is not None  # forward runs only on dispatched operations
    return cv.OperationExecutionOptions(name)


def _copy(x: Tensor, shape: tuple[int, ...], order: tuple[int, ...] | None = None) -> Tensor:
    """A contiguous device copy of ``x`` (optionally split/permuted first), shaped ``shape``."""
    storage = x.carrier
    assert isinstance(storage, TorchStorage)
    values = storage.strided(x.layout)
    if order is not None:
        values = values.permute(order)
    flat = values.contiguous().reshape(-1)
    carrier = type(storage)._from_buffer(flat, x.dtype)
    return Tensor._wrap(carrier, cv.Layout(shape), x.dtype)


class _View(cv.Operation):
    """Base: the core's view algebra, a copy only when no layout can express the result."""

    _input_shape: tuple[int, ...] = ()

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Tensor:
        (x,) = inputs
        self._input_shape = x.shape
        return self._view(x, _options(self, options))

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        name = self._operation_name
        assert name is not None  # forward runs only on dispatched operations
        layout = view_layout(name, x.layout, opts, x.carrier.size)
        if layout is None:
            return self._copied(x, opts)
        return Tensor._wrap(x.carrier, layout, x.dtype)

    def _copied(self, x: Tensor, opts: Any) -> Tensor:
        return _copy(x, tuple(opts.shape))

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        return (F.reshape(gradient, shape=self._input_shape),)


class Reshape(_View):
    pass


class Squeeze(_View):
    pass


class Unsqueeze(_View):
    pass


class Permute(_View):
    _axes: tuple[int, ...] = ()

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        self._axes = normalize_axes(opts.axes, x.ndim)
        return super()._view(x, opts)

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        inverse = tuple(int(a) for a in np.argsort(self._axes))
        return (F.permute(gradient, axes=inverse),)


class BroadcastTo(_View):
    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        # The autograd engine sums a broadcast gradient back to the input's shape.
        return (gradient,)


class View(_View):
    """Basic indexing (ints, slices, None, ...); its gradient scatters on the host."""

    _key: Any = None

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        self._key = opts.key
        return super()._view(x, opts)

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        values = np.zeros(self._input_shape, gradient.dtype.numpy)
        values[self._key] = gradient.numpy()
        return (cv.tensor(values, dtype=gradient.dtype, carrier=type(gradient.carrier)),)


class AsStrided(_View):
    """A raw strided view; ``offset`` counts from the input's own offset."""


class Rearrange(_View):
    """einops-style ``rearrange``: split groups, permute, merge groups."""

    _inverse: tuple[str, tuple[tuple[str, int], ...]] = ("", ())

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        *_, sizes = rearrange_plan(opts.pattern, x.shape, dict(opts.sizes))
        left, right = opts.pattern.split("->")
        named = tuple((n, s) for n, s in sorted(sizes.items()) if not n.startswith("..."))
        self._inverse = (f"{right}->{left}", named)
        return super()._view(x, opts)

    def _copied(self, x: Tensor, opts: Any) -> Tensor:
        split, order, merged, _ = rearrange_plan(opts.pattern, x.shape, dict(opts.sizes))
        layout = x.layout.reshape(split)
        if layout is None:  # the split itself needs a copy first
            x = _copy(x, tuple(split))
            layout = x.layout
        return _copy(Tensor._wrap(x.carrier, layout, x.dtype), tuple(merged), tuple(order))

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        pattern, sizes = self._inverse
        return (F.rearrange(gradient, pattern=pattern, sizes=sizes),)


VIEW_OPERATIONS: dict[str, type[cv.Operation]] = {
    "as_strided": AsStrided,
    "broadcast_to": BroadcastTo,
    "permute": Permute,
    "rearrange": Rearrange,
    "reshape": Reshape,
    "squeeze": Squeeze,
    "unsqueeze": Unsqueeze,
    "view": View,
}
