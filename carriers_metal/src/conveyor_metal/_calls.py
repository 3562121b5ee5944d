"""From an accepted plan and its inputs to kernel launches: one entry point per family."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import conveyor as cv
from conveyor.sdk import Tensor
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._storage import TorchStorage

__all__ = ["run_plan", "to_operand"]


def to_operand(value: Any) -> Any:
    """A tensor input as an engine ``Operand`` (its buffer, read in place); others unchanged."""
    if isinstance(value, Tensor):
        carrier = value.carrier
        assert isinstance(carrier, TorchStorage)  # the public functions refuse mixed carriers
        return Operand(carrier._buffer, value.layout)
    return value


def run_plan(
    engine: Engine,
    plan: cv.OperationPlan,
    options: cv.OperationExecutionOptions,
    inputs: Sequence[Any],
    carrier: str,
) -> list[tuple[Any, cv.Layout]]:
    """Run an accepted plan; one (flat buffer, result layout) per plan output."""
    from conveyor_metal._conv_call import conv_call
    from conveyor_metal._matmul_call import matmul_call
    from conveyor_metal._pointwise_call import pointwise_call
    from conveyor_metal._reduction_call import reduction_call
    from conveyor_metal._sort_call import sort_call
    from conveyor_metal._surface import FAMILIES

    operands = [to_operand(value) for value in inputs]
    family = FAMILIES[plan.operation]
    if family in ("elementwise", "comparisons"):
        buffer, shape = pointwise_call(engine, plan, options, operands, carrier)
        return [(buffer, cv.Layout(shape))]
    if family == "reductions":
        return [reduction_call(engine, plan, options, operands[0], carrier)]
    if family == "indexing":
        from conveyor_metal._indexing_call import indexing_call

        return [indexing_call(engine, plan, options, operands, carrier)]
    if family == "matmul":
        return [matmul_call(engine, plan, operands[0], operands[1], carrier)]
    if family == "conv_general":
        return [conv_call(engine, plan, options, operands[0], operands[1], carrier)]
    if family == "sorting":
        return sort_call(engine, plan, options, operands[0], carrier)
    msg = f"{plan.operation} on {carrier}: no kernel family {family!r}"  # pragma: no cover
    raise NotImplementedError(msg)
