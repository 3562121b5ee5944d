"""CPU kernels: elementwise arithmetic, comparisons, unary functions, activations, select, clamp.

Every kernel writes into one fresh aligned output (``cpu_runtime.empty``) with ``out=``; inputs
are converted on the fly by the ufunc's casting, never copied whole. Each plan runs in a *work*
dtype: the compute dtype itself for bool, integers, float32, float64 and complex128, and
float64 / complex128 for float16, bfloat16 and complex64, exactly as the reference kernels
widen them, so those results are bit-identical to Generic. float32 and float64 run natively:
arithmetic, comparisons and the exactly rounded functions (sqrt, floor, ...) match Generic bit
for bit, while transcendental functions and activations use NumPy's SIMD loops and in-place
formulas and stay within a few ulps of Generic's correctly rounded float64 evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor_generic.kernels import cpu_activations as act
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels._common import check_broadcast
from conveyor_generic.kernels._common import scalar as convert_scalar
from conveyor_generic.kernels.elementwise import int_pow
from conveyor_generic.kernels.unary import erf as exact_erf
from conveyor_generic.kernels.unary import gelu as exact_gelu

__all__ = ["ELEMENTWISE_KERNELS", "scalar", "work_dtype"]

Array = rt.Array

_BINARY: Final[dict[str, np.ufunc]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "elementwise_mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "rem": np.remainder,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
}
# Binary names whose float32 result is rounded differently natively than through float64.
_WIDE_FLOAT32: Final = frozenset({"pow", "rem"})

_UNARY: Final[dict[str, np.ufunc]] = {
    "neg": np.negative,
    "abs": np.absolute,
    "sign": np.sign,
    "recip": np.true_divide,  # true_divide(1, x): the reference's complex division too
    "sqrt": np.sqrt,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even
    "logical_not": np.logical_not,
    "relu": np.maximum,  # maximum(x, 0): keeps NaN and the integer dtype
}
_INTEGRAL: Final = frozenset({"floor", "ceil", "round"})  # identity on bool and integers
# Unary names as cheap as a copy: they split across cores only as late as binary arithmetic.
_MEMORY_BOUND_UNARY: Final = frozenset(
    {"neg", "abs", "sign", "floor", "ceil", "round", "logical_not", "relu"}
)

# Keyed by conveyor dtype: bfloat16's NumPy dtype would import ml_dtypes with this module.
_WIDE: Final = {
    cv.float16: np.dtype(np.float64),
    cv.bfloat16: np.dtype(np.float64),
    cv.complex64: np.dtype(np.complex128),
}


def work_dtype(compute: cv.DType) -> np.dtype[Any]:
    """The dtype a plan's arithmetic runs in on CPU (see the module docstring)."""
    return _WIDE.get(compute) or compute.numpy


# -- weak scalars ----------------------------------------------------------------------------

_SCALARS: dict[tuple[Any, ...], Array] = {}
_SCALAR_CACHE_MAX = 4096


def scalar(value: Any, dtype: cv.DType) -> Array:
    """A weak Python scalar as a 0-d array of ``dtype`` (integers wrap, huge floats become inf).

    Conversions are cached by (type, value, dtype), floats also by the sign (``0.0 == -0.0``);
    NaN and complex scalars are converted every time (NaN never equals itself).
    """
    cls = value.__class__
    if cls is float:
        if value != value:
            return convert_scalar(value, dtype)
        key: tuple[Any, ...] = (cls, value, dtype, math.copysign(1.0, value))
    elif cls is int or cls is bool:
        key = (cls, value, dtype)
    else:
        return convert_scalar(value, dtype)
    found = _SCALARS.get(key)
    if found is None:
        found = convert_scalar(value, dtype)
        found.flags.writeable = False
        if len(_SCALARS) >= _SCALAR_CACHE_MAX:
            _SCALARS.clear()
        _SCALARS[key] = found
    return found


def _operand(value: Any, target: cv.DType | None) -> Any:
    if type(value) is np.ndarray or value is None:
        return value
    assert target is not None  # a present operand always has a conversion target
    return scalar(value, target)


# -- binary ----------------------------------------------------------------------------------


def _shape_of(plan: cv.OperationPlan, *operands: Any) -> tuple[tuple[int, ...], int]:
    """The broadcast shape of the present operands and its element count."""
    shapes = [x.shape for x in operands if x is not None and x.shape]
    if not shapes:
        return (), 1
    first = shapes[0]
    if all(s == first for s in shapes):
        return first, math.prod(first)
    shape = check_broadcast(plan.operation, *shapes)
    return shape, math.prod(shape)


# Python ints up to this size convert to float exactly; larger ones take the general path.
_EXACT_INT: Final = 2**53

# (shape, shape) -> (broadcast shape, size) of operand shapes seen before: deriving it costs more
# than adding two small arrays. Only shapes that broadcast are kept; the rest raise each time.
_BROADCASTS: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], int]] = {}
_BROADCAST_CACHE_MAX = 4096


def _broadcast(
    plan: cv.OperationPlan, shapes: tuple[tuple[int, ...], tuple[int, ...]]
) -> tuple[tuple[int, ...], int]:
    """The broadcast shape of two operand shapes and its size, remembered for the next call."""
    shape = check_broadcast(plan.operation, *shapes)
    if len(_BROADCASTS) >= _BROADCAST_CACHE_MAX:
        _BROADCASTS.clear()
    found = _BROADCASTS[shapes] = (shape, math.prod(shape))
    return found


def _ufunc_call(ufunc: np.ufunc, work: np.dtype[Any], out: np.dtype[Any], nin: int) -> Any:
    """``call(out_array, *inputs)``: the ufunc over ``work``, casting inputs and output on the fly.

    Inputs must already hold compute-dtype values when ``work`` is wider (see ``_to_compute``).
    """
    if out == np.bool_:
        result = np.dtype(np.bool_)
    elif work.kind == "c" and out.kind == "f":  # abs of complex: the real counterpart
        result = np.empty(0, work).real.dtype
    else:
        result = work
    signature = (*(work,) * nin, result)

    if nin == 1:

        def unary(target: Array, x: Any) -> Any:
            if x.dtype == work and target.dtype == result:
                return ufunc(x, out=target)
            return ufunc(x, out=target, signature=signature, casting="unsafe")

        return unary

    def binary(target: Array, x: Any, y: Any) -> Any:
        if x.dtype == work and y.dtype == work and target.dtype == result:
            return ufunc(x, y, out=target)
        return ufunc(x, y, out=target, signature=signature, casting="unsafe")

    return binary


def _to_compute(x: Any, compute: np.dtype[Any], work: np.dtype[Any]) -> Any:
    """``x`` rounded to the compute dtype first when the work dtype is wider than it.

    The plan converts operands to the compute dtype; a wide work dtype must not skip that
    rounding (an int64 operand of a float16 plan becomes float16 before float64 arithmetic).
    """
    if x is None or work == compute or x.dtype == compute:
        return x
    return x.astype(compute)


def _binary(name: str) -> Callable[..., Array]:
    ufunc = _BINARY[name]
    # id(plan) -> (plan, general call, output dtype, work dtype, ufunc when inputs of the work
    # dtype can write the output directly, else None): decided once per plan. Keyed by identity
    # (the entry keeps its plan alive, so the id stays its own): a plan's hash is a Python call.
    # The last field is the NumPy scalar type a weak Python float (or int) operand becomes, when
    # it can go straight into the ufunc: a real floating plan computed in its own dtype.
    # The last field: ``pow`` of a real float32 / float64 tensor by a weak scalar, whose
    # exponent 2 runs as a multiply (see ``kernel``).
    prepared: dict[
        int, tuple[cv.OperationPlan, Any, np.dtype[Any], np.dtype[Any], Any, Any, bool]
    ] = {}

    def prepare(
        plan: cv.OperationPlan,
    ) -> tuple[cv.OperationPlan, Any, np.dtype[Any], np.dtype[Any], Any, Any, bool]:
        work = work_dtype(plan.compute)
        if name in _WIDE_FLOAT32 and plan.compute is cv.float32:
            work = np.dtype(np.float64)
        out_dtype = plan.outputs[0].numpy
        call = _ufunc_call(ufunc, work, out_dtype, 2)
        direct = out_dtype == work or out_dtype == np.bool_
        if name == "pow" and plan.compute.is_integer:
            direct = False  # negative exponents need a look first
        weak = None
        if (
            direct
            and plan.compute.is_floating
            and work == plan.compute.numpy
            and all(o.convert_to is plan.compute for o in plan.operands)
        ):
            weak = work.type
        square = (
            name == "pow"
            and plan.compute in (cv.float32, cv.float64)
            and plan.operands[1].weak
            and plan.operands[0].convert_to is plan.compute
            and plan.outputs[0] is plan.compute
        )
        found = prepared[id(plan)] = (
            plan,
            call,
            out_dtype,
            work,
            ufunc if direct else None,
            weak,
            square,
        )
        return found

    def kernel(plan: cv.OperationPlan, options: Any, a: Any, b: Any) -> Array:
        entry = prepared.get(id(plan))
        if entry is None or entry[0] is not plan:
            entry = prepare(plan)
        _, call, out_dtype, work, direct, weak, square = entry
        if (
            square
            and (b.__class__ is float or b.__class__ is int)
            and b == 2
            and a.__class__ is np.ndarray
            and a.dtype is out_dtype
        ):
            # x ** 2 as x * x: an exact square rounded once, so the same bits as the widened
            # power (float32 pow runs in float64, 3x a multiply's time).
            out = rt.empty(a.shape, out_dtype, a.size)
            if a.size >= rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE:
                rt.chunked(_square, out, (a,))
            else:
                np.multiply(a, a, out=out)
            return out
        if weak is not None:
            # A tensor and a weak Python float or int: the scalar rounded to the compute dtype
            # as _operand rounds it (through float64), then one ufunc call. Kernels run in the
            # quiet error state, so a scalar past the dtype's range becomes inf silently.
            if a.__class__ is np.ndarray and a.dtype is work:
                array, number, left = a, b, False
            else:
                array, number, left = b, a, True
            kind = number.__class__
            if (
                (kind is float or kind is int)
                and array.__class__ is np.ndarray
                and array.dtype is work
                and array.size < rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE
                and (kind is float or -_EXACT_INT <= number <= _EXACT_INT)
            ):
                value = weak(float(number))
                out = rt.empty(array.shape, out_dtype, array.size)
                if left:
                    direct(value, array, out=out)
                else:
                    direct(array, value, out=out)
                return out
        if (
            direct is not None
            and a.__class__ is np.ndarray
            and b.__class__ is np.ndarray
            and a.dtype is work
            and b.dtype is work
        ):
            shape = a.shape
            if shape == b.shape:
                size = a.size
            else:
                key = (shape, b.shape)
                found = _BROADCASTS.get(key) or _broadcast(plan, key)
                shape, size = found
            if size < rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE:
                # The hot path of operands of the work dtype below the threaded size: one
                # ufunc call (it broadcasts), nothing derived that a previous call derived.
                # (Up to 4M elements: binary work splits across cores only from there.)
                out = rt.empty(shape, out_dtype, size)
                direct(a, b, out=out)
                return out
        compute = plan.compute.numpy
        x = _to_compute(_operand(a, plan.operands[0].convert_to), compute, work)
        y = _to_compute(_operand(b, plan.operands[1].convert_to), compute, work)
        shape, size = _shape_of(plan, x, y)
        out = rt.empty(shape, out_dtype, size)
        if name == "pow" and plan.compute.is_integer and _negative(y):
            return _integer_pow(plan, x, y, out)
        if size >= rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE:
            rt.chunked(call, out, (x, y))
        else:
            call(out, x, y)
        return out

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _square(out: Array, x: Array) -> None:
    np.multiply(x, x, out=out)


def _negative(exponent: Array) -> bool:
    return exponent.dtype.kind == "i" and bool((exponent < 0).any())


def _integer_pow(plan: cv.OperationPlan, x: Array, y: Array, out: Array) -> Array:
    """Negative integer exponents: the reference's truncated values (NumPy refuses them)."""
    compute = plan.compute.numpy
    np.copyto(out, int_pow(x.astype(compute), y.astype(compute)), casting="unsafe")
    return out


# -- unary -----------------------------------------------------------------------------------


def _unary(name: str) -> Callable[..., Array]:
    ufunc = _UNARY[name]
    # id(plan) -> (plan, call or None for an identity copy, compute dtype, work dtype), once
    # per plan; keyed by identity like the binary kernels' (a plan's hash is a Python call).
    calls: dict[int, tuple[cv.OperationPlan, Any, np.dtype[Any], np.dtype[Any]]] = {}
    binary = name in ("relu", "recip")
    scale = rt.MEMORY_BOUND_SCALE if name in _MEMORY_BOUND_UNARY else 1

    def prepare(plan: cv.OperationPlan) -> tuple[cv.OperationPlan, Any, Any, Any]:
        work = work_dtype(plan.compute)
        call = None
        if not (name in _INTEGRAL and not (plan.compute.is_floating or plan.compute.is_complex)):
            call = _ufunc_call(ufunc, work, plan.outputs[0].numpy, 2 if binary else 1)
            if name == "recip":
                call = _with_one(call, np.ones((), work))
            elif binary:
                call = _with_zero(call, np.zeros((), work))
        found = calls[id(plan)] = (plan, call, plan.compute.numpy, work)
        return found

    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        entry = calls.get(id(plan))
        if entry is None or entry[0] is not plan:
            entry = prepare(plan)
        _, call, compute, work = entry
        out = rt.empty(a.shape, plan.outputs[0].numpy, a.size)
        if call is None:  # floor, ceil and round of bool and integers: the identity
            np.copyto(out, a, casting="unsafe")
            return out
        x = a if work == compute or a.dtype == compute else a.astype(compute)
        if a.size >= rt.PARALLEL_MIN * scale:
            rt.chunked(call, out, (x,))
        else:
            call(out, x)
        return out

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _with_zero(call: Any, zero: Array) -> Any:
    return lambda target, x: call(target, x, zero)


def _with_one(call: Any, one: Array) -> Any:
    return lambda target, x: call(target, one, x)


def rsqrt(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
    """``1 / sqrt(x)``: two rounding steps in the work dtype."""
    out, work = _activation_buffers(plan, a)
    np.sqrt(a, out=work, dtype=work.dtype, casting="unsafe")
    np.reciprocal(work, out=work)
    return _finish(out, work)


# -- activations -----------------------------------------------------------------------------


def _activation_buffers(plan: cv.OperationPlan, a: Array) -> tuple[Array, Array]:
    """(published output, work-dtype buffer the formula runs in; the same array when possible)."""
    out_dtype = plan.outputs[0].numpy
    out = rt.empty(a.shape, out_dtype, a.size)
    work = work_dtype(plan.compute)
    if work == out_dtype:
        return out, out
    return out, np.empty(a.shape, work)


def _finish(out: Array, work: Array) -> Array:
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    return out


def _activation(name: str) -> Callable[..., Array]:
    def kernel(plan: cv.OperationPlan, options: Any, a: Any) -> Array:
        out, work = _activation_buffers(plan, a)
        x = np.ascontiguousarray(a, dtype=work.dtype).reshape(-1)
        target = work.reshape(-1)
        if work.dtype != np.float32 and name in ("erf", "gelu") and not _tanh_gelu(options):
            # float64 (and the half dtypes it carries) keep the reference's exact erf.
            values = exact_erf(x) if name == "erf" else exact_gelu(x, "none")
            np.copyto(target, values, casting="unsafe")
            return _finish(out, work)
        step = act.step(name, options, work.dtype)
        if target.size >= rt.PARALLEL_MIN:
            rt.chunked(step, target, (x,))
        else:
            step(target, x)
        return _finish(out, work)

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _tanh_gelu(options: Any) -> bool:
    return options is not None and getattr(options, "approximate", "none") == "tanh"


# -- select and clamp ------------------------------------------------------------------------


_BITS: Final = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# Below this many elements select is np.where and a copy: measured on the 2-core reference
# machine (float32, random conditions), np.where + copyto took 5 us at 1K elements against the
# blend's 21 us, and the two met near 16K; at 64K the blend took 54 us, np.where 252 us.
_BLEND_MIN: Final = 16384


def _blend(target: Array, condition: Array, a: Array, b: Array) -> None:
    """``target = condition ? a : b`` on the raw bits: exact, and free of masked-copy branches.

    ``a`` and ``b`` hold ``target``'s dtype; all three broadcast to ``target``'s shape. A masked
    ``np.copyto`` mispredicts on random conditions (about 10 ns an element); here
    ``b ^ ((a ^ b) & mask)`` with an all-ones mask where the condition holds costs a few passes.
    """
    bits = _BITS.get(target.itemsize)
    if bits is None:  # complex128: no 16-byte integer; the masked copy is exact too
        np.copyto(target, b, casting="unsafe")
        np.copyto(target, a, casting="unsafe", where=condition)
        return
    shape = target.shape
    out = target.view(bits)
    # broadcast_to is a Python-level NumPy function (microseconds): only for operands that need it.
    left = (a if a.shape == shape else np.broadcast_to(a, shape)).view(bits)
    right = (b if b.shape == shape else np.broadcast_to(b, shape)).view(bits)
    mask = np.empty(shape, bits)
    np.copyto(mask, condition, casting="unsafe")
    np.negative(mask, out=mask)  # 1 -> all ones (unsigned wrap), 0 -> 0
    np.bitwise_xor(left, right, out=out)
    np.bitwise_and(out, mask, out=out)
    np.bitwise_xor(out, right, out=out)


def select(plan: cv.OperationPlan, options: Any, condition: Any, a: Any, b: Any) -> Array:
    """``condition ? a : b``, each element copied bit for bit from the branch it selects."""
    out_dtype = plan.outputs[0].numpy
    cond = _operand(condition, cv.bool)
    x = _operand(a, plan.operands[1].convert_to)
    y = _operand(b, plan.operands[2].convert_to)
    x = x if x.dtype == out_dtype else x.astype(out_dtype)
    y = y if y.dtype == out_dtype else y.astype(out_dtype)
    shape, size = _shape_of(plan, cond, x, y)
    out = rt.empty(shape, out_dtype, size)
    if size >= rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE:
        rt.chunked(_blend, out, (cond, x, y))
    elif size < _BLEND_MIN:
        # np.where copies each element's bytes as they are (NaN payloads, -0.0) in one call;
        # below this size that and a copy beat the blend's five passes.
        np.copyto(out, np.where(cond, x, y))
    else:
        _blend(out, cond, x, y)
    return out


def clamp(plan: cv.OperationPlan, options: Any, x: Any, lo: Any, hi: Any) -> Array:
    """``minimum(maximum(x, lo), hi)`` with absent bounds skipped (``lo > hi`` gives ``hi``)."""
    compute, work = plan.compute.numpy, work_dtype(plan.compute)
    x = _to_compute(x, compute, work)
    low = _to_compute(_operand(lo, plan.operands[1].convert_to), compute, work)
    high = _to_compute(_operand(hi, plan.operands[2].convert_to), compute, work)
    shape, size = _shape_of(plan, x, low, high)
    out_dtype = plan.outputs[0].numpy
    out = rt.empty(shape, out_dtype, size)
    call_max = _ufunc_call(np.maximum, work, out_dtype, 2)
    call_min = _ufunc_call(np.minimum, work, out_dtype, 2)
    operands = [v for v in (x, low, high) if v is not None]

    def fill(target: Array, *values: Array) -> None:
        value, rest = values[0], list(values[1:])
        if low is not None:
            call_max(target, value, rest.pop(0))
            value = target
        if high is not None:
            call_min(target, value, rest.pop(0))
        elif low is None:
            np.copyto(target, value, casting="unsafe")

    if size >= rt.PARALLEL_MIN * rt.MEMORY_BOUND_SCALE:
        rt.chunked(fill, out, operands)
    else:
        fill(out, *operands)
    return out


ELEMENTWISE_KERNELS: dict[str, Callable[..., Array]] = {
    **{name: _binary(name) for name in _BINARY},
    **{name: _unary(name) for name in _UNARY},
    "rsqrt": rsqrt,
    **{name: _activation(name) for name in act.ACTIVATIONS},
    "select": select,
    "clamp": clamp,
}
"""Elementwise names -> kernel(plan, options, *operands) returning a fresh aligned array."""
