"""Independent references for every planned name, written with NumPy in wide dtypes or plain loops.

``reference(name, plan, fields, operands)`` returns the expected outputs (a tuple of arrays in
the plan's output dtypes) for the operands a test passed (NumPy arrays, Python scalars, None).
They follow docs/operations.md and never call the carriers' kernels: they are the oracle the kit
checks Generic against (every other carrier is checked against Generic), and the suite of
conveyor-generic uses them too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

import conveyor as cv

# -- reference conversions --------------------------------------------------------------------


def ref_convert(value: Any, target: cv.DType | None) -> Any:
    """An operand converted to ``target`` the way NumPy casts (integers wrap)."""
    if value is None or target is None:
        return None
    with np.errstate(all="ignore"):
        if isinstance(value, np.ndarray):
            return value.astype(target.numpy)
        if target.is_integer:
            bits = target.bits
            wrapped = int(value) % (1 << bits)
            if target.kind == "signed_integer" and wrapped >= 1 << (bits - 1):
                wrapped -= 1 << bits
            return np.array(wrapped, dtype=target.numpy)
        try:
            return np.array(value).astype(target.numpy)
        except OverflowError:  # a Python int beyond float64
            return np.array(math.copysign(math.inf, value)).astype(target.numpy)


def wide(value: Any) -> Any:
    """Floating values as float64 and complex as complex128 (the reference's working dtypes)."""
    if value is None:
        return None
    if value.dtype.kind == "c":
        return value.astype(np.complex128)
    if value.dtype.kind == "f" or value.dtype == ml_dtypes.bfloat16:
        return value.astype(np.float64)
    return value


def converted(plan: cv.OperationPlan, operands: Sequence[Any]) -> list[Any]:
    return [ref_convert(v, o.convert_to) for v, o in zip(operands, plan.operands, strict=True)]


def elementwise(fn: Callable[..., Any]) -> Callable[[cv.OperationPlan, Sequence[Any]], Any]:
    """Reference of an elementwise name: convert per plan, widen floats, apply, round once."""

    def apply(plan: cv.OperationPlan, operands: Sequence[Any]) -> Any:
        args = [wide(v) for v in converted(plan, operands)]
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(plan.outputs[0].numpy)

    return apply


Operands = Sequence[Any]
_SQRT1_2 = math.sqrt(0.5)


def _loop(fn: Callable[[float], float]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        flat = [fn(float(v)) for v in np.asarray(x, np.float64).reshape(-1)]
        return np.array(flat, np.float64).reshape(np.shape(x))

    return apply


def _limit(x: Any, values: Any) -> Any:
    return np.where(x == -np.inf, -0.0, values)


def _gelu_exact(v: float) -> float:
    return v * 0.5 * math.erfc(-v * _SQRT1_2) if not math.isinf(v) else max(v, -0.0)


def _gelu_tanh(x: Any) -> Any:
    k = math.sqrt(2.0 / math.pi)
    return _limit(x, 0.5 * x * (1.0 + np.tanh(k * (x + 0.044715 * x**3))))


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


def _relu(x: Any) -> Any:
    keep = x > 0
    if x.dtype.kind == "f":
        keep = keep | np.isnan(x)
    return np.where(keep, x, np.zeros((), x.dtype))


def _integral(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda x: fn(x) if x.dtype.kind in "fc" else x


def _int_pow(plan: cv.OperationPlan, a: Any, b: Any) -> Any:
    bits = plan.compute.bits
    signed = plan.compute.kind == "signed_integer"
    base, exponent = np.broadcast_arrays(a, b)
    out = []
    for p, e in zip(base.reshape(-1).tolist(), exponent.reshape(-1).tolist(), strict=True):
        if e >= 0:
            value = pow(p, e, 1 << bits)
            if signed and value >= 1 << (bits - 1):
                value -= 1 << bits
        else:
            value = 1 if p == 1 else ((-1 if e % 2 else 1) if p == -1 else 0)
        out.append(value)
    return np.array(out, dtype=plan.compute.numpy).reshape(base.shape)


def _pow(plan: cv.OperationPlan, operands: Operands) -> Any:
    if plan.compute.is_integer:
        a, b = converted(plan, operands)
        return _int_pow(plan, a, b)
    return elementwise(np.power)(plan, operands)


_UNARY: dict[str, Callable[..., Any]] = {
    "neg": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "recip": lambda x: 1.0 / x,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "erf": _loop(math.erf),
    "floor": _integral(np.floor),
    "ceil": _integral(np.ceil),
    "round": _integral(np.round),
    "logical_not": lambda x: x == 0,
    "relu": _relu,
    "sigmoid": _sigmoid,
    "silu": lambda x: _limit(x, x * _sigmoid(x)),
    "softplus": lambda x: np.where(x > 40, x, np.log1p(np.exp(np.minimum(x, 40)))),
    # The complex-only names (their plans are complex): NumPy's C99 functions.
    "tan": np.tan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "expm1": np.expm1,
    "log1p": np.log1p,
}

_BINARY: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "elementwise_mul": np.multiply,
    "div": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "rem": np.remainder,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
}


def _with_fields(name: str, fields: dict[str, Any]) -> Callable[..., Any]:
    if name == "gelu":
        approximate = fields.get("approximate", "none")
        return _gelu_tanh if approximate == "tanh" else _loop(_gelu_exact)
    if name == "elu":
        alpha = fields.get("alpha", 1.0)
        return lambda x: np.where(x > 0, x, alpha * np.expm1(x))
    slope = fields.get("negative_slope", 0.01)
    return lambda x: np.where(x > 0, x, x * slope)


def _clamp(plan: cv.OperationPlan, operands: Operands) -> Any:
    x, lo, hi = (wide(v) for v in converted(plan, operands))
    with np.errstate(all="ignore"):
        value = x if lo is None else np.maximum(x, lo)
        value = value if hi is None else np.minimum(value, hi)
    return np.asarray(value).astype(plan.outputs[0].numpy)


# -- reductions -------------------------------------------------------------------------------


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if ndim == 0:
        return ()
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if isinstance(axis, int) else axis
    return tuple(sorted(a % ndim for a in items))


def _accumulate(fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
        (x,) = converted(plan, operands)
        axes = _axes(fields.get("axis"), x.ndim)
        keep = fields.get("keepdims", False)
        with np.errstate(all="ignore"):
            if plan.compute.is_integer:
                values = fn(x, axis=axes, keepdims=keep, dtype=plan.outputs[0].numpy)
            else:
                values = fn(wide(x), axis=axes, keepdims=keep)
        return np.asarray(values).astype(plan.outputs[0].numpy)

    return apply


def _extremum(fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
        (x,) = converted(plan, operands)
        axes = _axes(fields.get("axis"), x.ndim)
        values = fn(wide(x), axis=axes, keepdims=fields.get("keepdims", False))
        return np.asarray(values).astype(plan.outputs[0].numpy)

    return apply


def _arg(fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
        (x,) = converted(plan, operands)
        if x.ndim == 0:
            return np.array(0, np.int64)
        axis = fields.get("axis")
        return np.asarray(fn(wide(x), axis=axis, keepdims=fields.get("keepdims", False)))

    return apply


def _cumsum(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    (x,) = converted(plan, operands)
    axis = fields.get("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    elif x.ndim == 0:
        return x.astype(plan.outputs[0].numpy)
    with np.errstate(all="ignore"):
        if plan.compute.is_integer:
            values = np.cumsum(x, axis=axis, dtype=plan.outputs[0].numpy)
        else:
            values = np.cumsum(wide(x), axis=axis)
    return np.asarray(values).astype(plan.outputs[0].numpy)


def _lane_order(values: list[Any], descending: bool) -> list[int]:
    """Stable order of one lane with NaN as the largest value."""

    def key(i: int) -> tuple[int, Any]:
        v = values[i]
        nan = isinstance(v, float) and math.isnan(v)
        if descending:
            return (0 if nan else 1, 0 if nan else -v)
        return (1 if nan else 0, 0 if nan else v)

    return sorted(range(len(values)), key=key)


def _sorted(plan: cv.OperationPlan, x: Any, axis: int, descending: bool, k: int | None) -> Any:
    out = plan.outputs
    if x.ndim == 0:
        if k == 0:
            return np.zeros(0, out[0].numpy), np.zeros(0, np.int64)
        return x.astype(out[0].numpy), np.array(0, np.int64)
    moved = np.moveaxis(x, axis, -1)
    lanes = moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, moved.shape[-1])
    n = moved.shape[-1] if k is None else k
    values = np.zeros((lanes.shape[0], n), x.dtype)
    indices = np.zeros((lanes.shape[0], n), np.int64)
    for row, lane in enumerate(lanes):
        items = [float(v) if x.dtype.kind in "fV" else int(v) for v in lane]
        order = _lane_order(items, descending)[:n]
        values[row] = lane[order]
        indices[row] = order
    shape = (*moved.shape[:-1], n)
    back = (
        np.moveaxis(values.reshape(shape), -1, axis),
        np.moveaxis(indices.reshape(shape), -1, axis),
    )
    return back[0].astype(out[0].numpy), back[1]


def _sort(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    (x,) = converted(plan, operands)
    return _sorted(plan, x, fields.get("axis", -1), fields.get("descending", False), None)


def _topk(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    (x,) = converted(plan, operands)
    return _sorted(plan, x, fields.get("axis", -1), fields.get("largest", True), fields["k"])


# -- contractions -----------------------------------------------------------------------------


def _matmul(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    a, b = converted(plan, operands)
    with np.errstate(all="ignore"):
        if plan.compute.is_integer:
            wide_int = np.uint64 if plan.compute.kind == "unsigned_integer" else np.int64
            values = np.matmul(a.astype(wide_int), b.astype(wide_int))
        else:
            values = np.matmul(wide(a), wide(b))
        return np.asarray(values).astype(plan.outputs[0].numpy)


def conv_reference(x: Any, w: Any, fields: dict[str, Any]) -> Any:
    """Direct N-d grouped cross-correlation in canonical layouts, one output element at a time.

    An output position ``y`` and tap ``t`` read the padded, dilated input at ``q = y*s + t*rd``;
    that is input element ``(q - lo) / ld`` when it is a whole number in range, else zero.
    """
    n, channels, *in_sp = x.shape
    o, i, *k_sp = w.shape
    groups = fields.get("feature_group_count", 1)
    d = len(in_sp)
    strides = fields.get("window_strides") or (1,) * d
    padding = fields.get("padding") or ((0, 0),) * d
    lhs_dil = fields.get("lhs_dilation") or (1,) * d
    rhs_dil = fields.get("rhs_dilation") or (1,) * d
    out_sp = []
    for e, k, s, (lo, hi), ld, rd in zip(
        in_sp, k_sp, strides, padding, lhs_dil, rhs_dil, strict=False
    ):
        span = ((e - 1) * ld + 1 if e else 0) + lo + hi - ((k - 1) * rd + 1)
        out_sp.append(span // s + 1 if span >= 0 else 0)
    out = np.zeros((n, o, *out_sp), np.result_type(x, w))
    per_out = o // groups
    for pos in itertools.product(*(range(e) for e in out_sp)):
        for taps in itertools.product(*(range(k) for k in k_sp)):
            source = []
            for y, t, s, (lo, _), ld, rd, e in zip(
                pos, taps, strides, padding, lhs_dil, rhs_dil, in_sp, strict=False
            ):
                q = y * s + t * rd - lo
                if q % ld or not 0 <= q // ld < e:
                    break
                source.append(q // ld)
            else:
                for oc in range(o):
                    g = oc // per_out
                    column = x[(slice(None), slice(g * i, (g + 1) * i), *source)]
                    target: tuple[Any, ...] = (slice(None), oc, *pos)
                    out[target] += column @ w[(oc, slice(None), *taps)]
    del channels
    return out


def _conv(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    x, w = (wide(v) for v in converted(plan, operands))
    layouts = fields.get("dimension_numbers")
    if layouts is not None:
        lhs, rhs, out = layouts
        spatial = [c for c in lhs if c not in "NC"]
        x = np.transpose(x, [lhs.index(c) for c in ("N", "C", *spatial)])
        w = np.transpose(w, [rhs.index(c) for c in ("O", "I", *spatial)])
    values = conv_reference(x, w, fields)
    if layouts is not None:
        canonical = ("N", "C", *spatial)
        values = np.transpose(values, [canonical.index(c) for c in out])
    return values.astype(plan.outputs[0].numpy)


# -- indexing ---------------------------------------------------------------------------------


def _positions(index: Any, axis: int) -> Any:
    if index.ndim == 0:
        yield (), ()
        return
    for pos in np.ndindex(*index.shape):
        target = list(pos)
        target[axis] = int(index[pos])
        yield pos, tuple(target)


def _gather(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
    x, index = converted(plan, operands)
    axis = fields["axis"] % max(x.ndim, 1)
    out = np.zeros(index.shape, x.dtype)
    for pos, target in _positions(index, axis):
        out[pos] = x[target]
    return out


def _scatter(add: bool) -> Callable[..., Any]:
    def apply(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
        x, index, src = converted(plan, operands)
        axis = fields["axis"] % max(x.ndim, 1)
        out = x.copy()
        with np.errstate(all="ignore"):
            for pos, target in _positions(index, axis):
                out[target] = out[target] + src[pos] if add else src[pos]
        return out

    return apply


def _linalg(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Reference of a linear-algebra name: NumPy's LAPACK in float64 / complex128, rounded."""

    def apply(plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands) -> Any:
        arrays = [wide(a) for a in converted(plan, operands)]
        with np.errstate(all="ignore"):
            result = fn(fields, *arrays)
        results = result if isinstance(result, tuple) else (result,)
        rounded = tuple(
            np.asarray(r).astype(d.numpy) for r, d in zip(results, plan.outputs, strict=True)
        )
        return rounded if len(rounded) > 1 else rounded[0]

    return apply


_LINALG: dict[str, Callable[..., Any]] = {
    "inv": lambda fields, a: np.linalg.inv(a),
    "cholesky": lambda fields, a: np.linalg.cholesky(a, upper=fields.get("upper", False)),
    "solve": lambda fields, a, b: np.linalg.solve(a, b),
    "qr": lambda fields, a: tuple(np.linalg.qr(a, mode=fields.get("mode", "reduced"))),
    "eigh": lambda fields, a: tuple(np.linalg.eigh(a)),
    "svd": lambda fields, a: tuple(
        np.linalg.svd(a, full_matrices=fields.get("full_matrices", True))
    ),
}


# -- the table --------------------------------------------------------------------------------

_Ref = Callable[[cv.OperationPlan, dict[str, Any], Operands], Any]


def _lift(name: str) -> _Ref:
    if name in _UNARY:
        fn = elementwise(_UNARY[name])
        return lambda plan, fields, operands: fn(plan, operands)
    if name in _BINARY:
        fn = elementwise(_BINARY[name])
        return lambda plan, fields, operands: fn(plan, operands)
    if name in ("gelu", "elu", "leaky_relu"):
        return lambda plan, fields, operands: elementwise(_with_fields(name, fields))(
            plan, operands
        )
    msg = name
    raise KeyError(msg)


REFERENCES: dict[str, _Ref] = {
    **{name: _lift(name) for name in (*_UNARY, *_BINARY, "gelu", "elu", "leaky_relu")},
    "pow": lambda plan, fields, operands: _pow(plan, operands),
    "select": lambda plan, fields, operands: elementwise(np.where)(plan, operands),
    "clamp": lambda plan, fields, operands: _clamp(plan, operands),
    "reduce_sum": _accumulate(np.sum),
    "reduce_prod": _accumulate(np.prod),
    "reduce_max": _extremum(np.max),
    "reduce_min": _extremum(np.min),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
    "cumsum": _cumsum,
    "sort": _sort,
    "topk": _topk,
    "matmul": _matmul,
    "conv_general": _conv,
    "gather": _gather,
    "scatter": _scatter(add=False),
    "scatter_add": _scatter(add=True),
    **{name: _linalg(fn) for name, fn in _LINALG.items()},
}


def reference(
    name: str, plan: cv.OperationPlan, fields: dict[str, Any], operands: Operands
) -> tuple[Any, ...]:
    """The expected outputs of ``name`` for ``operands`` under ``plan``."""
    result = REFERENCES[name](plan, fields, operands)
    return result if isinstance(result, tuple) else (result,)
