"""The eight representation-preserving names on storage-only carriers, as layout algebra.

A storage carrier computes nothing, but a view is data export, not computation: the result is a
new layout over the same carrier, so ``file_tensor[2:5].numpy()`` reads only those slots. When
no layout can express the result (``reshape`` / ``rearrange`` of a non-viewable layout), the
values are copied into a sibling carrier of the same kind and placement, as NumPy copies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.functional import VIEW_OPERATIONS
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


_TOKEN: Final = re.compile(r"\.\.\.|[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S")


def _groups(side: str, pattern: str) -> list[list[str]]:
    """One list of axis names per axis of one side of a pattern (``1`` is an empty group)."""
    out: list[list[str]] = []
    group: list[str] | None = None
    for token in _TOKEN.findall(side):
        if token == "(" and group is None:
            group = []
        elif token == ")" and group is not None:
            out.append(group)
            group = None
        elif token == "1" or token == "..." or token.isidentifier():
            names = [] if token == "1" else [token]
            if group is None:
                out.append(names)
            else:
                group.extend(names)
        else:
            msg = f"rearrange: unexpected {token!r} in the pattern {pattern!r}"
            raise ValueError(msg)
    if group is not None:
        msg = f"rearrange: unclosed '(' in the pattern {pattern!r}"
        raise ValueError(msg)
    return out


def rearrange_plan(
    pattern: str, shape: tuple[int, ...], sizes: dict[str, int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(split shape, axis order, merged shape)``: split input groups, permute, merge outputs."""
    left_text, right_text = pattern.split("->")
    left, right = _groups(left_text, pattern), _groups(right_text, pattern)
    spread = len(shape) - (len(left) - 1) if ["..."] in left else 0
    if (["..."] in left and spread < 0) or (["..."] not in left and len(left) != len(shape)):
        msg = f"rearrange: {left_text.strip()!r} does not describe {len(shape)} axes"
        raise ValueError(msg)

    def expand(groups: list[list[str]]) -> list[list[str]]:
        out: list[list[str]] = []
        for g in groups:
            out.extend([[f"...{i}"] for i in range(spread)] if g == ["..."] else [g])
        return out

    left, right = expand(left), expand(right)
    known = dict(sizes)
    for group, extent in zip(left, shape, strict=True):
        if len(group) == 1 and group[0].startswith("..."):
            known[group[0]] = extent
            continue
        missing = [n for n in group if n not in known]
        product = math.prod(known[n] for n in group if n in known)
        if len(missing) > 1 or (missing and (product == 0 or extent % product)):
            msg = f"rearrange: cannot split an axis of extent {extent} into {group}"
            raise ValueError(msg)
        if missing:
            known[missing[0]] = extent // product
        elif product != extent:
            msg = f"rearrange: {group} multiplies to {product}, the axis has extent {extent}"
            raise ValueError(msg)
    names = [n for g in left for n in g]
    outputs = [n for g in right for n in g]
    if len(set(names)) != len(names) or sorted(names) != sorted(outputs):
        msg = f"rearrange: both sides of {pattern!r} must name the same axes, each once"
        raise ValueError(msg)
    split = tuple(known[n] for n in names)
    order = tuple(names.index(n) for n in outputs)
    merged = tuple(math.prod(known[n] for n in g) for g in right)
    return split, order, merged


def _view_layout(name: str, layout: cv.Layout, opts: Any, size: int) -> cv.Layout | None:
    """The result layout over the same buffer, or ``None`` when only a copy can express it."""
    if name == "reshape":
        return layout.reshape(opts.shape)
    if name == "squeeze":
        return layout.squeeze(opts.axes)
    if name == "unsqueeze":
        return layout.unsqueeze(opts.axes)
    if name == "permute":
        return layout.permute(opts.axes)
    if name == "broadcast_to":
        return layout.broadcast_to(opts.shape)
    if name == "view":
        return layout.index(opts.key)
    if name == "as_strided":
        out = cv.Layout(opts.shape, opts.strides, layout.offset + opts.offset)
        low, high = out.span()
        if out.size and (low < 0 or high > size):
            msg = f"as_strided: the view reaches slots [{low}, {high}) outside {size} slots"
            raise IndexError(msg)
        return out
    split, order, merged = rearrange_plan(opts.pattern, layout.shape, dict(opts.sizes))
    step = layout.reshape(split)
    step = step.permute(order) if step is not None else None
    return step.reshape(merged) if step is not None else None


def _copy_transform(name: str, opts: Any, shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """The NumPy transformation a copying reshape / rearrange applies to the input values."""
    if name == "reshape":
        return lambda values: values.reshape(opts.shape)
    split, order, merged = rearrange_plan(opts.pattern, shape, dict(opts.sizes))
    return lambda values: values.reshape(split).transpose(order).reshape(merged)


def _slots(layout: cv.Layout) -> np.ndarray[Any, Any]:
    """The buffer slot of every element of ``layout``, shaped like it."""
    index = np.full(layout.shape, layout.offset, np.int64)
    for axis, (extent, stride) in enumerate(zip(layout.shape, layout.strides, strict=True)):
        reach = [1] * layout.ndim
        reach[axis] = extent
        index = index + (np.arange(extent, dtype=np.int64) * stride).reshape(reach)
    return index


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
        layout = _view_layout(name, x.layout, opts, x.carrier.size)
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
            np.add.at(buffer, (_slots(self._result) - start).reshape(-1), g.reshape(-1))
            out = buffer[_slots(source) - start] if source.size else np.zeros(source.shape, g.dtype)
        return (_materialize(gradient.carrier, out, gradient.dtype),)
