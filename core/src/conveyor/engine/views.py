"""Views: the eight representation-preserving operations, written once for every carrier.

A view is layout algebra over the input's own carrier: the result shares storage with the
input whenever a layout can express it (``view_layout``), and only ``reshape`` / ``rearrange``
of a layout that cannot be re-viewed copy. The copy is the one thing a carrier may supply: a
function making a contiguous, optionally permuted, copy of a tensor on a carrier of its kind
(NumPy for the host carriers, a device copy for an accelerator); ``contiguous_copy`` does it through
the storage contract for any carrier with span hooks. Gradients are the central rules in
``VIEW_VJPS``: the inverse views, and two scatters computed on the host.

Definition-free carriers get the operation classes from ``view_operations(copy)``; a
definition-backed carrier with a storage provider runs ``view_result`` over ``contiguous_copy`` for
every view name, through its central definition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from conveyor.engine import functional as _F
from conveyor.engine.operation import Operation
from conveyor.engine.tensor import Tensor
from conveyor.types.layout import (
    Layout,
    normalize_axes,
    rearrange_plan,
    slot_indices,
    view_layout,
)
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import VIEW_OPERATIONS

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "VIEW_VJPS",
    "CopyFunction",
    "contiguous_copy",
    "view_operations",
    "view_result",
]

#: ``copy(x, order)``: a new contiguous tensor on a carrier of ``x``'s class holding ``x``'s
#: values with its axes permuted by ``order`` (the identity for a plain copy).
CopyFunction = Callable[[Tensor, tuple[int, ...]], Tensor]

_Vjp = Callable[[Operation, Any], tuple[Tensor | None, ...]]

# -- the copy --------------------------------------------------------------------------------


def contiguous_copy(x: Tensor, order: tuple[int, ...]) -> Tensor:
    """``x``'s values, axes permuted by ``order``, exported and imported into a fresh carrier.

    The fresh carrier comes from ``x.carrier.allocate_like``, so it keeps the source's placement
    (a file's directory, a block device).
    """
    import numpy as np

    values = x._carrier.export_span(x._layout)
    if order != tuple(range(len(order))):
        values = values.transpose(order)
    values = np.ascontiguousarray(values)
    carrier = x._carrier.allocate_like(values.size, x._dtype)
    if values.size:
        carrier.import_span(Layout((values.size,)), values.reshape(-1))
    return Tensor._wrap(carrier, Layout.contiguous(values.shape), x._dtype)


def _reshaped(
    copy: CopyFunction, x: Tensor, shape: tuple[int, ...], order: tuple[int, ...]
) -> Tensor:
    copied = copy(x, order)
    layout = copied._layout.reshape(shape)  # resolves a -1 extent
    assert layout is not None  # a fresh contiguous copy takes any shape of its size
    return Tensor._wrap(copied._carrier, layout, copied._dtype)


def _copied(name: str, x: Tensor, opts: Any, copy: CopyFunction) -> Tensor:
    """A ``reshape`` / ``rearrange`` result no layout can express: a contiguous copy."""
    if name != "rearrange":
        return _reshaped(copy, x, tuple(opts.shape), tuple(range(x.ndim)))
    split, order, merged, _ = rearrange_plan(opts.pattern, x.shape, dict(opts.sizes))
    layout = x._layout.reshape(tuple(split))
    if layout is None:  # the split itself needs a copy first
        x = _reshaped(copy, x, tuple(split), tuple(range(x.ndim)))
        layout = x._layout
    split_view = Tensor._wrap(x._carrier, layout, x._dtype)
    return _reshaped(copy, split_view, tuple(merged), tuple(order))


def view_result(name: str, x: Tensor, opts: Any, copy: CopyFunction) -> Tensor:
    """The view ``name`` of ``x`` under validated options: an alias when a layout can express it.

    Raises:
        ValueError, IndexError: the options do not fit the input (the layout algebra's errors).
    """
    layout = view_layout(name, x._layout, opts, x._carrier.size)
    if layout is None:
        return _copied(name, x, opts, copy)
    return Tensor._wrap(x._carrier, layout, x._dtype)


# -- the central gradients -----------------------------------------------------------------------


def _source(op: Operation) -> Layout:
    """The layout of the view's operand: the rules need nothing else of it.

    The definition-free view classes record it at forward, so their backward works whether or
    not forward saved the operand; a definition-backed view reads its saved operand.
    """
    layout: Layout | None = getattr(op, "_view_input", None)
    if layout is None:
        x = op.saved_inputs[0]
        assert type(x) is Tensor  # a view's only operand
        layout = x._layout
    return layout


def _options_of(op: Operation) -> Any:
    name = op._operation_name
    assert name is not None  # backward runs on dispatched operations
    return op.options if op.options is not None else OperationExecutionOptions(name)


def _reshape_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    """reshape, squeeze, unsqueeze: the cotangent in the input's shape."""
    return (_F.reshape(gradient, shape=_source(op).shape),)


def _permute_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    axes = normalize_axes(_options_of(op).axes, len(_source(op).shape))
    inverse = sorted(range(len(axes)), key=axes.__getitem__)
    return (_F.permute(gradient, axes=tuple(inverse)),)


def _broadcast_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    # The autograd engine sums a broadcast cotangent back to the input's shape.
    return (gradient,)


def _rearrange_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    opts = _options_of(op)
    sizes = rearrange_plan(opts.pattern, _source(op).shape, dict(opts.sizes))[3]
    left, right = opts.pattern.split("->")
    named = tuple((n, s) for n, s in sorted(sizes.items()) if not n.startswith("..."))
    return (_F.rearrange(gradient, pattern=f"{right}->{left}", sizes=named),)


def _scattered(gradient: Tensor, values: np.ndarray[Any, Any]) -> Tensor:
    """``values`` (NumPy) as a fresh tensor beside the cotangent (its ``allocate_like``)."""
    carrier = gradient._carrier.allocate_like(values.size, gradient._dtype)
    if values.size:
        carrier.import_span(Layout((values.size,)), values.reshape(-1))
    return Tensor._wrap(carrier, Layout.contiguous(values.shape), gradient._dtype)


def _view_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    """Basic indexing: the cotangent placed at the indexed positions of zeros."""
    import numpy as np

    values = np.zeros(_source(op).shape, gradient.dtype.numpy)
    values[_options_of(op).key] = gradient.numpy()
    return (_scattered(gradient, values),)


def _as_strided_back(op: Operation, gradient: Any) -> tuple[Tensor | None, ...]:
    """Raw strides may overlap: the cotangent is summed per buffer slot, then read back."""
    import numpy as np

    source = _source(op)
    opts = _options_of(op)
    layout = Layout(opts.shape, opts.strides, source.offset + opts.offset)
    size = max(layout.span()[1], source.span()[1])
    flat = np.zeros(size, gradient.dtype.numpy)
    np.add.at(flat, slot_indices(layout), gradient.numpy())
    return (_scattered(gradient, flat[slot_indices(source)]),)


VIEW_VJPS: Final[dict[str, _Vjp]] = {
    "as_strided": _as_strided_back,
    "broadcast_to": _broadcast_back,
    "permute": _permute_back,
    "rearrange": _rearrange_back,
    "reshape": _reshape_back,
    "squeeze": _reshape_back,
    "unsqueeze": _reshape_back,
    "view": _view_back,
}
"""The central VJP of every view name, shared by every carrier's view operations."""

# -- the operation classes of definition-free carriers -------------------------------------------

# (name, input layout, option value) -> result layout (None: only a copy can), for the names
# whose layout depends on their one validated option only. Keyed by the option's value (ints,
# tuples, None), not the options record, whose hash and equality are Python calls.
_LAYOUTS: dict[tuple[Any, ...], Layout | None] = {}
_LAYOUTS_MAX = 4096
_new = object.__new__
_MEMOISED: Final = {
    "broadcast_to": "shape",
    "permute": "axes",
    "reshape": "shape",
    "squeeze": "axes",
    "unsqueeze": "axes",
}


def _foreign(op: Operation, x: Tensor) -> TypeError:
    cls = getattr(op._dispatch_carrier_class, "__name__", "?")
    msg = (
        f"{op._operation_name} on {cls}: the operand lives on {type(x._carrier).__name__}; "
        f"dispatch the view on the operand's own carrier"
    )
    return TypeError(msg)


def view_operations(copy: CopyFunction = contiguous_copy) -> dict[str, type[Operation]]:
    """The eight view operation classes (by dispatch name) of a carrier whose copy is ``copy``.

    Each class's backward is the name's central rule (``VIEW_VJPS``). A repeated view of the
    same input layout with the same options is answered from a memoised layout.
    """

    class _View(Operation):
        """Base: the core's view algebra, a copy only when no layout can express the result."""

        # The one option field the result layout depends on, for the classes whose layout is
        # memoised: their repeated calls are answered here, inline.
        _memo_field: str | None = None
        # The operand's layout, recorded for the backward rule (see _source).
        _view_input: Layout | None = None

        def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> Tensor:
            (x,) = inputs
            cls = self._dispatch_carrier_class
            if x._carrier.__class__ is not cls and cls is not None:
                raise _foreign(self, x)  # a view never leaves its operand's carrier
            source = self._view_input = x._layout
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
                    result._grad = None
                    return result
            return self._view(x, options if options is not None else _options_of(self))

        def _view(self, x: Tensor, opts: Any) -> Tensor:
            name = self._operation_name
            assert name is not None  # forward runs only on dispatched operations
            field = _MEMOISED.get(name)
            if field is None:
                return view_result(name, x, opts, copy)
            source = x._layout
            key = (name, source.shape, source.strides, source.offset, getattr(opts, field))
            try:
                layout = _LAYOUTS[key]
            except KeyError:
                layout = view_layout(name, source, opts, 0)
                if len(_LAYOUTS) >= _LAYOUTS_MAX:
                    _LAYOUTS.clear()
                _LAYOUTS[key] = layout
            if layout is None:
                return _copied(name, x, opts, copy)
            return Tensor._wrap(x._carrier, layout, x._dtype)

    return {
        name: type(
            name.title().replace("_", ""),  # Reshape, BroadcastTo, ...
            (_View,),
            {"_memo_field": _MEMOISED.get(name), "backward": VIEW_VJPS[name]},
        )
        for name in VIEW_OPERATIONS
    }
