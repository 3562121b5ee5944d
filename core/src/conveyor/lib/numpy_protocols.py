"""NumPy's dispatch protocols (NEP 13 ``__array_ufunc__``, NEP 18 ``__array_function__``).

A NumPy call on a tensor runs the Conveyor function of the same meaning on the tensor's own
carrier and returns a Tensor; ndarray operands are copied onto that carrier first. A NumPy
function or ufunc method with no Conveyor equivalent (``np.median``, ``np.histogram``,
``np.add.reduce``, ...) runs in NumPy on host copies of the tensors, with a
``NumPyFallbackWarning`` that names it, and its array results are copied back onto the
tensor's carrier class: the computation left the carrier, so it is said, never silent. NumPy's
file writers (``np.save``, ``np.savez``, ``np.savetxt``) only read the values, as ``__array__``
does, and run without a warning. NumPy-only arguments such as ``out=`` are refused (NumPy
raises ``TypeError``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, ones_like, zeros_like
from conveyor.lib import composed as C
from conveyor.lib.composed import fourier
from conveyor.types.warnings import ConveyorWarning

__all__ = ["NumPyFallbackWarning", "handled_functions", "handled_ufuncs"]


class NumPyFallbackWarning(ConveyorWarning):
    """A NumPy function Conveyor has no equivalent for ran in NumPy on a host copy.

    Convert explicitly with ``np.asarray(tensor)`` to say that this is meant (and silence it),
    or filter this class.
    """

    __module__ = "conveyor"


def _greater(a: Any, b: Any) -> Tensor:
    return F.lt(b, a)


def _greater_equal(a: Any, b: Any) -> Tensor:
    return F.le(b, a)


@functools.cache
def handled_ufuncs() -> dict[Any, Callable[..., Any]]:
    """The NumPy ufuncs a tensor handles, with their Conveyor function (built on first use,
    so ``import conveyor`` does not import NumPy)."""
    import numpy as np

    return {
        np.absolute: F.abs,
        np.add: F.add,
        np.arccos: C.acos,
        np.arccosh: C.acosh,
        np.arcsin: C.asin,
        np.arcsinh: C.asinh,
        np.arctan: C.atan,
        np.arctan2: C.atan2,
        np.arctanh: C.atanh,
        np.bitwise_and: C.bitwise_and,
        np.bitwise_or: C.bitwise_or,
        np.bitwise_xor: C.bitwise_xor,
        np.ceil: F.ceil,
        np.conjugate: C.conj,
        np.copysign: C.copysign,
        np.cos: F.cos,
        np.cosh: C.cosh,
        np.divide: F.div,
        np.equal: F.eq,
        np.exp: F.exp,
        np.exp2: F.exp2,
        np.expm1: C.expm1,
        np.floor: F.floor,
        np.floor_divide: C.floor_divide,
        np.greater: _greater,
        np.greater_equal: _greater_equal,
        np.hypot: C.hypot,
        np.invert: lambda x: ~x,
        np.isfinite: C.isfinite,
        np.isinf: C.isinf,
        np.isnan: C.isnan,
        np.left_shift: C.bitwise_left_shift,
        np.less: F.lt,
        np.less_equal: F.le,
        np.log: F.log,
        np.log10: C.log10,
        np.log1p: C.log1p,
        np.log2: F.log2,
        np.logaddexp: C.logaddexp,
        np.logical_and: C.logical_and,
        np.logical_not: F.logical_not,
        np.logical_or: C.logical_or,
        np.logical_xor: C.logical_xor,
        np.matmul: F.matmul,
        np.maximum: F.maximum,
        np.minimum: F.minimum,
        np.multiply: F.mul,
        np.negative: F.neg,
        np.nextafter: C.nextafter,
        np.not_equal: F.ne,
        np.positive: C.positive,
        np.power: F.pow,
        np.reciprocal: F.recip,
        np.remainder: F.rem,
        np.right_shift: C.bitwise_right_shift,
        np.rint: F.round,
        np.sign: F.sign,
        np.signbit: C.signbit,
        np.sin: F.sin,
        np.sinh: C.sinh,
        np.sqrt: F.sqrt,
        np.square: C.square,
        np.subtract: F.sub,
        np.tan: C.tan,
        np.tanh: F.tanh,
        np.trunc: C.trunc,
    }


def array_ufunc(
    tensor: Tensor, ufunc: Any, method: str, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    function = handled_ufuncs().get(ufunc)
    if kwargs.get("out") is not None:
        return NotImplemented  # NumPy would write into the caller's array: refused
    if function is None or method != "__call__":
        name = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        return _on_host(tensor, name, getattr(ufunc, method), inputs, kwargs)
    if any(v is not None for v in kwargs.values()):
        return NotImplemented  # where=, dtype=, ...: NumPy-only arguments of a call
    operands = [tensor._operand(x) for x in inputs]
    if not all(isinstance(x, Tensor | bool | int | float | complex) for x in operands):
        return NotImplemented
    return function(*operands)


# -- NumPy functions: adapters with NumPy's parameter names -----------------------------------


def _sum(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.reduce_sum(a, axis=axis, keepdims=keepdims)


def _prod(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.reduce_prod(a, axis=axis, keepdims=keepdims)


def _max(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.reduce_max(a, axis=axis, keepdims=keepdims)


def _min(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.reduce_min(a, axis=axis, keepdims=keepdims)


def _mean(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return C.mean(a, axis=axis, keepdims=keepdims)


def _var(a: Tensor, axis: Any = None, ddof: float = 0, keepdims: bool = False) -> Tensor:
    return C.var(a, axis=axis, correction=ddof, keepdims=keepdims)


def _std(a: Tensor, axis: Any = None, ddof: float = 0, keepdims: bool = False) -> Tensor:
    return C.std(a, axis=axis, correction=ddof, keepdims=keepdims)


def _any(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return C.any(a, axis=axis, keepdims=keepdims)


def _all(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return C.all(a, axis=axis, keepdims=keepdims)


def _argmax(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.argmax(a, axis=axis, keepdims=keepdims)


def _argmin(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return F.argmin(a, axis=axis, keepdims=keepdims)


def _cumsum(a: Tensor, axis: Any = None) -> Tensor:
    return F.cumsum(a, axis=axis)


def _sort(a: Tensor, axis: int = -1) -> Tensor:
    return C.sort(a, axis=axis)


def _argsort(a: Tensor, axis: int = -1, kind: Any = None) -> Tensor:
    return C.argsort(a, axis=axis)


def _concatenate(arrays: Any, axis: Any = 0) -> Tensor:
    return C.concatenate(arrays, axis=axis)


def _stack(arrays: Any, axis: int = 0) -> Tensor:
    return C.stack(arrays, axis=axis)


def _split(ary: Tensor, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    return C.split(ary, indices_or_sections, axis=axis)


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None and y is None:
        return C.nonzero(condition)
    return C.where(condition, x, y)


def _reshape(a: Tensor, shape: Any = None, newshape: Any = None) -> Tensor:
    target = shape if shape is not None else newshape
    return a.reshape(target)


def _transpose(a: Tensor, axes: Any = None) -> Tensor:
    return a.T if axes is None else a.permute(axes)


def _squeeze(a: Tensor, axis: Any = None) -> Tensor:
    return a.squeeze(axis)


def _expand_dims(a: Tensor, axis: Any) -> Tensor:
    return C.expand_dims(a, axis)


def _broadcast_to(array: Tensor, shape: Any) -> Tensor:
    return array.broadcast_to(shape)


def _flip(m: Tensor, axis: Any = None) -> Tensor:
    return C.flip(m, axis=axis)


def _roll(a: Tensor, shift: Any, axis: Any = None) -> Tensor:
    return C.roll(a, shift, axis=axis)


def _pad(array: Tensor, pad_width: Any, mode: str = "constant", constant_values: Any = 0) -> Any:
    if mode != "constant":
        return NotImplemented
    return C.pad(array, pad_width, value=constant_values)


def _tile(A: Tensor, reps: Any) -> Tensor:  # NumPy's parameter name
    return C.tile(A, reps)


def _repeat(a: Tensor, repeats: Any, axis: Any = None) -> Tensor:
    return C.repeat(a, repeats, axis=axis)


def _einsum(subscripts: str, *operands: Tensor) -> Tensor:
    return C.einsum(subscripts, *operands)


def _tensordot(a: Tensor, b: Tensor, axes: Any = 2) -> Tensor:
    return C.tensordot(a, b, axes=axes)


def _outer(a: Tensor, b: Tensor) -> Tensor:
    return C.outer(F.reshape(a, shape=(a.size,)), F.reshape(b, shape=(b.size,)))


def _dot(a: Tensor, b: Tensor) -> Any:
    if a.ndim > 2 or b.ndim > 2 or a.ndim == 0 or b.ndim == 0:
        return NotImplemented
    return F.matmul(a, b)


def _isclose(
    a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> Tensor:
    return C.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _allclose(
    a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False
) -> bool:
    return C.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _clip(a: Tensor, a_min: Any = None, a_max: Any = None) -> Tensor:
    return F.clamp(a, a_min, a_max)


def _round(a: Tensor, decimals: int = 0) -> Tensor:
    return round(a, decimals)


def _zeros_like(a: Tensor) -> Tensor:
    return zeros_like(a)


def _ones_like(a: Tensor) -> Tensor:
    return ones_like(a)


def _full_like(a: Tensor, fill_value: Any) -> Tensor:
    return C.full_like(a, fill_value)


def _empty_like(prototype: Tensor) -> Tensor:
    return C.empty_like(prototype)


def _moveaxis(a: Tensor, source: Any, destination: Any) -> Tensor:
    return C.moveaxis(a, source, destination)


def _take(a: Tensor, indices: Any, axis: Any = None) -> Tensor:
    return C.take(a, indices, axis=axis)


def _nonzero(a: Tensor) -> tuple[Tensor, ...]:
    return C.nonzero(a)


def _diff(a: Tensor, n: int = 1, axis: int = -1) -> Tensor:
    return C.diff(a, n=n, axis=axis)


def _searchsorted(a: Tensor, v: Any, side: str = "left", sorter: Any = None) -> Tensor:
    return C.searchsorted(a, v, side=side, sorter=sorter)


def _cumprod(a: Tensor, axis: Any = None) -> Tensor:
    if axis is None:
        a, axis = F.reshape(a, shape=(a.size,)), 0
    return C.cumulative_prod(a, axis=axis)


def _tril(m: Tensor, k: int = 0) -> Tensor:
    return C.tril(m, k=k)


def _triu(m: Tensor, k: int = 0) -> Tensor:
    return C.triu(m, k=k)


def _count_nonzero(a: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return C.count_nonzero(a, axis=axis, keepdims=keepdims)


def _real(val: Tensor) -> Tensor:
    return C.real(val)


def _imag(val: Tensor) -> Tensor:
    return C.imag(val)


def _unique(ar: Tensor) -> Tensor:
    return C.unique_values(ar)


def _fourier(name: str) -> Callable[..., Tensor]:
    """An adapter for ``numpy.fft.<name>(a, n, axis, norm)`` (``norm=None`` is "backward")."""
    function = getattr(fourier, name)

    def adapter(a: Tensor, n: Any = None, axis: int = -1, norm: str | None = None) -> Tensor:
        return function(a, n=n, axis=axis, norm=norm or "backward")  # type: ignore[no-any-return]

    return adapter


def _fourier_n(name: str) -> Callable[..., Tensor]:
    """An adapter for ``numpy.fft.<name>(a, s, axes, norm)``."""
    function = getattr(fourier, name)

    def adapter(a: Tensor, s: Any = None, axes: Any = None, norm: str | None = None) -> Tensor:
        return function(a, s=s, axes=axes, norm=norm or "backward")  # type: ignore[no-any-return]

    return adapter


def _cholesky(a: Tensor, upper: bool = False) -> Tensor:
    return C.cholesky(a, upper=upper)


@functools.cache
def handled_functions() -> dict[Any, Callable[..., Any]]:
    """The NumPy functions a tensor handles, with adapters taking NumPy's parameter names."""
    import numpy as np

    return {
        np.all: _all,
        np.allclose: _allclose,
        np.amax: _max,
        np.amin: _min,
        np.any: _any,
        np.argmax: _argmax,
        np.argmin: _argmin,
        np.argsort: _argsort,
        np.around: _round,
        np.broadcast_to: _broadcast_to,
        np.clip: _clip,
        np.concatenate: _concatenate,
        np.count_nonzero: _count_nonzero,
        np.cumprod: _cumprod,
        np.cumsum: _cumsum,
        np.diff: _diff,
        np.dot: _dot,
        np.einsum: _einsum,
        np.empty_like: _empty_like,
        np.expand_dims: _expand_dims,
        np.flip: _flip,
        np.full_like: _full_like,
        np.imag: _imag,
        np.isclose: _isclose,
        np.max: _max,
        np.mean: _mean,
        np.min: _min,
        np.moveaxis: _moveaxis,
        np.nonzero: _nonzero,
        np.ones_like: _ones_like,
        np.outer: _outer,
        np.pad: _pad,
        np.prod: _prod,
        np.real: _real,
        np.repeat: _repeat,
        np.reshape: _reshape,
        np.roll: _roll,
        np.round: _round,
        np.searchsorted: _searchsorted,
        np.sort: _sort,
        np.split: _split,
        np.squeeze: _squeeze,
        np.stack: _stack,
        np.std: _std,
        np.sum: _sum,
        np.take: _take,
        np.tensordot: _tensordot,
        np.tile: _tile,
        np.transpose: _transpose,
        np.tril: _tril,
        np.triu: _triu,
        np.unique: _unique,
        np.var: _var,
        np.where: _where,
        np.zeros_like: _zeros_like,
        np.fft.fft: _fourier("fft"),
        np.fft.ifft: _fourier("ifft"),
        np.fft.rfft: _fourier("rfft"),
        np.fft.irfft: _fourier("irfft"),
        np.fft.hfft: _fourier("hfft"),
        np.fft.ihfft: _fourier("ihfft"),
        np.fft.fftn: _fourier_n("fftn"),
        np.fft.ifftn: _fourier_n("ifftn"),
        np.fft.rfftn: _fourier_n("rfftn"),
        np.fft.irfftn: _fourier_n("irfftn"),
        np.linalg.cholesky: _cholesky,
        np.linalg.det: C.det,
        np.linalg.inv: C.inv,
        np.linalg.slogdet: C.slogdet,
        np.linalg.solve: C.solve,
        np.linalg.qr: C.qr,
    }


def array_function(
    tensor: Tensor, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    import numpy as np

    if not all(issubclass(t, Tensor | np.ndarray) for t in types):
        return NotImplemented
    adapter = handled_functions().get(func)
    if adapter is None:
        if func.__module__ == "numpy" and func.__name__ in _WRITERS:
            return func(*_host(args), **_host(kwargs))
        name = f"{func.__module__.replace('numpy', 'np', 1)}.{func.__name__}"
        return _on_host(tensor, name, func, args, kwargs)
    try:
        bound = inspect.signature(adapter).bind(*args, **kwargs)
    except TypeError:
        return NotImplemented  # a NumPy-only argument (out=, dtype=, ...)
    converted = [_convert(tensor, v) for v in bound.args]
    return adapter(*converted, **{k: _convert(tensor, v) for k, v in bound.kwargs.items()})


# NumPy's file writers, by name (NumPy is not imported with Conveyor): they only read values.
_WRITERS = frozenset({"save", "savez", "savez_compressed", "savetxt"})


def _host(value: Any) -> Any:
    """Tensors (also inside lists, tuples and dicts) as host ndarrays."""
    import numpy as np

    if isinstance(value, Tensor):
        return np.asarray(value)
    if isinstance(value, list | tuple):
        return type(value)(_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    return value


def _on_host(tensor: Tensor, name: str, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``func`` run by NumPy on host copies, with a warning; arrays come back as tensors."""
    import warnings

    import numpy as np

    carrier = type(tensor.carrier).__name__
    msg = (
        f"{name} on {carrier}: Conveyor has no equivalent, so NumPy computed it on a host copy "
        f"and the result was copied back onto {carrier}; call it on np.asarray(tensor) to "
        f"make the conversion explicit (and silence this warning)"
    )
    warnings.warn(NumPyFallbackWarning(msg), stacklevel=4)
    result = func(*_host(args), **_host(kwargs))

    def back(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return tensor._operand(value)
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(back(v) for v in value)
        return value

    return back(result)


def _convert(tensor: Tensor, value: Any) -> Any:
    """ndarrays (also inside a list or tuple of operands) copied onto the tensor's carrier."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return tensor._operand(value)
    if isinstance(value, list | tuple) and any(isinstance(v, np.ndarray | Tensor) for v in value):
        return type(value)(_convert(tensor, v) for v in value)
    return value
