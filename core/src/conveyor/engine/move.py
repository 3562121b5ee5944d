"""Movement: copy a tensor's values into another carrier through a registered bulk route.

A route copies between one exact ``(source class, destination class)`` pair; there is no search
through intermediate carriers and no silent fallback, so the cost of a move is always the one
route its author wrote. Routes come from ``register_move_route`` and from plugins'
``conveyor_move_routes`` hook (collected from the default plugin host at the first move, and
again whenever the host contributes different routes); both land in one table where a pair may
appear once.

Without a route, a move to or from a definition-backed carrier with a storage provider takes the
generic bulk span path (``span_copy``); other pairs are refused with a message naming both
classes and the hooks to implement. Routes copy whole spans through the carrier storage
contract (``export_span`` / ``import_span``) or the carriers' own bulk I/O (memory maps,
``readinto``, ``pwrite``), never element by element. Movement is lowered execution: the
public ``move`` is differentiable (when its input requires grad and grad mode is on, the
result's autograd node moves the gradient back to the source class) and otherwise creates no
autograd node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias, final

import attrs

from conveyor.engine import journal as _journal
from conveyor.engine.carrier import Carrier, DependentCarrier
from conveyor.engine.carrier_registry import carrier_definition
from conveyor.engine.operation import Operation, execute_lowered
from conveyor.engine.plugin_access import default_host as _host
from conveyor.engine.providers import StorageProvider
from conveyor.engine.tensor import Tensor
from conveyor.types.layout import Layout
from conveyor.types.options import OperationExecutionOptions

__all__ = ["MoveRoute", "move", "move_route", "move_routes", "register_move_route", "span_copy"]

_NAME: Final = "move"

#: ``copy(source_tensor, destination_class, **allocate_options) -> Tensor``.
_Copy: TypeAlias = Callable[..., Tensor]
_Pair: TypeAlias = tuple[type[Carrier], type[Carrier]]


def _carrier_class(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not (isinstance(value, type) and issubclass(value, Carrier)):
        msg = (
            f"MoveRoute: {attribute.name} must be a conveyor.Carrier subclass, got {value!r} "
            f"({type(value).__name__})"
        )
        raise TypeError(msg)


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        msg = f"MoveRoute: copy must be callable, got {value!r} ({type(value).__name__})"
        raise TypeError(msg)


@final
@attrs.frozen(kw_only=True)
class MoveRoute:
    """A bulk copy from one exact source carrier class to one exact destination class.

    ``copy(source_tensor, destination_class, **allocate_options)`` returns a new contiguous
    tensor of ``destination_class`` with the source's shape and dtype; ``allocate_options`` are
    the keyword arguments given to ``move`` and are meant for ``destination.allocate``.
    """

    source: type[Carrier] = attrs.field(validator=_carrier_class)
    destination: type[Carrier] = attrs.field(validator=_carrier_class)
    copy: _Copy = attrs.field(validator=_callable)


_lock = threading.Lock()
_registered: dict[_Pair, MoveRoute] = {}
# (host, its contributed routes, merged table): rebuilt when either differs from the last move.
_merged: tuple[object, tuple[object, ...], dict[_Pair, MoveRoute]] | None = None


def _duplicate(route: MoveRoute) -> ValueError:
    msg = (
        f"register_move_route: a route from {route.source.__name__} to "
        f"{route.destination.__name__} is already registered; each (source, destination) pair "
        f"has exactly one route"
    )
    return ValueError(msg)


def register_move_route(
    *, source: type[Carrier], destination: type[Carrier], copy: _Copy
) -> MoveRoute:
    """Register the route ``move`` uses from ``source`` to ``destination``; returns its record.

    Plugins contribute the same records from their ``conveyor_move_routes`` hook instead.

    Raises:
        TypeError: a class is not a ``Carrier`` subclass, or ``copy`` is not callable.
        ValueError: a route for this exact pair is already registered or contributed.
    """
    route = MoveRoute(source=source, destination=destination, copy=copy)
    _journal.admit("register_move_route")
    global _merged
    with _lock:
        pair = (route.source, route.destination)
        if pair in _registered or (_merged is not None and pair in _merged[2]):
            raise _duplicate(route)
        _registered[pair] = route
        _merged = None
    _journal.record(lambda: _unregister(route), "register_move_route")
    return route


def _unregister(route: MoveRoute) -> None:
    """Withdraw ``route`` (a plugin that registered it at import ended broken)."""
    global _merged
    with _lock:
        pair = (route.source, route.destination)
        if _registered.get(pair) is route:
            del _registered[pair]
            _merged = None


def _table() -> dict[_Pair, MoveRoute]:
    """Registered routes and the default host's contributed routes, merged (cached)."""
    global _merged
    host = _host()
    contributed = host.move_routes()
    found = _merged
    if found is not None and found[0] is host and found[1] == contributed:
        return found[2]
    with _lock:
        table = dict(_registered)
        for item in contributed:
            if not isinstance(item, MoveRoute):
                msg = (
                    f"move: a plugin's conveyor_move_routes hook contributed {item!r} "
                    f"({type(item).__name__}); contribute conveyor.MoveRoute records"
                )
                raise TypeError(msg)
            pair = (item.source, item.destination)
            if pair in table:
                raise _duplicate(item)
            table[pair] = item
        _merged = (host, contributed, table)
    return table


def check_contributed_route(item: object, earlier: Mapping[_Pair, str]) -> _Pair:
    """Refuse a plugin's move route that ``move`` could not use; returns its pair.

    The plugin host calls it while loading the plugin, so a bad route marks that plugin broken
    (named in the error) instead of failing every later ``move``. ``earlier`` maps the pairs of
    plugins loaded before this one to how to name their plugin.

    Raises:
        TypeError: ``item`` is not a ``MoveRoute``.
        ValueError: its pair already has a registered route or an earlier plugin's route.
    """
    if not isinstance(item, MoveRoute):
        msg = f"contributed {item!r} ({type(item).__name__}); contribute conveyor.MoveRoute records"
        raise TypeError(msg)
    pair = (item.source, item.destination)
    where = f"a route from {item.source.__name__} to {item.destination.__name__}"
    with _lock:
        registered = pair in _registered
    if registered:
        msg = f"{where} is already registered with register_move_route; each pair has one route"
        raise ValueError(msg)
    owner = earlier.get(pair)
    if owner is not None:
        msg = f"{where} is also contributed by {owner}; each pair has exactly one route"
        raise ValueError(msg)
    return pair


def move_routes() -> Mapping[_Pair, MoveRoute]:
    """Every route ``move`` can take, keyed by ``(source class, destination class)``."""
    return dict(_table())


def move_route(source: type[Carrier], destination: type[Carrier]) -> MoveRoute:
    """The route from ``source`` to ``destination``.

    A registered or contributed route wins. Without one, a same-class copy and a move to or from
    a definition-backed carrier whose storage provider has spans take the generic bulk span path
    (``span_copy``), provided the other side implements the span hook it needs.

    Raises:
        NotImplementedError: no route joins the two classes and the span path cannot copy (the
            message names both classes and the hooks to implement).
    """
    route = _table().get((source, destination))
    if route is not None:
        return route
    if source is destination or _spans(source, destination):
        return MoveRoute(source=source, destination=destination, copy=span_copy)
    missing = [
        f"{cls.__name__}.{hook}"
        for cls, hook in ((source, "_export"), (destination, "_import"))
        if not _has_hook(cls, hook)
    ]
    need = (
        f"implement the storage span hooks {' and '.join(missing)} and give one side a "
        f"CarrierDefinition with a StorageProvider"
        if missing
        else "give one side a CarrierDefinition with a StorageProvider"
    )
    msg = (
        f"move from {source.__name__} to {destination.__name__}: no move route joins these "
        f"carriers; contribute a TransferRoute (CarrierDefinition transfers, the "
        f"conveyor_move_routes hook or conveyor.register_move_route), or {need} so the generic "
        f"bulk span path can copy, or move through a carrier both have routes to (e.g. 'cpu')"
    )
    raise NotImplementedError(msg)


def _has_hook(cls: type[Carrier], hook: str) -> bool:
    """Whether ``cls`` implements the storage hook (a definition-backed class gets it installed)."""
    return getattr(cls, hook, None) is not getattr(Carrier, hook)


def _spans(source: type[Carrier], destination: type[Carrier]) -> bool:
    """Whether the generic bulk span path applies between two different classes.

    It needs span export on the source, span import (and ``allocate``) on the destination, and a
    definition-backed side with a storage provider, whose author opted into the storage contract;
    composed carriers (``DependentCarrier``) allocate through their tiers, so they need a route.
    """
    if issubclass(source, DependentCarrier) or issubclass(destination, DependentCarrier):
        return False
    if not (_has_hook(source, "_export") and _has_hook(destination, "_import")):
        return False
    return any(
        isinstance(getattr(carrier_definition(cls), "storage", None), StorageProvider)
        for cls in (source, destination)
    )


def span_copy(source: Tensor, destination: type[Carrier], **options: Any) -> Tensor:
    """A route copy through the public storage contract: allocate, export span, import span.

    The built-in same-class route, and the route any two NumPy-exporting carriers can share:
    a fresh, contiguous copy (``move`` never aliases).
    """
    carrier = destination.allocate(source.size, source.dtype, **options)
    if source.size:
        values = source.carrier.export_span(source.layout).reshape(-1)
        carrier.import_span(Layout((source.size,)), values)
    return Tensor(carrier, Layout(source.shape))


def _destination_class(destination: object) -> type[Carrier]:
    if isinstance(destination, str):
        cls: type[Carrier] = _host().carrier(destination)
        return cls
    if isinstance(destination, type) and issubclass(destination, Carrier):
        return destination
    hint = ""
    if isinstance(destination, Carrier):
        hint = f"; to move next to this carrier, pass its class {type(destination).__name__}"
    msg = (
        f"move: the destination must be a Carrier class or a registered carrier name such as "
        f"'cpu', got {destination!r} ({type(destination).__name__}){hint}"
    )
    raise TypeError(msg)


def _check_result(route: MoveRoute, source: Tensor, result: object) -> Tensor:
    where = f"move from {route.source.__name__} to {route.destination.__name__}"
    if not isinstance(result, Tensor) or type(result.carrier) is not route.destination:
        got = type(result.carrier).__name__ if isinstance(result, Tensor) else type(result)
        msg = (
            f"{where}: the route returned {got!r}; it must return a "
            f"{route.destination.__name__} Tensor"
        )
        raise TypeError(msg)
    if result.shape != source.shape or result.dtype is not source.dtype:
        msg = (
            f"{where}: the route returned shape {result.shape} {result.dtype.name}, expected "
            f"{source.shape} {source.dtype.name}"
        )
        raise ValueError(msg)
    return result


class _Move(Operation):
    """The operation behind ``move``: one route call, and a backward that moves back."""

    def __init__(self, route: MoveRoute, options: dict[str, Any]) -> None:
        super().__init__()
        self._route = route
        self._allocate_options = options

    def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> Tensor:
        (source,) = inputs
        result = self._route.copy(source, self._route.destination, **self._allocate_options)
        return _check_result(self._route, source, result)

    def _save(self, inputs: tuple[Any, ...]) -> None:
        # Backward needs no input values, so nothing is version-checked: writing into the
        # source after a move does not invalidate the move's gradient.
        self._saved = ()
        self._saved_versions = ()
        self._grad_inputs = tuple(x for x in inputs if isinstance(x, Tensor))

    def backward(self, gradient: Any) -> tuple[Tensor | None, ...]:
        if gradient is None:
            return (None,)
        return (_lowered(gradient, self._route.source, {}),)


def _operation(tensor: object, destination: object, options: dict[str, Any]) -> _Move:
    if not isinstance(tensor, Tensor):
        msg = f"move: expected a Tensor, got {tensor!r} ({type(tensor).__name__})"
        raise TypeError(msg)
    source = tensor.carrier
    op = _Move(move_route(type(source), _destination_class(destination)), options)
    # Stamped like a dispatch of the source carrier: profiling and autograd name that boundary.
    op._operation_name = _NAME
    op._dispatch_carrier_class = type(source)
    op._dispatch_carrier = source
    op._dispatched = True
    return op


def _lowered(tensor: Tensor, destination: object, options: dict[str, Any]) -> Tensor:
    result = execute_lowered(_operation(tensor, destination, options), tensor)
    assert isinstance(result, Tensor)  # _Move returns one tensor
    return result


def move(tensor: Tensor, destination: type[Carrier] | str, /, **options: Any) -> Tensor:
    """A copy of ``tensor``'s values in a fresh, contiguous carrier of class ``destination``.

    ``destination`` is a carrier class or a registered carrier name (``"cpu"``); a carrier
    instance is refused, because a move always allocates. Keyword ``options`` go to the
    destination's ``allocate`` (a file carrier's ``directory=``, a block carrier's
    ``device=``). A move to the tensor's own class is a copy,
    so the result never aliases the source.

    Differentiable: when ``tensor`` requires grad and grad mode is on, the result's autograd
    node moves the incoming gradient back to the source class.

    Raises:
        TypeError: ``tensor`` is not a Tensor, or ``destination`` is not a class or name.
        ValueError: ``destination`` names no registered carrier.
        NotImplementedError: no route joins the source class and ``destination``.
    """
    result = _operation(tensor, destination, options).forward(tensor)
    assert isinstance(result, Tensor)  # _Move returns one tensor
    return result
