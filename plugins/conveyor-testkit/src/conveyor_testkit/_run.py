"""Running one plan on the carrier under test and on the Generic oracle, case by case.

Both sides get tensors built with ``cv.tensor`` from the same NumPy operands and execute through
``carrier.dispatch_op(name).forward(...)``, so what is compared is exactly the dispatched
implementation. When the oracle refuses a case, the carrier must refuse it with the same builtin
exception type; when only one side raises, that is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import conveyor as cv
from conveyor.policy import OperationPlan
from conveyor_testkit._compare import compare, tolerance
from conveyor_testkit._inputs import Case, cases_for, operand_arrays, options_for, plan_text

__all__ = ["PlanFailure", "check_plan", "describe_error"]


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


class _Raised(Exception):
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


def _execute(cls: type[cv.Carrier], plan: OperationPlan, case: Case) -> tuple[Any, ...]:
    """Run ``case`` on ``cls``: the output arrays, after checking metadata and result dtypes."""
    name = plan.operation
    try:
        inputs = [
            cv.tensor(v, dtype=o.dtype, carrier=cls) if isinstance(v, np.ndarray) else v
            for v, o in zip(case.operands, plan.operands, strict=True)
        ]
    except Exception as exc:
        raise _Raised("building the operands with cv.tensor", exc) from exc
    first = next(t for t in inputs if isinstance(t, cv.Tensor))
    try:
        with cv.no_grad():
            operation = first.carrier.dispatch_op(name)
            result = operation.forward(*inputs, options=options_for(plan, case))
    except Exception as exc:
        raise _Raised("execution", exc) from exc
    outputs = result if isinstance(result, tuple) else (result,)
    problems = []
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
        raise _Raised("result check", AssertionError("; ".join(problems)))
    return tuple(np.array(out.numpy()) for out in outputs)


def _check_case(
    target: type[cv.Carrier], oracle: type[cv.Carrier], plan: OperationPlan, case: Case
) -> PlanFailure | None:
    text, name = plan_text(plan), plan.operation
    try:
        expected = _execute(oracle, plan, case)
    except _Raised as raised:
        expected_error: BaseException | None = raised.error
    else:
        expected_error = None
    try:
        got = _execute(target, plan, case)
    except _Raised as raised:
        if expected_error is not None and isinstance(raised.error, _builtin(expected_error)):
            return None  # both refuse the case the same way
        also = f" (the oracle raised {describe_error(expected_error)})" if expected_error else ""
        detail = f"{raised.stage} raised {describe_error(raised.error)}{also}"
        return PlanFailure(name, text, case.label, detail)
    if expected_error is not None:
        detail = (
            f"the carrier returned a result but the Generic oracle raised "
            f"{describe_error(expected_error)}; it must refuse the case the same way"
        )
        return PlanFailure(name, text, case.label, detail)
    arrays = operand_arrays(case)
    for i, (g, w) in enumerate(zip(got, expected, strict=True)):
        mismatch = compare(g, w, tolerance(plan, i, arrays))
        if mismatch is not None:
            which = f"output {i}: " if len(got) > 1 else ""
            return PlanFailure(
                name, text, case.label, which + mismatch.text, mismatch.max_abs_error
            )
    return None


def check_plan(
    target: type[cv.Carrier], oracle: type[cv.Carrier], plan: OperationPlan, seed: int
) -> PlanFailure | None:
    """The first failing case of ``plan`` on ``target`` against ``oracle``, or ``None``."""
    try:
        cases = cases_for(plan, seed)
    except KeyError:
        detail = (
            f"the conformance kit has no input builder for {plan.operation!r}; update "
            f"conveyor-testkit"
        )
        return PlanFailure(plan.operation, plan_text(plan), "-", detail)
    for case in cases:
        failure = _check_case(target, oracle, plan, case)
        if failure is not None:
            return failure
    return None
