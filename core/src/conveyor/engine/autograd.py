"""Autograd: the reverse-mode backward engine (grad mode, from ``conveyor.engine.grad_mode``, too).

The graph is made of dispatched operations: a result tensor points at the operation that made it
(``tensor.autograd_ctx``), and the operation keeps its tensor inputs. The engine walks that graph
iteratively in reverse topological order, sums every contribution to a tensor before using it,
reduces broadcast gradients back to each input's shape and dtype, and accumulates into leaves.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from conveyor.engine import functional as F
from conveyor.engine.grad_mode import (
    _Off,
    attach,
    enable_grad,
    is_grad_enabled,
    no_grad,
    note_saved,
    saved_for_backward,
    set_grad_enabled,
)
from conveyor.engine.tensor import Tensor, ones_like

if TYPE_CHECKING:
    from conveyor.engine.operation import Operation

__all__ = [
    "attach",
    "backward",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "note_saved",
    "saved_for_backward",
    "set_grad_enabled",
    "sum_to_shape",
]


# Publishing a pass's gradients is a read-add-write of every target's ``.grad``; two threads
# doing it at once into a shared leaf would lose one contribution. One lock for the whole
# publication keeps each pass's writes atomic with respect to every other pass (the work it
# serialises is the gradient additions only; backward computation itself runs unlocked).
_publish_lock = threading.RLock()  # re-entrant: an observer of the additions may run backward


def sum_to_shape(gradient: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``gradient`` over the axes that broadcasting added or widened to reach ``shape``."""
    if gradient.shape == shape:
        return gradient
    lead = gradient.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, extent in enumerate(shape) if extent == 1 and gradient.shape[lead + i] != 1
    )
    if axes:
        gradient = F.reduce_sum(gradient, axis=axes, keepdims=True)
    return F.reshape(gradient, shape=shape)


def _fit(gradient: Tensor, target: Tensor) -> Tensor:
    shape = target._layout.shape
    if gradient._layout.shape != shape:
        gradient = sum_to_shape(gradient, shape)
    if gradient._dtype is not target._dtype:
        gradient = gradient.astype(target._dtype)
    return gradient


def _graph_order(root: Operation) -> list[Operation]:
    """Operations reachable from ``root``, each after every operation that consumes it."""
    order: list[Operation] = []
    seen = {id(root)}
    stack: list[tuple[Operation, int]] = [(root, 0)]
    # Iterative post-order DFS; reversing it puts consumers before producers.
    while stack:
        op, i = stack[-1]
        inputs = op._grad_inputs
        while i < len(inputs):
            producer = inputs[i]._grad_fn
            i += 1
            if producer is not None and id(producer) not in seen:
                seen.add(id(producer))
                stack[-1] = (op, i)
                stack.append((producer, 0))
                break
        else:
            stack.pop()
            order.append(op)
    order.reverse()
    return order


def _check_gradients(op: Operation, grads: Any) -> tuple[Tensor | None, ...]:
    if isinstance(grads, Tensor) or grads is None:
        grads = (grads,)
    name, cls = op._operation_name, getattr(op._dispatch_carrier_class, "__name__", "?")
    if not isinstance(grads, tuple | list):
        msg = (
            f"{name} on {cls}: backward returned {type(grads).__name__}; return one Tensor or "
            f"None per tensor input"
        )
        raise TypeError(msg)
    if len(grads) != len(op._grad_inputs):
        msg = (
            f"{name} on {cls}: backward returned {len(grads)} gradient(s) for "
            f"{len(op._grad_inputs)} tensor input(s)"
        )
        raise ValueError(msg)
    for g in grads:
        if g is not None and not isinstance(g, Tensor):
            msg = f"{name} on {cls}: backward returned {type(g).__name__}, not a Tensor or None"
            raise TypeError(msg)
    return tuple(grads)


def backward(tensor: Tensor, gradient: Tensor | None = None, *, retain_graph: bool = False) -> None:
    """Accumulate d(tensor)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

    Raises:
        RuntimeError: ``tensor`` does not require grad, an implicit gradient was asked for a
            non-scalar, saved state was released, or a saved input was modified in place.
    """

    # Slots read directly here and below (properties are Python calls; this runs every step).
    if not tensor._requires_grad:
        msg = "backward: the tensor does not require grad and has no autograd node"
        raise RuntimeError(msg)
    if gradient is None:
        if tensor._layout.size != 1:
            msg = (
                f"backward: a gradient can be implied only for a single-element tensor, this one "
                f"has shape {tensor.shape}; pass gradient="
            )
            raise RuntimeError(msg)
        gradient = ones_like(tensor)
    elif not isinstance(gradient, Tensor):
        msg = f"backward: gradient must be a Tensor, got {type(gradient).__name__}"
        raise TypeError(msg)
    elif gradient.shape != tensor.shape:
        msg = f"backward: gradient shape {gradient.shape} does not match {tensor.shape}"
        raise ValueError(msg)

    with _Off():
        root = tensor._grad_fn
        if root is None:
            with _publish_lock:
                for t, total in _totals([(tensor, gradient)]):
                    t._grad = total
            return
        order = _graph_order(root)
        for op in order:
            # Refuse a released graph or a mutated saved input anywhere before any backward work.
            op.saved_inputs  # noqa: B018  # raises RuntimeError
        pending: dict[int, list[Tensor | None]] = {
            id(root): _slots(root, tensor._output_index, gradient)
        }
        # A failed pass publishes nothing: gradients for leaves and retained non-leaves are
        # collected and written, and saved state released, only once every backward succeeded.
        published: list[tuple[Tensor, Tensor]] = []
        visited: list[Operation] = []
        for op in order:
            slots = pending.pop(id(op), None)
            if slots is None:
                continue  # no gradient reached this operation
            for index, t in op._retained.items():
                g_out = slots[index]
                if g_out is not None:
                    published.append((t, g_out))
            incoming = slots[0] if len(slots) == 1 else tuple(slots)
            grads = op.backward(incoming)
            # Checked again once the VJP has read the saved values: a write from another
            # thread that began after the check above would otherwise give gradients of the
            # new values without an error. (A loop, no call: this runs for every node.)
            for saved, version in op._saved_versions:
                if saved._carrier._version != version:
                    raise op._modified(saved, version, during=True)
            if grads.__class__ is not tuple or len(grads) != len(op._grad_inputs):
                grads = _check_gradients(op, grads)
            else:
                for g in grads:
                    if g is not None and g.__class__ is not Tensor:
                        grads = _check_gradients(op, grads)  # raises TypeError
            visited.append(op)
            for t, g in zip(op._grad_inputs, grads, strict=True):
                if g is None or not t._requires_grad:
                    continue
                if g._layout.shape != t._layout.shape or g._dtype is not t._dtype:
                    g = _fit(g, t)
                producer = t._grad_fn
                if producer is None:
                    published.append((t, g))
                    continue
                buf = pending.get(id(producer))
                if buf is None:
                    buf = pending[id(producer)] = [None] * producer._n_outputs
                prev = buf[t._output_index]
                buf[t._output_index] = g if prev is None else F.add(prev, g)
        with _publish_lock:
            # Every sum is computed before anything is written or released, so a refused
            # addition (a ``.grad`` the user replaced with an incompatible tensor) changes
            # nothing and the same backward can be retried.
            totals = _totals(published)
            if not retain_graph:
                for op in visited:
                    op._release_saved()
            for t, total in totals:
                t._grad = total


def _slots(op: Operation, index: int, gradient: Tensor) -> list[Tensor | None]:
    slots: list[Tensor | None] = [None] * op._n_outputs
    slots[index] = gradient
    return slots


def _totals(published: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
    """Each target once, with its current ``.grad`` plus every gradient published for it."""
    totals: dict[int, tuple[Tensor, Tensor]] = {}
    for target, gradient in published:
        gradient = _fit(gradient, target)
        entry = totals.get(id(target))
        base = entry[1] if entry is not None else _current_grad(target)
        totals[id(target)] = (target, gradient if base is None else F.add(base, gradient))
    return list(totals.values())


def _current_grad(target: Tensor) -> Tensor | None:
    """``target.grad``, refused when the user replaced it with a tensor of another shape."""
    grad = target._grad
    if grad is not None and grad._layout.shape != target._layout.shape:
        msg = (
            f"backward: .grad of a tensor of shape {target.shape} was set to a tensor of shape "
            f"{grad.shape}; set .grad = None (or a tensor of shape {target.shape}) and retry"
        )
        raise RuntimeError(msg)
    return grad
