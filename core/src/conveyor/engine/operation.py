"""Operation: the base of every executable implementation, and the dispatched-call lifecycle.

A dispatched operation is single-use: ``forward`` validates options, runs the preflight (central
plan + exact capability gate, before any allocation), saves what backward needs, calls the
carrier's ``_forward`` hook and becomes the autograd node of its results. Keeping one object per
call isolates saved inputs, options and plan between calls, which the dispatch contract requires.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from conveyor.engine import grad_mode, profiling
from conveyor.engine.grad_mode import _state as _grad_mode
from conveyor.engine.tensor import Tensor
from conveyor.types.dtypes import DType
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import (
    OperationPlan,
    OperationSpec,
    operation_spec,
    registered_operations,
    resolve_plan,
)

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__ = ["Gradients", "Operation", "OperationResult", "execute_lowered", "run_forward"]

OperationResult = Tensor | tuple[Tensor, ...]
Gradients = tuple[Tensor | None, ...]

_SCALARS = (bool, int, float, complex)
# name -> spec for planned names; unplanned names (views, custom) are absent.
_SPECS: dict[str, OperationSpec] = {name: operation_spec(name) for name in registered_operations()}


class Operation:
    """Base of every executable implementation (open: carriers subclass it).

    Subclasses override ``_forward(self, *inputs, options)`` and ``backward(self, gradient)``.
    For a planned name the accepted central plan is ``self.plan`` when ``_forward`` runs; the
    implementation executes conversions, arithmetic, accumulation and output dtype from it.
    All state has class-level defaults, so a subclass ``__init__`` need not call ``super()``.
    """

    _operation_name: str | None = None
    _dispatch_carrier_class: type[Carrier] | None = None
    _dispatch_carrier: Carrier | None = None
    _dispatched: bool = False
    _forwarded: bool = False
    plan: OperationPlan | None = None
    options: OperationExecutionOptions | None = None
    # Saved for backward: all positional inputs, and (tensor, carrier version) tokens.
    _saved: tuple[Any, ...] | None = None
    _saved_versions: tuple[tuple[Tensor, int], ...] = ()
    _saved_released: bool = False
    # Inputs the autograd engine routes gradients to: the tensor positional inputs, in order.
    _grad_inputs: tuple[Tensor, ...] = ()
    _n_outputs: int = 1
    # output index -> non-leaf result that asked for retain_grad(); replaced, never mutated.
    _retained: dict[int, Tensor] = {}  # noqa: RUF012  # read-only class default

    def __init__(self) -> None:
        """Operations take no constructor arguments; carriers configure them after creation."""

    def __repr__(self) -> str:
        carrier = self._dispatch_carrier_class
        where = f" on {carrier.__name__}" if carrier else " (not dispatched)"
        return f"<{type(self).__name__} {self._operation_name!r}{where}>"

    # -- public lifecycle ---------------------------------------------------------------------

    def forward(self, *inputs: Any, options: Any = None, **unexpected: Any) -> OperationResult:
        """Run the operation once on ``inputs`` and attach it as the results' autograd node."""
        return self._execute(inputs, options, unexpected, True)

    def backward(self, gradient: Any) -> Gradients:
        """One gradient (or ``None``) per tensor input of ``forward``; override in subclasses."""
        msg = (
            f"{self._operation_name} on {_carrier_name(self)}: {type(self).__name__} does not "
            f"implement backward; it is not differentiable on this carrier"
        )
        raise NotImplementedError(msg)

    def _forward(self, *inputs: Any, options: OperationExecutionOptions | None) -> OperationResult:
        msg = (
            f"{self._operation_name} on {_carrier_name(self)}: {type(self).__name__} does not "
            f"implement the Operation hook _forward"
        )
        raise NotImplementedError(msg)

    @property
    def saved_inputs(self) -> tuple[Any, ...]:
        """The positional inputs saved by forward, after checking none was mutated since.

        Raises:
            RuntimeError: nothing was saved (grad was off), the state was released by a previous
                backward without ``retain_graph=True``, or a saved tensor was modified in place.
        """
        if self._saved is None:
            if self._saved_released:
                msg = (
                    f"{self._operation_name} on {_carrier_name(self)}: saved state was already "
                    f"released by a backward pass; call backward(retain_graph=True) the first "
                    f"time to backpropagate twice"
                )
            else:
                msg = (
                    f"{self._operation_name} on {_carrier_name(self)}: forward saved no inputs "
                    f"(grad mode was off or no input required grad)"
                )
            raise RuntimeError(msg)
        for tensor, version in self._saved_versions:
            if tensor._carrier._version != version:
                raise self._modified(tensor, version)
        return self._saved

    def _modified(self, tensor: Tensor, version: int, *, during: bool = False) -> RuntimeError:
        """The error for a saved ``tensor`` written since forward (``during``: while backward
        was reading it, from another thread)."""
        when = "while backward read it" if during else "after forward"
        msg = (
            f"{self._operation_name} on {_carrier_name(self)}: a tensor saved for backward was "
            f"modified in place {when} (version {version} -> {tensor.version}); clone it before "
            f"modifying, or finish backward before writing"
        )
        return RuntimeError(msg)

    # -- framework internals ------------------------------------------------------------------

    def _execute(
        self,
        inputs: tuple[Any, ...],
        options: Any,
        unexpected: dict[str, Any],
        attach: bool,
    ) -> OperationResult:
        name = self._operation_name
        if not self._dispatched:
            msg = (
                f"{type(self).__name__}.forward: this operation was never dispatched; obtain "
                f"operations with carrier.dispatch_op(name)"
            )
            raise TypeError(msg)
        if self._forwarded:
            msg = (
                f"{name} on {_carrier_name(self)}: forward was already called on this "
                f"operation; dispatch a fresh one for each call"
            )
            raise RuntimeError(msg)
        # Consumed by the first call whatever its outcome, so a refused call cannot be retried.
        self._forwarded = True
        if unexpected:
            msg = (
                f"{name}.forward() got unexpected keyword argument(s) "
                f"{', '.join(sorted(unexpected))}; pass operation parameters in "
                f"options=OperationExecutionOptions({name!r}, ...)"
            )
            raise TypeError(msg)
        if options is not None:
            if type(options) is not OperationExecutionOptions:
                msg = (
                    f"{name}.forward(): options must be an OperationExecutionOptions or None, "
                    f"got {options!r} ({type(options).__name__})"
                )
                raise TypeError(msg)
            if options.name != name:
                msg = (
                    f"{name}.forward(): options were validated for {options.name!r}, not "
                    f"{name!r}; build OperationExecutionOptions({name!r}, ...)"
                )
                raise ValueError(msg)
        spec = _SPECS.get(name)  # type: ignore[arg-type]  # dispatched implies a name
        if spec is not None:
            self.plan = self._preflight(spec, inputs, options)
        self.options = options

        tracked = False
        if _grad_mode.enabled and (spec is None or spec.differentiable):
            for x in inputs:
                if type(x) is Tensor and x._requires_grad:
                    tracked = True
                    break
        return run_forward(self, inputs, options, tracked, attach)

    def _preflight(
        self, spec: OperationSpec, inputs: tuple[Any, ...], options: Any
    ) -> OperationPlan:
        """Resolve the central plan and require it on the dispatch carrier, before any work."""
        if len(inputs) != len(spec.roles):
            msg = (
                f"{spec.name} on {_carrier_name(self)}: expected {len(spec.roles)} operand(s) "
                f"({', '.join(spec.roles)}), got {len(inputs)}"
            )
            raise TypeError(msg)
        keys = [x._dtype if type(x) is Tensor else x for x in inputs]
        for role, x in zip(spec.roles, keys, strict=True):
            if type(x) is DType:
                continue
            if x is None and role not in spec.optional_roles:
                msg = (
                    f"{spec.name} on {_carrier_name(self)}: operand {role!r} is None, but it is "
                    f"required; pass a Tensor or a Python scalar"
                )
                raise TypeError(msg)
            if not (x is None or isinstance(x, _SCALARS)):
                msg = (
                    f"{spec.name} on {_carrier_name(self)}: operands must be Tensors or Python "
                    f"scalars, got {x!r} ({type(x).__name__})"
                )
                raise TypeError(msg)
            if x is not None and role not in spec.scalar_roles:
                msg = (
                    f"{spec.name} on {_carrier_name(self)}: operand {role!r} is the Python "
                    f"scalar {x!r} ({type(x).__name__}), but it must be a Tensor; build one with "
                    f"cv.tensor({x!r}, carrier=...)"
                )
                raise TypeError(msg)
        plan = resolve_plan(spec.name, *keys, options=options)
        carrier = self._dispatch_carrier
        assert carrier is not None  # set together with _dispatched
        carrier.require_operation_plan(plan)
        return plan

    def _fresh_state(self) -> tuple[dict[str, Any], bool]:
        """What a fresh operation of this dispatch holds besides its stamps, and whether its
        calls may become autograd nodes: the bound fast path builds its copies from these."""
        return {}, True

    def _save(self, inputs: tuple[Any, ...]) -> None:
        # One loop, no comprehension (each is a Python call): this runs on every tracked call.
        tensors: tuple[Tensor, ...] = ()
        versions: tuple[tuple[Tensor, int], ...] = ()
        for x in inputs:
            if x.__class__ is Tensor:
                tensors += (x,)
                # The carrier's write counter at save time, read directly.
                versions += ((x, x._carrier._version),)
        self._saved = inputs
        self._saved_versions = versions
        self._grad_inputs = tensors
        grad_mode.note_saved(self, tensors)  # exports of these carriers must stay read-only

    def refresh_saved(self, inputs: tuple[Any, ...]) -> None:
        """Replace the inputs forward saved for backward with ``inputs`` (same positions).

        For composite adapters: before their nested operation's backward runs, they point its
        saved inputs at the current form of the outer operands (a tier promoted again). New
        version tokens are taken. Does nothing when forward saved nothing.
        """
        if self._saved is not None:
            self._save(inputs)

    def _release_saved(self) -> None:
        """Drop the saved inputs after a backward pass (override to release nested state too)."""
        self._saved = None
        self._saved_released = True

    def _forward_profiled(self, inputs: tuple[Any, ...], options: Any) -> OperationResult:
        start = time.perf_counter()
        ok = False
        try:
            result = self._forward(*inputs, options=options)
            ok = True
        finally:
            profiling.record(
                self._operation_name,
                self._dispatch_carrier_class,
                time.perf_counter() - start,
                ok,
            )
        return result


def run_forward(
    op: Operation,
    inputs: tuple[Any, ...],
    options: OperationExecutionOptions | None,
    tracked: bool,
    attach: bool,
) -> OperationResult:
    """The rest of every call once its plan is accepted: save, ``_forward``, check, attach.

    ``Operation.forward`` comes here after its checks and preflight; a public function's bound
    call comes here directly for a tracked call (an untracked one, with no profiler active, is
    ``_forward`` and the result check only). ``tracked``: grad mode is on, the name is
    differentiable and an input requires grad; ``attach``: the result gets ``op`` as its node
    (lowered execution saves state but attaches nothing).
    """
    if tracked:
        op._save(inputs)
    if profiling.active:
        result = op._forward_profiled(inputs, options)
    else:
        result = op._forward(*inputs, options=options)
    if result.__class__ is Tensor:
        if tracked and attach and result._dtype.is_differentiable:
            result._grad_fn = op  # grad_mode.attach's single-Tensor case, inline
            result._requires_grad = True
        return result
    _check_result(op, result)
    if tracked and attach:
        grad_mode.attach(op, result)
    return result


def _carrier_name(op: Operation) -> str:
    cls = op._dispatch_carrier_class
    return cls.__name__ if cls is not None else "<undispatched>"


def _check_result(op: Operation, result: Any) -> None:
    if type(result) is Tensor:
        return
    if isinstance(result, tuple) and result and all(isinstance(r, Tensor) for r in result):
        return
    if isinstance(result, Tensor):
        return
    msg = (
        f"{op._operation_name} on {_carrier_name(op)}: {type(op).__name__}._forward returned "
        f"{type(result).__name__}; it must return a Tensor or a tuple of Tensors"
    )
    raise TypeError(msg)


def execute_lowered(op: Operation, *inputs: Any, options: Any = None) -> OperationResult:
    """Run a nested operation with full validation, profiling and saved state, but no visible node.

    Composite adapters use it: the adapter stays the only autograd node on the published result,
    while the nested operation keeps the saved inputs its own backward needs.
    """
    if not isinstance(op, Operation):
        msg = f"execute_lowered expects an Operation, got {op!r} ({type(op).__name__})"
        raise TypeError(msg)
    return op._execute(inputs, options, {}, False)
