"""Definitions: central operation semantics and definition-backed dispatch.

An ``OperationDefinition`` is the one meaning of a dispatch name: how a call binds, how it
resolves into an immutable ``ResolvedInvocation`` (plan, result specs, saved operands), and its
VJP. A carrier class registered with a ``CarrierDefinition`` (see
``conveyor.carrier_definitions``) dispatches a fresh ``DefinitionOperation`` bound to the central
definition and the exact carrier; calling it binds and resolves centrally, runs the capability
gate (derived from the carrier's kernel patterns), and only then lets a provider prepare and
execute. Provider results are checked
against the invocation before anything is published; gradients come only from the central VJP.

The built-in definitions (every planned name and the eight view names) are generated from the
policy, options and gradient tables by ``conveyor.central_definitions``, which fills this
module's registry; ``operation_definitions()`` lists them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from conveyor import _journal
from conveyor.capabilities import _key
from conveyor.carrier_definitions import (
    CarrierDefinition,
    _Sealed,
    _sealed,
    carrier_definition,
    register_carrier_definition,
)
from conveyor.dtypes import DType
from conveyor.functional import VIEW_OPERATIONS
from conveyor.layout import Layout, rearrange_plan
from conveyor.operation import Operation
from conveyor.options import OperationExecutionOptions
from conveyor.policy import OperationPlan, is_planned
from conveyor.providers import (
    KernelExecutionInterface,
    KernelPattern,
    PreparedComposite,
    ProviderContractError,
    ProviderResult,
    StorageProvider,
    Unsupported,
)
from conveyor.tensor import Tensor

if TYPE_CHECKING:
    from conveyor.carrier import Carrier

__all__ = [
    "NON_DIFFERENTIABLE",
    "BoundCall",
    "CarrierDefinition",
    "DefinitionOperation",
    "OperationDefinition",
    "ResolvedInvocation",
    "ResultSpec",
    "carrier_definition",
    "define_operation",
    "dispatch_definition",
    "operation_definition",
    "operation_definitions",
    "register_carrier_definition",
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
    ``optional_roles`` ``None``. Options follow the name's schema in ``conveyor.options``
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
        from conveyor.functional import call

        return call(self.name, operands, {})

    def bind(self, carrier_class: type, operands: tuple[Any, ...], options: Any) -> BoundCall:
        """Check the operands against the roles (count, kind, carrier) and bind them.

        Raises:
            TypeError: wrong operand count, an operand of the wrong kind, or a tensor on another
                carrier class.
        """
        where = f"{self.name} on {carrier_class.__name__}"
        if len(operands) != len(self.roles):
            msg = (
                f"{where}: expected {len(self.roles)} operand(s) ({', '.join(self.roles)}), got "
                f"{len(operands)}"
            )
            raise TypeError(msg)
        for role, x in zip(self.roles, operands, strict=True):
            if type(x) is Tensor:
                if type(x._carrier) is not carrier_class:
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
        return BoundCall(self.name, operands, options, None, carrier=carrier_class)


_OPERATIONS: dict[str, OperationDefinition] = {}
_OPERATIONS_LOCK = threading.Lock()
_CUSTOM_NAME: Final = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+")
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
    if not _CUSTOM_NAME.fullmatch(name):
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
    from conveyor.plugins import _host

    default = _host._default
    if default is None or default._discovery is None:
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


# -- definition-backed dispatch -----------------------------------------------------------------


class DefinitionOperation(Operation):
    """The fresh operation a definition-backed carrier dispatches (never subclassed by vendors).

    ``forward`` runs the ordinary lifecycle (options, plan, capability gate, saved inputs); then
    ``_forward`` binds and resolves centrally, lets the provider prepare and execute the
    ``invocation``, and validates its result before publishing. ``backward`` is the central VJP.
    """

    invocation: ResolvedInvocation | None = None
    _ran_kernel: bool = False  # kernels read saved inputs as they are; composites may lower
    _in_vjp: bool = False

    def __init__(self, definition: OperationDefinition, sealed: _Sealed) -> None:
        self.definition = definition
        self._table = sealed

    def _execute(
        self,
        inputs: tuple[Any, ...],
        options: Any,
        unexpected: dict[str, Any],
        attach: bool,
    ) -> Any:
        # A non-differentiable definition never becomes an autograd node.
        return super()._execute(
            inputs, options, unexpected, attach and self.definition.differentiable
        )

    def _save(self, inputs: tuple[Any, ...]) -> None:
        super()._save(inputs)
        # Only operands the VJP reads are version-checked; set again once resolved.
        self._saved_versions = ()
        self._pending_save = True

    def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> Any:
        carrier = self._dispatch_carrier
        assert carrier is not None  # dispatched
        cls = type(carrier)
        definition = self.definition
        call = definition.bind(cls, inputs, options)
        call = BoundCall(call.operation, call.operands, call.options, self.plan, carrier=cls)
        invocation = definition.resolve(call)
        if not isinstance(invocation, ResolvedInvocation) or (
            invocation.operands is not inputs
            or invocation.options is not options
            or invocation.plan is not self.plan
            or invocation.operation != definition.name
        ):
            msg = (
                f"{definition.name} on {cls.__name__}: the definition's resolve must return "
                f"call.resolved(...) for the call it was given, got {invocation!r}"
            )
            raise TypeError(msg)
        self.invocation = invocation
        if getattr(self, "_pending_save", False):
            self._saved_versions = tuple(
                (inputs[i], inputs[i].version)
                for i in invocation.saved
                if type(inputs[i]) is Tensor
            )
        pattern = self._pattern(invocation)
        if pattern is not None:
            self._ran_kernel = True
            return self._run_kernel(carrier, pattern, invocation)
        if invocation.operation in VIEW_OPERATIONS and _has_storage(cls):
            return _publish(invocation, cls, _span_view(carrier, invocation), (cls,))
        return self._run_composite(carrier, invocation)

    def _pattern(self, invocation: ResolvedInvocation) -> KernelPattern | None:
        if invocation.plan is not None:
            return self._table.planned.get(_key(invocation.plan))
        return self._table.unplanned.get(invocation.operation)

    def _run_kernel(
        self, carrier: Carrier, pattern: KernelPattern, invocation: ResolvedInvocation
    ) -> Any:
        context = KernelExecutionInterface(carrier, invocation)
        try:
            result = pattern.kernel(context)
            return _publish(invocation, type(carrier), result, (type(carrier),))
        except BaseException:
            for allocated in context._allocated:
                allocated.release()
            raise
        finally:
            context._allocated.clear()

    def _run_composite(self, carrier: Carrier, invocation: ResolvedInvocation) -> Any:
        cls = type(carrier)
        composite = carrier_definition(cls).composite  # type: ignore[union-attr]  # sealed
        if composite is None:  # the gate passed, so only an unplanned name can get here
            msg = f"{invocation.operation} on {cls.__name__}: no kernel pattern matches the call"
            raise NotImplementedError(msg)
        prepared = composite.prepare(carrier, invocation)
        if isinstance(prepared, Unsupported):
            msg = f"{invocation.operation} on {cls.__name__}: {prepared.reason}"
            raise NotImplementedError(msg)
        if not isinstance(prepared, PreparedComposite):
            reason = (
                f"prepare returned {type(prepared).__name__}; return PreparedComposite or "
                f"Unsupported"
            )
            raise ProviderContractError(invocation.operation, cls, reason)
        result = prepared.execute()
        return _publish(invocation, cls, result, composite.result_carriers)

    @property
    def saved_inputs(self) -> tuple[Any, ...]:
        """The saved inputs; a composite's ``lower_saved`` lowers its own outer tensors."""
        saved = super().saved_inputs
        carrier = self._dispatch_carrier
        if not self._in_vjp or carrier is None or self._ran_kernel:
            return saved
        definition = carrier_definition(type(carrier))
        lower = definition.composite.lower_saved if definition and definition.composite else None
        if lower is None:
            return saved
        cls = type(carrier)
        return tuple(
            _lowered(lower, carrier, x) if type(x) is Tensor and type(x._carrier) is cls else x
            for x in saved
        )

    def backward(self, gradient: Any) -> tuple[Tensor | None, ...]:
        """The central VJP of the definition: providers never supply gradient math."""
        vjp = self.definition.vjp
        if isinstance(vjp, _NonDifferentiable):
            carrier = getattr(self._dispatch_carrier_class, "__name__", "?")
            msg = f"{self._operation_name} on {carrier}: the operation is not differentiable"
            raise NotImplementedError(msg)
        self._in_vjp = True  # only the VJP's own reads lower (the engine's checks do not)
        try:
            return vjp(self, gradient)
        finally:
            self._in_vjp = False


def _lowered(lower: Callable[[Any, Tensor], Tensor], carrier: Any, x: Tensor) -> Tensor:
    """A saved outer tensor as the composite lowers it, keeping whether it wants a gradient."""
    low = lower(carrier, x)
    if x.requires_grad:
        low.requires_grad = True
    return low


def _publish(
    invocation: ResolvedInvocation,
    cls: type,
    result: object,
    result_carriers: tuple[type, ...],
) -> Tensor | tuple[Tensor, ...]:
    """The provider's outputs after checking them against the invocation, else the error."""

    def broken(reason: str) -> ProviderContractError:
        return ProviderContractError(invocation.operation, cls, reason)

    if not isinstance(result, ProviderResult):
        raise broken(f"it returned {type(result).__name__}, not a ProviderResult")
    if result.completion is not None and not result.completion.done():
        result.completion.wait()
    outputs, specs = result.outputs, invocation.results
    if len(outputs) != len(specs):
        raise broken(f"it returned {len(outputs)} result(s), the invocation declares {len(specs)}")
    inputs = {id(x._carrier) for x in invocation.operands if type(x) is Tensor}
    seen: set[int] = set()
    for i, (out, spec) in enumerate(zip(outputs, specs, strict=True)):
        if type(out) is not Tensor:
            raise broken(f"result {i} is {type(out).__name__}, not a Tensor")
        if out.dtype is not spec.dtype:
            raise broken(f"result {i} has dtype {out.dtype.name}, expected {spec.dtype.name}")
        if out.shape != spec.shape:
            raise broken(f"result {i} has shape {out.shape}, expected {spec.shape}")
        if out.layout != spec.layout:
            raise broken(f"result {i} has layout {out.layout!r}, expected {spec.layout!r}")
        if spec.alias is not None:
            if out._carrier is not invocation.operands[spec.alias]._carrier:
                raise broken(f"result {i} must alias operand {spec.alias}, it does not")
            continue
        if type(out._carrier) not in result_carriers:
            expected = " or ".join(c.__name__ for c in result_carriers)
            raise broken(f"result {i} lives on {type(out._carrier).__name__}, expected {expected}")
        if id(out._carrier) in inputs or id(out._carrier) in seen:
            raise broken(f"result {i} aliases an operand or another result; it must be fresh")
        seen.add(id(out._carrier))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _has_storage(cls: type) -> bool:
    definition = carrier_definition(cls)
    return definition is not None and isinstance(definition.storage, StorageProvider)


def _span_view(carrier: Carrier, invocation: ResolvedInvocation) -> ProviderResult:
    """A view name executed by the framework over a carrier's storage provider.

    An aliasing result is the declared layout over the operand's own carrier; a copy (a
    ``reshape`` or ``rearrange`` no layout expresses) is the operand's exported span, reordered
    in NumPy and imported into a fresh carrier of the same class, so a vendor needs no view
    kernels.
    """
    (x,) = invocation.operands
    (spec,) = invocation.results
    if spec.alias is not None:
        return ProviderResult(Tensor._wrap(x._carrier, spec.layout, spec.dtype))
    values = x._carrier.export_span(x.layout)
    options = invocation.options
    if invocation.operation == "rearrange":
        assert options is not None  # rearrange has a required pattern
        split, order, merged, _ = rearrange_plan(options.pattern, x.shape, dict(options.sizes))
        values = values.reshape(split).transpose(order).reshape(merged)
    out = type(carrier).allocate(spec.layout.size, spec.dtype)
    if spec.layout.size:
        out.import_span(Layout((spec.layout.size,)), values.reshape(-1))
    return ProviderResult(Tensor._wrap(out, spec.layout, spec.dtype))


def dispatch_definition(
    carrier: Carrier, definition: CarrierDefinition, operation_name: str
) -> Operation:
    """The definition-backed dispatch path of ``Carrier.dispatch_op``.

    Raises:
        NotImplementedError: the definition is storage-only, the name has no central
            definition, or the carrier's providers do not cover it.
    """
    cls = type(carrier)
    central = operation_definition(operation_name)
    if operation_name in VIEW_OPERATIONS and isinstance(definition.storage, StorageProvider):
        assert central is not None  # every view name has a built-in definition
        return DefinitionOperation(central, _sealed(cls, definition))
    if definition.is_storage_only and (central is not None or is_planned(operation_name)):
        msg = (
            f"{operation_name} on {cls.__name__}: the carrier's definition is storage-only (no "
            f"kernel or composite provider), so it executes no computational operation; move "
            f"the tensor to a compute carrier with cv.move"
        )
        raise NotImplementedError(msg)
    if central is None:
        msg = f"{operation_name} on {cls.__name__}: no central operation definition has this name"
        raise NotImplementedError(msg)
    sealed = _sealed(cls, definition)
    if not sealed.covers(operation_name):
        msg = (
            f"{operation_name} on {cls.__name__}: the carrier's kernel and composite providers "
            f"cover no invocation of this operation"
        )
        raise NotImplementedError(msg)
    return DefinitionOperation(central, sealed)
