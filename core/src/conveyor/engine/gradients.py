"""Gradients: the vector-Jacobian product (VJP) of every differentiable planned operation.

Every rule is written with the public functions of ``conveyor.engine.functional`` only, so any
carrier that implements the planned surface can share them: its operations' ``backward`` is ``vjp``
(``VJPOperation`` says so once). Backward runs under ``no_grad``, so the rules record nothing.

Rules return gradients that may still carry broadcast shapes or a wider dtype; the autograd
engine sums them back to each input's shape and casts them to its dtype. Complex rules follow
the transpose-of-the-JVP convention (JAX's; no conjugation), because the public surface has no
``conj``. ``docs/gradients.md`` records every convention (ties, kinks, zeros).
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any, Final, final

from conveyor.engine import functional as _functional
from conveyor.engine.operation import Operation
from conveyor.engine.tensor import Tensor
from conveyor.types.layout import normalize_axes, normalize_axis
from conveyor.types.options import OperationExecutionOptions

__all__ = ["VJPOperation", "differentiable_operations", "vjp"]

_Grad = Tensor | None
# A bool tensor, or a Python bool where every operand of the test was a Python scalar.
_Mask = Tensor | bool

_LN2: Final = math.log(2.0)
_SQRT1_2: Final = math.sqrt(0.5)
_ERF_SCALE: Final = 2.0 / math.sqrt(math.pi)
_PDF_SCALE: Final = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_SCALE: Final = math.sqrt(2.0 / math.pi)
_TANH_CUBIC: Final = 0.044715


@final
class _Functional:
    """``conveyor.engine.functional`` as the rules use it: every function returns a Tensor."""

    def __getattr__(self, name: str) -> Callable[..., Tensor]:
        function: Callable[..., Tensor] = getattr(_functional, name)
        self.__dict__[name] = function  # later lookups are plain attribute hits
        return function


_F: Final = _Functional()


@final
class _Call:
    """What a rule reads: the saved positional inputs, the options, the plan and the cotangent."""

    __slots__ = ("gradient", "inputs", "name", "options", "plan")

    def __init__(self, op: Operation, gradient: Any, inputs: tuple[Any, ...] | None) -> None:
        name = op._operation_name
        assert name is not None  # vjp is only reached through a dispatched operation
        self.name = name
        self.inputs = op.saved_inputs if inputs is None else inputs
        options = op.options
        if options is None:  # the schema's defaults: one shared frozen record per name
            options = _DEFAULTS.get(name) or _DEFAULTS.setdefault(
                name, OperationExecutionOptions(name)
            )
        self.options = options
        self.plan = op.plan
        self.gradient = gradient

    def wants(self, i: int) -> bool:
        """Whether input ``i`` is a tensor that receives a gradient."""
        x = self.inputs[i]
        return x.__class__ is Tensor and x._requires_grad


_DEFAULTS: dict[str, OperationExecutionOptions] = {}


_Rule = Callable[[_Call], tuple[_Grad, ...]]


def vjp(
    op: Operation, gradient: Any, inputs: tuple[Any, ...] | None = None
) -> tuple[Tensor | None, ...]:
    """One gradient (or ``None``) per tensor input of ``op``'s forward call, in order.

    ``gradient`` is the cotangent of the output (a tuple, with ``None`` for outputs that got
    none, for ``sort`` and ``topk``). Inputs that are not tensors requiring grad (integer and
    bool tensors, indices, the select condition) get ``None``. ``inputs``, when given, are read
    in place of ``op.saved_inputs``: a carrier that differentiates in pieces (TiledEvictable,
    tile by tile) passes one piece of them and the matching piece of ``gradient``.

    Raises:
        NotImplementedError: the operation is not differentiable (no rule).
        RuntimeError: the saved inputs were released or modified in place.
    """
    name = op._operation_name
    rule = _RULES.get(name) if isinstance(name, str) else None
    if rule is None:
        carrier = getattr(op._dispatch_carrier_class, "__name__", "?")
        msg = (
            f"{name} on {carrier}: the operation has no gradient rule (it is not "
            f"differentiable); detach its inputs or leave it out of the differentiated graph"
        )
        raise NotImplementedError(msg)
    call = _Call(op, gradient, inputs)
    grads = rule(call)
    out: list[Tensor | None] = []
    for x, g in zip(call.inputs, grads, strict=True):
        if x.__class__ is Tensor:
            out.append(g if x._requires_grad else None)
    return tuple(out)


def differentiable_operations() -> tuple[str, ...]:
    """Every planned name that has a gradient rule, sorted."""
    return tuple(sorted(_RULES))


class VJPOperation(Operation):
    """Base of a definition-free carrier's planned operations: the central VJP is the backward.

    Subclasses implement ``_forward`` only; gradients stay the shared rules of this module, so
    every carrier differentiates every name the same way.
    """

    backward = vjp


# -- helpers ----------------------------------------------------------------------------------


def _zeros(like: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Zeros of ``like``'s dtype on ``like``'s carrier: the sum of an empty view, broadcast."""
    base: Tensor = like if like.ndim else _F.unsqueeze(like, axes=(0,))
    empty: Tensor = _F.view(base, key=(slice(0, 0),))
    zero: Tensor = _F.reduce_sum(empty)
    return _F.broadcast_to(zero, shape=shape)


def _and(p: _Mask, q: _Mask) -> _Mask:
    if isinstance(p, bool):
        return q if p else False
    if isinstance(q, bool):
        return p if q else False
    return _F.select(p, q, False)


def _or(p: _Mask, q: _Mask) -> _Mask:
    if isinstance(p, bool):
        return True if p else q
    if isinstance(q, bool):
        return True if q else p
    return _F.select(p, True, q)


def _where(mask: _Mask, yes: Any, no: Any, like: Tensor) -> Tensor:
    """``select`` that also accepts a Python-bool mask; ``like`` gives zeros their dtype."""
    if isinstance(mask, bool):
        chosen = yes if mask else no
        return chosen if isinstance(chosen, Tensor) else _zeros(like, like.shape)
    return _F.select(mask, yes, no)


def _is_nan(x: Any) -> _Mask:
    if isinstance(x, Tensor):
        return _F.ne(x, x)
    return bool(x != x)


def _test(fn: Callable[..., Tensor], a: Any, b: Any, py: Callable[[Any, Any], bool]) -> _Mask:
    """A comparison that also works when both operands are Python scalars."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return fn(a, b)
    return py(a, b)


def _eq(a: Any, b: Any) -> _Mask:
    return _test(_F.eq, a, b, lambda p, q: bool(p == q))


def _lt(a: Any, b: Any) -> _Mask:
    return _test(_F.lt, a, b, lambda p, q: bool(p < q))


def _le(a: Any, b: Any) -> _Mask:
    return _test(_F.le, a, b, lambda p, q: bool(p <= q))


def _reduced_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    # A 0-d input has nothing to reduce: axis 0 / -1 name its single element.
    if ndim == 0:
        return ()
    return tuple(sorted(normalize_axes(axis, ndim)))


def _expand(g: Tensor, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    """The reduction's cotangent broadcast back over the reduced axes."""
    if axes and not keepdims and axes != tuple(range(len(axes))):
        # Broadcasting prepends missing axes, so only reduced axes after a kept one need
        # putting back first (a full reduction's 0-d cotangent broadcasts as it is).
        g = _F.unsqueeze(g, axes=axes)
    return _F.broadcast_to(g, shape=shape)


def _flip(x: Tensor, axis: int) -> Tensor:
    key = (slice(None),) * axis + (slice(None, None, -1),)
    return _F.view(x, key=key)


def _swap_last(x: Tensor) -> Tensor:
    axes = (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)
    return _F.permute(x, axes=axes)


def _fit_index(values: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``values`` (shaped like an index) zero-padded at the end of each axis to ``shape``."""
    if values.shape == shape:
        return values
    every: Tensor = _F.select(_F.eq(values, values), True, True)
    positions: Tensor = _F.sub(_F.cumsum(every, axis=0), 1)
    return _F.scatter(_zeros(values, shape), positions, values, axis=0)


def _log_scalar(value: Any, complex_plan: bool) -> Any:
    if complex_plan or isinstance(value, complex):
        return cmath.log(value) if value != 0 else -math.inf
    if value > 0:
        return math.log(value)
    return -math.inf if value == 0 else math.nan


# -- arithmetic -------------------------------------------------------------------------------


def _add(c: _Call) -> tuple[_Grad, ...]:
    return (c.gradient, c.gradient)


def _sub(c: _Call) -> tuple[_Grad, ...]:
    return (c.gradient, _F.neg(c.gradient) if c.wants(1) else None)


def _mul(c: _Call) -> tuple[_Grad, ...]:
    a, b = c.inputs
    g = c.gradient
    return (_F.mul(g, b) if c.wants(0) else None, _F.mul(g, a) if c.wants(1) else None)


def _div(c: _Call) -> tuple[_Grad, ...]:
    a, b = c.inputs
    ga: Tensor = _F.div(c.gradient, b)
    gb = _F.neg(_F.mul(ga, _F.div(a, b))) if c.wants(1) else None  # -g * a / b**2
    return (ga, gb)


def _pow(c: _Call) -> tuple[_Grad, ...]:
    a, b = c.inputs
    g = c.gradient
    ga = gb = None
    if c.wants(0):
        # b * a**(b-1), and 0 where b == 0 (the limit; a**-1 would give 0 * inf at a == 0).
        b1 = _F.sub(b, 1) if isinstance(b, Tensor) else b - 1
        ga = _where(_eq(b, 0), 0, _F.mul(g, _F.mul(b, _F.pow(a, b1))), g)
    if c.wants(1):
        # a**b * log(a), and 0 where a == 0 and b >= 0 (as PyTorch), where log(a) is -inf.
        complex_plan = c.plan is not None and c.plan.compute.is_complex
        if isinstance(a, Tensor) and a.dtype.is_bool and c.plan is not None:
            a = a.astype(c.plan.compute)  # log has no bool plan; the base's values are 0 and 1
        log_a = _F.log(a) if isinstance(a, Tensor) else _log_scalar(a, complex_plan)
        value = _F.mul(_F.mul(g, _F.pow(a, b)), log_a)
        zero_base = _eq(a, 0)
        mask = zero_base if complex_plan else _and(zero_base, _le(0, b))
        gb = _where(mask, 0, value, g)
    return (ga, gb)


def _extremum(c: _Call, beats: Callable[[Any, Any], _Mask]) -> tuple[_Grad, ...]:
    """``input`` wins where it beats ``other`` or is NaN; ties split the gradient in halves."""
    a, b = c.inputs
    g = c.gradient
    a_wins = _or(beats(b, a), _is_nan(a))
    tie = _eq(a, b)
    half = _F.mul(g, 0.5)
    ga = _where(a_wins, g, _where(tie, half, 0, g), g) if c.wants(0) else None
    gb = _where(a_wins, 0, _where(tie, half, g, g), g) if c.wants(1) else None
    return (ga, gb)


def _rem(c: _Call) -> tuple[_Grad, ...]:
    a, b = c.inputs
    g = c.gradient
    gb = _F.neg(_F.mul(g, _F.floor(_F.div(a, b)))) if c.wants(1) else None
    return (g, gb)


# -- unary functions and activations ----------------------------------------------------------


def _unary(derivative: Callable[[Tensor, Tensor, _Call], Tensor]) -> _Rule:
    """A rule for ``f(x)``: ``derivative(x, g, call)`` returns ``g * f'(x)``."""

    def rule(c: _Call) -> tuple[_Grad, ...]:
        return (derivative(c.inputs[0], c.gradient, c),)

    return rule


def _abs(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    if x.dtype.is_complex:
        # d|z| transposed: g * conj(z) / |z| = g * |z| / z, and 0 at z == 0.
        return _where(_F.eq(x, 0), 0, _F.mul(g, _F.div(_F.abs(x), x)), g)
    return _F.mul(g, _F.sign(x))


def _recip(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    out = _F.recip(x)
    return _F.neg(_F.mul(g, _F.mul(out, out)))


def _rsqrt(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    out = _F.rsqrt(x)
    return _F.mul(_F.mul(g, -0.5), _F.mul(_F.mul(out, out), out))


def _sigmoid(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    s = _F.sigmoid(x)
    return _F.mul(g, _F.mul(s, _F.sub(1, s)))


def _tanh(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    t = _F.tanh(x)
    return _F.mul(g, _F.sub(1, _F.mul(t, t)))


def _gelu(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    if c.options.approximate == "tanh":
        # y = x/2 (1 + tanh(u)), u = k (x + a x**3):
        # y' = (1 + t)/2 + x/2 (1 - t**2) k (1 + 3 a x**2)
        x2 = _F.mul(x, x)
        u = _F.mul(_F.add(x, _F.mul(_F.mul(x2, x), _TANH_CUBIC)), _TANH_SCALE)
        t = _F.tanh(u)
        du = _F.mul(_F.add(1, _F.mul(x2, 3 * _TANH_CUBIC)), _TANH_SCALE)
        slope = _F.add(
            _F.mul(_F.add(1, t), 0.5), _F.mul(_F.mul(_F.mul(x, 0.5), _F.sub(1, _F.mul(t, t))), du)
        )
    else:
        # y = x Phi(x): y' = Phi(x) + x phi(x)
        cdf = _F.mul(_F.add(1, _F.erf(_F.mul(x, _SQRT1_2))), 0.5)
        pdf = _F.mul(_F.exp(_F.mul(_F.mul(x, x), -0.5)), _PDF_SCALE)
        slope = _F.add(cdf, _F.mul(x, pdf))
    return _F.mul(g, slope)


def _silu(x: Tensor, g: Tensor, c: _Call) -> Tensor:
    s = _F.sigmoid(x)
    return _F.mul(g, _F.mul(s, _F.add(1, _F.mul(x, _F.sub(1, s)))))


# Rules of the form g * f'(x). Activations with a kink select instead of multiplying by a
# mask, so an infinite cotangent where the slope is 0 gives 0, not NaN.
_UNARY: Final[dict[str, Callable[[Tensor, Tensor, _Call], Tensor]]] = {
    "neg": lambda x, g, c: _F.neg(g),
    "abs": _abs,
    "recip": _recip,
    "sqrt": lambda x, g, c: _F.div(g, _F.mul(_F.sqrt(x), 2)),
    "rsqrt": _rsqrt,
    "exp": lambda x, g, c: _F.mul(g, _F.exp(x)),
    "exp2": lambda x, g, c: _F.mul(g, _F.mul(_F.exp2(x), _LN2)),
    "log": lambda x, g, c: _F.div(g, x),
    "log2": lambda x, g, c: _F.div(g, _F.mul(x, _LN2)),
    "sin": lambda x, g, c: _F.mul(g, _F.cos(x)),
    "cos": lambda x, g, c: _F.neg(_F.mul(g, _F.sin(x))),
    "erf": lambda x, g, c: _F.mul(g, _F.mul(_F.exp(_F.neg(_F.mul(x, x))), _ERF_SCALE)),
    "relu": lambda x, g, c: _where(_F.lt(0, x), g, 0, g),  # relu'(0) = 0
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "gelu": _gelu,
    "silu": _silu,
    "softplus": lambda x, g, c: _F.mul(g, _F.sigmoid(x)),
    "elu": lambda x, g, c: _where(_F.lt(0, x), g, _F.mul(g, _F.mul(_F.exp(x), c.options.alpha)), g),
    "leaky_relu": lambda x, g, c: _where(_F.lt(0, x), g, _F.mul(g, c.options.negative_slope), g),
    # The complex plans of the composed functions (input is always complex here).
    "tan": lambda x, g, c: _F.div(g, _F.mul(_F.cos(x), _F.cos(x))),
    "sinh": lambda x, g, c: _F.mul(g, _F.cosh(x)),
    "cosh": lambda x, g, c: _F.mul(g, _F.sinh(x)),
    "asin": lambda x, g, c: _F.div(g, _F.sqrt(_F.sub(1, _F.mul(x, x)))),
    "acos": lambda x, g, c: _F.neg(_F.div(g, _F.sqrt(_F.sub(1, _F.mul(x, x))))),
    "atan": lambda x, g, c: _F.div(g, _F.add(1, _F.mul(x, x))),
    "asinh": lambda x, g, c: _F.div(g, _F.sqrt(_F.add(_F.mul(x, x), 1))),
    "acosh": lambda x, g, c: _F.div(g, _F.mul(_F.sqrt(_F.sub(x, 1)), _F.sqrt(_F.add(x, 1)))),
    "atanh": lambda x, g, c: _F.div(g, _F.sub(1, _F.mul(x, x))),
    "expm1": lambda x, g, c: _F.mul(g, _F.exp(x)),
    "log1p": lambda x, g, c: _F.div(g, _F.add(x, 1)),
}


def _clamp(c: _Call) -> tuple[_Grad, ...]:
    """``minimum(maximum(x, lo), hi)``: the gradient goes to whichever operand was chosen."""
    x, lo, hi = c.inputs
    g = c.gradient
    above_lo: _Mask = True if lo is None else _le(lo, x)
    below_hi: _Mask = True if hi is None else _le(x, hi)
    gx = _where(_and(above_lo, below_hi), g, 0, g) if c.wants(0) else None
    glo = ghi = None
    if c.wants(1):
        lo_ok: _Mask = True if hi is None else _le(lo, hi)
        glo = _where(_and(_lt(x, lo), lo_ok), g, 0, g)
    if c.wants(2):
        raised = x if lo is None else _F.maximum(x, lo)
        ghi = _where(_lt(hi, raised), g, 0, g)
    return (gx, glo, ghi)


def _select(c: _Call) -> tuple[_Grad, ...]:
    condition, _, _ = c.inputs
    g = c.gradient
    ga = _F.select(condition, g, 0) if c.wants(1) else None
    gb = _F.select(condition, 0, g) if c.wants(2) else None
    return (None, ga, gb)


# -- reductions and scans ---------------------------------------------------------------------


def _reduce_sum(c: _Call) -> tuple[_Grad, ...]:
    (x,) = c.inputs
    axes = _reduced_axes(c.options.axis, x.ndim)
    return (_expand(c.gradient, x.shape, axes, c.options.keepdims),)


def _reduce_prod(c: _Call) -> tuple[_Grad, ...]:
    """Product of the others, exact with one zero in a slice (no division by that zero)."""
    (x,) = c.inputs
    axes = _reduced_axes(c.options.axis, x.ndim)
    zero = _F.eq(x, 0)
    zeros_in_slice = _F.reduce_sum(zero, axis=axes, keepdims=True)
    nonzero = _F.select(zero, 1, x)
    product = _F.reduce_prod(nonzero, axis=axes, keepdims=True)  # of the non-zero elements
    at_zero = _F.select(_F.eq(zeros_in_slice, 1), product, 0)
    elsewhere = _F.select(_F.eq(zeros_in_slice, 0), _F.div(product, nonzero), 0)
    others = _F.select(zero, at_zero, elsewhere)
    return (_F.mul(_expand(c.gradient, x.shape, axes, c.options.keepdims), others),)


def _reduce_extremum(c: _Call) -> tuple[_Grad, ...]:
    """The gradient is split evenly among the elements equal to the result (NaNs if NaN)."""
    (x,) = c.inputs
    axes = _reduced_axes(c.options.axis, x.ndim)
    reduce = _F.reduce_max if c.name == "reduce_max" else _F.reduce_min
    out = reduce(x, axis=axes, keepdims=True)
    winners = _F.select(_F.ne(out, out), _F.ne(x, x), _F.eq(x, out))
    count = _F.reduce_sum(winners, axis=axes, keepdims=True)
    g = _expand(c.gradient, x.shape, axes, c.options.keepdims)
    return (_F.select(winners, _F.div(g, count), 0),)


def _cumsum(c: _Call) -> tuple[_Grad, ...]:
    (x,) = c.inputs
    g: Tensor = c.gradient
    if x.ndim == 0:
        return (_F.reshape(g, shape=()),)
    axis = 0 if c.options.axis is None else normalize_axis(c.options.axis, x.ndim)
    reversed_sums = _flip(_F.cumsum(_flip(g, axis), axis=axis), axis)
    return (_F.reshape(reversed_sums, shape=x.shape),)


def _sorted_values(c: _Call) -> tuple[_Grad, ...]:
    """sort / topk values: scatter-add the values' cotangent at the recomputed indices."""
    (x,) = c.inputs
    g_values = c.gradient[0] if isinstance(c.gradient, tuple) else c.gradient
    if g_values is None:
        return (None,)
    if x.ndim == 0:
        return (_F.reshape(g_values, shape=()),)
    fields = dict(c.options.fields())
    results: tuple[Tensor, Tensor] = getattr(_functional, c.name)(x, **fields)
    indices = results[1]
    axis = normalize_axis(c.options.axis, x.ndim)
    return (_F.scatter_add(_zeros(g_values, x.shape), indices, g_values, axis=axis),)


# -- contractions -----------------------------------------------------------------------------


def _matmul(c: _Call) -> tuple[_Grad, ...]:
    """NumPy ``@``: 1-D operands gain a unit axis, and lose it again in their gradient."""
    a, b = c.inputs
    g: Tensor = c.gradient
    if a.ndim == 1 and b.ndim == 1:
        return (_F.mul(g, b) if c.wants(0) else None, _F.mul(g, a) if c.wants(1) else None)
    a2 = _F.unsqueeze(a, axes=(0,)) if a.ndim == 1 else a
    b2 = _F.unsqueeze(b, axes=(-1,)) if b.ndim == 1 else b
    g2 = _F.unsqueeze(g, axes=(-2,)) if a.ndim == 1 else g
    g2 = _F.unsqueeze(g2, axes=(-1,)) if b.ndim == 1 else g2
    ga = gb = None
    if c.wants(0):
        ga = _F.matmul(g2, _swap_last(b2))
        ga = _F.squeeze(ga, axes=(-2,)) if a.ndim == 1 else ga
    if c.wants(1):
        gb = _F.matmul(_swap_last(a2), g2)
        gb = _F.squeeze(gb, axes=(-1,)) if b.ndim == 1 else gb
    return (ga, gb)


def _dilated(extent: int, dilation: int) -> int:
    return (extent - 1) * dilation + 1 if extent else 0


def _conv_general(c: _Call) -> tuple[_Grad, ...]:
    """Both VJPs are convolutions over canonical (N, C, spatial...) layouts.

    The input gradient is the gradient of the padded, dilated input (a full correlation of the
    cotangent, dilated by the strides, with the flipped, group-transposed kernel), cropped back
    and sub-sampled by ``lhs_dilation``. The weight gradient correlates the input (channels as
    batch, batch as features) with the cotangent as the kernel, dilated by the strides.
    """
    x, w = c.inputs
    g: Tensor = c.gradient
    o = c.options
    n_sp = x.ndim - 2
    lhs, rhs, out = o.dimension_numbers or ("NC", "OI", "NC")
    order = [ch for ch in lhs if ch not in "NC"]  # spatial dimensions, in lhs order
    if o.dimension_numbers is None:
        perm_x = perm_w = perm_g = tuple(range(x.ndim))
    else:
        perm_x = (lhs.index("N"), lhs.index("C"), *(lhs.index(ch) for ch in order))
        perm_w = (rhs.index("O"), rhs.index("I"), *(rhs.index(ch) for ch in order))
        perm_g = (out.index("N"), out.index("C"), *(out.index(ch) for ch in order))
    xc: Tensor = _F.permute(x, axes=perm_x)
    wc: Tensor = _F.permute(w, axes=perm_w)
    gc: Tensor = _F.permute(g, axes=perm_g)
    ones = (1,) * n_sp
    strides = o.window_strides or ones
    padding = o.padding or ((0, 0),) * n_sp
    lhs_dil = o.lhs_dilation or ones
    rhs_dil = o.rhs_dilation or ones
    groups = o.feature_group_count
    n, _, *in_sp = xc.shape
    o_ch, i_ch, *k_sp = wc.shape
    out_sp = gc.shape[2:]
    per_group = o_ch // groups
    padded = [
        _dilated(e, d) + lo + hi for e, d, (lo, hi) in zip(in_sp, lhs_dil, padding, strict=True)
    ]
    gx = gw = None
    if c.wants(0):
        flipped = _F.view(wc, key=(slice(None), slice(None)) + (slice(None, None, -1),) * n_sp)
        wt = _F.reshape(flipped, shape=(groups, per_group, i_ch, *k_sp))
        wt = _F.permute(wt, axes=(0, 2, 1, *range(3, 3 + n_sp)))
        wt = _F.reshape(wt, shape=(groups * i_ch, per_group, *k_sp))
        full = [
            (_dilated(k, d) - 1, p - _dilated(y, s))
            for k, d, p, y, s in zip(k_sp, rhs_dil, padded, out_sp, strides, strict=True)
        ]
        grad_padded = _F.conv_general(
            gc,
            wt,
            padding=full,
            lhs_dilation=strides,
            rhs_dilation=rhs_dil,
            feature_group_count=groups,
        )
        crop = tuple(
            slice(lo, lo + _dilated(e, d), d)
            for e, d, (lo, _) in zip(in_sp, lhs_dil, padding, strict=True)
        )
        grad_x = _F.view(grad_padded, key=(slice(None), slice(None), *crop))
        gx = _F.permute(grad_x, axes=_inverse(perm_x))
    if c.wants(1):
        if 0 in out_sp:
            gw = _zeros(g, w.shape)
        else:
            sp = tuple(range(3, 3 + n_sp))
            xt = _F.reshape(xc, shape=(n, groups, i_ch, *in_sp))
            xt = _F.reshape(_F.permute(xt, axes=(2, 1, 0, *sp)), shape=(i_ch, groups * n, *in_sp))
            gt = _F.reshape(gc, shape=(n, groups, per_group, *out_sp))
            gt = _F.reshape(_F.permute(gt, axes=(1, 2, 0, *sp)), shape=(o_ch, n, *out_sp))
            grad_w = _F.conv_general(
                xt,
                gt,
                window_strides=rhs_dil,
                padding=padding,
                lhs_dilation=lhs_dil,
                rhs_dilation=strides,
                feature_group_count=groups,
            )
            grad_w = _F.view(grad_w, key=(slice(None), slice(None), *(slice(0, k) for k in k_sp)))
            grad_w = _F.permute(grad_w, axes=(1, 0, *range(2, 2 + n_sp)))
            gw = _F.permute(grad_w, axes=_inverse(perm_w))
    return (gx, gw)


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


# -- indexing ---------------------------------------------------------------------------------


def _gather(c: _Call) -> tuple[_Grad, ...]:
    x, index = c.inputs
    g = c.gradient
    return (_F.scatter_add(_zeros(g, x.shape), index, g, axis=c.options.axis), None)


def _scatter(c: _Call) -> tuple[_Grad, ...]:
    """The written positions of ``input`` get nothing; ``src`` gets what they received."""
    _, index, src = c.inputs
    g = c.gradient
    axis = c.options.axis
    gx = _F.scatter(g, index, _zeros(g, index.shape), axis=axis) if c.wants(0) else None
    gs = _fit_index(_F.gather(g, index, axis=axis), src.shape) if c.wants(2) else None
    return (gx, None, gs)


def _scatter_add(c: _Call) -> tuple[_Grad, ...]:
    _, index, src = c.inputs
    g = c.gradient
    gs = _fit_index(_F.gather(g, index, axis=c.options.axis), src.shape) if c.wants(2) else None
    return (g, None, gs)


# -- linear algebra ---------------------------------------------------------------------------
# Decompositions recompute their forward results (the saved state is the input only). The
# symmetric ones (cholesky, eigh) return the symmetrised gradient: the input is taken to be the
# symmetric matrix LAPACK reads, as in PyTorch. Complex decompositions need conjugation, which
# the planned surface does not have, so only inv and solve differentiate complex plans.


def _mT(x: Tensor) -> Tensor:
    return _swap_last(x)


def _positions(x: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column numbers (from 1, int64) of every element of ``x``'s last two axes."""
    every: Tensor = _F.select(_F.eq(x, x), True, True)
    return _F.cumsum(every, axis=x.ndim - 2), _F.cumsum(every, axis=x.ndim - 1)


def _diagonal_matrix(v: Tensor) -> Tensor:
    """``v`` of shape ``(..., k)`` on the diagonal of a ``(..., k, k)`` stack of zeros."""
    k = v.shape[-1]
    rows_of_v: Tensor = _F.broadcast_to(_F.unsqueeze(v, axes=(-2,)), shape=(*v.shape, k))
    rows, cols = _positions(rows_of_v)
    return _F.select(_F.eq(rows, cols), rows_of_v, 0)


def _symmetrised(g: Tensor) -> Tensor:
    return _F.mul(_F.add(g, _mT(g)), 0.5)


def _real_only(c: _Call) -> None:
    if c.plan is not None and c.plan.compute.is_complex:
        msg = (
            f"{c.name}: the gradient of a complex {c.name} needs conjugation, which no planned "
            f"operation provides; differentiate a real {c.name}, or detach its input"
        )
        raise NotImplementedError(msg)


def _inv(c: _Call) -> tuple[_Grad, ...]:
    """``d(A^-1) = -A^-1 dA A^-1``, so ``gA = -Y^T g Y^T`` with ``Y = A^-1``."""
    (x,) = c.inputs
    yt = _mT(_F.inv(x))
    return (_F.neg(_F.matmul(_F.matmul(yt, c.gradient), yt)),)


def _solve(c: _Call) -> tuple[_Grad, ...]:
    """``X = A^-1 B``: ``gB = A^-T g`` and ``gA = -gB X^T`` (a vector ``b`` as one column)."""
    a, b = c.inputs
    g: Tensor = c.gradient
    vector = b.ndim == 1
    g2 = _F.unsqueeze(g, axes=(-1,)) if vector else g
    gb: Tensor = _F.solve(_mT(a), g2)
    ga = None
    if c.wants(0):
        x = _F.solve(a, b)
        x2 = _F.unsqueeze(x, axes=(-1,)) if vector else x
        ga = _F.neg(_F.matmul(gb, _mT(x2)))
    return (ga, _F.squeeze(gb, axes=(-1,)) if vector else gb)


def _cholesky(c: _Call) -> tuple[_Grad, ...]:
    """``gA = L^-T Phi(L^T gL) L^-1``, symmetrised.

    ``Phi`` keeps the strictly lower triangle and half the diagonal.
    """
    _real_only(c)
    (x,) = c.inputs
    upper = c.options.upper
    factor: Tensor = _F.cholesky(x, upper=upper)
    g: Tensor = c.gradient
    lower, g_lower = (_mT(factor), _mT(g)) if upper else (factor, g)
    inner = _F.matmul(_mT(lower), g_lower)
    rows, cols = _positions(inner)
    phi = _F.select(_F.lt(cols, rows), inner, _F.select(_F.eq(rows, cols), _F.mul(inner, 0.5), 0))
    lower_inv = _F.inv(lower)
    return (_symmetrised(_F.matmul(_F.matmul(_mT(lower_inv), phi), lower_inv)),)


def _eigh(c: _Call) -> tuple[_Grad, ...]:
    """``gA = V (diag(gw) + F o (V^T gV)) V^T`` with ``F_ij = 1 / (w_j - w_i)`` off the diagonal."""
    _real_only(c)
    (x,) = c.inputs
    g_values, g_vectors = c.gradient
    values, vectors = _F.eigh(x)
    middle = None
    if g_vectors is not None:
        gaps = _F.sub(_F.unsqueeze(values, axes=(-2,)), _F.unsqueeze(values, axes=(-1,)))
        rows, cols = _positions(gaps)
        diagonal = _F.eq(rows, cols)
        factors = _F.select(diagonal, 0, _F.recip(_F.select(diagonal, 1, gaps)))
        middle = _F.mul(factors, _F.matmul(_mT(vectors), g_vectors))
    if g_values is not None:
        spread = _diagonal_matrix(g_values)
        middle = spread if middle is None else _F.add(middle, spread)
    assert middle is not None  # backward runs only when some output received a gradient
    return (_symmetrised(_F.matmul(_F.matmul(vectors, middle), _mT(vectors))),)


def _svd(c: _Call) -> tuple[_Grad, ...]:
    """The reduced SVD's VJP (PyTorch's ``svd_backward``, real case).

    ``gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)] V^T`` plus the parts of ``gU``
    and ``gV`` outside the spans of ``U`` and ``V``, with ``E_jk = s_k^2 - s_j^2``.
    """
    _real_only(c)
    (x,) = c.inputs
    g_u, g_s, g_vh = c.gradient
    m, n = x.shape[-2:]
    k = min(m, n)
    if c.options.full_matrices and m != n and (g_u is not None or g_vh is not None):
        msg = (
            "svd: the gradient of U or Vh with full_matrices=True is not defined for a "
            "non-square matrix (the extra columns are arbitrary); use full_matrices=False"
        )
        raise NotImplementedError(msg)
    u, s, vh = _F.svd(x, full_matrices=False)
    v = _mT(vh)
    g_v = None if g_vh is None else _mT(g_vh)
    s_row, s_col = _F.unsqueeze(s, axes=(-2,)), _F.unsqueeze(s, axes=(-1,))
    middle = None
    if g_u is not None or g_v is not None:
        squares = _F.mul(s, s)
        gaps = _F.sub(_F.unsqueeze(squares, axes=(-2,)), _F.unsqueeze(squares, axes=(-1,)))
        rows, cols = _positions(gaps)
        gaps = _F.select(_F.eq(rows, cols), 1, gaps)
        if g_u is not None:
            uu = _F.matmul(_mT(u), g_u)
            middle = _F.mul(_F.sub(uu, _mT(uu)), s_row)
        if g_v is not None:
            vv = _F.matmul(vh, g_v)
            term = _F.mul(s_col, _F.sub(vv, _mT(vv)))
            middle = term if middle is None else _F.add(middle, term)
        middle = _F.div(middle, gaps)
    if g_s is not None:
        spread = _diagonal_matrix(g_s)
        middle = spread if middle is None else _F.add(middle, spread)
    assert middle is not None  # backward runs only when some output received a gradient
    if m > k and g_u is not None:
        scaled = _F.div(g_u, s_row)
        outside = _F.sub(scaled, _F.matmul(u, _F.matmul(_mT(u), scaled)))
        return (_F.matmul(_F.add(_F.matmul(u, middle), outside), vh),)
    if n > k and g_v is not None:
        scaled = _F.div(g_v, s_row)
        outside = _F.sub(_mT(scaled), _F.matmul(_F.matmul(_mT(scaled), v), vh))
        return (_F.matmul(u, _F.add(_F.matmul(middle, vh), outside)),)
    return (_F.matmul(_F.matmul(u, middle), vh),)


def _qr(c: _Call) -> tuple[_Grad, ...]:
    """``gA = (gQ + Q S) R^-T`` with ``M = gR R^T - Q^T gQ`` and ``S = triu(M) + triu(M, 1)^T``.

    Defined where ``R`` is square and invertible: ``m >= n`` in reduced mode (PyTorch's rule).
    """
    _real_only(c)
    (x,) = c.inputs
    m, n = x.shape[-2:]
    if m < n or (c.options.mode == "complete" and m != n):
        msg = (
            f"qr: the gradient is defined for inputs with at least as many rows as columns in "
            f"mode 'reduced' (got shape {x.shape}, mode {c.options.mode!r}); transpose the "
            f"input or use mode='reduced'"
        )
        raise NotImplementedError(msg)
    g_q, g_r = c.gradient
    q, r = _F.qr(x, mode=c.options.mode)
    middle = None
    if g_r is not None:
        middle = _F.matmul(g_r, _mT(r))
    if g_q is not None:
        qq = _F.matmul(_mT(q), g_q)
        middle = _F.neg(qq) if middle is None else _F.sub(middle, qq)
    assert middle is not None  # backward runs only when some output received a gradient
    rows, cols = _positions(middle)
    mirrored = _F.add(
        _F.select(_F.le(rows, cols), middle, 0), _mT(_F.select(_F.lt(rows, cols), middle, 0))
    )
    left = _F.matmul(q, mirrored)
    if g_q is not None:
        left = _F.add(left, g_q)
    return (_F.matmul(left, _mT(_F.inv(r))),)


# The rule table. Names absent here are not differentiable (their spec says so) and the
# engine never asks; every differentiable planned name has exactly one rule.
_RULES: Final[dict[str, _Rule]] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "elementwise_mul": _mul,
    "div": _div,
    "pow": _pow,
    "maximum": lambda c: _extremum(c, _lt),
    "minimum": lambda c: _extremum(c, lambda p, q: _lt(q, p)),
    "rem": _rem,
    **{name: _unary(derivative) for name, derivative in _UNARY.items()},
    "clamp": _clamp,
    "select": _select,
    "reduce_sum": _reduce_sum,
    "reduce_prod": _reduce_prod,
    "reduce_max": _reduce_extremum,
    "reduce_min": _reduce_extremum,
    "cumsum": _cumsum,
    "sort": _sorted_values,
    "topk": _sorted_values,
    "matmul": _matmul,
    "conv_general": _conv_general,
    "gather": _gather,
    "scatter": _scatter,
    "scatter_add": _scatter_add,
    "inv": _inv,
    "solve": _solve,
    "cholesky": _cholesky,
    "eigh": _eigh,
    "svd": _svd,
    "qr": _qr,
}
