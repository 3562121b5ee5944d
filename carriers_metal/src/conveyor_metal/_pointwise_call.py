"""Running a planned pointwise call: broadcast, layout class, kernel key, one launch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import conveyor as cv
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._launch import Launch

__all__ = ["POINTWISE", "pointwise_call", "pointwise_key"]


def _bodies() -> dict[str, Any]:
    from conveyor_metal.kernels import comparisons, elementwise

    return {**elementwise.BODIES, **comparisons.BODIES}


#: Every pointwise dispatch name (the keys of the two expression tables).
POINTWISE: Final = frozenset(
    {
        *("add", "sub", "mul", "elementwise_mul", "div", "pow", "maximum", "minimum", "rem"),
        *("neg", "abs", "sign", "recip", "sqrt", "rsqrt", "exp", "exp2", "log", "log2"),
        *("sin", "cos", "erf", "floor", "ceil", "round", "relu", "sigmoid", "tanh", "gelu"),
        *("silu", "softplus", "elu", "leaky_relu", "eq", "ne", "lt", "le", "logical_not"),
        *("select", "clamp"),
    }
)


def _params(plan: cv.OperationPlan, options: Any) -> tuple[Any, ...]:
    from conveyor_metal.kernels.elementwise import params

    if plan.operation == "clamp":
        return tuple(o.role for o in plan.operands if o.convert_to is not None)[1:]
    return params(plan.operation, options)


def pointwise_key(plan: cv.OperationPlan, options: Any) -> Any:
    """The kernel key of a pointwise plan: stored and converted dtypes of present operands.

    bfloat16 operands convert to float32 and the body computes in float32 (``_tile.work``).
    """
    from conveyor_metal.kernels._pointwise import PointwiseKey
    from conveyor_metal.kernels._tile import tl_dtype, work

    present = [o for o in plan.operands if o.convert_to is not None]
    stored = tuple(tl_dtype(o.convert_to if o.weak else o.dtype) for o in present)  # type: ignore[arg-type]  # present: convert_to set
    convert = tuple(work(o.convert_to) for o in present)  # type: ignore[arg-type]  # present
    return PointwiseKey(
        "pointwise",
        plan.operation,
        stored,
        convert,
        work(plan.compute),
        tl_dtype(plan.outputs[0]),
        _params(plan, options),
    )


def pointwise_call(
    engine: Engine,
    plan: cv.OperationPlan,
    options: Any,
    operands: Sequence[Any],
    carrier: str,
) -> tuple[Any, tuple[int, ...]]:
    """Run a pointwise plan; returns (flat result buffer, result shape).

    Raises:
        ValueError: the operand shapes do not broadcast, or the result exceeds 2**31 - 1
            elements (the kernels index with 32 bits).
    """
    from conveyor_metal.kernels._pointwise import pointwise
    from conveyor_metal.kernels._tile import BLOCK, INT32_MAX, classify

    name = plan.operation
    shapes = [o.layout.shape for o in operands if isinstance(o, Operand)]
    try:
        shape = cv.broadcast_shapes(*shapes) if shapes else ()
    except ValueError:
        listed = ", ".join(str(s) for s in shapes)
        msg = (
            f"{name} on {carrier}: operand shapes {listed} do not broadcast together; "
            f"reshape or broadcast_to first"
        )
        raise ValueError(msg) from None
    size = math.prod(shape)
    if size > INT32_MAX:
        msg = (
            f"{name} on {carrier}: {size} elements exceed the 2**31 - 1 a Metal kernel "
            f"indexes; split the tensor"
        )
        raise ValueError(msg)
    output = plan.outputs[0]
    result = engine.empty(size, output)
    if size == 0:
        return result, shape
    present = [(value, o) for value, o in zip(operands, plan.operands, strict=True) if o.convert_to]
    placed = []
    for value, o in present:
        stored = o.convert_to if o.weak else o.dtype
        assert stored is not None  # present operands have a dtype
        placed.append(engine.operand(value, stored, shape))
    layout_class, meta = classify(shape, [p.layout for p in placed])
    key = pointwise_key(plan, options)
    body = _bodies()[name]
    source = engine.source(
        key, layout_class, lambda: pointwise(key, layout_class, lambda v: body(v, key))
    )
    buffers = {f"X{j}": p.buffer for j, p in enumerate(placed)}
    buffers |= {"Y": result, "meta": engine.meta(meta)}
    scalars = {"n": size} | {f"n{j}": int(p.buffer.numel()) for j, p in enumerate(placed)}
    launch = Launch(((size + BLOCK - 1) // BLOCK, 1, 1), (BLOCK, 1, 1))
    engine.run(source, buffers, scalars, launch)
    return result, shape
