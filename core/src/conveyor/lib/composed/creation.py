"""Composed creation: tensors built on the host and copied onto a carrier through its span import.

Creation has no operand to compute from, so these functions make the values with NumPy (as
``cv.arange`` does) and hand them to the carrier's public ``import_span``; every carrier with
storage can hold them. ``constant`` is the helper the other composed functions use to put a
literal (an index ladder, a fill value) on the carrier of the tensor they work on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conveyor.engine.tensor import (
    Tensor,
    _check_dtype,
    _from_array,
    _infer_dtype,
    _resolve_carrier,
    full,
    tensor,
)
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "asarray",
    "constant",
    "empty_like",
    "eye",
    "from_dlpack",
    "from_numpy",
    "full_like",
    "linspace",
    "meshgrid",
    "tril",
    "triu",
]


def constant(values: Any, dtype: DType, like: Tensor) -> Tensor:
    """``values`` as a ``dtype`` tensor on the carrier class of ``like``."""
    import numpy as np

    array = np.asarray(values, dtype=dtype.numpy)
    return _from_array(array, dtype, type(like.carrier))


def full_like(
    t: Tensor, fill_value: Any, dtype: DType | None = None, carrier: Any = None
) -> Tensor:
    """A tensor shaped like ``t`` filled with ``fill_value`` (``t``'s dtype and carrier class)."""
    return full(t.shape, fill_value, dtype or t.dtype, carrier or type(t.carrier))


def empty_like(t: Tensor, dtype: DType | None = None, carrier: Any = None) -> Tensor:
    """A tensor shaped like ``t``; storage is zero-filled, so its values are zeros."""
    return full_like(t, 0, dtype, carrier)


def linspace(
    start: float,
    stop: float,
    num: int,
    dtype: DType | None = None,
    carrier: Any = None,
    *,
    endpoint: bool = True,
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless ``endpoint``).

    Raises:
        ValueError: ``num`` is negative.
    """
    import numpy as np

    if not isinstance(num, int) or num < 0:
        msg = f"linspace: num must be a non-negative int, got {num!r}"
        raise ValueError(msg)
    complex_input = isinstance(start, complex) or isinstance(stop, complex)
    default = dtypes.complex64 if complex_input else dtypes.default_float
    target = _check_dtype(dtype) if dtype is not None else default
    values = np.linspace(
        start, stop, num, endpoint=endpoint, dtype=np.complex128 if complex_input else np.float64
    )
    return _from_array(values.astype(target.numpy), target, _resolve_carrier(carrier))


def eye(
    n_rows: int,
    n_cols: int | None = None,
    k: int = 0,
    dtype: DType | None = None,
    carrier: Any = None,
) -> Tensor:
    """A 2-D tensor with ones on diagonal ``k`` and zeros elsewhere (``float32`` by default)."""
    import numpy as np

    target = _check_dtype(dtype) if dtype is not None else dtypes.default_float
    values = np.eye(n_rows, n_cols, k, dtype=target.numpy)
    return _from_array(values, target, _resolve_carrier(carrier))


def _triangle(x: Tensor, k: int, upper: bool) -> Tensor:
    import numpy as np

    from conveyor.engine import functional as F

    if x.ndim < 2:
        msg = f"{'triu' if upper else 'tril'}: needs at least 2 axes, got shape {x.shape}"
        raise ValueError(msg)
    rows, cols = x.shape[-2:]
    keep = (
        np.triu(np.ones((rows, cols), bool), k)
        if upper
        else np.tril(np.ones((rows, cols), bool), k)
    )
    zero = 0 if not x.dtype.is_bool else False
    return F.select(constant(keep, dtypes.bool_, x), x, zero)


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    """``x`` with the elements above diagonal ``k`` of its last two axes set to zero."""
    return _triangle(x, k, upper=False)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    """``x`` with the elements below diagonal ``k`` of its last two axes set to zero."""
    return _triangle(x, k, upper=True)


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate tensors from 1-D tensors, as ``numpy.meshgrid`` (broadcast views, no copy)."""
    from conveyor.engine import functional as F

    if indexing not in ("xy", "ij"):
        msg = f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}"
        raise ValueError(msg)
    sizes = [a.size for a in arrays]
    if indexing == "xy" and len(arrays) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and len(arrays) >= 2 and i < 2:
            axis = 1 - i
        shape = [1] * len(arrays)
        shape[axis] = a.size
        out.append(F.broadcast_to(F.reshape(a, shape=tuple(shape)), shape=tuple(sizes)))
    return out


def asarray(
    obj: Any, /, *, dtype: DType | None = None, carrier: Any = None, copy: bool | None = None
) -> Tensor:
    """``obj`` as a tensor: a tensor already of that dtype and carrier is returned as is.

    Raises:
        ValueError: ``copy=False`` but a copy is needed (another dtype or carrier, or data that
            is not already a tensor).
    """
    import numpy as np

    target = _check_dtype(dtype) if dtype is not None else None
    if isinstance(obj, Tensor):
        same_dtype = target is None or target is obj.dtype
        same_carrier = carrier is None or _resolve_carrier(carrier) is type(obj.carrier)
        if same_dtype and same_carrier and not copy:
            return obj
        if copy is False:
            msg = "asarray: copy=False, but a different dtype or carrier needs a copy"
            raise ValueError(msg)
        moved = obj if carrier is None else obj.to(carrier)
        result = moved if target is None or target is moved.dtype else moved.astype(target)
        return result.clone() if result is obj else result
    if copy is False:
        msg = f"asarray: copy=False, but {type(obj).__name__} data must be copied into a carrier"
        raise ValueError(msg)
    if isinstance(obj, (list, tuple)) and any(isinstance(v, Tensor) for v in obj):
        obj = [v.numpy() if isinstance(v, Tensor) else v for v in obj]
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        obj = np.from_dlpack(obj)
    return tensor(obj, target, carrier)


def from_numpy(array: np.ndarray[Any, Any], carrier: Any = None) -> Tensor:
    """A copy of ``array`` on ``carrier`` keeping NumPy's dtype (``float64`` stays ``float64``)."""
    import numpy as np

    if not isinstance(array, np.ndarray):
        msg = f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}"
        raise TypeError(msg)
    return _from_array(
        np.ascontiguousarray(array), _infer_dtype(array, array), _resolve_carrier(carrier)
    )


def from_dlpack(x: Any, /, *, carrier: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor from any DLPack producer with CPU-addressable memory (copied onto ``carrier``).

    Raises:
        TypeError: ``x`` is not a DLPack producer (it has no ``__dlpack__``).
        BufferError: ``copy=False`` (carriers own their storage, so the data is always copied;
            ``conveyor_generic.cpu.from_dlpack`` shares a producer's memory on CPU).
    """
    import numpy as np

    if not hasattr(x, "__dlpack__"):
        msg = (
            f"from_dlpack: {type(x).__name__} is not a DLPack producer (it has no __dlpack__); "
            f"pass a NumPy array, a PyTorch CPU tensor or another DLPack exporter, or build "
            f"the tensor from Python data with cv.tensor(...)"
        )
        raise TypeError(msg)
    if copy is False:
        msg = (
            "from_dlpack: copy=False, but carriers own their storage, so the data is always "
            "copied; pass copy=None, or use conveyor_generic.cpu.from_dlpack to share memory"
        )
        raise BufferError(msg)
    return from_numpy(np.from_dlpack(x), carrier)
