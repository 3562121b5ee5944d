"""On an Apple GPU: every advertised plan runs on Metal and matches Generic.

These tests need macOS arm64 with MPS and are skipped elsewhere with that reason. They run
the same cases the Linux C-target check runs, through real ``Metal`` tensors, so the kernels,
their name-bound launch through ``torch.mps.compile_shader`` and the result wrapping are all
exercised on the device. The conformance kit runs with ``--conveyor-carrier=metal``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_metal._surface import advertised_plans

from .support import assert_close, cases, plan_id, reference, values_of

pytestmark = pytest.mark.metal


def _on_metal(value: Any, dtype: cv.DType | None) -> Any:
    from conveyor_metal import Metal
    from conveyor_metal._engine import Operand

    if isinstance(value, Operand):
        assert dtype is not None
        return cv.tensor(values_of(value, dtype), dtype=dtype, carrier=Metal)
    return value


@pytest.mark.parametrize("plan", advertised_plans(), ids=plan_id)
def test_advertised_plan_on_device_matches_generic(plan: cv.OperationPlan) -> None:
    """Each case of the plan, run on Metal tensors, equals the Generic result."""
    for _, operands, options in cases(plan, seed=2):
        want = reference(plan, options, operands)
        inputs = [_on_metal(v, o.dtype) for v, o in zip(operands, plan.operands, strict=True)]
        from conveyor_metal import Metal

        op = Metal.allocate(0, cv.float32).dispatch_op(plan.operation)
        got = op.forward(*inputs, options=options)
        if isinstance(got, tuple):  # sort and topk: values and indices
            assert_close(plan.operation, tuple(np.asarray(g.numpy()) for g in got), want)
        else:
            assert_close(plan.operation, np.asarray(got.numpy()), want)


def test_move_between_metal_and_cpu_round_trips() -> None:
    """Metal <-> CPU moves are bulk copies that keep every value."""
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = cv.tensor(values, carrier="cpu")
    back = cv.move(cv.move(x, "metal"), "cpu")
    np.testing.assert_array_equal(back.numpy(), values)


def test_matmul_shapes_that_do_not_contract_are_refused_as_on_generic() -> None:
    """The central shape rule refuses before a kernel runs: Generic's type and message."""
    from conveyor_generic import Generic
    from conveyor_metal import Metal

    messages = []
    for carrier in (Metal, Generic):
        a = cv.tensor(np.ones((2, 3), np.float32), carrier=carrier)
        b = cv.tensor(np.ones((4, 5), np.float32), carrier=carrier)
        with pytest.raises(ValueError, match=f"^matmul on {carrier.__name__}: ") as info:
            cv.matmul(a, b)
        messages.append(str(info.value).split(": ", 1)[1])
    assert messages[0] == messages[1]
