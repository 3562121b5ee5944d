"""BlockDeviceCarrier: storage-only slots on one extent of a ``BlockDevice``.

The carrier owns no descriptor: every transfer goes through its device, which reads and writes
whole aligned blocks (see ``block_device``). Construct it only through ``BlockDevice.allocate``;
``release`` hands the extent back to the device's free list and never fails, even on a faulted
or closed device.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, final

import numpy as np

import conveyor as cv
from conveyor.sdk import CONCRETE_DTYPES, storage_only_refusal, view_operations
from conveyor_storage._spans import storage_numpy, strided

if TYPE_CHECKING:
    from conveyor_storage.block_device import BlockDevice

__all__ = ["BlockDeviceCarrier"]


@final
@cv.closed_carrier
class BlockDeviceCarrier(cv.Carrier):
    """Storage only: ``size`` slots of one dtype on one extent of a ``BlockDevice``.

    Obtain one from ``device.allocate(size, dtype)``; every computational dispatch name raises
    ``NotImplementedError`` (move to a compute carrier with ``cv.move``).
    """

    #: Every concrete dtype is stored as its raw little-endian bytes.
    storable_dtypes: ClassVar[frozenset[cv.DType]] = frozenset(CONCRETE_DTYPES)

    _device: BlockDevice
    _start: int
    _length: int
    _size: int
    _dt: cv.DType
    _np: np.dtype[Any]

    def __init__(self, *args: object, **kwargs: object) -> None:
        msg = (
            "BlockDeviceCarrier cannot be constructed directly; allocate it from its device "
            "with BlockDevice(path).allocate(size, dtype)"
        )
        raise TypeError(msg)

    @classmethod
    def _on(
        cls, device: BlockDevice, start: int, length: int, size: int, dtype: cv.DType
    ) -> BlockDeviceCarrier:
        carrier = object.__new__(cls)
        cv.Carrier.__init__(carrier)
        carrier._device, carrier._start, carrier._length = device, start, length
        carrier._size, carrier._dt, carrier._np = size, dtype, storage_numpy(dtype)
        return carrier

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, device: object = None, **kwargs: Any) -> Self:
        from conveyor_storage.block_device import BlockDevice  # that module imports this one

        if kwargs or not isinstance(device, BlockDevice):
            msg = (
                f"allocate on BlockDeviceCarrier: pass device=BlockDevice(path) (got "
                f"{device!r}), or call BlockDevice(path).allocate(size, dtype)"
            )
            raise TypeError(msg)
        return device.allocate(size, dtype)

    @classmethod
    def _allocate_for_overwrite(
        cls, size: int, dtype: cv.DType, device: object = None, **kwargs: Any
    ) -> BlockDeviceCarrier:
        """Like ``allocate`` but not zeroed: only for a caller that writes every slot next."""
        from conveyor_storage.block_device import BlockDevice  # that module imports this one

        if kwargs or not isinstance(device, BlockDevice):
            return cls.allocate(size, dtype, device=device, **kwargs)  # raises the usual error
        return device._allocate(size, dtype, zero=False)

    def _pickle_refusal(self) -> str:
        return (
            "a BlockDeviceCarrier is an extent of a device this process holds open; pickle "
            "cv.move(tensor, 'cpu') instead, or reopen the image in the other process with "
            "BlockDevice(path)"
        )

    def allocate_like(self, size: int, dtype: cv.DType) -> BlockDeviceCarrier:
        """A new zero-filled carrier on the same device."""
        return self._device.allocate(size, dtype)

    def _allocate_like_for_overwrite(self, size: int, dtype: cv.DType) -> BlockDeviceCarrier:
        """``allocate_like`` without zeroing, for a caller that writes every slot next."""
        return self._device._allocate(size, dtype, zero=False)

    def _read_chunks(self, start: int, count: int) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
        """``(first slot, values)`` covering ``count`` slots from ``start``, streamed through
        one reused aligned buffer (each array is valid until the next step)."""
        item = self._dt.itemsize
        low = self._start + start * item
        for at, data in self._device._stream(low, low + count * item):
            yield (at - self._start) // item, data.view(self._np)

    @property
    def device(self) -> BlockDevice:
        return self._device

    @property
    def offset(self) -> int:
        """The byte offset of the extent in the device's data area."""
        return self._start

    def flush(self) -> None:
        """Make every write so far durable (``fsync`` of the device)."""
        self._check_alive("flush")
        self._device.flush()

    # -- storage hooks ------------------------------------------------------------------------

    def _storage_size(self) -> int:
        return self._size

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _read(self, index: int) -> Any:
        return self._export(cv.Layout((), (), index)).item()

    def _write(self, index: int, value: Any) -> None:
        values = np.zeros(1, self._np)
        values[0] = value
        self._import(cv.Layout((1,), None, index), values)

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        with self._device._io("export_span"):  # close() waits for this read
            if layout.size == 0:
                return np.zeros(layout.shape, self._np)
            return self._export_held(layout)

    def _export_held(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        low, high = layout.span()
        item = self._dt.itemsize
        buffer, head = self._device._read_blocks(self._start + low * item, (high - low) * item)
        flat = buffer[head : head + (high - low) * item].view(self._np)
        return strided(flat, layout, low, writeable=layout.is_contiguous)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        with self._device._io("import_span"):  # close() waits for this write
            if layout.size:
                try:
                    self._import_held(layout, values)
                except OSError:
                    # A refused write may have reached part of the span: the version moves,
                    # so a tensor saved for backward cannot see the change unnoticed.
                    self._mark_written()
                    raise

    def _import_held(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        device = self._device
        item = self._dt.itemsize
        if layout.is_contiguous:
            data = np.ascontiguousarray(values, dtype=self._np).reshape(-1)
            device._write_blocks(self._start + layout.offset * item, data.view(np.uint8).data)
            return
        low, high = layout.span()
        buffer, head = device._read_blocks(self._start + low * item, (high - low) * item)
        flat = buffer[head : head + (high - low) * item].view(self._np)
        strided(flat, layout, low, writeable=True)[...] = values
        device._pwrite_all(buffer.data, device._base + self._start + low * item - head)

    def _release(self) -> None:
        self._device._give(self._start, self._length)

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        view = _VIEWS.get(operation_name)
        if view is None:
            raise storage_only_refusal(
                operation_name,
                BlockDeviceCarrier,
                why="BlockDeviceCarrier is storage only",
                move_to="cpu",
            )
        return view()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (
            f"<BlockDeviceCarrier size={self._size} dtype={self._dt.name} offset={self._start} "
            f"on {self._device.path!r}{state}>"
        )


# Views are layout algebra over the same file; a copy no layout expresses goes into a sibling
# BlockDeviceCarrier (``allocate_like``) through the storage contract.
_VIEWS: Final = view_operations()
