"""Operation definitions: the central meaning of every dispatch name, and their registry.

An ``OperationDefinition`` is the one meaning of a dispatch name: how a call binds, how it
resolves into an immutable ``ResolvedInvocation`` (plan, result specs, saved operands), and its
VJP. Definition-backed carriers execute them (``conveyor.engine.definition_dispatch``).

The built-in definitions (every planned name and the eight view names) are generated from the
policy, options and gradient tables by ``conveyor.engine.builtin_operations``, which fills this
registry; ``define_operation`` adds namespaced custom ones; ``operation_definitions()`` lists
them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final, final

import attrs

from conveyor.engine import journal as _journal
from conveyor.engine.functional import call
from conveyor.engine.operation import Operation
from conveyor.engine.plugin_access import scanned_host as _scanned_host
from conveyor.engine.tensor import Tensor
from conveyor.types.dtypes import DType
from conveyor.types.layout import Layout
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import OperationPlan

__all__ = [
    "NON_DIFFERENTIABLE",
    "BoundCall",
    "OperationDefinition",
    "ResolvedInvocation",
    "ResultSpec",
    "check_contributed_definition",
    "define_operation",
    "operation_definition",
    "operation_definitions",
]

_SCALARS: Final = (bool, int, float, complex)


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


def _strs(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _str_set(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


def _specs(values: Iterable[ResultSpec]) -> tuple[ResultSpec, ...]:
    return tuple(values)


@final
class _NonDifferentiable:
    """The VJP marker of an operation that has no gradient."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NON_DIFFERENTIABLE"


NON_DIFFERENTIABLE: Final = _NonDifferentiable()

# -- operation semantics ------------------------------------------------------------------------


def _layout_or_none(value: object) -> Layout | None:
    if value is None or isinstance(value, Layout):
        return value
    msg = f"ResultSpec: layout must be a conveyor.Layout or None, got {value!r}"
    raise TypeError(msg)


@final
@attrs.frozen(kw_only=True)
class ResultSpec:
    """One result of a resolved call: dtype, shape, layout, and the operand it aliases.

    A fresh result (``alias=None``) has the contiguous layout of its shape on a new carrier. An
    aliasing result (a view) names the operand index whose carrier it shares and its exact
    layout there.
    """

    dtype: DType = attrs.field(validator=attrs.validators.instance_of(DType))
    shape: tuple[int, ...] = attrs.field(converter=_ints)
    layout: Layout = attrs.field(default=None, converter=_layout_or_none)
    alias: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.layout is None:
            object.__setattr__(self, "layout", Layout.contiguous(self.shape))
        elif self.layout.shape != self.shape:
            msg = f"ResultSpec: layout shape {self.layout.shape} differs from shape {self.shape}"
            raise ValueError(msg)
        if self.alias is None and self.layout != Layout.contiguous(self.shape):
            msg = "ResultSpec: a fresh (non-aliasing) result has the contiguous layout"
            raise ValueError(msg)


@final
@attrs.frozen(kw_only=True)
class ResolvedInvocation:
    """The immutable outcome of central binding and resolution; all a provider ever sees.

    ``saved`` are the operand indices the VJP reads: only those are version-checked at backward.
    """

    operation: str
    operands: tuple[Any, ...]
    options: OperationExecutionOptions | None
    plan: OperationPlan | None
    results: tuple[ResultSpec, ...] = attrs.field(converter=_specs)
    saved: tuple[int, ...] = attrs.field(default=(), converter=_ints)

    @classmethod
    def _of(
        cls, call: BoundCall, results: tuple[ResultSpec, ...], saved: tuple[int, ...]
    ) -> ResolvedInvocation:
        """``call.resolved(results, saved)`` for tuples already checked (a resolve's memo):
        the same record, without the converters' calls."""
        made = object.__new__(cls)
        _SET_OPERATION(made, call.operation)
        _SET_OPERANDS(made, call.operands)
        _SET_OPTIONS(made, call.options)
        _SET_PLAN(made, call.plan)
        _SET_RESULTS(made, results)
        _SET_SAVED(made, saved)
        return made


#: The slot setters of ``ResolvedInvocation``'s fields, in order: a memo fills a record with
#: them (``_of``, the definition-backed bound path) at about half the cost of
#: ``object.__setattr__``.
_INVOCATION_SETTERS: Final = tuple(
    ResolvedInvocation.__dict__[field.name].__set__ for field in attrs.fields(ResolvedInvocation)
)
_SET_OPERATION, _SET_OPERANDS, _SET_OPTIONS, _SET_PLAN, _SET_RESULTS, _SET_SAVED = (
    _INVOCATION_SETTERS
)


@final
@attrs.frozen
class BoundCall:
    """A bound call, as ``resolve`` receives it: operands by role, validated options, plan.

    ``carrier`` is the exact dispatch carrier class, so refusals can name it.
    """

    operation: str
    operands: tuple[Any, ...]
    options: OperationExecutionOptions | None
    plan: OperationPlan | None
    carrier: type | None = attrs.field(default=None, kw_only=True)

    def option(self, name: str) -> Any:
        """An option's value, its schema default when the call gave no options."""
        options = self.options or OperationExecutionOptions(self.operation)
        return getattr(options, name)

    def resolved(
        self, results: Iterable[ResultSpec], saved: Iterable[int] = ()
    ) -> ResolvedInvocation:
        """The ``ResolvedInvocation`` of this call with ``results`` and ``saved`` operands."""
        return ResolvedInvocation(
            operation=self.operation,
            operands=self.operands,
            options=self.options,
            plan=self.plan,
            results=tuple(results),
            saved=tuple(saved),
        )


_Resolve = Callable[[BoundCall], ResolvedInvocation]
_Vjp = Callable[[Operation, Any], tuple[Tensor | None, ...]]


@final
@attrs.frozen(kw_only=True, eq=False)
class OperationDefinition:
    """The central semantics of one dispatch name (compared by identity).

    ``roles`` name the positional operands; ``scalar_roles`` may also be Python scalars and
    ``optional_roles`` ``None``. Options follow the name's schema in ``conveyor.types.options``
    (custom operations take none). ``vjp(operation, gradient)`` returns one gradient or ``None``
    per tensor operand, or is ``NON_DIFFERENTIABLE``. Calling a definition dispatches it on
    its operands' carrier: ``definition(x, y)``.
    """

    name: str
    roles: tuple[str, ...] = attrs.field(converter=_strs)
    resolve: _Resolve
    vjp: _Vjp | _NonDifferentiable = NON_DIFFERENTIABLE
    scalar_roles: frozenset[str] = attrs.field(default=frozenset(), converter=_str_set)
    optional_roles: frozenset[str] = attrs.field(default=frozenset(), converter=_str_set)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not NON_DIFFERENTIABLE

    def __call__(self, *operands: Any) -> Any:
        return call(self.name, operands, {})

    def bind(
        self,
        carrier_class: type,
        operands: tuple[Any, ...],
        options: Any,
        plan: OperationPlan | None = None,
    ) -> BoundCall:
        """Check the operands against the roles (count, kind, carrier) and bind them with the
        accepted ``plan`` (``None`` before planning, and for unplanned names).

        Raises:
            TypeError: wrong operand count, an operand of the wrong kind, or a tensor on another
                carrier class.
        """
        where = f"{self.name} on {carrier_class.__name__}"
        accepted: tuple[type, ...] | None = None  # companions, looked up only when needed
        if len(operands) != len(self.roles):
            msg = (
                f"{where}: expected {len(self.roles)} operand(s) ({', '.join(self.roles)}), got "
                f"{len(operands)}"
            )
            raise TypeError(msg)
        for role, x in zip(self.roles, operands, strict=True):
            if type(x) is Tensor:
                if type(x._carrier) is not carrier_class:
                    if accepted is None:
                        accepted = getattr(carrier_class, "_companion_classes", tuple)()
                    if type(x._carrier) in accepted:
                        continue
                    msg = (
                        f"{where}: operand {role} lives on {type(x._carrier).__name__}; move it "
                        f"first with cv.move(tensor, {carrier_class.__name__})"
                    )
                    raise TypeError(msg)
            elif not (
                (x is None and role in self.optional_roles)
                or (isinstance(x, _SCALARS) and role in self.scalar_roles)
            ):
                msg = f"{where}: operand {role} must be a Tensor, got {x!r} ({type(x).__name__})"
                raise TypeError(msg)
        return BoundCall(self.name, operands, options, plan, carrier=carrier_class)


_OPERATIONS: dict[str, OperationDefinition] = {}
#: The definitions whose ``resolve`` depends on nothing but the plan, the options and each
#: operand's shape (a non-tensor operand's type), and only checks them: the built-in planned
#: ones whose shape rule reads no operand values (``conveyor.engine.builtin_operations`` adds
#: them). The bound path of definition-backed carriers keeps their result specs per call shape
#: instead of resolving again; every other definition is resolved on every call.
_SHAPE_RESOLVED: set[OperationDefinition] = set()
_OPERATIONS_LOCK = threading.Lock()
# compiled (and cached) by re on first use, not at every import
_CUSTOM_NAME: Final = r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+"
#: Namespaces no custom operation may use: built-in names are not dotted, and ``conveyor.`` is
#: kept for future built-ins.
_RESERVED: Final = frozenset({"conveyor", "cv", "builtin"})


def _register_operation(definition: OperationDefinition) -> None:
    with _OPERATIONS_LOCK:
        if definition.name in _OPERATIONS:
            msg = (
                f"define_operation: {definition.name!r} is already defined; operation names are "
                f"defined exactly once"
            )
            raise ValueError(msg)
        _OPERATIONS[definition.name] = definition


def _check_custom_name(name: object) -> None:
    if not isinstance(name, str):
        msg = f"define_operation: name must be a str, got {name!r} ({type(name).__name__})"
        raise TypeError(msg)
    if not re.fullmatch(_CUSTOM_NAME, name):
        msg = (
            f"define_operation: {name!r} is not a namespaced name; custom operations are named "
            f"'namespace.operation' in lower-case identifiers, e.g. 'acme.scale'"
        )
        raise ValueError(msg)
    if name.split(".", 1)[0] in _RESERVED:
        msg = (
            f"define_operation: {name!r} uses the reserved namespace "
            f"{name.split('.', 1)[0]!r}; use your distribution's name"
        )
        raise ValueError(msg)


def check_contributed_definition(item: object) -> None:
    """Refuse what a plugin's ``conveyor_operation_definitions`` hook may not contribute.

    The plugin host calls it while loading the plugin, so a bad contribution marks that plugin
    broken (with its name in the error) instead of failing a later, unrelated lookup.

    Raises:
        TypeError: ``item`` is not an ``OperationDefinition``.
        ValueError: its name breaks ``define_operation``'s rules or names another definition.
    """
    if not isinstance(item, OperationDefinition):
        msg = (
            f"contributed {item!r} ({type(item).__name__}); contribute OperationDefinition "
            f"records, e.g. define_operation(...) results"
        )
        raise TypeError(msg)
    _check_custom_name(item.name)
    existing = _OPERATIONS.get(item.name)
    if existing is not None and existing is not item:
        msg = (
            f"define_operation: {item.name!r} is already defined by another definition; "
            f"operation names are defined exactly once"
        )
        raise ValueError(msg)


def define_operation(
    name: str,
    *,
    roles: Iterable[str],
    resolve: _Resolve,
    vjp: _Vjp | _NonDifferentiable = NON_DIFFERENTIABLE,
    scalar_roles: Iterable[str] = (),
    optional_roles: Iterable[str] = (),
) -> OperationDefinition:
    """Define a namespaced custom operation (``"vendor.name"``) and return its definition.

    Custom operations are not dtype-planned and take no options; ``resolve`` decides their
    results. Carriers execute one through a ``KernelPattern`` with no plans.

    Raises:
        TypeError: ``name`` is not a str, ``resolve`` or ``vjp`` is not callable.
        ValueError: ``name`` is not dotted lower-case identifiers, uses a reserved namespace
            (``conveyor.``), or is already defined.
    """
    _check_custom_name(name)
    if not callable(resolve):
        msg = f"define_operation {name}: resolve must be callable, got {resolve!r}"
        raise TypeError(msg)
    if vjp is not NON_DIFFERENTIABLE and not callable(vjp):
        msg = f"define_operation {name}: vjp must be callable or NON_DIFFERENTIABLE, got {vjp!r}"
        raise TypeError(msg)
    definition = OperationDefinition(
        name=name,
        roles=tuple(roles),
        resolve=resolve,
        vjp=vjp,
        scalar_roles=scalar_roles,
        optional_roles=optional_roles,
    )
    _journal.admit(f"define_operation {name}")
    _register_operation(definition)
    _journal.record(lambda: _unregister_operation(definition), f"define_operation {name}")
    return definition


def _unregister_operation(definition: OperationDefinition) -> None:
    """Withdraw ``definition`` (the plugin that defined it at import ended broken)."""
    with _OPERATIONS_LOCK:
        if _OPERATIONS.get(definition.name) is definition:
            del _OPERATIONS[definition.name]


def _contributed_definitions() -> None:
    """Register operation definitions plugins contributed to the default host (if it scanned)."""
    default = _scanned_host()
    if default is None:
        return
    # The host checked every item at plugin load (check_contributed_definition).
    for item in default.operation_definitions():
        assert isinstance(item, OperationDefinition)
        if _OPERATIONS.get(item.name) is not item:
            _register_operation(item)


def operation_definition(name: str) -> OperationDefinition | None:
    """The central definition of ``name`` (built-in or custom), or ``None``."""
    found = _OPERATIONS.get(name)
    if found is None and "." in name:
        _contributed_definitions()
        found = _OPERATIONS.get(name)
    return found


def operation_definitions() -> tuple[OperationDefinition, ...]:
    """Every central definition known now (built-in and custom), sorted by name.

    The built-in ones cover every planned dispatch name and every view name, so a
    definition-backed carrier can implement any of them.
    """
    _contributed_definitions()
    with _OPERATIONS_LOCK:
        found = list(_OPERATIONS.values())
    return tuple(sorted(found, key=lambda d: d.name))
