"""The eight representation-preserving names on storage-only carriers, as layout algebra.

A storage carrier computes nothing, but a view is data export, not computation: the result is a
new layout over the same carrier, so ``file_tensor[2:5].numpy()`` reads only those slots. When
no layout can express the result (``reshape`` / ``rearrange`` of a non-viewable layout), the
values are copied into a sibling carrier of the same kind and placement, as NumPy copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.functional import VIEW_OPERATIONS
from conveyor.layout import rearrange_plan, slot_indices, view_layout
from conveyor_storage._spans import sibling_allocator

__all__ = ["VIEW_NAMES", "StorageView", "storage_only_refusal"]

VIEW_NAMES: Final = frozenset(VIEW_OPERATIONS)


def storage_only_refusal(name: str, carrier: cv.Carrier) -> NotImplementedError:
    """The refusal every computational name gets on a storage-only carrier."""
    cls = type(carrier).__name__
    msg = (
        f"{name} on {cls}: {cls} is storage only and computes nothing; move the tensor to a "
        f"compute carrier first, e.g. cv.move(tensor, 'cpu')"
    )
    return NotImplementedError(msg)


def _copy_transform(name: str, opts: Any, shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """The NumPy transformation a copying reshape / rearrange applies to the input values."""
    if name == "reshape":
        return lambda values: values.reshape(opts.shape)
    split, order, merged, _ = rearrange_plan(opts.pattern, shape, dict(opts.sizes))
    return lambda values: values.reshape(split).transpose(order).reshape(merged)


def _materialize(like: cv.Carrier, values: np.ndarray[Any, Any], dtype: cv.DType) -> cv.Tensor:
    carrier = sibling_allocator(like)(values.size, dtype)
    if values.size:
        carrier.import_span(cv.Layout((values.size,)), np.ascontiguousarray(values).reshape(-1))
    return cv.Tensor(carrier, cv.Layout(values.shape))


class StorageView(cv.Operation):
    """One of the eight view names on a storage carrier: same carrier, new layout."""

    _source: cv.Layout | None = None
    _result: cv.Layout | None = None
    _transform: Callable[[Any], Any] | None = None

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        name = self._operation_name
        assert name is not None  # dispatched
        cls = self._dispatch_carrier_class
        if len(inputs) != 1 or not isinstance(inputs[0], cv.Tensor):
            msg = f"{name} on {getattr(cls, '__name__', '?')}: expected one Tensor operand"
            raise TypeError(msg)
        (x,) = inputs
        if type(x.carrier) is not cls:
            msg = (
                f"{name} on {getattr(cls, '__name__', '?')}: the operand lives on "
                f"{type(x.carrier).__name__}; dispatch on the operand's own carrier"
            )
            raise TypeError(msg)
        opts = options if options is not None else cv.OperationExecutionOptions(name)
        layout = view_layout(name, x.layout, opts, x.carrier.size)
        self._source = x.layout
        if layout is not None:
            self._result = layout
            return cv.Tensor(x.carrier, layout)
        self._transform = _copy_transform(name, opts, x.shape)
        return _materialize(x.carrier, self._transform(x.numpy()), x.dtype)

    def backward(self, gradient: Any) -> tuple[cv.Tensor | None, ...]:
        """The gradient of the input: every output element's gradient added to its source."""
        source = self._source
        assert source is not None  # forward ran
        g = np.asarray(gradient.numpy())
        if self._transform is not None:
            index = self._transform(np.arange(source.size, dtype=np.int64).reshape(source.shape))
            flat = np.zeros(source.size, g.dtype)
            np.add.at(flat, index.reshape(-1), g.reshape(-1))
            out = flat.reshape(source.shape)
        else:
            assert self._result is not None
            start = min(source.span()[0], self._result.span()[0])
            stop = max(source.span()[1], self._result.span()[1])
            buffer = np.zeros(max(stop - start, 0), g.dtype)
            np.add.at(buffer, (slot_indices(self._result) - start).reshape(-1), g.reshape(-1))
            out = (
                buffer[slot_indices(source) - start]
                if source.size
                else np.zeros(source.shape, g.dtype)
            )
        return (_materialize(gradient.carrier, out, gradient.dtype),)
