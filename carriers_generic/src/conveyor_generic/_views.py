"""The eight representation-preserving operations, shared by Generic and CPU.

A view is layout algebra over the input's own carrier: the result shares storage with the input
whenever the layout can express it, and only ``reshape`` / ``rearrange`` of a layout that cannot
be re-viewed fall back to a contiguous copy (as NumPy does). Gradients are the inverse views.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

import conveyor as cv
from conveyor import functional as F
from conveyor.layout import normalize_axes
from conveyor.tensor import Tensor
from conveyor_generic._storage import ArrayStorage

__all__ = ["VIEW_OPERATIONS", "parse_rearrange"]


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


def _result(x: Tensor, layout: cv.Layout) -> Tensor:
    return Tensor._wrap(x.carrier, layout, x.dtype)


class _View(cv.Operation):
    """Base: remembers the input's shape for the inverse view in backward."""

    _input_shape: tuple[int, ...] = ()

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Tensor:
        (x,) = inputs
        self._input_shape = x.shape
        return self._view(x, _options(self, options))

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        raise NotImplementedError

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        return (F.reshape(gradient, shape=self._input_shape),)


class Reshape(_View):
    def _view(self, x: Tensor, opts: Any) -> Tensor:
        layout = x.layout.reshape(opts.shape)
        if layout is None:
            return _copy(x, x.numpy().reshape(opts.shape))
        return _result(x, layout)


class Squeeze(_View):
    def _view(self, x: Tensor, opts: Any) -> Tensor:
        return _result(x, x.layout.squeeze(opts.axes))


class Unsqueeze(_View):
    def _view(self, x: Tensor, opts: Any) -> Tensor:
        return _result(x, x.layout.unsqueeze(opts.axes))


class Permute(_View):
    _axes: tuple[int, ...] = ()

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        layout = x.layout.permute(opts.axes)
        self._axes = normalize_axes(opts.axes, x.ndim)
        return _result(x, layout)

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        inverse = tuple(int(a) for a in np.argsort(self._axes))
        return (F.permute(gradient, axes=inverse),)


class BroadcastTo(_View):
    def _view(self, x: Tensor, opts: Any) -> Tensor:
        return _result(x, x.layout.broadcast_to(opts.shape))

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        # The autograd engine sums a broadcast gradient back to the input's shape.
        return (gradient,)


class View(_View):
    """Basic indexing (ints, slices, None, ...)."""

    _key: Any = None

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        self._key = opts.key
        return _result(x, x.layout.index(opts.key))

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        values = np.zeros(self._input_shape, gradient.dtype.numpy)
        values[self._key] = gradient.numpy()
        return (_copy(gradient, values),)


class AsStrided(_View):
    """A raw strided view; ``offset`` counts from the input's own offset."""

    _layout: cv.Layout | None = None
    _source: cv.Layout | None = None

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        layout = cv.Layout(opts.shape, opts.strides, x.layout.offset + opts.offset)
        low, high = layout.span()
        if layout.size and (low < 0 or high > x.carrier.size):
            msg = (
                f"as_strided on {type(x.carrier).__name__}: the view reaches slots "
                f"[{low}, {high}) outside the buffer of {x.carrier.size}"
            )
            raise IndexError(msg)
        self._layout, self._source = layout, x.layout
        return _result(x, layout)

    def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
        assert self._layout is not None and self._source is not None
        size = max(self._layout.span()[1], self._source.span()[1])
        flat = np.zeros(size, gradient.dtype.numpy)
        np.add.at(flat, _slots(self._layout), gradient.numpy())
        return (_copy(gradient, flat[_slots(self._source)]),)


def _slots(layout: cv.Layout) -> np.ndarray[Any, Any]:
    index = np.full(layout.shape, layout.offset, np.int64)
    for axis, (extent, stride) in enumerate(zip(layout.shape, layout.strides, strict=True)):
        shape = [1] * layout.ndim
        shape[axis] = extent
        index = index + (np.arange(extent) * stride).reshape(shape)
    return index


_TOKEN = re.compile(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*|1|\S")


def _side(text: str) -> list[list[str]]:
    groups: list[list[str]] = []
    current: list[str] | None = None
    for token in _TOKEN.findall(text):
        if token == "(":
            if current is not None:
                msg = f"rearrange: nested parentheses in {text!r}"
                raise ValueError(msg)
            current = []
        elif token == ")":
            if current is None:
                msg = f"rearrange: unbalanced ')' in {text!r}"
                raise ValueError(msg)
            groups.append(current)
            current = None
        elif token == "1" or token == "..." or token.isidentifier():
            names = [] if token == "1" else [token]
            if current is None:
                groups.append(names)
            else:
                current.extend(names)
        else:
            msg = f"rearrange: unexpected {token!r} in {text!r}"
            raise ValueError(msg)
    if current is not None:
        msg = f"rearrange: unbalanced '(' in {text!r}"
        raise ValueError(msg)
    return groups


def parse_rearrange(
    pattern: str, shape: tuple[int, ...], sizes: dict[str, int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], dict[str, int]]:
    """(elementary shape, axis order, output shape, every axis size) for an einops pattern.

    Raises:
        ValueError: malformed pattern, names differing between sides, or sizes that do not fit.
    """
    if pattern.count("->") != 1:
        msg = f"rearrange: the pattern needs exactly one '->', got {pattern!r}"
        raise ValueError(msg)
    left_text, right_text = pattern.split("->")
    left, right = _side(left_text), _side(right_text)
    ellipsis_dims = len(shape) - len(left) + 1 if any("..." in g for g in left) else 0
    if ellipsis_dims < 0 or (not ellipsis_dims and len(left) != len(shape)):
        msg = f"rearrange: pattern {left_text.strip()!r} does not match {len(shape)} axes"
        raise ValueError(msg)
    known = dict(sizes)
    expanded: list[list[str]] = []
    dims = iter(shape)
    for group in left:
        if group == ["..."]:
            for i in range(ellipsis_dims):
                name = f"...{i}"
                known[name] = next(dims)
                expanded.append([name])
            continue
        extent = next(dims)
        unknown = [n for n in group if n not in known]
        product = math.prod(known[n] for n in group if n in known)
        if len(unknown) > 1:
            msg = f"rearrange: cannot infer the sizes of {unknown} in {pattern!r}; pass sizes="
            raise ValueError(msg)
        if unknown:
            if product == 0 or extent % product:
                msg = f"rearrange: axis of extent {extent} cannot split as {group} in {pattern!r}"
                raise ValueError(msg)
            known[unknown[0]] = extent // product
        elif product != extent:
            msg = f"rearrange: {group} has size {product}, but the axis has extent {extent}"
            raise ValueError(msg)
        expanded.append(group)
    out_groups: list[list[str]] = []
    for group in right:
        if group == ["..."]:
            out_groups.extend([f"...{i}"] for i in range(ellipsis_dims))
        else:
            out_groups.append(group)
    left_names = [n for g in expanded for n in g]
    right_names = [n for g in out_groups for n in g]
    if sorted(left_names) != sorted(right_names) or len(set(left_names)) != len(left_names):
        msg = f"rearrange: both sides of {pattern!r} must name the same axes exactly once"
        raise ValueError(msg)
    elementary = tuple(known[n] for n in left_names)
    order = tuple(left_names.index(n) for n in right_names)
    out_shape = tuple(math.prod(known[n] for n in g) for g in out_groups)
    return elementary, order, out_shape, {n: known[n] for n in left_names}


class Rearrange(_View):
    """einops-style ``rearrange``: split groups, permute, merge groups."""

    _inverse: tuple[str, tuple[tuple[str, int], ...]] = ("", ())

    def _view(self, x: Tensor, opts: Any) -> Tensor:
        elementary, order, out_shape, sizes = parse_rearrange(
            opts.pattern, x.shape, dict(opts.sizes)
        )
        left, right = opts.pattern.split("->")
        named = tuple((n, s) for n, s in sorted(sizes.items()) if not n.startswith("..."))
        self._inverse = (f"{right}->{left}", named)
        split = x.layout.reshape(elementary)
        moved = split.permute(order) if split is not None else None
        merged = moved.reshape(out_shape) if moved is not None else None
        if merged is None:
            values = x.numpy().reshape(elementary).transpose(order).reshape(out_shape)
            return _copy(x, values)
        return _result(x, merged)

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
