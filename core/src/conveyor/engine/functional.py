"""The public operation functions: one per dispatch name, built from the policy and options tables.

Each function checks that every tensor operand lives on the same exact carrier class (the one
place mixed carriers are refused), builds the validated options from its keyword arguments,
dispatches a fresh operation on the first tensor's carrier and calls ``forward``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor.engine import profiling
from conveyor.engine.grad_mode import _state as _grad_mode
from conveyor.engine.operation import _SPECS, Operation, _check_result, run_forward
from conveyor.engine.tensor import Tensor
from conveyor.types.dtypes import DType
from conveyor.types.options import OperationExecutionOptions, options_schema
from conveyor.types.policy import VIEW_OPERATIONS, OperationPlan, operation_spec

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__ = [
    "VIEW_OPERATIONS",
    "abs",
    "acos",
    "acosh",
    "add",
    "argmax",
    "argmin",
    "as_strided",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "broadcast_to",
    "ceil",
    "cholesky",
    "clamp",
    "conv_general",
    "cos",
    "cosh",
    "cumsum",
    "div",
    "eigh",
    "elementwise_mul",
    "elu",
    "eq",
    "erf",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "gather",
    "gelu",
    "inv",
    "le",
    "leaky_relu",
    "log",
    "log1p",
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
    "qr",
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
    "sinh",
    "softplus",
    "solve",
    "sort",
    "sqrt",
    "squeeze",
    "svd",
    "tan",
    "tanh",
    "topk",
    "unsqueeze",
    "view",
]


def call(
    name: str, operands: tuple[Any, ...], fields: dict[str, Any], *, build: bool = False
) -> Any:
    """Dispatch ``name`` on the operands' carrier and run it (the body of every public function).

    Options are built only when keywords were given (or ``build``: the schema has required
    fields, so a missing one is refused here, before dispatch), keeping option-free calls cheap.
    """
    carrier = _carrier_of(name, operands)
    options = OperationExecutionOptions(name, **fields) if fields or build else None
    return carrier.dispatch_op(name).forward(*operands, options=options)


def _carrier_of(name: str, operands: tuple[Any, ...]) -> Carrier:
    """The carrier that dispatches: the first tensor operand's, when every tensor operand shares
    its exact class; with mixed classes, the one whose class accepts all the others as
    companions (``CompositeProvider.companions``), else the mixed-carrier refusal."""
    carrier = None
    mixed = False
    for x in operands:
        if type(x) is Tensor:
            if carrier is None:
                carrier = x._carrier
            elif type(x._carrier) is not type(carrier):
                mixed = True
    if carrier is None:
        msg = f"{name}: at least one operand must be a Tensor, got {operands!r}"
        raise TypeError(msg)
    return _host(name, operands, carrier) if mixed else carrier


def _host(name: str, operands: tuple[Any, ...], first: Carrier) -> Carrier:
    carriers = [x._carrier for x in operands if type(x) is Tensor]
    for host in carriers:
        accepted = (type(host), *host._companion_classes())
        if all(type(c) in accepted for c in carriers):
            return host
    other = next(c for c in carriers if type(c) is not type(first))
    msg = (
        f"{name}: operands live on different carriers ({type(first).__name__} and "
        f"{type(other).__name__}); move them to one carrier first with "
        f"cv.move(tensor, {type(first).__name__})"
    )
    raise TypeError(msg)


# -- the bound fast path --------------------------------------------------------------------
#
# A bound record is (operation class, accepted plan or None, differentiable, the operation's
# ``_fresh_state`` attributes: a definition-backed class's definition), cached per exact
# carrier class, operand signature (dtype per tensor, Python type per other operand) and
# accumulator. It is stored only after a full dispatch of that signature succeeded, so its plan
# passed the capability gate; capability sets are sealed, so the verdict cannot change. A call
# that hits it makes the same fresh, stamped operation ``dispatch_op`` would (the carrier names
# the class its hook returns for the name, in ``_dispatch_classes``) with the accepted plan,
# and hands it to ``run_forward``, the part of ``Operation.forward`` after the preflight.
_Bound = tuple[type[Operation], OperationPlan | None, bool, dict[str, Any]]
_BOUND_MAX = 4096
_new = object.__new__
# Option value types whose equality implies the same validated value (floats are not: -0.0).
_KEYABLE = frozenset({int, bool, str, type(None), DType})


def _bind(
    records: dict[tuple[Any, ...], _Bound],
    key: tuple[Any, ...],
    name: str,
    carrier: Carrier,
    operands: tuple[Any, ...],
    options: OperationExecutionOptions | None,
) -> Any:
    """The full dispatch of one call; remember its bound record when the carrier allows it."""
    op = carrier.dispatch_op(name)
    result = op.forward(*operands, options=options)
    op_cls = type(op)
    if carrier._bound_class(name) is op_cls:
        if len(records) >= _BOUND_MAX:
            records.clear()
        spec = _SPECS.get(name)
        state, differentiable = op._fresh_state()
        differentiable = differentiable and (spec is None or spec.differentiable)
        records[key] = (op_cls, op.plan, differentiable, state)
    return result


def _positional_options(
    name: str,
    roles: tuple[str, ...],
    schema: Any,
    operands: tuple[Any, ...],
    fields: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """NumPy's positional forms: arguments after the operands fill the options in schema order.

    ``reshape(x, (2, 3))`` is ``reshape(x, shape=(2, 3))``, ``sort(x, -1)`` is
    ``sort(x, axis=-1)``; the values are validated as keywords are.

    Raises:
        TypeError: too few operands, more positional values than options, or an option given
            both ways; the message names the keywords to use.
    """
    n = len(roles)
    names = list(schema)
    extra = operands[n:]
    keywords = ", ".join(f"{f}=" for f in names)
    if len(operands) < n or len(extra) > len(names):
        usage = f" then its options ({keywords})" if names else " and no options"
        fix = "pass the options by keyword" if names else f"pass exactly {n} operand(s)"
        msg = (
            f"{name}() takes {n} operand(s) ({', '.join(roles)}){usage}, got {len(operands)} "
            f"positional argument(s); {fix}"
        )
        raise TypeError(msg)
    given = dict(zip(names, extra, strict=False))
    twice = sorted(set(given) & set(fields))
    if twice:
        msg = f"{name}() got option {twice[0]!r} both by position and by keyword; pass it once"
        raise TypeError(msg)
    return operands[:n], {**given, **fields}


def _public(name: str, roles: tuple[str, ...], optional: frozenset[str]) -> Callable[..., Any]:
    n = len(roles)
    required = n - len(optional)
    schema = options_schema(name)
    build = any(field.required for field in schema.values())
    accumulates = "accumulator_dtype" in schema
    records: dict[tuple[Any, ...], _Bound] = {}
    memo: dict[tuple[Any, ...], OperationExecutionOptions] = {}

    def function(*operands: Any, **fields: Any) -> Any:
        if len(operands) != n:
            if required <= len(operands) < n:
                operands = operands + (None,) * (n - len(operands))
            else:
                operands, fields = _positional_options(name, roles, schema, operands, fields)
        # The signature (dtype per tensor, type per other operand, exact carrier class) and the
        # carrier check of _carrier_of, in one pass; binary calls unrolled (the hot path).
        if n == 2:
            a, b = operands
            if a.__class__ is Tensor:
                carrier = a._carrier
                if b.__class__ is Tensor:
                    if b._carrier.__class__ is not carrier.__class__:
                        # Refused, or one class accepts the other as a companion: dispatch there,
                        # cached under both classes.
                        carrier = _carrier_of(name, operands)
                        signature: tuple[Any, ...] = (
                            a._dtype,
                            b._dtype,
                            a._carrier.__class__,
                            b._carrier.__class__,
                        )
                    else:
                        signature = (a._dtype, b._dtype, carrier.__class__)
                else:
                    signature = (a._dtype, b.__class__, carrier.__class__)
            elif b.__class__ is Tensor:
                carrier = b._carrier
                signature = (a.__class__, b._dtype, carrier.__class__)
            else:
                carrier = _carrier_of(name, operands)  # raises: no tensor operand
        elif n == 1:
            (a,) = operands
            if a.__class__ is not Tensor:
                _carrier_of(name, operands)  # raises: no tensor operand
            carrier = a._carrier
            signature = (a._dtype, carrier.__class__)
        else:
            carrier = _carrier_of(name, operands)
            signature = (
                *[
                    (x._dtype, x._carrier.__class__) if x.__class__ is Tensor else x.__class__
                    for x in operands
                ],
                carrier.__class__,
            )
        if fields:
            # Validated options are frozen values: reuse them for keywords seen before. Keyed
            # with exact types (and only exact-int tuples), so True/1/1.0 never share a record.
            key: tuple[Any, ...] | None = ()
            for field, value in fields.items():
                kind = value.__class__
                if kind is tuple:
                    for item in value:
                        if item.__class__ is not int:
                            key = None
                            break
                elif kind not in _KEYABLE:
                    key = None
                if key is None:
                    break
                key += (field, kind, value)
            options = memo.get(key) if key is not None else None
            if options is None:
                options = OperationExecutionOptions(name, **fields)
                if key is not None:
                    if len(memo) >= _BOUND_MAX:
                        memo.clear()
                    memo[key] = options
        elif build:
            options = OperationExecutionOptions(name)  # raises: a required field is missing
        else:
            options = None
        if accumulates and options is not None:
            signature += (options.accumulator_dtype,)
        record = records.get(signature)
        if record is None or profiling.active:
            return _bind(records, signature, name, carrier, operands, options)
        op_cls, plan, differentiable, state = record
        op = _new(op_cls)
        op.__dict__ = {
            **state,
            "_operation_name": name,
            "_dispatch_carrier_class": carrier.__class__,
            "_dispatch_carrier": carrier,
            "_dispatched": True,
            "_forwarded": True,
            "plan": plan,
            "options": options,
        }
        if differentiable and _grad_mode.enabled:
            for x in operands:
                if x.__class__ is Tensor and x._requires_grad:
                    return run_forward(op, operands, options, True, True)
        # Untracked, no profiler: all run_forward would do is _forward and the result check.
        result = op._forward(*operands, options=options)
        if result.__class__ is not Tensor:
            _check_result(op, result)
        return result

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
    """A planned name with two outputs (values and indices, ``qr``'s factors, ``eigh``'s)."""
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
# Complex plans of functions composed for real input (conveyor.lib.composed)
tan = _planned("tan")
sinh = _planned("sinh")
cosh = _planned("cosh")
asin = _planned("asin")
acos = _planned("acos")
atan = _planned("atan")
asinh = _planned("asinh")
acosh = _planned("acosh")
atanh = _planned("atanh")
expm1 = _planned("expm1")
log1p = _planned("log1p")
# Linear algebra
inv = _planned("inv")
cholesky = _planned("cholesky")
solve = _planned("solve")
qr = _planned_pair("qr")
eigh = _planned_pair("eigh")
svd: Callable[..., tuple[Tensor, Tensor, Tensor]] = _public("svd", ("input",), frozenset())
# Views (representation-preserving)
as_strided = _view("as_strided")
broadcast_to = _view("broadcast_to")
permute = _view("permute")
rearrange = _view("rearrange")
reshape = _view("reshape")
squeeze = _view("squeeze")
unsqueeze = _view("unsqueeze")
view = _view("view")
