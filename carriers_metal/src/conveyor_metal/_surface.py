"""Which plans the Metal kernels implement: the one predicate the capabilities come from.

Metal advertises exactly the plans its TileLang kernels were written and verified for (the
Linux checks lower every one of them to MSL, check the source's syntax, and run the kernel's
algorithm through the C target against Generic). The rule, per plan:

- every tensor operand is ``float32``, ``float16``, ``int32`` or ``bool``, all tensor
  operands of one call share that dtype (``select``'s condition is ``bool``), and weak
  Python scalars convert to it;
- the compute and output dtypes are among those, or ``int64`` (index outputs, integer sums);
- elementwise and comparison plans also take ``bfloat16`` tensor operands, without weak
  scalars (computed in float32, rounded once on store);
- the name's family implements the compute kind (``pow`` only floating compute);
- ``gather`` / ``scatter`` / ``scatter_add``: input (and ``src``) of one of those tensor
  dtypes, and an ``int32`` or ``int64`` index.

Nothing here imports torch or tilelang, so capability queries stay cheap.
"""

from __future__ import annotations

from typing import Final

import conveyor as cv
from conveyor.sdk import enumerate_plans

__all__ = ["FAMILIES", "advertised", "advertised_capabilities", "advertised_plans"]

_TENSOR_DTYPES: Final = frozenset({"float32", "float16", "int32", "bool"})
_RESULT_DTYPES: Final = _TENSOR_DTYPES | {"int64"}

#: Dispatch name -> its kernel family (the module in ``conveyor_metal.kernels``).
FAMILIES: Final[dict[str, str]] = {
    **{
        name: "elementwise"
        for name in (
            *("add", "sub", "mul", "elementwise_mul", "div", "pow", "maximum", "minimum"),
            *("rem", "neg", "abs", "sign", "recip", "sqrt", "rsqrt", "exp", "exp2", "log"),
            *("log2", "sin", "cos", "erf", "floor", "ceil", "round", "relu", "sigmoid"),
            *("tanh", "gelu", "silu", "softplus", "elu", "leaky_relu"),
        )
    },
    **{name: "comparisons" for name in ("eq", "ne", "lt", "le", "logical_not", "select", "clamp")},
    **{
        name: "reductions"
        for name in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin")
    },
    "cumsum": "reductions",
    **{name: "indexing" for name in ("gather", "scatter", "scatter_add")},
    "matmul": "matmul",
    "conv_general": "conv_general",
    **{name: "sorting" for name in ("sort", "topk")},
}

_FLOAT_ONLY: Final = frozenset({"pow"})
_INDEX_DTYPES: Final = frozenset({"int32", "int64"})


def _indexing(plan: cv.OperationPlan) -> bool:
    """gather / scatter / scatter_add: values of one tensor dtype, an int32 or int64 index."""
    values = {o.dtype.name for o in plan.operands if o.role != "index" and o.dtype is not None}
    index = plan.operands[1].dtype
    return values <= _TENSOR_DTYPES and index is not None and index.name in _INDEX_DTYPES


def advertised(plan: cv.OperationPlan) -> bool:
    """Whether a Metal kernel implements ``plan`` (see the module docstring for the rule)."""
    name = plan.operation
    if name not in FAMILIES:
        return False
    if FAMILIES[name] == "indexing":
        return _indexing(plan)
    pointwise = FAMILIES[name] in ("elementwise", "comparisons")
    allowed = _TENSOR_DTYPES | {"bfloat16"} if pointwise else _TENSOR_DTYPES
    results = _RESULT_DTYPES | {"bfloat16"} if pointwise else _RESULT_DTYPES
    tensors = {
        o.dtype.name
        for o in plan.operands
        if o.dtype is not None and not o.weak and o.role != "condition"
    }
    if any(o.role == "condition" and o.dtype is not cv.bool for o in plan.operands):
        return False
    if len(tensors) != 1 or not tensors <= allowed:
        return False
    # bfloat16 with a weak scalar (93 more plans, mostly clamp's) is not advertised: each plan
    # is more kernels for the Linux sweep, which CI's time budget does not cover yet.
    if tensors == {"bfloat16"} and any(o.weak for o in plan.operands):
        return False
    (dtype,) = tensors
    for operand in plan.operands:
        if operand.weak and (operand.convert_to is None or operand.convert_to.name != dtype):
            return False
    if plan.compute.name not in results:
        return False
    if any(out.name not in results for out in plan.outputs):
        return False
    if name in _FLOAT_ONLY and not plan.compute.is_floating:
        return False
    # pow with a weak float scalar exponent disagrees with Generic at special values (a negative
    # base to a large power gives nan where Generic gives inf): not advertised until fixed.
    return not (name == "pow" and any(o.weak for o in plan.operands))


def advertised_plans() -> list[cv.OperationPlan]:
    """Every plan the policy can resolve that a Metal kernel implements, in policy order."""
    return [plan for plan in enumerate_plans() if advertised(plan)]


def advertised_capabilities() -> cv.CapabilitySet:
    """``advertised_plans`` as a set declared by rule: a name's plans are built on first query."""

    def rule(name: str) -> list[cv.OperationCapability]:
        return [cv.OperationCapability.from_plan(p) for p in enumerate_plans(name) if advertised(p)]

    return cv.CapabilitySet.by_rule(FAMILIES, rule)
