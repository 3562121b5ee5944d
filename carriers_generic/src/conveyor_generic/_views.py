"""The eight representation-preserving operations, shared by Generic and CPU.

A view is layout algebra over the input's own carrier: the result shares storage with the input
whenever the layout can express it, and only ``reshape`` / ``rearrange`` of a layout that cannot
be re-viewed fall back to a contiguous copy (as NumPy does). Gradients are the inverse views.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor import functional as F
from conveyor.layout import normalize_axes, rearrange_plan, slot_indices, view_layout
from conveyor.tensor import Tensor
from conveyor_generic._storage import ArrayStorage

__all__ = ["VIEW_OPERATIONS"]


def _options(op: cv.Operation, options: cv.OperationExecutionOptions | None) -> Any:
    if options is not None:
        return options
    name = op._operation_name
    assert name is not None  # forward runs only on dispatched operations
    return cv.OperationExecutionOptions(name)


def _copy(x: Tensor, values: np.ndarray[Any, Any]) -> Tensor:
    storage = x.carrier
    assert isinstance(storage, ArrayStorage)
    return type(storage).wrap(np.ascontiguousarray(values), x.dtype)


# (name, input layout, option value) -> result layout (None: only a copy can), for the names
# whose layout depends on their one validated option only. Keyed by the option's value (ints,
# tuples, None), not the options record, whose hash and equality are Python calls.
_LAYOUTS: dict[tuple[Any, ...], cv.Layout | None] = {}
_LAYOUTS_MAX = 4096
_MEMOISED = {
    "broadcast_to": "shape",
    "permute": "axes",
    "reshape": "shape",
    "squeeze": "axes",
    "unsqueeze": "axes",
}


class _View(cv.Operation):
    """Base: the core's view algebra, a copy only when no layout can express the result."""

    _input_shape: tuple[int, ...] = ()

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Tensor:
        (x,) = inputs
        self._input_shape = x._layout.shape
        return self._view(x, options if options is not None else _options(self, options))

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        name = self._operation_name
        assert name is not None  # forward runs only on dispatched operations
        source = x._layout
        field = _MEMOISED.get(name)
        if field is not None:
            key = (name, source.shape, source.strides, source.offset, getattr(opts, field))
            try:
                layout = _LAYOUTS[key]
            except KeyError:
                layout = view_layout(name, source, opts, 0)
                if len(_LAYOUTS) >= _LAYOUTS_MAX:
                    _LAYOUTS.clear()
                _LAYOUTS[key] = layout
        else:
            layout = view_layout(name, source, opts, x._carrier.size)
        if layout is None:
            return _copy(x, self._copied(x.numpy(), opts))
        return Tensor._wrap(x._carrier, layout, x._dtype)

    def _copied(self, values: np.ndarray[Any, Any], opts: Any) -> np.ndarray[Any, Any]:
        """The values of a result no layout can express (only reshape and rearrange)."""
        return values.reshape(opts.shape)

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
    """Basic indexing (ints, slices, None, ...)."""

    _key: Any = None

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        self._key = opts.key
        return super()._view(x, opts)

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        values = np.zeros(self._input_shape, gradient.dtype.numpy)
        values[self._key] = gradient.numpy()
        return (_copy(gradient, values),)


class AsStrided(_View):
    """A raw strided view; ``offset`` counts from the input's own offset."""

    _layout: cv.Layout | None = None
    _source: cv.Layout | None = None

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        result = super()._view(x, opts)
        self._layout, self._source = result.layout, x.layout
        return result

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        assert self._layout is not None and self._source is not None
        size = max(self._layout.span()[1], self._source.span()[1])
        flat = np.zeros(size, gradient.dtype.numpy)
        np.add.at(flat, slot_indices(self._layout), gradient.numpy())
        return (_copy(gradient, flat[slot_indices(self._source)]),)


class Rearrange(_View):
    """einops-style ``rearrange``: split groups, permute, merge groups."""

    _inverse: tuple[str, tuple[tuple[str, int], ...]] = ("", ())

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        *_, sizes = rearrange_plan(opts.pattern, x.shape, dict(opts.sizes))
        left, right = opts.pattern.split("->")
        named = tuple((n, s) for n, s in sorted(sizes.items()) if not n.startswith("..."))
        self._inverse = (f"{right}->{left}", named)
        return super()._view(x, opts)

    def _copied(self, values: np.ndarray[Any, Any], opts: Any) -> np.ndarray[Any, Any]:
        split, order, merged, _ = rearrange_plan(opts.pattern, values.shape, dict(opts.sizes))
        return values.reshape(split).transpose(order).reshape(merged)

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
