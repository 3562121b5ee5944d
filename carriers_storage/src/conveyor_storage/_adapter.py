"""EvictableOperation: the composite adapter between Evictable tensors and the primary's operation.

The adapter is the only visible dispatch and autograd node. Its forward checks the outer
operands, lowers them to tensors over their promoted primaries, runs the owned primary
operation through ``cv.execute_lowered`` (full validation and profiling, no visible node) and
restores the results to Evictable tensors. Its backward refreshes the nested operation's saved
inputs from the current primaries (an evict / promote in between replaces them) and restores
the nested gradients to Evictable hierarchies. Both hold the locks of every operand's hierarchy
(taken in one global order, by ``id``, so two operations never wait on each other), so no
evict / promote runs while the nested operation reads or writes a primary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, final

import conveyor as cv
from conveyor.sdk import wrap

if TYPE_CHECKING:
    from conveyor_storage.evictable import Evictable

__all__ = ["EvictableOperation"]


_EVICTABLE: list[type[Evictable]] = []  # filled on first use: evictable imports this module


def _evictable_class() -> type[Evictable]:
    if not _EVICTABLE:
        from conveyor_storage.evictable import Evictable

        _EVICTABLE.append(Evictable)
    return _EVICTABLE[0]


@contextlib.contextmanager
def _holding(values: tuple[Any, ...]) -> Iterator[None]:
    """Hold the lock of every Evictable among the Tensor ``values``' carriers, in ``id`` order."""
    ev_class = _evictable_class()
    owners = {id(x.carrier): x.carrier for x in values if isinstance(x, cv.Tensor)}
    with contextlib.ExitStack() as stack:
        for key in sorted(owners):
            carrier = owners[key]
            if isinstance(carrier, ev_class):
                stack.enter_context(carrier._lock)
        yield


def _lower(x: cv.Tensor) -> cv.Tensor:
    """``x`` (an Evictable tensor, promoted) as a tensor over its primary, same layout."""
    primary = x.carrier.primary  # type: ignore[attr-defined]  # checked to be an Evictable
    # The fast constructor: the layout is already valid over a primary of the same size.
    lowered = wrap(primary, x.layout, x.dtype)
    if x.requires_grad:
        lowered.requires_grad = True  # so the nested operation saves what its backward needs
    return lowered


@final
class EvictableOperation(cv.Operation):
    """The single-use adapter running one operation of an Evictable through its primary.

    Args:
        primary_operation: the fresh operation the promoted primary dispatched for this name.

    Raises:
        TypeError: ``primary_operation`` is not an ``Operation``.
    """

    def __init__(self, primary_operation: cv.Operation) -> None:
        super().__init__()
        given: object = primary_operation  # checked at run time: callers pass any object
        if not isinstance(given, cv.Operation):
            msg = (
                f"EvictableOperation: primary_operation must be the Operation the promoted "
                f"primary dispatched, got {primary_operation!r} "
                f"({type(primary_operation).__name__})"
            )
            raise TypeError(msg)
        self._inner = primary_operation

    @property
    def primary_operation(self) -> cv.Operation:
        """The nested operation this adapter owns and lowers to."""
        return self._inner

    # -- forward ------------------------------------------------------------------------------

    def _check_operands(self, inputs: tuple[Any, ...]) -> list[cv.Tensor]:
        name, ev_class = self._operation_name, _evictable_class()
        outer = self._dispatch_carrier
        assert isinstance(outer, ev_class)  # the dispatch hook of Evictable made this adapter
        tensors = [x for x in inputs if isinstance(x, cv.Tensor)]
        if not tensors:
            msg = f"{name} on Evictable: expected at least one Tensor operand, got {inputs!r}"
            raise TypeError(msg)
        expected = outer.tier_classes
        evicted = False
        # Wrong carriers first, then mismatched hierarchies, then evicted operands.
        for x in tensors:
            if type(x.carrier) is not ev_class or len(x.subtensors) != 1:
                msg = (
                    f"{name} on Evictable: every Tensor operand must be backed by one Evictable, "
                    f"got one on {type(x.carrier).__name__}; move it with cv.move(tensor, "
                    f"Evictable) or use operands of one hierarchy"
                )
                raise TypeError(msg)
        for x in tensors:
            found = x.carrier.tier_classes  # type: ignore[attr-defined]  # checked above
            if found != expected:
                msg = (
                    f"{name} on Evictable: operands belong to different hierarchies "
                    f"({expected[0].__name__}/{expected[1].__name__} and "
                    f"{found[0].__name__}/{found[1].__name__}); use one primary and one "
                    f"secondary class for every operand"
                )
                raise TypeError(msg)
            evicted = evicted or x.carrier.primary is None  # type: ignore[attr-defined]
        if evicted:
            msg = f"{name} on Evictable: an operand is evicted; call promote() on it first"
            raise RuntimeError(msg)
        inner = self._inner
        if inner._dispatch_carrier_class is not expected[0] or inner._operation_name != name:
            msg = (
                f"{name} on Evictable: the nested operation was dispatched as "
                f"{inner._operation_name!r} by "
                f"{getattr(inner._dispatch_carrier_class, '__name__', None)}; it must be the "
                f"fresh {name!r} operation of the promoted {expected[0].__name__} primary"
            )
            raise TypeError(msg)
        return tensors

    def _forward(
        self, *inputs: Any, options: cv.OperationExecutionOptions | None
    ) -> cv.Tensor | tuple[cv.Tensor, ...]:
        with _holding(inputs):
            return self._forward_held(inputs, options)

    def _forward_held(
        self, inputs: tuple[Any, ...], options: cv.OperationExecutionOptions | None
    ) -> cv.Tensor | tuple[cv.Tensor, ...]:
        tensors = self._check_operands(inputs)
        lowered = tuple(_lower(x) if isinstance(x, cv.Tensor) else x for x in inputs)
        result = cv.execute_lowered(self._inner, *lowered, options=options)
        outer = self._dispatch_carrier
        owners: dict[int, Evictable] = {id(x.carrier.primary): x.carrier for x in tensors}  # type: ignore[attr-defined, misc]  # checked Evictables
        ev_class = _evictable_class()

        def restore(r: cv.Tensor) -> cv.Tensor:
            carrier = r.carrier
            ev = owners.get(id(carrier))
            if ev is None:  # a newly allocated primary result: a fresh hierarchy, empty secondary
                ev = owners[id(carrier)] = ev_class._adopt(carrier, outer)  # type: ignore[arg-type]  # outer is an Evictable
            return wrap(ev, r.layout, r.dtype)

        if isinstance(result, tuple):
            return tuple(restore(r) for r in result)
        return restore(result)

    # -- backward -----------------------------------------------------------------------------

    def _unwrap(self, gradient: object) -> cv.Tensor:
        primary_class = self._expected_primary()
        if isinstance(gradient, cv.Tensor):
            carrier = gradient.carrier
            if isinstance(carrier, _evictable_class()):
                if carrier.tier_classes[0] is primary_class:
                    if carrier.primary is None:
                        msg = (
                            f"{self._operation_name} on Evictable: the incoming gradient is "
                            f"evicted; call promote() on it before backward"
                        )
                        raise RuntimeError(msg)
                    return cv.Tensor(carrier.primary, gradient.layout)
            elif type(carrier) is primary_class:
                return gradient
        got = type(gradient.carrier).__name__ if isinstance(gradient, cv.Tensor) else None
        msg = (
            f"{self._operation_name} on Evictable: the gradient must be an Evictable Tensor over "
            f"{primary_class.__name__} or a {primary_class.__name__} Tensor, got "
            f"{type(gradient).__name__}{f' on {got}' if got else ''}"
        )
        raise TypeError(msg)

    def _expected_primary(self) -> type[cv.Carrier]:
        outer = self._dispatch_carrier
        assert isinstance(outer, _evictable_class())
        return outer.tier_classes[0]

    def _refresh(self, inputs: tuple[Any, ...]) -> None:
        """Point the nested saved inputs at the current promoted primaries of the outer ones.

        The nested operation was called with these inputs lowered (other values as they are);
        when it saved nothing, its backward says why.
        """
        self._inner.refresh_saved(
            tuple(_lower(x) if isinstance(x, cv.Tensor) else x for x in inputs)
        )

    def backward(self, gradient: Any) -> tuple[cv.Tensor | None, ...]:
        """One Evictable gradient (or ``None``) per saved Tensor input, in matching hierarchies.

        Raises:
            RuntimeError: a saved input was modified since forward, is evicted, or nothing
                was saved.
            TypeError: the gradient is not Evictable / primary-backed, or the nested backward
                returned something other than Tensors or ``None``.
            ValueError: the nested backward returned the wrong number of gradients.
        """
        inputs = self.saved_inputs  # outer version check: in-place writes are refused here
        incoming = gradient if isinstance(gradient, tuple) else (gradient,)
        with _holding(inputs + incoming):
            return self._backward_held(inputs, gradient)

    def _backward_held(
        self, inputs: tuple[Any, ...], gradient: Any
    ) -> tuple[cv.Tensor | None, ...]:
        name = self._operation_name
        if isinstance(gradient, tuple):
            incoming: Any = tuple(None if g is None else self._unwrap(g) for g in gradient)
            given = [g for g in incoming if g is not None]
        else:
            incoming = self._unwrap(gradient)
            given = [incoming]
        tensors = [x for x in inputs if isinstance(x, cv.Tensor)]
        for x in tensors:
            if x.carrier.is_evicted():  # type: ignore[attr-defined]  # forward checked
                msg = (
                    f"{name} on Evictable: an input saved for backward is evicted; call "
                    f"promote() on it before backward"
                )
                raise RuntimeError(msg)
        self._refresh(inputs)
        grads: object = self._inner.backward(incoming)  # checked: nested code may return anything
        if isinstance(grads, cv.Tensor) or grads is None:
            grads = (grads,)
        if not isinstance(grads, tuple | list):
            msg = (
                f"{name} on Evictable: the nested backward returned {type(grads).__name__}; "
                f"it must return one Tensor or None per Tensor input"
            )
            raise TypeError(msg)
        if len(grads) != len(tensors):
            msg = (
                f"{name} on Evictable: the nested backward returned {len(grads)} gradient(s) "
                f"for {len(tensors)} Tensor input(s)"
            )
            raise ValueError(msg)
        primary_class = self._expected_primary()
        for g in grads:
            if g is not None and (
                not isinstance(g, cv.Tensor) or type(g.carrier) is not primary_class
            ):
                where = f" on {type(g.carrier).__name__}" if isinstance(g, cv.Tensor) else ""
                msg = (
                    f"{name} on Evictable: the nested backward returned "
                    f"{type(g).__name__}{where}; expected {primary_class.__name__} Tensors or None"
                )
                raise TypeError(msg)
        # A new hierarchy owns its primary: never adopt storage that someone else holds.
        taken = {id(t.carrier) for t in given} | {id(x.carrier.primary) for x in tensors}  # type: ignore[attr-defined]  # Evictables
        out: list[cv.Tensor | None] = []
        ev_class = _evictable_class()
        for x, g in zip(tensors, grads, strict=True):
            if g is None:
                out.append(None)
                continue
            if id(g.carrier) in taken:
                g = g.clone()
            taken.add(id(g.carrier))
            out.append(cv.Tensor(ev_class._adopt(g.carrier, x.carrier), g.layout))  # type: ignore[arg-type]  # an Evictable
        return tuple(out)

    def _release_saved(self) -> None:
        super()._release_saved()
        self._inner._release_saved()
