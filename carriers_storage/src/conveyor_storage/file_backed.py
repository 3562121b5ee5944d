"""FileBacked: a storage-only carrier whose slots are raw little-endian values in a real file.

Every transfer is positional I/O on the file's descriptor (``preadv`` / ``pwrite``), never a
memory mapping: a file that another process truncates then gives a clean ``OSError`` instead
of killing this process with ``SIGBUS`` on the next touch of a vanished page (there is no way
to keep another process from truncating a file; advisory locks and leases do not stop it).
Space is reserved with ``posix_fallocate`` when the file is created, so a full disk refuses the
allocation. Transfers run inside the carrier's ``IOGuard``: ``release()`` waits for transfers in
flight and refuses new ones before it closes the descriptor, so no I/O reaches a file that
reused the descriptor number.

Files ``allocate`` creates belong to the carrier: ``release()`` deletes them. Files ``open``
finds are only read and never deleted. A file a copy fills (a move, an eviction) is created
under a hidden ``.partial`` name and renamed on commit, so a crash leaves no full-size file
that looks complete. The default directory is private to the process and removed when the
interpreter exits; one left by a killed process is removed by the next process that uses it.

Names derived from another (a ``.partial`` file's final name, the hidden name a large file gets
while it is unlinked) can be taken in a shared directory such as ``/tmp``: another user may
create them first. Such a name is never followed or replaced: the file takes a fresh random name
of the same form instead. Large files a killed process left half-deleted (``.conveyor-*.deleted``)
are removed the next time a carrier is allocated in their directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar, Final, Self, final

import numpy as np

import conveyor as cv
from conveyor.sdk import CONCRETE_DTYPES, storage_only_refusal, view_operations
from conveyor_storage import _private_dir
from conveyor_storage._guard import IOGuard
from conveyor_storage._spans import aligned_bytes, storage_numpy, strided

__all__ = ["FileBacked"]

# Streaming reads (moves, promotions) use one buffer of this size, small enough to stay in a
# core's L2 cache; reading into fresh arrays would fault in every page of every chunk.
_READ_WINDOW: Final = 2 << 20
# Owned files at least this large are deleted in the background (see _delete).
_BACKGROUND_DELETE_MIN: Final = 64 << 20
_NO_FALLOCATE: Final = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})
_PARTIAL: Final = ".partial"  # suffix of a file a copy is still filling (see _commit)
_MAX_FILE_BYTES: Final = 2**63 - 1  # the largest offset (off_t) a file can have
_DELETED: Final = ".deleted"  # suffix of a large file being unlinked off-thread (see _delete)
# Fresh random names tried when another user holds the name a file should take.
_NAME_ATTEMPTS: Final = 100
# Directories whose leftover .deleted files this process already removed.
_SWEPT: set[str] = set()
_SWEPT_LOCK = threading.Lock()


def _released(what: str) -> RuntimeError:
    return RuntimeError(f"{what} on FileBacked: the carrier was released")


def _close(guard: IOGuard, fd: int, unlink: list[str | None], owner: int) -> None:
    """Finalizer: close the descriptor once; delete the file when it is the carrier's to delete.

    ``unlink`` is a one-item list shared with the carrier, which renames the file on commit.
    """
    guard.close(fd)
    path = unlink[0]
    if path is not None and os.getpid() == owner:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


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
    try:
        doomed = _move(path, os.path.join(folder, f".{name.lstrip('.')}{_DELETED}"), _DELETED)
    except FileNotFoundError:
        return
    threading.Thread(target=_unlink_quietly, args=(doomed,), name="conveyor-delete").start()


def _move(path: str, wanted: str, suffix: str) -> str:
    """Give the file at ``path`` the name ``wanted``, never replacing a file that holds it.

    When another user holds ``wanted`` (a shared sticky directory), a fresh random name of the
    same form (``[.]conveyor-<random>.<kind><suffix>``) is tried instead. Returns the new path.

    Raises:
        FileExistsError: every name tried was taken (the message says where and how many).
        FileNotFoundError: nothing is at ``path``.
    """
    folder, name = os.path.split(wanted)
    hidden = "." if name.startswith(".") else ""
    kind = name.lstrip(".").split(".")[1]  # conveyor-<random>.<kind>[suffix]
    candidate = wanted
    for _ in range(_NAME_ATTEMPTS):
        try:
            os.link(path, candidate)  # fails if ``candidate`` exists, unlike rename
        except FileExistsError:
            # os.urandom, not secrets: importing secrets loads OpenSSL (hashlib, hmac) at discovery
            fresh = f"{hidden}conveyor-{os.urandom(6).hex()}.{kind}{suffix}"
            candidate = os.path.join(folder, fresh)
            continue
        except FileNotFoundError:
            raise
        except OSError:  # no hard links on this filesystem: ``candidate`` is a fresh name
            os.rename(path, candidate)
            return candidate
        os.unlink(path)
        return candidate
    msg = (
        f"FileBacked: every name tried for {name!r} in {folder!r} ({_NAME_ATTEMPTS} of them) "
        f"is taken by another file; use a directory other users cannot write to"
    )
    raise FileExistsError(errno.EEXIST, msg)


def _sweep_deleted(folder: str) -> None:
    """Remove this user's ``.conveyor-*.deleted`` files in ``folder`` (once per process).

    Such a file is always doomed: a release renamed it before unlinking it off-thread, and a
    process killed in between left it behind. Unlinking it twice is harmless.
    """
    with _SWEPT_LOCK:
        if folder in _SWEPT:
            return
        _SWEPT.add(folder)
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if not (name.startswith(".conveyor-") and name.endswith(_DELETED)):
                continue
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and (
                    entry.stat(follow_symlinks=False).st_uid == os.getuid()
                ):
                    os.unlink(entry.path)


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


def _final_name(pending: str) -> str:
    """``dir/.conveyor-x.float32.partial`` -> ``dir/conveyor-x.float32``."""
    folder, name = os.path.split(pending)
    return os.path.join(folder, name[1 : -len(_PARTIAL)])


def _pending_name(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}{_PARTIAL}")


@final
@cv.closed_carrier
class FileBacked(cv.Carrier):
    """Storage only: ``size`` slots of one dtype in a file, read and written positionally.

    Create one with ``FileBacked.allocate(size, dtype, directory=None)`` or open an existing
    file read-only with ``FileBacked.open(path, dtype)``; every computational dispatch name
    raises ``NotImplementedError`` (move to a compute carrier with ``cv.move``), while storage
    access, movement and the eight view names work.
    """

    #: Every concrete dtype is stored as its raw little-endian bytes (bfloat16: 2-byte pattern).
    storable_dtypes: ClassVar[frozenset[cv.DType]] = frozenset(CONCRETE_DTYPES)

    _fd: int
    _guard: IOGuard
    _unlink: list[str | None]  # the path the finalizer deletes (shared with it), or [None]
    _path: str
    _pending: bool  # the file still has its hidden .partial name (see _commit)
    _owned: bool
    _writable: bool
    _size: int
    _dt: cv.DType
    _np: np.dtype[Any]
    _write_lock: threading.Lock  # orders read-modify-write of strided spans against writes
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
        carrier._pending = path.endswith(_PARTIAL)
        carrier._writable = owned
        carrier._size, carrier._dt, carrier._np = size, dtype, storage_numpy(dtype)
        carrier._dir_synced = not owned
        carrier._write_lock = threading.Lock()
        carrier._guard = IOGuard(_released)
        private = owned and _private_dir.holds(path)
        carrier._unlink = [path if private else None]
        carrier._finalizer = weakref.finalize(
            carrier, _close, carrier._guard, fd, carrier._unlink, os.getpid()
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
        return cls._new(size, dtype, directory, kwargs, pending=False)

    @classmethod
    def _allocate_for_overwrite(
        cls,
        size: int,
        dtype: cv.DType,
        directory: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """``allocate`` under a hidden ``.partial`` name, for a copy that calls ``_commit``."""
        dtype = _check_dtype("allocate", dtype)
        return cls._new(size, dtype, directory, kwargs, pending=True)

    @classmethod
    def _new(
        cls,
        size: int,
        dtype: cv.DType,
        directory: str | os.PathLike[str] | None,
        kwargs: dict[str, Any],
        *,
        pending: bool,
    ) -> Self:
        if kwargs:
            msg = f"allocate on FileBacked: unexpected argument(s) {', '.join(sorted(kwargs))}"
            raise TypeError(msg)
        if size * dtype.itemsize > _MAX_FILE_BYTES:
            msg = (
                f"allocate on FileBacked: {size} {dtype.name} slots need "
                f"{size * dtype.itemsize} bytes, more than a file can hold ({_MAX_FILE_BYTES} "
                f"bytes); allocate fewer slots"
            )
            raise ValueError(msg)
        where = _private_dir.path() if directory is None else os.fspath(directory)
        _sweep_deleted(os.path.abspath(where))
        fd, path = _private_dir.new_file(where, dtype.name, _PARTIAL if pending else None)
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
    def open(
        cls, path: str | os.PathLike[str], dtype: cv.DType, *, size: int | None = None
    ) -> Self:
        """Open an existing file of raw little-endian ``dtype`` values, read-only.

        The carrier never writes or deletes the file; writes raise ``RuntimeError``. Pass
        ``size`` (in slots) when the length is known, so a truncated file is refused instead of
        read as a shorter tensor. A FIFO, a directory or a device is refused without blocking.

        Raises:
            TypeError: ``dtype`` is not a concrete conveyor dtype, or ``size`` not an int.
            ValueError: the file is not a regular file, its length is not a multiple of the
                item size, or it does not hold ``size`` slots.
            OSError: the file cannot be opened.

        .. versionchanged:: 0.2 ``size=``; FIFOs are refused instead of blocking the caller.
        """
        dtype = _check_dtype("open", dtype)
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            msg = f"open on FileBacked: size must be an int, got {size!r}"
            raise TypeError(msg)
        name = os.fspath(path)
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever.
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                msg = (
                    f"open on FileBacked: {name!r} is not a regular file (a FIFO, directory, "
                    f"socket or device); pass the path of a regular file"
                )
                raise ValueError(msg)
            os.set_blocking(fd, True)
            if info.st_size % dtype.itemsize:
                msg = (
                    f"open on FileBacked: {name!r} holds {info.st_size} bytes, not a whole "
                    f"number of {dtype.name} items ({dtype.itemsize} bytes each)"
                )
                raise ValueError(msg)
            if size is not None and info.st_size != size * dtype.itemsize:
                msg = (
                    f"open on FileBacked: {name!r} holds {info.st_size} bytes but {size} "
                    f"{dtype.name} slots need {size * dtype.itemsize} bytes; the file was "
                    f"truncated or is not the one meant"
                )
                raise ValueError(msg)
        except BaseException:
            os.close(fd)
            raise
        return cls._create(
            fd, os.path.abspath(name), dtype, info.st_size // dtype.itemsize, owned=False
        )

    def _pickle_refusal(self) -> str:
        return (
            "a FileBacked tensor is a file this process holds open (its descriptor and locks "
            "cannot travel through pickle); pickle cv.move(tensor, 'cpu') instead, or share the "
            "file itself: FileBacked.open(carrier.path, dtype) reads it in another process "
            "(allocate it with directory= to keep the file after release)"
        )

    def allocate_like(self, size: int, dtype: cv.DType) -> FileBacked:
        """A new zero-filled FileBacked in this carrier's directory."""
        return FileBacked.allocate(size, dtype, directory=os.path.dirname(self._path))

    def _allocate_like_for_overwrite(self, size: int, dtype: cv.DType) -> FileBacked:
        """``allocate_like`` under a hidden ``.partial`` name, for a copy that commits."""
        return FileBacked._allocate_for_overwrite(
            size, dtype, directory=os.path.dirname(self._path)
        )

    # -- file ---------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The absolute path of the file (a hidden ``.partial`` name until a copy commits)."""
        return self._path

    @property
    def owns_file(self) -> bool:
        """Whether ``release()`` deletes the file (``allocate`` created it; ``open`` did not)."""
        return self._owned

    def _begin_overwrite(self) -> None:
        """Give an owned file its hidden ``.partial`` name while a copy overwrites all of it."""
        if self._owned and not self._pending:
            self._rename(_pending_name(self._path))
            self._pending = True

    def _commit(self) -> None:
        """The copy filling this file completed: give it its final name (no-op if it has one).

        The rename is the commit point: a process killed earlier leaves only a hidden
        ``.partial`` file (swept from the private directory by the next process).
        """
        if self._pending:
            self._rename(_final_name(self._path))
            self._pending = False

    def _rename(self, new: str) -> None:
        """Move the file to the name ``new`` (a fresh one of its form if another file has it)."""
        suffix = _PARTIAL if new.endswith(_PARTIAL) else ""
        with self._guard.use("commit"):
            new = _move(self._path, new, suffix)
        self._path = new
        self._dir_synced = False  # the directory entry changed: flush() syncs it again
        if self._unlink[0] is not None:
            self._unlink[0] = new

    def flush(self) -> None:
        """Make every write so far durable: ``fsync`` the file and, once, its directory."""
        self._check_alive("flush")
        if not self._writable:
            return
        with self._guard.use("flush"):
            os.fsync(self._fd)
        if not self._dir_synced:  # a new or renamed file's directory entry must be durable too
            folder = os.open(os.path.dirname(self._path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
            self._dir_synced = True

    @contextlib.contextmanager
    def descriptor(self) -> Iterator[int]:
        """The open descriptor, for I/O of the caller's own inside the ``with`` block.

        The block counts as a transfer in flight: ``release`` waits for it to end before it
        closes the descriptor (a ``release`` inside the block closes it when the block ends),
        so the number never reaches a file opened later. Writes made through it are not
        counted by the carrier's version (saved tensors cannot see them): write data with
        ``write`` / ``import_span``, and use the descriptor for ``fstat``, reads, advice.

        Raises:
            RuntimeError: the carrier was released.
        """
        with self._guard.use("descriptor"):
            yield self._fd

    # -- positional I/O -----------------------------------------------------------------------

    def _shrunk(self, what: str, have: int) -> OSError:
        need = self._size * self._dt.itemsize
        msg = (
            f"{what} on FileBacked: {self._path!r} holds {have} bytes, fewer than the {need} "
            f"this carrier's {self._size} {self._dt.name} slots need; another process "
            f"truncated it"
        )
        return OSError(errno.EIO, msg)

    def _pread(self, what: str, buffer: np.ndarray[Any, Any], offset: int) -> None:
        """Fill ``buffer`` (uint8) from byte ``offset``; a short file is a clean ``OSError``."""
        view, done = buffer.data, 0
        with self._guard.use(what):
            while done < len(view):
                count = os.preadv(self._fd, [view[done:]], offset + done)
                if count == 0:
                    raise self._shrunk(what, os.fstat(self._fd).st_size)
                done += count

    def _pwrite(self, what: str, data: memoryview, offset: int) -> None:
        """Write ``data`` at byte ``offset``, refusing a file that shrank (never regrow it)."""
        done = 0
        with self._guard.use(what):
            have = os.fstat(self._fd).st_size
            if have < self._size * self._dt.itemsize:
                raise self._shrunk(what, have)
            while done < len(data):
                written = os.pwrite(self._fd, data[done:], offset + done)
                if written == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)
                done += written

    def _span(self, what: str, low: int, high: int) -> np.ndarray[Any, Any]:
        """Slots ``[low, high)`` read into a fresh array."""
        item = self._dt.itemsize
        buffer = np.empty((high - low) * item, np.uint8)
        self._pread(what, buffer, low * item)
        return buffer.view(self._np)

    def _read_chunks(self, start: int, count: int) -> Iterator[tuple[int, np.ndarray[Any, Any]]]:
        """``(first slot, values)`` covering ``count`` slots from ``start``, read through one
        reused buffer (each array is valid until the next step)."""
        item = self._dt.itemsize
        step = max(1, _READ_WINDOW // item)
        buffer = aligned_bytes(min(step, count) * item, 4096)
        for first in range(start, start + count, step):
            n = min(step, start + count - first)
            self._pread("export_span", buffer[: n * item], first * item)
            yield first, buffer[: n * item].view(self._np)

    # -- storage hooks ------------------------------------------------------------------------

    def _storage_size(self) -> int:
        return self._size

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _storage_mutable(self) -> bool:
        return self._writable

    def _read(self, index: int) -> Any:
        return self._span("read", index, index + 1)[0].item()

    def _write(self, index: int, value: Any) -> None:
        values = np.zeros(1, self._np)
        values[0] = value
        with self._write_lock:
            self._pwrite("write", values.view(np.uint8).data, index * self._dt.itemsize)

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        if layout.size == 0:
            return np.zeros(layout.shape, self._np)
        low, high = layout.span()
        return strided(self._span("export_span", low, high), layout, low)

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        if layout.size == 0:
            return
        item = self._dt.itemsize
        with self._write_lock:
            if layout.is_contiguous:
                data = np.ascontiguousarray(values, dtype=self._np).reshape(-1)
                self._pwrite("import_span", data.view(np.uint8).data, layout.offset * item)
                return
            low, high = layout.span()  # read-modify-write of the span the strided slots cover
            flat = self._span("import_span", low, high)
            strided(flat, layout, low, writeable=True)[...] = values
            self._pwrite("import_span", flat.view(np.uint8).data, low * item)

    def _release(self) -> None:
        self._finalizer()  # waits for transfers in flight, then closes the descriptor
        if self._owned:
            _delete(self._path, self._size * self._dt.itemsize)

    # -- dispatch -----------------------------------------------------------------------------

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        view = _VIEWS.get(operation_name)
        if view is None:
            raise storage_only_refusal(
                operation_name, FileBacked, why="FileBacked is storage only", move_to="cpu"
            )
        return view()

    def __repr__(self) -> str:
        state = "released" if self.released else ("owned" if self._owned else "read-only")
        return f"<FileBacked size={self._size} dtype={self._dt.name} {state} path={self._path!r}>"


# Views are layout algebra over the same file; a copy no layout expresses goes into a sibling
# FileBacked (``allocate_like``) through the storage contract.
_VIEWS: Final = view_operations()
