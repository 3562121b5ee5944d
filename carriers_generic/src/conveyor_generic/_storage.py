"""NumPy-array storage shared by Generic and CPU: one flat, 64-byte aligned buffer per carrier.

Both shipped carriers keep their slots in a flat NumPy array, so storage access, views and
results wrapping live here once. The class is a private implementation base: the public,
closed carriers are ``Generic`` and ``CPU``, and dispatch metadata always names the exact one.
"""

from __future__ import annotations

import ctypes
from typing import Any, Self

import numpy as np

import conveyor as cv
from conveyor.sdk import Tensor, publish

__all__ = ["ArrayStorage", "aligned_empty", "buffer_address", "strided_view"]

_ALIGN = 64


def aligned_empty(
    size: int, np_dtype: np.dtype[Any], *, zero: bool = False
) -> np.ndarray[Any, Any]:
    """A flat array of ``size`` items whose data starts on a 64-byte boundary (cache line)."""
    nbytes = size * np_dtype.itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + _ALIGN, np.uint8)
    start = (-buffer_address(raw)) % _ALIGN
    return raw[start : start + nbytes].view(np_dtype)


def buffer_address(raw: np.ndarray[Any, Any]) -> int:
    """The address of a writable array's first byte.

    A third of the cost of ``raw.ctypes.data`` or ``__array_interface__`` (both build Python
    objects on every call), and every allocation asks for it.
    """
    buffer = ctypes.c_char.from_buffer(raw)  # type: ignore[arg-type]  # ndarray is a buffer
    return ctypes.addressof(buffer)


# (element strides, item size) -> byte strides: a generator per strided read costs more than
# the lookup, and backward reads the same broadcast layouts over and over.
_BYTE_STRIDES: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}
_BYTE_STRIDES_MAX = 4096


def strided_view(flat: np.ndarray[Any, Any], layout: cv.Layout) -> np.ndarray[Any, Any]:
    """The elements of ``flat`` under ``layout`` as a NumPy view (no copy)."""
    if layout.is_contiguous:
        return flat[layout.offset : layout.offset + layout.size].reshape(layout.shape)
    item = flat.itemsize
    key = (layout.strides, item)
    strides = _BYTE_STRIDES.get(key)
    if strides is None:
        if len(_BYTE_STRIDES) >= _BYTE_STRIDES_MAX:
            _BYTE_STRIDES.clear()
        strides = _BYTE_STRIDES[key] = tuple(s * item for s in layout.strides)
    return np.ndarray(
        layout.shape, flat.dtype, buffer=flat, offset=layout.offset * item, strides=strides
    )


class ArrayStorage(cv.Carrier):
    """Storage hooks over one flat NumPy array (private base of Generic and CPU)."""

    _array: np.ndarray[Any, Any]
    _dt: cv.DType
    # (buffer, read-only alias of it) behind exports: a tuple, replaced atomically.
    _read_only: tuple[np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None] = (None, None)

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Self:
        if kwargs:
            msg = f"allocate on {cls.__name__}: unexpected argument(s) {', '.join(sorted(kwargs))}"
            raise TypeError(msg)
        return cls._from_flat(aligned_empty(size, dtype.numpy, zero=True), dtype)

    @classmethod
    def _from_flat(cls, flat: np.ndarray[Any, Any], dtype: cv.DType) -> Self:
        # Skips Carrier.__init__ on purpose: the class defaults (version 0, not released) apply.
        carrier = object.__new__(cls)
        carrier._array = flat
        carrier._dt = dtype
        return carrier

    @classmethod
    def wrap(cls, values: np.ndarray[Any, Any], dtype: cv.DType) -> Tensor:
        """A result tensor owning ``values`` (converted to ``dtype`` only if it differs)."""
        if values.dtype != dtype.numpy:
            values = values.astype(dtype.numpy)
        shape = values.shape
        flat = values.reshape(-1) if values.flags.c_contiguous else values.ravel()
        return publish(cls, {"_array": flat, "_dt": dtype}, cv.Layout.contiguous(shape), dtype)

    def view(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        """Read-only NumPy view of the slots under ``layout`` (kernels read inputs this way)."""
        out = strided_view(self._array, layout)
        out.flags.writeable = False
        return out

    def _storage_size(self) -> int:
        return int(self._array.size)

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _read(self, index: int) -> Any:
        return self._array[index].item()

    def _write(self, index: int, value: Any) -> None:
        self._array[index] = value

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        """A view over a read-only alias of the buffer (zero copy).

        NumPy refuses ``flags.writeable = True`` on such a view, so no write through an export
        can bypass the version counter that guards what autograd saved for backward.
        """
        flat, alias = self._read_only
        if flat is not self._array or alias is None:
            flat = self._array
            alias = np.frombuffer(flat.view(np.uint8).data.toreadonly(), flat.dtype)
            self._read_only = (flat, alias)
        return strided_view(alias, layout)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        strided_view(self._array, layout)[...] = values

    def _release(self) -> None:
        self._read_only = (None, None)  # the alias would keep the buffer alive
        # A fresh empty array, not a slice: a slice would keep the whole buffer alive.
        self._array = np.empty(0, self._array.dtype)
