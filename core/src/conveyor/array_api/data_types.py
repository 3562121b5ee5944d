"""Array API data type functions: casting, promotion, and dtype limits and kinds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from conveyor.engine.tensor import Tensor
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

if TYPE_CHECKING:
    pass

__all__ = ["astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]


def astype(x: Tensor, dtype: DType, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """``x`` converted to ``dtype`` (and moved to ``device``); ``x`` itself when nothing changes
    and ``copy`` is false."""
    moved = x if device is None else x.to(device)
    if dtype is moved.dtype:
        return moved if (not copy or moved is not x) else x.clone()
    return moved.astype(dtype)


def result_type(*arrays_and_dtypes: Any) -> DType:
    """The promoted dtype of the operands (Python scalars are weak and follow the others)."""
    found = [a.dtype if isinstance(a, Tensor) else a for a in arrays_and_dtypes]
    typed = [d for d in found if isinstance(d, DType)]
    if not typed:
        msg = "result_type: needs at least one array or dtype"
        raise ValueError(msg)
    result = typed[0]
    for d in typed[1:]:
        result = dtypes.promote_types(result, d)
    for value in found:
        if isinstance(value, bool) and not result.is_bool:
            continue
        if isinstance(value, complex) and not result.is_complex:
            result = dtypes.complex128 if result is dtypes.float64 else dtypes.complex64
        elif isinstance(value, float) and not (result.is_floating or result.is_complex):
            result = dtypes.default_float
    return result


# The standard's promotion table joins integers with integers and floats with floats or
# complex; bool and the cross-kind pairs Conveyor promotes as NumPy does are outside it.
_FAMILY = {
    "bool": "bool",
    "signed_integer": "integer",
    "unsigned_integer": "integer",
    "floating": "inexact",
    "complex_floating": "inexact",
}


def can_cast(from_: DType | Tensor, to: DType, /) -> bool:
    """Whether the standard's promotion table takes ``from_`` to ``to``."""
    source = from_.dtype if isinstance(from_, Tensor) else from_
    if _FAMILY[source.kind] != _FAMILY[to.kind]:
        return False
    try:
        return dtypes.promote_types(source, to) is to
    except TypeError:
        return False


class finfo_object(NamedTuple):  # the standard's name
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


class iinfo_object(NamedTuple):  # the standard's name
    bits: int
    max: int
    min: int
    dtype: DType


def finfo(type: DType | Tensor, /) -> finfo_object:  # the standard's name
    """Limits of a floating (or complex: of its real part) dtype."""
    import numpy as np

    dtype = type.dtype if isinstance(type, Tensor) else type
    info = np.finfo(dtype.numpy)
    # The standard describes a complex dtype by its real part, dtype included (complex64 ->
    # float32); NumPy's finfo reports the same bits and limits.
    real = {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(dtype, dtype)
    return finfo_object(
        int(info.bits),
        float(info.eps),
        float(info.max),
        float(info.min),
        float(info.smallest_normal),
        real,
    )


def iinfo(type: DType | Tensor, /) -> iinfo_object:  # the standard's name
    """Limits of an integer dtype."""
    import numpy as np

    dtype = type.dtype if isinstance(type, Tensor) else type
    info = np.iinfo(dtype.numpy)
    return iinfo_object(int(info.bits), int(info.max), int(info.min), dtype)


_KINDS = {
    "bool": ("bool",),
    "signed integer": ("signed_integer",),
    "unsigned integer": ("unsigned_integer",),
    "integral": ("signed_integer", "unsigned_integer"),
    "real floating": ("floating",),
    "complex floating": ("complex_floating",),
    "numeric": ("signed_integer", "unsigned_integer", "floating", "complex_floating"),
}


def isdtype(dtype: DType, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind`` (a dtype, a kind name, or a tuple of them)."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype is kind
    if kind not in _KINDS:
        msg = f"isdtype: unknown kind {kind!r}; use one of {sorted(_KINDS)}"
        raise ValueError(msg)
    return dtype.kind in _KINDS[kind]
