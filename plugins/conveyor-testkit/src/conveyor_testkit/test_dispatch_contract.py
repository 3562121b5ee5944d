"""The dispatch contract (spec: carrier-dispatch) on the carrier under test.

Dispatch is an instance operation that returns a fresh, exactly stamped ``Operation`` for every
call; names and options are validated at the boundary; and every refusal (an unadvertised plan,
a dtype central planning rejects) happens before any allocation or implementation entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.sdk import (
    CONCRETE_DTYPES,
    VIEW_OPERATIONS,
    OperationPlan,
    enumerate_plans,
    operation_spec,
    registered_operations,
)
from conveyor_testkit._inputs import Case, cases_for, plan_text
from conveyor_testkit._probe import record_work
from conveyor_testkit._run import describe_error
from conveyor_testkit._target import Target, make_tensor

VIEW_NAMES = VIEW_OPERATIONS
UNKNOWN_NAME = "conveyor_testkit_no_such_operation"
# How many unadvertised plans the refusal check tries to build before giving up.
_REFUSAL_CANDIDATES = 40


def _fail(failures: list[str], what: str) -> None:
    if failures:
        shown = "\n  ".join(failures[:10])
        more = f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""
        pytest.fail(f"{len(failures)} {what}:\n  {shown}{more}", pytrace=False)


def _tensors(target: Target, plan: OperationPlan, case: Case) -> list[Any]:
    return [
        make_tensor(target.cls, v, o.dtype) if isinstance(v, np.ndarray) else v
        for v, o in zip(case.operands, plan.operands, strict=True)
    ]


def _runnable(target: Target) -> tuple[OperationPlan, list[Any]]:
    """An advertised plan and operands for it on the carrier (skips when there is none)."""
    capabilities = target.capabilities
    assert capabilities is not None
    for name in target.supported_names():
        for plan in enumerate_plans(name) if name in registered_operations() else ():
            if not capabilities.supports(plan):
                continue
            case = cases_for(plan)[0]
            try:
                return plan, _tensors(target, plan, case)
            except Exception:  # try the next plan: this dtype is not storable
                continue
    pytest.skip(f"{target.cls.__name__} advertises no planned operation the kit can build")


class TestDispatchIsFresh:
    def test_every_advertised_name_dispatches_fresh_operations(
        self, conveyor_target: Target, conveyor_instance: cv.Carrier
    ) -> None:
        """Two dispatches of each advertised name give distinct, exactly stamped Operations."""
        names = conveyor_target.supported_names()
        if not names:
            pytest.skip(f"{conveyor_target.cls.__name__} advertises no operation")
        failures = [
            problem for name in names for problem in _fresh(conveyor_instance, name, required=True)
        ]
        _fail(failures, "dispatch contract violations")

    def test_view_names_dispatch_fresh_operations_or_refuse(
        self, conveyor_target: Target, conveyor_instance: cv.Carrier
    ) -> None:
        """Each view name is either refused with NotImplementedError or dispatches freshly."""
        failures = [
            problem
            for name in VIEW_NAMES
            for problem in _fresh(conveyor_instance, name, required=False)
        ]
        _fail(failures, "dispatch contract violations for view names")


def _fresh(carrier: cv.Carrier, name: str, *, required: bool) -> Iterator[str]:
    cls = type(carrier)
    operations = []
    for attempt in ("first", "second"):
        try:
            operation = carrier.dispatch_op(name)
        except NotImplementedError as exc:
            if required or attempt == "second":
                yield f"{name}: the {attempt} dispatch raised {describe_error(exc)}"
            return
        except Exception as exc:
            hint = " (a cached operation?)" if attempt == "second" else ""
            yield f"{name}: the {attempt} dispatch raised {describe_error(exc)}{hint}"
            return
        operations.append(operation)
    first, second = operations
    if first is second:
        yield f"{name}: two dispatches returned the same object"
    for operation in operations:
        if not isinstance(operation, cv.Operation):
            yield f"{name}: dispatch returned {type(operation).__name__}, not an Operation"
        if operation._operation_name != name:
            yield f"{name}: _operation_name is {operation._operation_name!r}"
        if operation._dispatch_carrier_class is not cls:
            got = getattr(operation._dispatch_carrier_class, "__name__", None)
            yield f"{name}: _dispatch_carrier_class is {got}, not exactly {cls.__name__}"


class TestDispatchArguments:
    def test_dispatch_on_the_class_raises_type_error(self, conveyor_target: Target) -> None:
        """dispatch_op called on the carrier class (no instance) raises TypeError."""
        cls: Any = conveyor_target.cls
        name = next(iter(conveyor_target.supported_names()), "add")
        with pytest.raises(TypeError):
            cls.dispatch_op(name)

    @pytest.mark.parametrize("bad", [1, None, b"add", ("add",)], ids=repr)
    def test_non_string_name_raises_type_error(
        self, conveyor_instance: cv.Carrier, bad: Any
    ) -> None:
        """A name that is not a str raises TypeError naming the value."""
        carrier: Any = conveyor_instance
        with pytest.raises(TypeError) as caught:
            carrier.dispatch_op(bad)
        assert repr(bad) in str(caught.value), f"the message does not show {bad!r}: {caught.value}"

    def test_unknown_name_raises_not_implemented_error(self, conveyor_instance: cv.Carrier) -> None:
        """An unknown name raises NotImplementedError naming it."""
        with pytest.raises(NotImplementedError) as caught:
            conveyor_instance.dispatch_op(UNKNOWN_NAME)
        assert UNKNOWN_NAME in str(caught.value), f"the message omits the name: {caught.value}"


class TestForwardOptions:
    def test_options_for_another_operation_raise_value_error(self, conveyor_target: Target) -> None:
        """Options bound to another name raise ValueError before any work."""
        plan, inputs = _runnable(conveyor_target)
        other = "neg" if plan.operation == "add" else "add"
        operation = _dispatch(inputs, plan.operation)
        with record_work(conveyor_target.cls, operation) as work, pytest.raises(ValueError):
            operation.forward(*inputs, options=cv.OperationExecutionOptions(other))
        assert not work, f"{plan.operation}: work started before the refusal: {work}"

    def test_options_of_another_type_raise_type_error(self, conveyor_target: Target) -> None:
        """An options value that is not OperationExecutionOptions raises TypeError."""
        plan, inputs = _runnable(conveyor_target)
        operation = _dispatch(inputs, plan.operation)
        with record_work(conveyor_target.cls, operation) as work, pytest.raises(TypeError):
            operation.forward(*inputs, options={"axis": 0})
        assert not work, f"{plan.operation}: work started before the refusal: {work}"

    def test_unknown_keyword_raises_type_error(self, conveyor_target: Target) -> None:
        """A keyword other than options raises TypeError."""
        plan, inputs = _runnable(conveyor_target)
        operation = _dispatch(inputs, plan.operation)
        with record_work(conveyor_target.cls, operation) as work, pytest.raises(TypeError):
            operation.forward(*inputs, conveyor_testkit_unknown=1)
        assert not work, f"{plan.operation}: work started before the refusal: {work}"


def _dispatch(inputs: list[Any], name: str) -> cv.Operation:
    first = next(t for t in inputs if isinstance(t, cv.Tensor))
    operation: cv.Operation = first.carrier.dispatch_op(name)
    return operation


def _unadvertised(target: Target) -> Iterator[OperationPlan]:
    """Plans the carrier does not advertise: of names it supports first, then of the others."""
    capabilities = target.capabilities
    assert capabilities is not None
    supported = [n for n in registered_operations() if n in capabilities.names]
    others = [n for n in registered_operations() if n not in capabilities.names]
    for name in supported + others:
        for plan in enumerate_plans(name):
            dtypes = [o.dtype for o in plan.operands if o.dtype is not None and not o.weak]
            if not capabilities.supports(plan) and all(d in target.storable for d in dtypes):
                yield plan


class TestRefusalsBeforeAllocation:
    def test_dispatch_allocates_nothing(self, conveyor_target: Target) -> None:
        """``dispatch_op`` only makes the operation: no carrier of any class is allocated."""
        carrier = conveyor_target.instance()
        try:
            for name in conveyor_target.supported_names():
                with record_work(conveyor_target.cls, None) as work:
                    carrier.dispatch_op(name)
                if work:
                    pytest.fail(
                        f"{name} on {conveyor_target.cls.__name__}: dispatch_op did work before "
                        f"any call: {', '.join(work)}; allocate in forward, after the gate",
                        pytrace=False,
                    )
        finally:
            carrier.release()

    def test_unadvertised_plan_refused_before_allocation(self, conveyor_target: Target) -> None:
        """A plan the carrier does not advertise raises UnsupportedOperationPlan, allocating
        nothing and never entering the implementation (or the name is refused at dispatch)."""
        cls, tried, at_dispatch = conveyor_target.cls, 0, []
        for plan in _unadvertised(conveyor_target):
            if tried >= _REFUSAL_CANDIDATES:
                break
            tried += 1
            try:
                inputs = _tensors(conveyor_target, plan, cases_for(plan)[0])
            except Exception:  # the carrier cannot store these dtypes: next plan
                continue
            try:
                operation = _dispatch(inputs, plan.operation)
            except NotImplementedError:
                at_dispatch.append(plan.operation)
                continue
            with record_work(cls, operation) as work:
                try:
                    operation.forward(*inputs)
                except cv.UnsupportedOperationPlan as exc:
                    refusal: BaseException | None = exc
                except Exception as exc:
                    refusal = exc
                else:
                    refusal = None
            _check_refusal(cls, plan, refusal, work)
            return
        if at_dispatch:
            return  # every unadvertised name was refused at dispatch: nothing was allocated
        pytest.skip(
            f"{cls.__name__} advertises every plan the kit could build operands for; there is "
            f"no unadvertised plan to refuse"
        )

    def test_planning_refusal_before_allocation(self, conveyor_target: Target) -> None:
        """Operand dtypes central planning rejects raise its TypeError before any work."""
        cls = conveyor_target.cls
        for name, dtype in _unplannable(conveyor_target):
            roles = operation_spec(name).roles
            try:
                inputs = [make_tensor(cls, np.zeros((2, 3), dtype.numpy), dtype) for _ in roles]
            except Exception:  # not storable on this carrier: next candidate
                continue
            operation = _dispatch(inputs, name)
            with record_work(cls, operation) as work, pytest.raises(TypeError) as caught:
                operation.forward(*inputs)
            assert name in str(caught.value), f"the message omits {name!r}: {caught.value}"
            assert not work, (
                f"{name} with {dtype.name} operands: work started before the planning "
                f"refusal: {work}"
            )
            return
        pytest.skip(
            f"every dtype {cls.__name__} can store is accepted by central planning for the "
            f"names it advertises; there is no planning refusal to provoke"
        )


def _unplannable(target: Target) -> Iterator[tuple[str, cv.DType]]:
    for name in target.supported_names():
        if name not in registered_operations():
            continue
        roles = operation_spec(name).roles
        for dtype in CONCRETE_DTYPES:
            try:
                cv.resolve_plan(name, *([dtype] * len(roles)))
            except TypeError:
                yield name, dtype


def _check_refusal(
    cls: type[cv.Carrier], plan: OperationPlan, refusal: BaseException | None, work: list[str]
) -> None:
    text = plan_text(plan)
    if refusal is None:
        pytest.fail(f"{text}: not advertised, yet forward returned a result", pytrace=False)
    if not isinstance(refusal, cv.UnsupportedOperationPlan):
        pytest.fail(
            f"{text}: not advertised; forward raised {describe_error(refusal)} instead of "
            f"UnsupportedOperationPlan",
            pytrace=False,
        )
    if work:
        pytest.fail(
            f"{text}: allocated or entered the implementation before refusing the unadvertised "
            f"plan: {', '.join(work)}",
            pytrace=False,
        )
    problems = []
    if refusal.operation != plan.operation:
        problems.append(f"its operation attribute is {refusal.operation!r}")
    if refusal.carrier is not cls:
        problems.append(f"its carrier attribute is {refusal.carrier!r}")
    if plan.operation not in str(refusal) or cls.__name__ not in str(refusal):
        problems.append(f"its message does not name the operation and carrier: {refusal}")
    if problems:
        pytest.fail(f"{text}: UnsupportedOperationPlan: {'; '.join(problems)}", pytrace=False)
