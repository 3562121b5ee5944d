"""Running one plan on the carrier under test and on the Generic oracle, case by case.

Both sides get tensors built with ``cv.tensor`` from the same NumPy operands and execute through
``carrier.dispatch_op(name).forward(...)``, so what is compared is exactly the dispatched
implementation. When the oracle refuses a case, the carrier must refuse it with the same builtin
exception type; when only one side raises, that is a failure. Generic itself is checked against
the independent NumPy references (``_reference``), never against itself. Every execution is also
checked for writing into its inputs (with or without a version bump) and for results that alias
an input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import conveyor as cv
from conveyor.sdk import OperationPlan
from conveyor_testkit._compare import compare, tolerance
from conveyor_testkit._inputs import Case, cases_for, operand_arrays, options_for, plan_text
from conveyor_testkit._probe import record_work
from conveyor_testkit._reference import reference
from conveyor_testkit._surface import Surface
from conveyor_testkit._target import make_tensor

__all__ = [
    "Build",
    "PlanFailure",
    "Raised",
    "Run",
    "build_operands",
    "check_case",
    "check_plan",
    "describe_error",
    "execute",
]


@dataclass(frozen=True)
class PlanFailure:
    """The first problem found for one plan: which case, and what differed."""

    name: str
    plan: str
    case: str
    detail: str
    max_abs_error: float | None = None

    def __str__(self) -> str:
        return f"{self.plan} [case {self.case}]: {self.detail}"


Build = Callable[[int, Any, cv.DType | None], Any]
"""How a check builds operand ``index`` from its array and dtype (a view, a grad leaf...)."""


class Raised(Exception):
    """One side raised while executing a case; carries the original exception."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(stage)
        self.stage = stage
        self.error = error


def describe_error(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _builtin(error: BaseException) -> type[BaseException]:
    """The nearest builtin exception class of ``error`` (what the spec names)."""
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def _snapshot(inputs: list[Any]) -> list[tuple[int, Any, bytes, int]]:
    """(operand index, tensor, its bytes, its version) of every tensor operand."""
    return [
        (i, x, np.ascontiguousarray(x.numpy()).tobytes(), x.version)
        for i, x in enumerate(inputs)
        if isinstance(x, cv.Tensor)
    ]


def _untouched(plan: OperationPlan, before: list[tuple[int, Any, bytes, int]]) -> list[str]:
    """What the execution did to its inputs: it must neither write them nor bump their version."""
    problems = []
    for i, x, values, version in before:
        role = plan.operands[i].role
        changed = np.ascontiguousarray(x.numpy()).tobytes() != values
        bumped = x.version != version
        if changed and not bumped:
            problems.append(
                f"it mutated its input {role} without a version bump (a silent write: autograd "
                f"and other readers see changed values); kernels must never write operands"
            )
        elif changed or bumped:
            problems.append(
                f"it mutated its input {role} (version {version} -> {x.version}); kernels "
                f"must never write operands"
            )
    return problems


def _aliases(inputs: list[Any], outputs: tuple[Any, ...]) -> list[str]:
    """Results that share storage with an input (planned results are always fresh)."""
    carriers = {id(x.carrier): i for i, x in enumerate(inputs) if isinstance(x, cv.Tensor)}
    return [
        f"output {k} aliases input operand {carriers[id(out.carrier)]} (the same carrier "
        f"instance); results of planned operations must be fresh"
        for k, out in enumerate(outputs)
        if id(out.carrier) in carriers
    ]


def build_operands(
    cls: type[cv.Carrier], plan: OperationPlan, case: Case, build: Build | None = None
) -> list[Any]:
    """The call's operands: tensors of ``cls`` for arrays (``build(index, array, dtype)`` when
    given, else ``cv.tensor``), the case's scalars and ``None`` as they are."""
    make = build or (lambda _, v, dtype: make_tensor(cls, v, dtype))
    try:
        return [
            make(i, v, o.dtype) if isinstance(v, np.ndarray) else v
            for i, (v, o) in enumerate(zip(case.operands, plan.operands, strict=True))
        ]
    except Exception as exc:
        raise Raised("building the operands", exc) from exc


def execute(
    cls: type[cv.Carrier],
    plan: OperationPlan,
    case: Case,
    inputs: list[Any] | None = None,
    grad: bool = False,
) -> tuple[Any, ...]:
    """Run ``case`` on ``cls`` (on ``inputs`` when given, else freshly built ones): the output
    arrays, after checking metadata, result dtypes, that the inputs were left alone and that no
    result aliases an input. ``grad``: run with grad mode on instead of under ``no_grad``.
    """
    name = plan.operation
    inputs = build_operands(cls, plan, case) if inputs is None else inputs
    first = next(t for t in inputs if isinstance(t, cv.Tensor))
    try:
        before = _snapshot(inputs)
    except Exception as exc:
        raise Raised("reading the operands' values (x.numpy())", exc) from exc
    try:
        with cv.set_grad_enabled(grad):
            operation = first.carrier.dispatch_op(name)
            result = operation.forward(*inputs, options=options_for(plan, case))
    except Exception as exc:
        raise Raised("execution", exc) from exc
    outputs = result if isinstance(result, tuple) else (result,)
    problems = _untouched(plan, before) + _aliases(inputs, outputs)
    if operation._operation_name != name or operation._dispatch_carrier_class is not cls:
        problems.append(
            f"after forward the dispatch metadata reads ({operation._operation_name!r}, "
            f"{getattr(operation._dispatch_carrier_class, '__name__', None)}), not ({name!r}, "
            f"{cls.__name__})"
        )
    if len(outputs) != len(plan.outputs):
        problems.append(f"{len(outputs)} outputs, the plan declares {len(plan.outputs)}")
    for i, (out, dtype) in enumerate(zip(outputs, plan.outputs, strict=False)):
        if out.dtype is not dtype:
            problems.append(f"output {i} has dtype {out.dtype.name}, the plan says {dtype.name}")
    if problems:
        raise Raised("result check", AssertionError("; ".join(problems)))
    return tuple(np.array(out.detach().numpy()) for out in outputs)


def _expected(oracle: type[cv.Carrier] | None, plan: OperationPlan, case: Case) -> tuple[Any, ...]:
    """The oracle's outputs: Generic's, or (``oracle`` is None) the independent NumPy reference.

    The reference raises for cases it cannot compute; those are refusals only when Generic
    refuses them too, so the kit then asks Generic for the expected refusal.
    """
    if oracle is not None:
        return execute(oracle, plan, case)
    arrays = [v.copy() if isinstance(v, np.ndarray) else v for v in case.operands]
    try:
        return tuple(
            np.asarray(a) for a in reference(plan.operation, plan, dict(case.fields), arrays)
        )
    except Exception as exc:
        raise Raised("the NumPy reference", exc) from exc


Run = Callable[[], tuple[Any, ...]]
"""Executes a case on the target a check's own way; returns the output arrays (``execute``)."""


def check_case(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    case: Case,
    run: Run | None = None,
    label: str | None = None,
) -> PlanFailure | None:
    """The failure of ``case`` on ``target`` against the oracle's result of the same values on
    fresh contiguous tensors, or ``None``. ``run``: how the target executes it (default: on
    fresh tensors); ``label``: the case as reports name it (default: its label).
    """
    text, name = plan_text(plan), plan.operation
    label = case.label if label is None else label
    independent = target is oracle  # Generic is checked against NumPy, never against itself
    try:
        expected = _expected(None if independent else oracle, plan, case)
    except Raised as raised:
        expected_error: BaseException | None = raised.error
    else:
        expected_error = None
    try:
        got = run() if run is not None else execute(target, plan, case)
    except Raised as raised:
        if expected_error is not None and isinstance(raised.error, _builtin(expected_error)):
            return None  # both refuse the case the same way
        if independent and expected_error is not None and raised.stage == "execution":
            return None  # the reference cannot compute what Generic refuses
        also = f" (the oracle raised {describe_error(expected_error)})" if expected_error else ""
        detail = f"{raised.stage} raised {describe_error(raised.error)}{also}"
        return PlanFailure(name, text, label, detail)
    if expected_error is not None:
        who = "the NumPy reference" if independent else "the Generic oracle"
        detail = (
            f"the carrier returned a result but {who} raised {describe_error(expected_error)}; "
            f"it must refuse the case the same way"
        )
        return PlanFailure(name, text, label, detail)
    arrays = operand_arrays(case)
    for i, (g, w) in enumerate(zip(got, expected, strict=True)):
        want = w.astype(g.dtype) if independent else w
        mismatch = compare(g, want, tolerance(plan, i, arrays, case.accumulation, want))
        if mismatch is not None:
            which = f"output {i}: " if len(got) > 1 else ""
            return PlanFailure(name, text, label, which + mismatch.text, mismatch.max_abs_error)
    return None


def _check_refused(
    target: type[cv.Carrier], plan: OperationPlan, case: Case, surface: Surface, why: str
) -> PlanFailure | None:
    """A case outside a composite's direct surface: refused before any work, with the hint."""
    text, name = plan_text(plan), plan.operation
    inputs = [
        make_tensor(target, v, o.dtype) if isinstance(v, np.ndarray) else v
        for v, o in zip(case.operands, plan.operands, strict=True)
    ]
    first = next(t for t in inputs if isinstance(t, cv.Tensor))
    operation = first.carrier.dispatch_op(name)
    with record_work(target, None) as work:
        try:
            with cv.no_grad():
                operation.forward(*inputs, options=options_for(plan, case))
        except NotImplementedError as exc:
            error: BaseException | None = exc
        except Exception as exc:
            detail = (
                f"outside the direct surface ({why}) it raised {describe_error(exc)}, not "
                f"NotImplementedError"
            )
            return PlanFailure(name, text, case.label, detail)
        else:
            error = None
    if error is None:
        detail = f"outside the direct surface ({why}) it returned a result instead of refusing"
        return PlanFailure(name, text, case.label, detail)
    if surface.hint not in str(error):
        detail = f"its refusal does not say to {surface.hint} first: {describe_error(error)}"
        return PlanFailure(name, text, case.label, detail)
    if work:
        detail = f"it did work before refusing a call outside its surface: {', '.join(work)}"
        return PlanFailure(name, text, case.label, detail)
    return None


def check_plan(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    seed: int,
    surface: Surface | None = None,
) -> PlanFailure | None:
    """The first failing case of ``plan`` on ``target`` against ``oracle``, or ``None``.

    With a direct ``surface``, the cases outside it must be refused instead.
    """
    try:
        cases = cases_for(plan, seed)
    except KeyError:
        detail = (
            f"the conformance kit has no input builder for {plan.operation!r}; update "
            f"conveyor-testkit"
        )
        return PlanFailure(plan.operation, plan_text(plan), "-", detail)
    for case in cases:
        why = surface.refuses(plan, case) if surface is not None else None
        if surface is not None and why is not None:
            failure = _check_refused(target, plan, case, surface, why)
        else:
            failure = check_case(target, oracle, plan, case)
        if failure is not None:
            return failure
    return None
