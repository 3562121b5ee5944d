"""The public operation functions: one per dispatch name, built from the policy and options tables.

Each function checks that every tensor operand lives on the same exact carrier class (the one
place mixed carriers are refused), builds the validated options from its keyword arguments,
dispatches a fresh operation on the first tensor's carrier and calls ``forward``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from conveyor.options import OperationExecutionOptions, options_schema
from conveyor.policy import operation_spec
from conveyor.tensor import Tensor

__all__ = [
    "VIEW_OPERATIONS",
    "abs",
    "add",
    "argmax",
    "argmin",
    "as_strided",
    "broadcast_to",
    "ceil",
    "clamp",
    "conv_general",
    "cos",
    "cumsum",
    "div",
    "elementwise_mul",
    "elu",
    "eq",
    "erf",
    "exp",
    "exp2",
    "floor",
    "gather",
    "gelu",
    "le",
    "leaky_relu",
    "log",
    "log2",
    "logical_not",
    "lt",
    "matmul",
    "maximum",
    "minimum",
    "mul",
    "ne",
    "neg",
    "permute",
    "pow",
    "rearrange",
    "recip",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "relu",
    "rem",
    "reshape",
    "round",
    "rsqrt",
    "scatter",
    "scatter_add",
    "select",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "softplus",
    "sort",
    "sqrt",
    "squeeze",
    "tanh",
    "topk",
    "unsqueeze",
    "view",
]

# The representation-preserving names: not dtype-planned, one tensor operand, options only.
VIEW_OPERATIONS = (
    "as_strided",
    "broadcast_to",
    "permute",
    "rearrange",
    "reshape",
    "squeeze",
    "unsqueeze",
    "view",
)


def call(
    name: str, operands: tuple[Any, ...], fields: dict[str, Any], *, build: bool = False
) -> Any:
    """Dispatch ``name`` on the operands' carrier and run it (the body of every public function).

    Options are built only when keywords were given (or ``build``: the schema has required
    fields, so a missing one is refused here, before dispatch), keeping option-free calls cheap.
    """
    carrier = None
    for x in operands:
        if type(x) is Tensor:
            if carrier is None:
                carrier = x._carrier
            elif type(x._carrier) is not type(carrier):
                msg = (
                    f"{name}: operands live on different carriers ({type(carrier).__name__} and "
                    f"{type(x._carrier).__name__}); move them to one carrier first with "
                    f"cv.move(tensor, {type(carrier).__name__})"
                )
                raise TypeError(msg)
    if carrier is None:
        msg = f"{name}: at least one operand must be a Tensor, got {operands!r}"
        raise TypeError(msg)
    options = OperationExecutionOptions(name, **fields) if fields or build else None
    return carrier.dispatch_op(name).forward(*operands, options=options)


def _public(name: str, roles: tuple[str, ...], optional: frozenset[str]) -> Callable[..., Any]:
    n = len(roles)
    required = n - len(optional)
    schema = options_schema(name)
    build = any(field.required for field in schema.values())

    def function(*operands: Any, **fields: Any) -> Any:
        if len(operands) != n:
            if required <= len(operands) < n:
                operands = operands + (None,) * (n - len(operands))
            else:
                msg = f"{name}() takes {n} operand(s) ({', '.join(roles)}), got {len(operands)}"
                raise TypeError(msg)
        return call(name, operands, fields, build=build)

    params = [
        inspect.Parameter(
            role,
            inspect.Parameter.POSITIONAL_ONLY,
            default=None if role in optional else inspect.Parameter.empty,
        )
        for role in roles
    ]
    params += [
        inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY) for field in options_schema(name)
    ]
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"Dispatch ``{name}`` on the operands' carrier (see docs/operations.md)."
    function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # introspection
    return function


def _planned(name: str) -> Callable[..., Tensor]:
    spec = operation_spec(name)
    return _public(name, spec.roles, spec.optional_roles)


def _planned_pair(name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    """A planned name with two outputs (values and int64 indices)."""
    spec = operation_spec(name)
    return _public(name, spec.roles, spec.optional_roles)


def _view(name: str) -> Callable[..., Tensor]:
    return _public(name, ("input",), frozenset())


# Elementwise arithmetic and comparisons
add = _planned("add")
sub = _planned("sub")
mul = _planned("mul")
elementwise_mul = _planned("elementwise_mul")
div = _planned("div")
pow = _planned("pow")
maximum = _planned("maximum")
minimum = _planned("minimum")
rem = _planned("rem")
eq = _planned("eq")
ne = _planned("ne")
lt = _planned("lt")
le = _planned("le")
# Elementwise functions
neg = _planned("neg")
abs = _planned("abs")
sign = _planned("sign")
recip = _planned("recip")
sqrt = _planned("sqrt")
rsqrt = _planned("rsqrt")
exp = _planned("exp")
exp2 = _planned("exp2")
log = _planned("log")
log2 = _planned("log2")
sin = _planned("sin")
cos = _planned("cos")
erf = _planned("erf")
floor = _planned("floor")
ceil = _planned("ceil")
round = _planned("round")
logical_not = _planned("logical_not")
# Activations
relu = _planned("relu")
sigmoid = _planned("sigmoid")
tanh = _planned("tanh")
gelu = _planned("gelu")
silu = _planned("silu")
softplus = _planned("softplus")
elu = _planned("elu")
leaky_relu = _planned("leaky_relu")
# Reductions and scans
reduce_sum = _planned("reduce_sum")
reduce_prod = _planned("reduce_prod")
reduce_max = _planned("reduce_max")
reduce_min = _planned("reduce_min")
argmax = _planned("argmax")
argmin = _planned("argmin")
cumsum = _planned("cumsum")
sort = _planned_pair("sort")
topk = _planned_pair("topk")
# Contractions
matmul = _planned("matmul")
conv_general = _planned("conv_general")
# Indexing and selection
gather = _planned("gather")
scatter = _planned("scatter")
scatter_add = _planned("scatter_add")
select = _planned("select")
clamp = _planned("clamp")
# Views (representation-preserving)
as_strided = _view("as_strided")
broadcast_to = _view("broadcast_to")
permute = _view("permute")
rearrange = _view("rearrange")
reshape = _view("reshape")
squeeze = _view("squeeze")
unsqueeze = _view("unsqueeze")
view = _view("view")
