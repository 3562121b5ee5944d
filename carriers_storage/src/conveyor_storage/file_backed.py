"""FileBacked: a storage-only carrier whose slots are raw little-endian values in a real file.

The file is memory-mapped with NumPy, so reads and views are zero-copy exports, and whole-span
writes go through ``pwrite`` on the same file (one kernel copy; Linux keeps a shared mapping and
``pwrite`` coherent through the page cache). Space is reserved with ``posix_fallocate`` when the
file is created, so a full disk refuses the allocation instead of killing the process with
``SIGBUS`` on a later write into the mapping.

Files ``allocate`` creates belong to the carrier: ``release()`` deletes them. Files ``open``
finds are only read and never deleted. The default directory is private to the process and
removed when the interpreter exits; a file the carrier created there is also deleted when the
carrier is garbage-collected. Files in a directory the caller chose stay until ``release()``.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import io
import mmap
import os
import shutil
import stat
import tempfile
import threading
import weakref
from typing import Any, ClassVar, Final, Literal, Self, final

import numpy as np

import conveyor as cv
from conveyor.dtypes import CONCRETE_DTYPES
from conveyor_storage._spans import storage_numpy, strided
from conveyor_storage._views import VIEW_NAMES, StorageView, storage_only_refusal

__all__ = ["FileBacked"]

# Below this many bytes a contiguous write goes through the mapping; above, through pwrite.
_PWRITE_MIN: Final = 1 << 20
# Exports of at least this many bytes are prefaulted with MADV_POPULATE_READ (Linux 5.14+).
_PREFAULT_MIN: Final = 1 << 20
_MADV_POPULATE_READ: Final = getattr(mmap, "MADV_POPULATE_READ", 22)
# Owned files at least this large are deleted in the background (see _delete).
_BACKGROUND_DELETE_MIN: Final = 64 << 20
_NO_FALLOCATE: Final = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})

_private_lock = threading.Lock()
_private_dir: str | None = None


def _remove_private_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child must not remove its parent's files
        shutil.rmtree(path, ignore_errors=True)


def _default_directory() -> str:
    """The process's private temporary directory, created on first use, removed at exit."""
    global _private_dir
    with _private_lock:
        if _private_dir is None:
            _private_dir = tempfile.mkdtemp(prefix="conveyor-storage-")
            atexit.register(_remove_private_dir, _private_dir, os.getpid())
        return _private_dir


def _close(fd: int, unlink: str | None, owner: int) -> None:
    """Finalizer: close the descriptor; delete the file when it is the carrier's to delete."""
    with contextlib.suppress(OSError):
        os.close(fd)
    if unlink is not None and os.getpid() == owner:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(unlink)


def _delete(path: str, nbytes: int) -> None:
    """Delete a file the carrier created; a large one is unlinked off the caller's thread.

    Unlinking drops the file's cached pages, which costs about as much as writing them did, so
    a large file is first renamed to a hidden name (the path is gone at once) and then unlinked
    by a short-lived thread (non-daemon: the interpreter waits for it at exit).
    """
    if nbytes < _BACKGROUND_DELETE_MIN:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    folder, name = os.path.split(path)
    doomed = os.path.join(folder, f".{name}.deleted")
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return
    threading.Thread(target=_unlink_quietly, args=(doomed,), name="conveyor-delete").start()


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _check_dtype(what: str, dtype: object) -> cv.DType:
    if not isinstance(dtype, cv.DType):
        msg = f"{what} on FileBacked: dtype must be a conveyor dtype, got {dtype!r}"
        raise TypeError(msg)
    if dtype.is_abstract:
        msg = (
            f"{what} on FileBacked: {dtype.name} is an abstract dtype category and cannot be "
            f"storage; use a concrete dtype"
        )
        raise TypeError(msg)
    return dtype


@final
@cv.closed_carrier
class FileBacked(cv.Carrier):
    """Storage only: ``size`` slots of one dtype in a file, memory-mapped.

    Create one with ``FileBacked.allocate(size, dtype, directory=None)`` or open an existing
    file read-only with ``FileBacked.open(path, dtype)``; every computational dispatch name
    raises ``NotImplementedError`` (move to a compute carrier with ``cv.move``), while storage
    access, movement and the eight view names work.
    """

    #: Every concrete dtype is stored as its raw little-endian bytes (bfloat16: 2-byte pattern).
    storable_dtypes: ClassVar[frozenset[cv.DType]] = frozenset(CONCRETE_DTYPES)

    _fd: int
    _path: str
    _owned: bool
    _writable: bool
    _size: int
    _dt: cv.DType
    _np: np.dtype[Any]
    _map: np.ndarray[Any, Any] | None
    _map_lock: threading.Lock
    _dir_synced: bool
    _finalizer: weakref.finalize[Any, Any]

    def __init__(self) -> None:
        msg = (
            "FileBacked() cannot be constructed directly; use FileBacked.allocate(size, dtype, "
            "directory=None) for a new file or FileBacked.open(path, dtype) for an existing one"
        )
        raise TypeError(msg)

    @classmethod
    def _create(cls, fd: int, path: str, dtype: cv.DType, size: int, *, owned: bool) -> Self:
        carrier = object.__new__(cls)
        cv.Carrier.__init__(carrier)
        carrier._fd, carrier._path, carrier._owned = fd, path, owned
        carrier._writable = owned
        carrier._size, carrier._dt, carrier._np = size, dtype, storage_numpy(dtype)
        carrier._map = None
        carrier._dir_synced = not owned
        carrier._map_lock = threading.Lock()
        private = owned and os.path.dirname(path) == _private_dir
        carrier._finalizer = weakref.finalize(
            carrier, _close, fd, path if private else None, os.getpid()
        )
        return carrier

    @classmethod
    def _allocate(
        cls,
        size: int,
        dtype: cv.DType,
        directory: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        if kwargs:
            msg = f"allocate on FileBacked: unexpected argument(s) {', '.join(sorted(kwargs))}"
            raise TypeError(msg)
        where = _default_directory() if directory is None else os.fspath(directory)
        fd, path = tempfile.mkstemp(prefix="conveyor-", suffix=f".{dtype.name}", dir=where)
        try:
            nbytes = size * dtype.itemsize
            if nbytes:
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as exc:
                    if exc.errno not in _NO_FALLOCATE:
                        raise
                    os.ftruncate(fd, nbytes)  # the filesystem cannot reserve: sparse file
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls._create(fd, os.path.abspath(path), dtype, size, owned=True)

    @classmethod
    def open(cls, path: str | os.PathLike[str], dtype: cv.DType) -> Self:
        """Open an existing file of raw little-endian ``dtype`` values, read-only.

        The carrier never writes or deletes the file; writes raise ``RuntimeError``.

        Raises:
            TypeError: ``dtype`` is not a concrete conveyor dtype.
            ValueError: the file is not a regular file or its length is not a multiple of the
                item size.
            OSError: the file cannot be opened.
        """
        dtype = _check_dtype("open", dtype)
        name = os.fspath(path)
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                msg = f"open on FileBacked: {name!r} is not a regular file"
                raise ValueError(msg)
            if info.st_size % dtype.itemsize:
                msg = (
                    f"open on FileBacked: {name!r} holds {info.st_size} bytes, not a whole "
                    f"number of {dtype.name} items ({dtype.itemsize} bytes each)"
                )
                raise ValueError(msg)
        except BaseException:
            os.close(fd)
            raise
        return cls._create(
            fd, os.path.abspath(name), dtype, info.st_size // dtype.itemsize, owned=False
        )

    def allocate_like(self, size: int, dtype: cv.DType) -> FileBacked:
        """A new zero-filled FileBacked in this carrier's directory."""
        return FileBacked.allocate(size, dtype, directory=os.path.dirname(self._path))

    # -- file ---------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The absolute path of the file."""
        return self._path

    @property
    def owns_file(self) -> bool:
        """Whether ``release()`` deletes the file (``allocate`` created it; ``open`` did not)."""
        return self._owned

    def flush(self) -> None:
        """Make every write so far durable: ``msync`` the mapping, then ``fsync`` the file."""
        self._check_alive("flush")
        if not self._writable:
            return
        mapped = self._map
        if mapped is not None and isinstance(mapped, np.memmap):
            mapped.flush()
        os.fsync(self._fd)
        if not self._dir_synced:  # a new file's directory entry must be durable too
            folder = os.open(os.path.dirname(self._path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
            self._dir_synced = True

    def fileno(self) -> int:
        """The open descriptor (valid until ``release``), for bulk I/O by storage routes."""
        self._check_alive("fileno")
        return self._fd

    def _mapped(self) -> np.ndarray[Any, Any]:
        found = self._map
        if found is None:
            with self._map_lock:
                if self._map is None:
                    if self._size == 0:
                        self._map = np.zeros(0, self._np)
                    else:
                        mode: Literal["r+", "r"] = "r+" if self._writable else "r"
                        handle = io.FileIO(self._fd, mode, closefd=False)
                        self._map = np.memmap(handle, self._np, mode, shape=(self._size,))
                found = self._map
        return found

    # -- storage hooks ------------------------------------------------------------------------

    def _storage_size(self) -> int:
        return self._size

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _storage_mutable(self) -> bool:
        return self._writable

    def _read(self, index: int) -> Any:
        return self._mapped()[index].item()

    def _write(self, index: int, value: Any) -> None:
        self._mapped()[index] = value

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        if layout.size == 0:
            return np.zeros(layout.shape, self._np)
        mapped = self._mapped()
        low, high = layout.span()
        if (high - low) * self._dt.itemsize >= _PREFAULT_MIN:
            self._prefault(mapped, low * self._dt.itemsize, high * self._dt.itemsize)
        return strided(mapped.view(np.ndarray), layout)

    @staticmethod
    def _prefault(mapped: np.ndarray[Any, Any], start: int, stop: int) -> None:
        """Map a large span's pages in one call before it is copied (one fault per page else)."""
        raw = getattr(mapped, "_mmap", None)  # the mmap object behind NumPy's memmap
        if raw is None:
            return
        first = start - start % mmap.PAGESIZE
        with contextlib.suppress(OSError, ValueError):  # older kernels: fault pages lazily
            raw.madvise(_MADV_POPULATE_READ, first, stop - first)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        nbytes = layout.size * self._dt.itemsize
        if layout.is_contiguous and nbytes >= _PWRITE_MIN:
            data = np.ascontiguousarray(values, dtype=self._np).reshape(-1)
            self._pwrite(data.view(np.uint8).data, layout.offset * self._dt.itemsize)
            return
        strided(self._mapped(), layout, writeable=True)[...] = values

    def _pwrite(self, data: memoryview, offset: int) -> None:
        done = 0
        while done < len(data):
            written = os.pwrite(self._fd, data[done:], offset + done)
            if written == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)
            done += written

    def _release(self) -> None:
        # Exported views keep the mapping alive on their own; unlinking a mapped file is safe.
        self._map = None
        self._finalizer()
        if self._owned:
            _delete(self._path, self._size * self._dt.itemsize)

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in VIEW_NAMES:
            return StorageView()
        raise storage_only_refusal(operation_name, self)

    def __repr__(self) -> str:
        state = "released" if self.released else ("owned" if self._owned else "read-only")
        return f"<FileBacked size={self._size} dtype={self._dt.name} {state} path={self._path!r}>"
