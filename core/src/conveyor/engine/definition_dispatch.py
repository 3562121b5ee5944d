"""Definition-backed dispatch: the fresh operation a definition-backed carrier class returns.

A carrier class registered with a ``CarrierDefinition`` (``conveyor.engine.carrier_registry``)
dispatches a fresh ``DefinitionOperation`` bound to the central ``OperationDefinition`` and the
exact carrier; calling it binds and resolves centrally, runs the capability gate (derived from
the carrier's kernel patterns), and only then lets a provider prepare and execute. Provider
results are checked against the invocation before anything is published; gradients come only
from the central VJP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor.engine import grad_mode
from conveyor.engine.carrier_registry import (
    _WITHDRAWN,
    CarrierDefinition,
    _Sealed,
    _sealed,
    carrier_definition,
    storage_handle,
    withdrawal_refusal,
)
from conveyor.engine.operation import Operation
from conveyor.engine.operation_definitions import (
    _INVOCATION_SETTERS,
    _SHAPE_RESOLVED,
    BoundCall,
    OperationDefinition,
    ResolvedInvocation,
    ResultSpec,
    _NonDifferentiable,
    operation_definition,
)
from conveyor.engine.providers import (
    KernelExecutionInterface,
    KernelPattern,
    PreparedComposite,
    ProviderContractError,
    ProviderResult,
    StorageProvider,
    Unsupported,
)
from conveyor.engine.tensor import Tensor
from conveyor.engine.views import contiguous_copy, view_result
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import VIEW_OPERATIONS, is_planned

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

from conveyor.engine.carrier import storage_only_refusal

__all__ = ["DefinitionOperation", "bound_definition_class", "dispatch_definition"]

_Specs = tuple[tuple[ResultSpec, ...], tuple[int, ...], KernelPattern]
_SPECS_MAX = 1024  # call shapes kept per bound record
_new = object.__new__
_set_operation, _set_operands, _set_options, _set_plan, _set_results, _set_saved = (
    _INVOCATION_SETTERS
)


class DefinitionOperation(Operation):
    """The fresh operation a definition-backed carrier dispatches (never subclassed by vendors).

    ``forward`` runs the ordinary lifecycle (options, plan, capability gate, saved inputs); then
    ``_forward`` binds and resolves centrally, lets the provider prepare and execute the
    ``invocation``, and validates its result before publishing. ``backward`` is the central VJP.
    """

    invocation: ResolvedInvocation | None = None
    _ran_kernel: bool = False  # kernels read saved inputs as they are; composites may lower
    # The kernel pattern of this dispatch's plan: sealed tables never change, so the bound fast
    # path hands the first call's pattern to every later one (``_fresh_state``).
    _bound_pattern: KernelPattern | None = None
    # Set on the bound fast path's copies: their operands have the signature (exact carrier
    # class, dtype per tensor, type per other operand) of a call that already bound.
    _signature_bound: bool = False
    # On the bound fast path's copies of a shape-resolved definition (``_SHAPE_RESOLVED``): call
    # shape (options, shape per tensor, type per other operand) -> (result specs, saved
    # operands, kernel pattern), shared by every call of one bound record, hence of one plan.
    # Only calls that resolved centrally and found a kernel pattern are kept.
    _specs: dict[tuple[Any, ...], _Specs] | None = None
    _in_vjp: bool = False
    _pending_save: bool = False  # _save ran: _forward takes the saved operands' version tokens

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

    def _fresh_state(self) -> tuple[dict[str, Any], bool]:
        state = {"definition": self.definition, "_table": self._table, "_signature_bound": True}
        if self._bound_pattern is not None:
            state["_bound_pattern"] = self._bound_pattern
        if self.definition in _SHAPE_RESOLVED:
            state["_specs"] = {}  # this record's own: its plan is fixed
        return state, self.definition.differentiable

    def _save(self, inputs: tuple[Any, ...]) -> None:
        # Operation._save without its version tokens: only operands the VJP reads are
        # version-checked, and _forward takes their tokens once the call is resolved.
        tensors: tuple[Tensor, ...] = ()
        for x in inputs:  # a loop, not a comprehension: this runs on every tracked call
            if x.__class__ is Tensor:
                tensors += (x,)
        self._saved = inputs
        self._saved_versions = ()
        self._grad_inputs = tensors
        self._pending_save = True
        grad_mode.note_saved(self, tensors)  # exports of these carriers must stay read-only

    def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> Any:
        carrier = self._dispatch_carrier
        assert carrier is not None  # dispatched
        cls = type(carrier)
        if _WITHDRAWN:  # a plugin broke after its class was used: bound calls stop here too
            refusal = withdrawal_refusal(self.definition.name, cls)
            if refusal is not None:
                raise refusal
        specs = self._specs
        key: tuple[Any, ...] = (options,)
        bound: _Specs | None = None
        pattern: KernelPattern | None
        if specs is not None:  # a bound call of a shape-resolved definition
            for x in inputs:  # a loop, not a comprehension: this runs on every call
                key += (x._layout.shape if x.__class__ is Tensor else x.__class__,)
            bound = specs.get(key)
        if bound is not None:
            # This call shape resolved before under the same plan: the same frozen result specs
            # and saved operands, and the kernel pattern the sealed table gave them.
            results, saved, pattern = bound
            invocation = _new(ResolvedInvocation)
            _set_operation(invocation, self.definition.name)
            _set_operands(invocation, inputs)
            _set_options(invocation, options)
            _set_plan(invocation, self.plan)
            _set_results(invocation, results)
            _set_saved(invocation, saved)
        else:
            invocation = self._resolve(cls, inputs, options)
            saved = invocation.saved
            pattern = self._bound_pattern or self._pattern(invocation)
            if pattern is not None:
                self._bound_pattern = pattern  # for _fresh_state
                if specs is not None:
                    if len(specs) >= _SPECS_MAX:
                        specs.clear()
                    specs[key] = (invocation.results, saved, pattern)
        self.invocation = invocation
        if self._pending_save:
            versions: tuple[tuple[Tensor, int], ...] = ()
            for i in saved:  # a loop, not a comprehension: this runs on every tracked call
                x = inputs[i]
                if x.__class__ is Tensor:
                    versions += ((x, x._carrier._version),)  # the write counter, read directly
            self._saved_versions = versions
        if pattern is None:
            if invocation.operation in VIEW_OPERATIONS and _has_storage(cls):
                return _publish(invocation, cls, _span_view(carrier, invocation), (cls,))
            if invocation.operation in self._table.fallback_names:
                return _publish(invocation, cls, _fallback(self._table, invocation), (cls,))
            return self._run_composite(carrier, invocation)
        self._ran_kernel = True
        table = self._table
        # The interface's constructor, inline: its slots written directly.
        context = _new(KernelExecutionInterface)
        context.carrier = carrier
        context.invocation = invocation
        allocated: list[Carrier] = []
        context._allocated = allocated
        context._storage = table.storage
        context._handle = storage_handle
        context._fresh = table.fresh
        context._plain_flat = table.plain_flat
        # Withdrawn classes allocate through the checked public path (the sealed table's fresh).
        context._allocators = None if _WITHDRAWN else table.allocators
        try:
            result = pattern.kernel(context)
            declared = invocation.results
            if result.__class__ is Tensor and len(declared) == 1:
                # The kernel returned its one result itself: _publish's checks, inline, for the
                # result allocate_result gave (the spec's own layout and dtype objects).
                spec = declared[0]
                out = result._carrier
                if (
                    result._layout is spec.layout
                    and result._dtype is spec.dtype
                    and out.__class__ is cls
                    and spec.alias is None
                ):
                    for x in inputs:
                        if x.__class__ is Tensor and x._carrier is out:
                            break  # an operand's carrier: _publish refuses it
                    else:
                        return result
            return _publish(invocation, cls, result, (cls,))
        except BaseException:
            for kept in allocated:
                kept.release()
            raise
        finally:
            allocated.clear()

    def _resolve(
        self, cls: type, inputs: tuple[Any, ...], options: OperationExecutionOptions | None
    ) -> ResolvedInvocation:
        """Bind (unless the signature bound before) and resolve centrally, checking that the
        definition's resolve returned the invocation of this very call."""
        definition = self.definition
        if self._signature_bound:  # bind's verdict is the first call's: same signature
            call = BoundCall(definition.name, inputs, options, self.plan, carrier=cls)
        else:
            call = definition.bind(cls, inputs, options, self.plan)
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
        return invocation

    def _pattern(self, invocation: ResolvedInvocation) -> KernelPattern | None:
        if invocation.plan is not None:
            return self._table.pattern(invocation.plan)
        return self._table.unplanned.get(invocation.operation)

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
        saved = self._saved
        if saved is not None and (self._ran_kernel or not self._in_vjp):
            # Operation.saved_inputs's version check, inline (kernels read saved inputs as
            # they are); the errors and the lowering take the full path below.
            for tensor, version in self._saved_versions:
                if tensor._carrier._version != version:
                    raise self._modified(tensor, version)
            return saved
        saved = super().saved_inputs  # raises when nothing is saved; else a composite's VJP
        carrier = self._dispatch_carrier
        if carrier is None:
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
    name = invocation.operation  # the refusals are built only when one is raised
    if isinstance(result, Tensor):  # a kernel's one result, returned without the wrapper
        outputs: tuple[Tensor, ...] = (result,)
    elif isinstance(result, ProviderResult):
        if result.completion is not None and not result.completion.done():
            result.completion.wait()
        outputs = result.outputs
    else:
        raise ProviderContractError(
            name, cls, f"it returned {type(result).__name__}, not a ProviderResult or a Tensor"
        )
    specs = invocation.results
    if len(outputs) != len(specs):
        raise ProviderContractError(
            name, cls, f"it returned {len(outputs)} result(s), the invocation declares {len(specs)}"
        )
    operands = invocation.operands
    for i, out in enumerate(outputs):  # loops, not sets of ids: this runs on every call
        spec = specs[i]
        if type(out) is not Tensor:
            raise ProviderContractError(
                name, cls, f"result {i} is {type(out).__name__}, not a Tensor"
            )
        layout = out._layout
        if out._dtype is not spec.dtype:
            raise ProviderContractError(
                name, cls, f"result {i} has dtype {out._dtype.name}, expected {spec.dtype.name}"
            )
        if layout.shape != spec.shape:
            raise ProviderContractError(
                name, cls, f"result {i} has shape {layout.shape}, expected {spec.shape}"
            )
        if layout is not spec.layout and layout != spec.layout:
            raise ProviderContractError(
                name, cls, f"result {i} has layout {layout!r}, expected {spec.layout!r}"
            )
        carrier = out._carrier
        if spec.alias is not None:
            if carrier is not operands[spec.alias]._carrier:
                raise ProviderContractError(
                    name, cls, f"result {i} must alias operand {spec.alias}, it does not"
                )
            continue
        if type(carrier) not in result_carriers:
            expected = " or ".join(c.__name__ for c in result_carriers)
            raise ProviderContractError(
                name, cls, f"result {i} lives on {type(carrier).__name__}, expected {expected}"
            )
        for x in operands:
            if x.__class__ is Tensor and x._carrier is carrier:
                raise ProviderContractError(
                    name, cls, f"result {i} aliases an operand or another result; it must be fresh"
                )
        for j in range(i):
            if outputs[j]._carrier is carrier:
                raise ProviderContractError(
                    name, cls, f"result {i} aliases an operand or another result; it must be fresh"
                )
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _fallback(table: _Sealed, invocation: ResolvedInvocation) -> ProviderResult:
    """Run a name the definition has no kernel for on its fallback class, under the same plan.

    The operands move to the fallback class, its own dispatch runs the call (its gate accepts
    the plan: the sealed capabilities listed the fallback's plans for this name), and each
    result moves back to the dispatch class. The outer operation is the only autograd node.
    """
    from conveyor.engine.grad_mode import no_grad
    from conveyor.engine.move import move

    target = table.fallback
    assert target is not None  # only a definition with a fallback has fallback names
    cls = type(next(x for x in invocation.operands if type(x) is Tensor)._carrier)
    with no_grad():
        operands = tuple(move(x, target) if type(x) is Tensor else x for x in invocation.operands)
        first = next(x for x in operands if type(x) is Tensor)
        op = first._carrier.dispatch_op(invocation.operation)
        result = op.forward(*operands, options=invocation.options)
        outputs = result if isinstance(result, tuple) else (result,)
        return ProviderResult([move(out, cls) for out in outputs])


def _has_storage(cls: type) -> bool:
    definition = carrier_definition(cls)
    return definition is not None and isinstance(definition.storage, StorageProvider)


def _span_view(carrier: Carrier, invocation: ResolvedInvocation) -> ProviderResult:
    """A view name executed by the framework over a carrier's storage provider.

    The shared view algebra (``conveyor.engine.views``) with the span copy: an alias when a
    layout expresses the view, else the operand's span exported, reordered in NumPy and imported
    into a fresh carrier of the same class, so a vendor needs no view kernels.
    """
    (x,) = invocation.operands
    name = invocation.operation
    options = invocation.options or OperationExecutionOptions(name)
    return ProviderResult(view_result(name, x, options, contiguous_copy))


def bound_definition_class(definition: CarrierDefinition, operation_name: str) -> type | None:
    """The operation class every dispatch of ``operation_name`` by a definition-backed class
    makes, for the bound fast path; ``None`` for view names and storage-only definitions, whose
    dispatch is always asked."""
    if operation_name in VIEW_OPERATIONS or definition.is_storage_only:
        return None
    return definition.operation_class or DefinitionOperation


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
        return (definition.operation_class or DefinitionOperation)(
            central, _sealed(cls, definition)
        )
    if definition.is_storage_only and (central is not None or is_planned(operation_name)):
        raise storage_only_refusal(operation_name, cls)
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
    return (definition.operation_class or DefinitionOperation)(central, sealed)
