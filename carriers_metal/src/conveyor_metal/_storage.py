"""Torch-buffer storage: one private, flat 1-D torch tensor per carrier, moved in bulk.

Metal keeps its slots in one 1-D ``torch`` tensor on the ``mps`` device: torch allocates the
``MTLBuffer`` and ``torch.mps.compile_shader`` launches kernels on it, so the tensor is the
allocation boundary. Every bulk transfer is one tensor copy (a span is gathered on the device
with ``as_strided`` and copied once), never a loop over elements. The device is a class
attribute so the Linux checks can run exactly this code on a CPU tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

import conveyor as cv

if TYPE_CHECKING:
    import torch

__all__ = ["TorchStorage", "torch_dtype"]

# The dtypes an MPS buffer can hold, by name.
# float64 and complex are absent: Metal has no double precision.
METAL_DTYPE_NAMES: frozenset[str] = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32")
)
"""The dtypes a Metal buffer holds; torch and TileLang spell each one as conveyor does."""


def torch_dtype(dtype: cv.DType) -> torch.dtype | None:
    """The torch dtype storing ``dtype``, or ``None`` where a Metal buffer cannot hold it."""
    import torch

    name = dtype.name
    stored: torch.dtype | None = getattr(torch, name) if name in METAL_DTYPE_NAMES else None
    return stored


def _numpy(values: torch.Tensor, dtype: cv.DType) -> np.ndarray[Any, Any]:
    """A host NumPy copy of ``values`` in ``dtype`` (bfloat16 travels through its bit pattern)."""
    import torch

    host = values.detach().to("cpu")
    if dtype.name == "bfloat16":
        host = host.view(torch.int16)
    array: np.ndarray[Any, Any] = host.numpy()
    return array.view(dtype.numpy) if dtype.name == "bfloat16" else array


def _tensor(values: np.ndarray[Any, Any], dtype: cv.DType) -> torch.Tensor:
    """A host torch tensor of ``values`` in ``dtype`` (one conversion, no element loop)."""
    import torch

    array = np.ascontiguousarray(values, dtype=dtype.numpy)
    if dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class TorchStorage(cv.Carrier):
    """Storage hooks over one flat torch tensor on ``_device`` (private base of ``Metal``)."""

    _device: ClassVar[str] = "mps"
    _buffer: torch.Tensor
    _dt: cv.DType

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Self:
        if kwargs:
            msg = (
                f"allocate on {cls.__name__}: unexpected argument(s) "
                f"{', '.join(sorted(kwargs))}; pass only size and dtype"
            )
            raise TypeError(msg)
        stored = torch_dtype(dtype)
        if stored is None:
            msg = (
                f"allocate on {cls.__name__}: {dtype.name} cannot be stored in a Metal buffer "
                f"(no double precision or complex on the GPU); cast to float32 or use 'cpu'"
            )
            raise TypeError(msg)
        import torch

        return cls._from_buffer(torch.zeros(size, dtype=stored, device=cls._device), dtype)

    @classmethod
    def _from_buffer(cls, buffer: torch.Tensor, dtype: cv.DType) -> Self:
        # Skips Carrier.__init__ on purpose: the class defaults (version 0, not released) apply.
        carrier = object.__new__(cls)
        carrier._buffer = buffer
        carrier._dt = dtype
        return carrier

    def strided(self, layout: cv.Layout) -> torch.Tensor:
        """The slots under ``layout`` as a torch view of the buffer (no copy)."""
        return self._buffer.as_strided(layout.shape, layout.strides, layout.offset)

    def _storage_size(self) -> int:
        return int(self._buffer.numel())

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _read(self, index: int) -> Any:
        return _numpy(self._buffer[index : index + 1], self._dt)[0].item()

    def _write(self, index: int, value: Any) -> None:
        self._buffer[index : index + 1] = _tensor(np.asarray([value]), self._dt).to(self._device)

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        if layout.size == 0:
            return np.empty(layout.shape, self._dt.numpy)
        return _numpy(self.strided(layout).contiguous(), self._dt)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        if layout.size == 0:
            return
        self.strided(layout).copy_(_tensor(values, self._dt).reshape(layout.shape))

    def _release(self) -> None:
        # A fresh empty tensor, not a slice: a slice would keep the whole buffer alive.
        import torch

        self._buffer = torch.empty(0, dtype=self._buffer.dtype, device=self._device)
