"""Built-in operations: one ``OperationDefinition`` per planned name and view name, from tables.

Nothing here is written per operation. Each definition is generated from what already decides a
name's meaning: its roles from the policy row (``conveyor.types.policy``), its options from the
schema (``conveyor.types.options``), its result dtypes from the resolved plan and its VJP from
``conveyor.engine.gradients`` (views: ``conveyor.engine.views``). Only the *shape* rule is chosen
per family (broadcasting elementwise, reduction, scan, sort, contraction, indexing, view); every
refusal a shape rule raises is the one the reference carrier raises, so a definition-backed carrier
and Generic agree on every call, including the failing ones. Registering them is this module's only
side effect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from conveyor.engine.carrier_registry import carrier_definition
from conveyor.engine.gradients import differentiable_operations, vjp
from conveyor.engine.operation_definitions import (
    _SHAPE_RESOLVED,
    NON_DIFFERENTIABLE,
    BoundCall,
    OperationDefinition,
    ResolvedInvocation,
    ResultSpec,
    _register_operation,
)
from conveyor.engine.tensor import Tensor
from conveyor.engine.views import VIEW_VJPS
from conveyor.types.layout import (
    Layout,
    broadcast_shapes,
    normalize_axes,
    normalize_axis,
    rearrange_plan,
    view_layout,
)
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import VIEW_OPERATIONS, operation_spec, registered_operations

__all__: list[str] = []

_Shape = tuple[int, ...]
_ShapeRule = Callable[[BoundCall], tuple[_Shape, ...]]


def _where(call: BoundCall) -> str:
    carrier = call.carrier.__name__ if call.carrier is not None else "the carrier"
    return f"{call.operation} on {carrier}"


def _value_error(call: BoundCall, text: str) -> ValueError:
    return ValueError(f"{_where(call)}: {text}")


def _index_error(call: BoundCall, text: str) -> IndexError:
    return IndexError(f"{_where(call)}: {text}")


def _shape(x: Any) -> _Shape:
    return x.shape if type(x) is Tensor else ()


def _opts(call: BoundCall) -> Any:
    return call.options if call.options is not None else OperationExecutionOptions(call.operation)


# -- axes, as the reference kernels read them ----------------------------------------------------


def _lane(call: BoundCall, axis: int, ndim: int) -> int:
    """One axis (scans, sorts, indexing); a 0-d operand answers to 0 and -1."""
    try:
        return normalize_axis(axis, ndim)
    except IndexError as exc:
        bound = max(ndim, 1)
        raise _index_error(call, f"{exc}; pass an axis in [-{bound}, {bound})") from None


def _reduced(call: BoundCall, axis: Any, ndim: int) -> tuple[int, ...]:
    """The axes a reduction runs over; a 0-d operand has none (but 0 / -1 are accepted)."""
    if ndim == 0:
        for a in () if axis is None else (axis,) if isinstance(axis, int) else axis:
            _lane(call, a, 0)
        return ()
    try:
        return tuple(sorted(normalize_axes(axis, ndim)))
    except IndexError as exc:
        raise _index_error(call, f"{exc}; pass axes in [-{ndim}, {ndim})") from None


def _refuse_empty(call: BoundCall, what: str, shape: _Shape, axes: tuple[int, ...]) -> None:
    empty = [a for a in axes if shape[a] == 0]
    if empty:
        msg = (
            f"cannot take {what} over axis {empty[0]} of extent 0 (shape {shape}); it has no "
            f"identity, so reduce a non-empty axis"
        )
        raise _value_error(call, msg)


def _kept(shape: _Shape, axes: tuple[int, ...], keepdims: bool) -> _Shape:
    if keepdims:
        return tuple(1 if i in axes else e for i, e in enumerate(shape))
    return tuple(e for i, e in enumerate(shape) if i not in axes)


# -- shape rules, one per family -------------------------------------------------------------------


def _broadcast(call: BoundCall) -> tuple[_Shape, ...]:
    """Elementwise names, ``select`` and ``clamp``: NumPy broadcasting of the present operands."""
    shapes = [_shape(x) for x in call.operands if x is not None]
    try:
        return (broadcast_shapes(*shapes),)
    except ValueError:
        listed = ", ".join(str(s) for s in shapes)
        msg = f"operand shapes {listed} do not broadcast together; reshape or broadcast_to first"
        raise _value_error(call, msg) from None


def _reduction(call: BoundCall) -> tuple[_Shape, ...]:
    (x,) = call.operands
    axes = _reduced(call, call.option("axis"), x.ndim)
    if call.operation in ("reduce_max", "reduce_min"):
        _refuse_empty(call, call.operation[len("reduce_") :], x.shape, axes)
    return (_kept(x.shape, axes, call.option("keepdims")),)


def _arg(call: BoundCall) -> tuple[_Shape, ...]:
    (x,) = call.operands
    axis, keepdims = call.option("axis"), call.option("keepdims")
    if x.ndim == 0:
        _reduced(call, axis, 0)
        return ((),)
    if axis is None:
        _refuse_empty(call, call.operation, (x.size,), (0,))
        return ((1,) * x.ndim if keepdims else (),)
    lane = _lane(call, axis, x.ndim)
    _refuse_empty(call, call.operation, x.shape, (lane,))
    return (_kept(x.shape, (lane,), keepdims),)


def _cumsum(call: BoundCall) -> tuple[_Shape, ...]:
    (x,) = call.operands
    axis = call.option("axis")
    if axis is None:
        return ((x.size,),)
    if x.ndim == 0:
        _reduced(call, axis, 0)
        return ((),)
    _lane(call, axis, x.ndim)
    return (x.shape,)


def _sorted(call: BoundCall) -> tuple[_Shape, ...]:
    """``sort`` and ``topk``: values and int64 indices share one shape."""
    (x,) = call.operands
    k = call.option("k") if call.operation == "topk" else None
    if x.ndim == 0:
        _reduced(call, call.option("axis"), 0)
        if k is not None and k > 1:
            raise _value_error(
                call, f"k={k} is larger than the 1 element of a 0-d input; pass k <= 1"
            )
        shape: _Shape = (0,) if k == 0 else ()
        return (shape, shape)
    axis = _lane(call, call.option("axis"), x.ndim)
    if k is not None and k > x.shape[axis]:
        msg = (
            f"k={k} is larger than axis {axis} of extent {x.shape[axis]} (shape {x.shape}); "
            f"pass k <= {x.shape[axis]}"
        )
        raise _value_error(call, msg)
    shape = x.shape if k is None else (*x.shape[:axis], k, *x.shape[axis + 1 :])
    return (shape, shape)


def _matmul(call: BoundCall) -> tuple[_Shape, ...]:
    """NumPy ``@``: 1-D operands gain a unit axis that the result drops again."""
    a, b = (x.shape for x in call.operands)
    if not a or not b:
        msg = (
            f"operands of shapes {a} and {b}: matmul needs at least 1-D operands; use mul for "
            f"scalars"
        )
        raise _value_error(call, msg)
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        msg = (
            f"operand shapes {a} and {b} do not contract: {a2[-1]} != {b2[-2]}; transpose or "
            f"reshape an operand"
        )
        raise _value_error(call, msg)
    try:
        batch = broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        msg = (
            f"operand shapes {a[:-2]}, {b[:-2]} do not broadcast together; reshape or "
            f"broadcast_to first"
        )
        raise _value_error(call, msg) from None
    return ((*batch, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ())),)


def _dilated(extent: int, dilation: int) -> int:
    return (extent - 1) * dilation + 1 if extent else 0


def _conv(call: BoundCall) -> tuple[_Shape, ...]:
    """XLA-style grouped convolution; ``dimension_numbers`` permute to and from (N, C, ...)."""
    x, w = (t.shape for t in call.operands)
    opts = _opts(call)
    layouts = opts.dimension_numbers
    identity = tuple(range(len(x)))
    perms = (identity, identity, identity)
    if layouts is not None:
        lhs, rhs, out = layouts
        if len(lhs) != len(x):
            msg = (
                f"dimension_numbers {layouts!r} describe {len(lhs)}-d operands, got {len(x)}-d ones"
            )
            raise _value_error(call, msg)
        spatial = [c for c in lhs if c not in "NC"]
        perms = (
            (lhs.index("N"), lhs.index("C"), *(lhs.index(c) for c in spatial)),
            (rhs.index("O"), rhs.index("I"), *(rhs.index(c) for c in spatial)),
            (out.index("N"), out.index("C"), *(out.index(c) for c in spatial)),
        )
    if len(x) < 2 or len(x) != len(w):
        msg = f"input {x} and weight {w} must both have 2 + (number of spatial dimensions) axes"
        raise _value_error(call, msg)
    x = tuple(x[i] for i in perms[0])
    w = tuple(w[i] for i in perms[1])
    n, channels, *in_sp = x
    o, i, *k_sp = w
    groups = opts.feature_group_count
    if channels != i * groups or o % groups:
        msg = (
            f"input has {channels} channels and weight {o} outputs x {i} inputs, which does not "
            f"fit feature_group_count={groups}; input channels must equal {i} * {groups} and "
            f"outputs must divide by {groups}"
        )
        raise _value_error(call, msg)
    if 0 in k_sp:
        raise _value_error(call, f"weight spatial extents {tuple(k_sp)} must all be >= 1")
    count = len(in_sp)
    fields = {
        "window_strides": opts.window_strides or (1,) * count,
        "padding": opts.padding or ((0, 0),) * count,
        "lhs_dilation": opts.lhs_dilation or (1,) * count,
        "rhs_dilation": opts.rhs_dilation or (1,) * count,
    }
    for name, value in fields.items():
        if len(value) != count:
            msg = (
                f"option {name} has {len(value)} entries for {count} spatial dimensions; pass "
                f"{count}"
            )
            raise _value_error(call, msg)
    out_sp = []
    for e, k, s, (lo, hi), ld, rd in zip(in_sp, k_sp, *fields.values(), strict=True):
        span = _dilated(e, ld) + lo + hi - _dilated(k, rd)
        out_sp.append(span // s + 1 if span >= 0 else 0)
    canonical = (n, o, *out_sp)
    inverse = sorted(range(len(canonical)), key=perms[2].__getitem__)
    return (tuple(canonical[j] for j in inverse),)


def _check_index(call: BoundCall, src: Tensor | None) -> None:
    """``torch.gather`` index rules; entries are read (once) to refuse out-of-range ones."""
    x, index = call.operands[0], call.operands[1]
    shape = x.shape
    if index.ndim != len(shape) or (src is not None and src.ndim != len(shape)):
        also = f" and src has {src.ndim}" if src is not None else ""
        msg = (
            f"index has {index.ndim} axes but input has {len(shape)}{also}; they must have the "
            f"same number of axes"
        )
        raise _value_error(call, msg)
    axis = _lane(call, call.option("axis"), len(shape))
    for d, extent in enumerate(index.shape):
        if d != axis and extent > shape[d]:
            msg = (
                f"index shape {index.shape} exceeds input shape {shape} on axis {d}; only the "
                f"indexed axis {axis} may be larger"
            )
            raise _value_error(call, msg)
        if src is not None and extent > src.shape[d]:
            raise _value_error(
                call, f"index shape {index.shape} exceeds src shape {src.shape} on axis {d}"
            )
    if index.size and not _deferred(index):
        values = index.numpy()
        extent = shape[axis] if shape else 1
        low, high = values.min(), values.max()
        if low < 0 or high >= extent:
            bad = low if low < 0 else high
            msg = (
                f"index {int(bad)} is out of range for axis {axis} with extent {extent}; "
                f"indices must lie in [0, {extent}) (negative indices are not counted from the end)"
            )
            raise _index_error(call, msg)


def _deferred(x: Tensor) -> bool:
    """Whether ``x``'s values are computed only when read (its kernel then checks them)."""
    definition = carrier_definition(type(x.carrier))
    return definition is not None and getattr(definition.storage, "deferred_values", False)


def _gather(call: BoundCall) -> tuple[_Shape, ...]:
    _check_index(call, None)
    x, index = call.operands
    return (index.shape if x.ndim else (),)


def _scatter(call: BoundCall) -> tuple[_Shape, ...]:
    _check_index(call, call.operands[2])
    return (call.operands[0].shape,)


def _matrix_shape(call: BoundCall, x: Tensor, square: bool) -> _Shape:
    """The shape of a stack of matrices (at least 2-D; square where the name needs it)."""
    shape = x.shape
    if len(shape) < 2 or (square and shape[-1] != shape[-2]):
        need = "a stack of square matrices" if square else "a stack of matrices"
        msg = (
            f"input of shape {shape} is not {need} (the last two axes); pass an array of shape "
            f"(..., {'n, n' if square else 'm, n'})"
        )
        raise _value_error(call, msg)
    return shape


def _linalg(call: BoundCall) -> tuple[_Shape, ...]:
    """Decompositions and inverses of the matrices in the last two axes (batched over the rest)."""
    name = call.operation
    square = name in ("inv", "cholesky", "eigh")
    shape = _matrix_shape(call, call.operands[0], square)
    *batch, m, n = shape
    if name in ("inv", "cholesky"):
        return (shape,)
    if name == "eigh":
        return ((*batch, n), shape)
    k = min(m, n)
    if name == "qr":
        q = m if call.option("mode") == "complete" else k
        return ((*batch, m, q), (*batch, q, n))
    left, right = (m, n) if call.option("full_matrices") else (k, k)
    return ((*batch, m, left), (*batch, k), (*batch, right, n))


def _solve(call: BoundCall) -> tuple[_Shape, ...]:
    """``solve(a, b)``: ``b`` of shape ``(n,)`` is one vector, else a stack of ``(n, k)`` ones."""
    a, b = call.operands
    shape = _matrix_shape(call, a, True)
    n = shape[-1]
    vector = b.ndim == 1
    rows = b.shape[0] if vector else b.shape[-2] if b.ndim >= 2 else None
    if rows != n:
        msg = (
            f"operand shapes {shape} and {b.shape} do not fit: other must be of shape ({n},) or "
            f"(..., {n}, k); reshape other"
        )
        raise _value_error(call, msg)
    if vector:
        return (shape[:-1],)
    try:
        batch = broadcast_shapes(shape[:-2], b.shape[:-2])
    except ValueError:
        msg = (
            f"operand shapes {shape[:-2]}, {b.shape[:-2]} do not broadcast together; reshape "
            f"or broadcast_to first"
        )
        raise _value_error(call, msg) from None
    return ((*batch, n, b.shape[-1]),)


_SHAPE_RULES: Final[dict[str, _ShapeRule]] = {
    "reduce_sum": _reduction,
    "reduce_prod": _reduction,
    "reduce_max": _reduction,
    "reduce_min": _reduction,
    "argmax": _arg,
    "argmin": _arg,
    "cumsum": _cumsum,
    "sort": _sorted,
    "topk": _sorted,
    "matmul": _matmul,
    "conv_general": _conv,
    "gather": _gather,
    "scatter": _scatter,
    "scatter_add": _scatter,
    "inv": _linalg,
    "cholesky": _linalg,
    "eigh": _linalg,
    "qr": _linalg,
    "svd": _linalg,
    "solve": _solve,
}
"""Names whose results are not the broadcast of their operands; every other planned name is."""

_READS_VALUES: Final = frozenset({"gather", "scatter", "scatter_add"})
"""Names whose shape rule reads operand values (the index range), so every call resolves anew."""


_MEMO_MAX = 1024


def _planned_resolve(name: str) -> Callable[[BoundCall], ResolvedInvocation]:
    rule = _SHAPE_RULES.get(name, _broadcast)
    differentiable = operation_spec(name).differentiable
    reads_values = name in _READS_VALUES

    # (plan, options, shape or type per operand) -> (plan, results, saved): the specs are
    # frozen values of exactly these, so a loop of same-shaped calls resolves each once (not
    # for a rule that reads operand values: an index in range once may not be next time). Plans
    # are keyed by identity (their hash is a Python call); the plan kept in the value makes
    # a reused id miss.
    memo: dict[tuple[Any, ...], tuple[Any, tuple[ResultSpec, ...], tuple[int, ...]]] = {}

    def resolve(call: BoundCall) -> ResolvedInvocation:
        plan = call.plan
        assert plan is not None  # the lifecycle resolves the plan of every planned name
        key: tuple[Any, ...] = (id(plan), call.options)
        for x in call.operands:  # a loop, not a comprehension: this runs on every call
            key += (x._layout.shape if x.__class__ is Tensor else x.__class__,)
        found = None if reads_values else memo.get(key)
        if found is None or found[0] is not plan:
            shapes = rule(call)
            results = tuple(
                ResultSpec(dtype=dtype, shape=shape)
                for dtype, shape in zip(plan.outputs, shapes, strict=True)
            )
            # Every tensor operand is version-checked at backward, as on the definition-free path.
            saved = (
                tuple(i for i, x in enumerate(call.operands) if type(x) is Tensor)
                if differentiable
                else ()
            )
            found = (plan, results, saved)
            if not reads_values:
                if len(memo) >= _MEMO_MAX:
                    memo.clear()
                memo[key] = found
        return ResolvedInvocation._of(call, found[1], found[2])

    resolve.__name__ = resolve.__qualname__ = f"resolve_{name}"
    return resolve


# -- the view names ------------------------------------------------------------------------------


def _view_resolve(call: BoundCall) -> ResolvedInvocation:
    """An alias of operand 0 when a layout can express the view, else a fresh row-major copy."""
    (x,) = call.operands
    opts = _opts(call)
    # Refusals are the layout algebra's own, word for word as on Generic and CPU.
    layout = view_layout(call.operation, x.layout, opts, x.carrier.size)
    if layout is not None:
        return call.resolved(
            [ResultSpec(dtype=x.dtype, shape=layout.shape, layout=layout, alias=0)]
        )
    if call.operation == "rearrange":
        shape = rearrange_plan(opts.pattern, x.shape, dict(opts.sizes))[2]
    else:
        target = Layout.contiguous(x.shape).reshape(opts.shape)
        assert target is not None  # a contiguous layout always reshapes to a fitting shape
        shape = target.shape
    return call.resolved([ResultSpec(dtype=x.dtype, shape=shape)])


# -- generation ------------------------------------------------------------------------------------


def _generate() -> tuple[OperationDefinition, ...]:
    differentiable = frozenset(differentiable_operations())
    made = []
    for name in registered_operations():
        spec = operation_spec(name)
        made.append(
            OperationDefinition(
                name=name,
                roles=spec.roles,
                resolve=_planned_resolve(name),
                vjp=vjp if name in differentiable else NON_DIFFERENTIABLE,
                scalar_roles=spec.scalar_roles,
                optional_roles=spec.optional_roles,
            )
        )
    made.extend(
        OperationDefinition(name=name, roles=("input",), resolve=_view_resolve, vjp=VIEW_VJPS[name])
        for name in VIEW_OPERATIONS
    )
    return tuple(made)


CENTRAL_DEFINITIONS: Final = _generate()
"""Every built-in definition: the planned names (sorted), then the eight view names."""

for _definition in CENTRAL_DEFINITIONS:
    _register_operation(_definition)
    if _definition.name not in VIEW_OPERATIONS and _definition.name not in _READS_VALUES:
        _SHAPE_RESOLVED.add(_definition)
del _definition
