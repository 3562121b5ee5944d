"""The eight representation-preserving operations, written once for every carrier.

A view is layout algebra over the input's own carrier: the result shares storage with the
input whenever a layout can express it (``view_layout``), and only ``reshape`` /
``rearrange`` of a layout that cannot be re-viewed copy. The copy is the one thing a carrier
supplies: ``view_operations(copy)`` builds the operation classes around a function that
makes a contiguous, optionally permuted, copy of a tensor on its own carrier (NumPy for the
host carriers, a device copy for an accelerator). Gradients are the inverse views; the two
scatter gradients (``view``, ``as_strided``) are computed on the host and stored back on the
gradient's carrier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conveyor import functional as F
from conveyor.layout import Layout, normalize_axes, rearrange_plan, slot_indices, view_layout
from conveyor.operation import Operation
from conveyor.options import OperationExecutionOptions
from conveyor.tensor import Tensor, tensor

__all__ = ["CopyFunction", "view_operations"]

#: ``copy(x, order)``: a new contiguous tensor on ``x``'s carrier holding ``x``'s values with
#: its axes permuted by ``order`` (the identity for a plain copy).
CopyFunction = Callable[[Tensor, tuple[int, ...]], Tensor]

# (name, input layout, option value) -> result layout (None: only a copy can), for the names
# whose layout depends on their one validated option only. Keyed by the option's value (ints,
# tuples, None), not the options record, whose hash and equality are Python calls.
_LAYOUTS: dict[tuple[Any, ...], Layout | None] = {}
_LAYOUTS_MAX = 4096
_new = object.__new__
_MEMOISED = {
    "broadcast_to": "shape",
    "permute": "axes",
    "reshape": "shape",
    "squeeze": "axes",
    "unsqueeze": "axes",
}


def _options(op: Operation) -> Any:
    name = op._operation_name
    assert name is not None  # forward runs only on dispatched operations
    return OperationExecutionOptions(name)


def _on_carrier_of(gradient: Tensor, values: np.ndarray[Any, Any]) -> Tensor:
    return tensor(values, dtype=gradient.dtype, carrier=type(gradient.carrier))


def view_operations(copy: CopyFunction) -> dict[str, type[Operation]]:
    """The eight view operation classes (by dispatch name) of a carrier whose copy is ``copy``."""

    def reshaped(x: Tensor, shape: tuple[int, ...], order: tuple[int, ...]) -> Tensor:
        copied = copy(x, order)
        layout = copied._layout.reshape(shape)  # resolves a -1 extent
        assert layout is not None  # a fresh contiguous copy takes any shape of its size
        return Tensor._wrap(copied._carrier, layout, copied._dtype)

    class _View(Operation):
        """Base: the core's view algebra, a copy only when no layout can express the result."""

        _input_shape: tuple[int, ...] = ()
        # The one option field the result layout depends on, for the classes whose ``_view``
        # is the memoised lookup alone: their repeated calls are answered here, inline.
        _memo_field: str | None = None

        def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> Tensor:
            (x,) = inputs
            source = x._layout
            self._input_shape = source.shape
            field = self._memo_field
            if field is not None and options is not None:
                key = (
                    self._operation_name,
                    source.shape,
                    source.strides,
                    source.offset,
                    getattr(options, field),
                )
                layout = _LAYOUTS.get(key)
                if layout is not None:
                    # Tensor._wrap inlined (a repeated view makes one call less).
                    result = _new(Tensor)
                    result._carrier = x._carrier
                    result._layout = layout
                    result._dtype = x._dtype
                    result._grad_fn = None
                    result._output_index = 0
                    result._requires_grad = False
                    result.grad = None
                    return result
            return self._view(x, options if options is not None else _options(self))

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
                return self._copied(x, opts)
            return Tensor._wrap(x._carrier, layout, x._dtype)

        def _copied(self, x: Tensor, opts: Any) -> Tensor:
            """A result no layout can express (only reshape and rearrange get here)."""
            return reshaped(x, tuple(opts.shape), tuple(range(x.ndim)))

        def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
            return (F.reshape(gradient, shape=self._input_shape),)

    class Reshape(_View):
        _memo_field = _MEMOISED["reshape"]

    class Squeeze(_View):
        _memo_field = _MEMOISED["squeeze"]

    class Unsqueeze(_View):
        _memo_field = _MEMOISED["unsqueeze"]

    class Permute(_View):
        _memo_field = _MEMOISED["permute"]

        def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
            # The axes are normalised here, not in forward: a repeated forward is answered
            # from the memoised layout alone (the options were validated at dispatch).
            opts = self.options if self.options is not None else _options(self)
            axes = normalize_axes(opts.axes, len(self._input_shape))
            inverse = tuple(int(a) for a in np.argsort(axes))
            return (F.permute(gradient, axes=inverse),)

    class BroadcastTo(_View):
        _memo_field = _MEMOISED["broadcast_to"]

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
            return (_on_carrier_of(gradient, values),)

    class AsStrided(_View):
        """A raw strided view; ``offset`` counts from the input's own offset."""

        _layout: Layout | None = None
        _source: Layout | None = None

        def _view(self, x: Tensor, opts: Any) -> Tensor:
            result = super()._view(x, opts)
            self._layout, self._source = result.layout, x.layout
            return result

        def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
            assert self._layout is not None and self._source is not None
            size = max(self._layout.span()[1], self._source.span()[1])
            flat = np.zeros(size, gradient.dtype.numpy)
            np.add.at(flat, slot_indices(self._layout), gradient.numpy())
            return (_on_carrier_of(gradient, flat[slot_indices(self._source)]),)

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
            layout = x.layout.reshape(tuple(split))
            if layout is None:  # the split itself needs a copy first
                x = reshaped(x, tuple(split), tuple(range(x.ndim)))
                layout = x.layout
            split_view = Tensor._wrap(x._carrier, layout, x._dtype)
            return reshaped(split_view, tuple(merged), tuple(order))

        def backward(self, gradient: Tensor) -> tuple[Tensor | None, ...]:
            pattern, sizes = self._inverse
            return (F.rearrange(gradient, pattern=pattern, sizes=sizes),)

    return {
        "as_strided": AsStrided,
        "broadcast_to": BroadcastTo,
        "permute": Permute,
        "rearrange": Rearrange,
        "reshape": Reshape,
        "squeeze": Squeeze,
        "unsqueeze": Unsqueeze,
        "view": View,
    }
