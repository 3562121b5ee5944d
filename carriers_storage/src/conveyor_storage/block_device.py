"""BlockDevice: a block device or block image, the resource that allocates BlockDeviceCarriers.

``BlockDevice(path)`` opens a block-special device, or a regular-file image made by
``BlockDevice.create_image`` for development and CI. It is an allocator, not a carrier: each
``allocate`` places a ``BlockDeviceCarrier`` at the lowest free extent aligned to the physical
block size. All I/O is positional ``os.preadv`` / ``os.pwrite`` of whole logical blocks at
block-aligned offsets; a write that covers part of a block reads the block first
(read-modify-write), reads land in buffers aligned to the page, and short transfers are
retried. Every transfer runs inside the device's ``IOGuard``, so ``close()`` waits for transfers
in flight and refuses new ones before it closes the descriptor: no read returns, and no write
reaches, a file that reused the descriptor number. The first ``OSError`` from the device is
terminal: it is raised, the device is marked faulted, and every later access to it or its
carriers raises ``RuntimeError`` (``release`` still works, so cleanup never fails). A write the
device refuses for space (``ENOSPC``, ``EDQUOT``: a full file system under a sparse image, a
quota) is not a fault: that write raises, and the device and every carrier on it stay usable
(the refused span may hold part of the new values; its carrier's version moved).

An image starts with one header block (magic, block sizes, capacity) followed by the data area,
so reopening an image recovers its geometry; a header whose block sizes or capacity are not
valid is refused on open (``ValueError`` naming the field). Allocations are not persistent.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import stat
import struct
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any, Final, NoReturn, Self, SupportsIndex, final

import numpy as np

import conveyor as cv
from conveyor_storage._guard import IOGuard
from conveyor_storage._spans import CHUNK_BYTES, aligned_bytes
from conveyor_storage.block_device_carrier import BlockDeviceCarrier

__all__ = ["BlockDevice"]

_BLKSSZGET: Final = 0x1268  # logical block size (int)
_BLKPBSZGET: Final = 0x127B  # physical block size (unsigned int)
_BLKGETSIZE64: Final = 0x80081272  # capacity in bytes (u64)
_BLKZEROOUT: Final = 0x127F  # zero a byte range (u64 start, u64 length)
_PUNCH_HOLE: Final = 0x03  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_MAGIC: Final = b"CONVEYOR-BLOCK-IMAGE-V1\0"
_HEADER: Final = struct.Struct("<24sIIQ")  # magic, logical, physical block size, capacity
_MEMORY_ALIGN: Final = 4096  # O_DIRECT needs buffers aligned at least to the logical block
# Streaming reads use one buffer of this size: small enough to stay in a core's L2 cache.
# A write refused for space is a refusal, not a device fault (see the module docstring).
_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
_READ_WINDOW: Final = 2 << 20


@functools.cache
def _fallocate() -> Any:
    """libc ``fallocate`` (for punching holes in images), or ``None`` where it is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


def _ioctl_int(fd: int, request: int, fmt: str) -> int:
    size = struct.calcsize(fmt)
    value: int = struct.unpack(fmt, fcntl.ioctl(fd, request, bytes(size)))[0]
    return value


def _check_allocation(size: object, dtype: object) -> cv.DType:
    if isinstance(size, bool) or not isinstance(size, int):
        msg = f"allocate on BlockDevice: size must be an int, got {size!r}"
        raise TypeError(msg)
    if size < 0:
        msg = f"allocate on BlockDevice: size must be >= 0, got {size!r}"
        raise ValueError(msg)
    if not isinstance(dtype, cv.DType) or dtype.is_abstract:
        msg = f"allocate on BlockDevice: dtype must be a concrete conveyor dtype, got {dtype!r}"
        raise TypeError(msg)
    return dtype


@final
class BlockDevice:
    """A block device (or image) and its extent allocator; not a carrier.

    Args:
        path: a block-special file, or an image made by ``create_image``.
        direct: open with ``O_DIRECT`` (bypass the page cache); buffers are aligned either way.

    Raises:
        ValueError: ``path`` is neither a block device nor a Conveyor block image.
        OSError: the path cannot be opened.
    """

    __slots__ = (
        "__weakref__",
        "_base",
        "_capacity",
        "_closed",
        "_direct",
        "_fault",
        "_fd",
        "_free",
        "_guard",
        "_image",
        "_lock",
        "_logical",
        "_path",
        "_physical",
        "_returned",
    )

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        # An open descriptor and its locks cannot travel; say what can instead.
        msg = (
            "pickle on BlockDevice: the device is a descriptor this process holds open; "
            "reopen it in the other process with BlockDevice(path) (path: "
            f"{self._path!r})"
        )
        raise TypeError(msg)

    def __init__(self, path: str | os.PathLike[str], *, direct: bool = False) -> None:
        name = os.path.abspath(os.fspath(path))
        fd = os.open(name, os.O_RDWR | os.O_CLOEXEC | (os.O_DIRECT if direct else 0))
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISBLK(mode):
                logical = _ioctl_int(fd, _BLKSSZGET, "i")
                physical = max(_ioctl_int(fd, _BLKPBSZGET, "I"), logical)
                capacity, base, image = _ioctl_int(fd, _BLKGETSIZE64, "Q"), 0, False
            elif stat.S_ISREG(mode):
                logical, physical, capacity = _read_header(name)
                base, image = logical, True
                if os.fstat(fd).st_size < base + capacity:
                    msg = f"BlockDevice: the image {name!r} is shorter than its header says"
                    raise ValueError(msg)
            else:
                msg = f"BlockDevice: {name!r} is neither a block device nor a block image"
                raise ValueError(msg)
        except BaseException:
            os.close(fd)
            raise
        self._path, self._fd, self._direct, self._image = name, fd, direct, image
        self._logical, self._physical, self._base = logical, physical, base
        self._capacity = capacity - capacity % physical
        self._free: list[list[int]] = [[0, self._capacity]] if self._capacity else []
        # Extents given back but not merged into _free yet (see _give).
        self._returned: deque[tuple[int, int]] = deque()
        self._lock = threading.Lock()
        self._fault: OSError | None = None
        self._closed = False
        self._guard = IOGuard(functools.partial(_closed_refusal, name))

    @classmethod
    def create_image(
        cls, path: str | os.PathLike[str], capacity_bytes: int, block_size: int = 4096
    ) -> BlockDevice:
        """Create a sparse image of ``capacity_bytes`` data bytes at ``path`` and open it.

        Raises:
            TypeError: a size is not an int.
            ValueError: ``block_size`` is not a power of two in [512, 1 MiB], or
                ``capacity_bytes`` is not a positive multiple of it.
            FileExistsError: ``path`` exists (an image is never overwritten).
        """
        for label, value in (("capacity_bytes", capacity_bytes), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                msg = f"create_image: {label} must be an int, got {value!r}"
                raise TypeError(msg)
        if not 512 <= block_size <= 1 << 20 or block_size & (block_size - 1):
            msg = (
                f"create_image: block_size must be a power of two in [512, 1 MiB], got {block_size}"
            )
            raise ValueError(msg)
        if capacity_bytes <= 0 or capacity_bytes % block_size:
            msg = (
                f"create_image: capacity_bytes must be a positive multiple of block_size "
                f"{block_size}, got {capacity_bytes}"
            )
            raise ValueError(msg)
        name = os.fspath(path)
        # 0600, like FileBacked files: the image holds the data of every carrier on it.
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            header = _HEADER.pack(_MAGIC, block_size, block_size, capacity_bytes)
            os.pwrite(fd, header.ljust(block_size, b"\0"), 0)
            os.ftruncate(fd, block_size + capacity_bytes)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(name)
            raise
        os.close(fd)
        return cls(name)

    def __repr__(self) -> str:
        kind = "image" if self._image else "device"
        state = " faulted" if self._fault else (" closed" if self._closed else "")
        return (
            f"<BlockDevice {kind} {self._path!r} capacity={self._capacity} "
            f"blocks={self._logical}/{self._physical}{state}>"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._guard.close(self._fd)

    # -- geometry and state -------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def capacity(self) -> int:
        """Bytes available to allocations (an image's header block is not counted)."""
        return self._capacity

    @property
    def logical_block_size(self) -> int:
        """The smallest unit of I/O, in bytes (``BLKSSZGET``; an image's block size)."""
        return self._logical

    @property
    def physical_block_size(self) -> int:
        """The unit extents are aligned to, in bytes (``BLKPBSZGET``; an image's block size)."""
        return self._physical

    @property
    def is_image(self) -> bool:
        return self._image

    @property
    def free_bytes(self) -> int:
        with self._lock:
            self._merge_returned()
            return sum(length for _, length in self._free)

    @property
    def fault(self) -> OSError | None:
        """The I/O error that faulted the device, or ``None``."""
        return self._fault

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the device; its carriers then refuse access (``release`` still works)."""
        if not self._closed:
            self._closed = True  # new transfers are refused from here on
            self._guard.close(self._fd)  # waits for those in flight

    def flush(self) -> None:
        """Make every completed write durable (``fsync``)."""
        with self._io("flush"):
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._fail(exc)

    # -- allocation ---------------------------------------------------------------------------

    def allocate(self, size: int, dtype: cv.DType = cv.float32) -> BlockDeviceCarrier:
        """A zero-filled carrier of ``size`` slots at the lowest free aligned extent.

        Raises:
            TypeError, ValueError: a bad ``size`` or ``dtype``, as ``Carrier.allocate``.
            MemoryError: no free extent is large enough.
            RuntimeError: the device is closed or faulted.
        """
        return self._allocate(size, dtype, zero=True)

    def _allocate(self, size: object, dtype: object, *, zero: bool) -> BlockDeviceCarrier:
        """``allocate``; ``zero=False`` skips zeroing for callers that overwrite every slot."""
        dtype = _check_allocation(size, dtype)
        assert isinstance(size, int)  # checked just above
        self._check_usable("allocate")
        unit = self._physical
        length = -(-size * dtype.itemsize // unit) * unit
        start = self._take(length) if length else 0
        try:
            if zero:
                with self._io("allocate"):
                    self._zero(start, length)
        except BaseException:
            self._give(start, length)
            raise
        return BlockDeviceCarrier._on(self, start, length, size, dtype)

    def _take(self, length: int) -> int:
        with self._lock:
            while True:
                self._merge_returned()
                for extent in self._free:  # sorted by start: first fit is the lowest address
                    if extent[1] >= length:
                        start = extent[0]
                        extent[0] += length
                        extent[1] -= length
                        if not extent[1]:
                            self._free.remove(extent)
                        return start
                largest = max((e[1] for e in self._free), default=0)
                if not self._returned:  # nothing came back while we searched
                    break
        msg = (
            f"allocate on BlockDevice {self._path!r}: no free extent of {length} bytes (largest "
            f"free extent {largest} of {self._capacity} bytes); release carriers or use a "
            f"larger device"
        )
        raise MemoryError(msg)

    def _give(self, start: int, length: int) -> None:
        """Return an extent: queued, then merged if the lock is free (else by its next holder).

        A carrier can be released by a finalizer that the garbage collector runs on a thread
        already inside this lock (a dead TiledEvictable or Evictable owning a carrier of this
        device); waiting for the lock there would deadlock, and merging would change ``_free``
        in the middle of the interrupted update. Every reader of ``_free`` merges first.
        """
        if not length:
            return
        self._returned.append((start, length))
        if self._lock.acquire(blocking=False):
            try:
                self._merge_returned()
            finally:
                self._lock.release()

    def _merge_returned(self) -> None:
        """Move the queued extents into ``_free`` (sorted, neighbours merged); holds the lock."""
        while self._returned:
            start, length = self._returned.popleft()
            free = self._free
            at = next((i for i, e in enumerate(free) if e[0] > start), len(free))
            free.insert(at, [start, length])
            # Merge with the following, then the preceding neighbour.
            if at + 1 < len(free) and free[at][0] + free[at][1] == free[at + 1][0]:
                free[at][1] += free.pop(at + 1)[1]
            if at and free[at - 1][0] + free[at - 1][1] == free[at][0]:
                free[at - 1][1] += free.pop(at)[1]

    def _zero(self, start: int, length: int) -> None:
        """Zero an extent: punch a hole (image) or BLKZEROOUT (device), else write zeros."""
        if not length:
            return
        offset = self._base + start
        if self._image:
            punch = _fallocate()
            if punch is not None and punch(self._fd, _PUNCH_HOLE, offset, length) == 0:
                return
        else:
            try:
                fcntl.ioctl(self._fd, _BLKZEROOUT, struct.pack("QQ", offset, length))
                return
            except OSError:
                pass  # not supported here: write the zeros
        zeros = aligned_bytes(min(length, CHUNK_BYTES), _MEMORY_ALIGN)
        zeros[:] = 0
        for done in range(0, length, len(zeros)):
            self._pwrite_all(zeros.data[: min(len(zeros), length - done)], offset + done)

    # -- I/O ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Hold the descriptor open for one transfer (refused on a closed or faulted device)."""
        with self._guard.use(what):
            self._check_usable(what)
            yield

    def _check_usable(self, what: str) -> None:
        if self._closed:
            msg = f"{what} on BlockDevice {self._path!r}: the device is closed"
            raise RuntimeError(msg)
        if self._fault is not None:
            msg = (
                f"{what} on BlockDevice {self._path!r}: the device faulted after an I/O error "
                f"({self._fault}); release its carriers and check the device"
            )
            raise RuntimeError(msg) from self._fault

    def _fail(self, exc: OSError) -> NoReturn:
        if self._fault is None:
            self._fault = exc
        raise exc

    def _pread_all(self, buffer: memoryview, offset: int) -> None:
        done = 0
        while done < len(buffer):
            try:
                count = os.preadv(self._fd, [buffer[done:]], offset + done)
            except OSError as exc:
                self._fail(exc)
            if count == 0:
                self._fail(OSError(errno.EIO, "unexpected end of device", self._path))
            done += count

    def _pwrite_all(self, data: memoryview, offset: int) -> None:
        done = 0
        while done < len(data):
            try:
                count = os.pwrite(self._fd, data[done:], offset + done)
            except OSError as exc:
                if exc.errno in _NO_SPACE:
                    raise self._refused(exc) from exc
                self._fail(exc)
            if count == 0:
                raise self._refused(OSError(errno.ENOSPC, "the device accepted no bytes"))
            done += count

    def _refused(self, cause: OSError) -> OSError:
        """A write refused for space: an error for this write only, the device stays usable."""
        number = cause.errno if cause.errno is not None else errno.ENOSPC
        msg = (
            f"write on BlockDevice {self._path!r}: the device refused it "
            f"({os.strerror(number)}); the device and its carriers stay usable: free space on "
            f"the file system that holds it (or raise the quota) and write again"
        )
        return OSError(number, msg)

    def _read_blocks(self, start: int, nbytes: int) -> tuple[np.ndarray[Any, Any], int]:
        """The whole blocks covering ``[start, start + nbytes)`` and the offset of ``start``."""
        block = self._logical
        first = start - start % block
        last = -(-(start + nbytes) // block) * block
        buffer = aligned_bytes(last - first, _MEMORY_ALIGN)
        self._pread_all(buffer.data, self._base + first)
        return buffer, start - first

    def _write_blocks(self, start: int, data: memoryview) -> None:
        """Write ``data`` at ``start``: partial edge blocks read-modify-write, the rest whole."""
        block, end = self._logical, start + len(data)
        inner_start = -(-start // block) * block
        inner_end = end - end % block
        if inner_start >= inner_end:  # no whole block inside: one or two edge blocks
            buffer, head = self._read_blocks(start, len(data))
            buffer[head : head + len(data)] = np.frombuffer(data, np.uint8)
            self._pwrite_all(buffer.data, self._base + start - head)
            return
        if start != inner_start:
            self._write_blocks(start, data[: inner_start - start])
        self._write_whole(inner_start, data[inner_start - start : inner_end - start])
        if end != inner_end:
            self._write_blocks(inner_end, data[inner_end - start :])

    def _write_whole(self, start: int, data: memoryview) -> None:
        # Buffered I/O takes any memory; only O_DIRECT needs an aligned source (the address is
        # looked up only then: through ndarray.ctypes it cost 6% of a buffered 256 MiB move).
        if not self._direct or (
            np.frombuffer(data, np.uint8).__array_interface__["data"][0] % _MEMORY_ALIGN == 0
            if len(data)
            else True
        ):
            self._pwrite_all(data, self._base + start)
            return
        bounce = aligned_bytes(min(len(data), CHUNK_BYTES), _MEMORY_ALIGN)
        for done in range(0, len(data), len(bounce)):
            piece = data[done : done + len(bounce)]
            bounce[: len(piece)] = np.frombuffer(piece, np.uint8)
            self._pwrite_all(bounce.data[: len(piece)], self._base + start + done)

    def _stream(self, low: int, high: int) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
        """``(offset, bytes)`` covering ``[low, high)``, read in whole blocks into one reused
        aligned buffer of at most ``_READ_WINDOW`` bytes."""
        self._check_usable("export_span")
        block = self._logical
        window = max(_READ_WINDOW - _READ_WINDOW % block, block)
        first = low - low % block
        last = -(-high // block) * block
        buffer = aligned_bytes(min(window, max(last - first, 0)), _MEMORY_ALIGN)
        for at in range(first, last, window):
            size = min(window, last - at)
            with self._io("export_span"):  # per window: a paused generator holds nothing
                self._pread_all(buffer.data[:size], self._base + at)
            lo, hi = max(low, at), min(high, at + size)
            yield lo, buffer[lo - at : hi - at]


def _read_header(name: str) -> tuple[int, int, int]:
    # A separate buffered descriptor: O_DIRECT could not read the short header.
    with open(name, "rb") as handle:
        raw = handle.read(_HEADER.size)
    if len(raw) < _HEADER.size or raw[: len(_MAGIC)] != _MAGIC:
        msg = (
            f"BlockDevice: {name!r} is a regular file but not a Conveyor block image; create "
            f"one with BlockDevice.create_image(path, capacity_bytes)"
        )
        raise ValueError(msg)
    _, logical, physical, capacity = _HEADER.unpack(raw)
    for field, value in (("logical_block_size", logical), ("physical_block_size", physical)):
        if not 512 <= value <= 1 << 20 or value & (value - 1):
            msg = (
                f"BlockDevice: the header of {name!r} is corrupt: {field} is {value}, not a "
                f"power of two in [512, 1 MiB]; recreate the image"
            )
            raise ValueError(msg)
    if physical < logical:
        msg = (
            f"BlockDevice: the header of {name!r} is corrupt: physical_block_size {physical} "
            f"is smaller than logical_block_size {logical}; recreate the image"
        )
        raise ValueError(msg)
    if capacity <= 0 or capacity % logical:
        msg = (
            f"BlockDevice: the header of {name!r} is corrupt: capacity is {capacity}, not a "
            f"positive multiple of logical_block_size {logical}; recreate the image"
        )
        raise ValueError(msg)
    return logical, physical, capacity


def _closed_refusal(path: str, what: str) -> RuntimeError:
    return RuntimeError(f"{what} on BlockDevice {path!r}: the device is closed")
