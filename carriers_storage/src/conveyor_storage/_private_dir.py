"""The process's private directory for FileBacked files, and the sweep of dead processes' ones.

Each process that allocates a FileBacked without a directory gets ``conveyor-storage-*`` under
the system temporary directory, removed at exit. A process killed with ``SIGKILL`` never runs
its exit hooks, so its directory stays behind, possibly with full-size files. To tell a dead
owner's directory from a live one, the owner holds an exclusive ``flock`` on ``.owner.lock``
inside it for its whole life (the kernel drops the lock when the process dies, whatever kills
it; a PID check would be fooled by PID reuse). The first process to need its own directory
removes every other one whose lock it can take. The lock file is created under another name and
renamed into place already locked, so a sweeper never sees a live directory's lock unheld.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import threading

__all__ = ["holds", "new_file", "path", "sweep"]

_PREFIX = "conveyor-storage-"
_LOCK = ".owner.lock"

_lock = threading.Lock()
_path: str | None = None
_lock_fd: int | None = None  # held open (and locked) for the life of the process


def _remove(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child must not remove its parent's files
        shutil.rmtree(folder, ignore_errors=True)


def sweep(root: str) -> list[str]:
    """Remove the private directories under ``root`` whose owner process is gone.

    Returns the directories removed. Directories without a lock file (another version, or one
    being created) and directories of other users are left alone.
    """
    try:
        names = os.listdir(root)
    except OSError:
        return []
    removed = []
    for name in names:
        folder = os.path.join(root, name)
        if not name.startswith(_PREFIX) or folder == _path:
            continue
        try:
            fd = os.open(os.path.join(folder, _LOCK), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: the owner is alive
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


def path() -> str:
    """The process's private directory, created (and leftovers swept) on first use."""
    global _path, _lock_fd
    with _lock:
        if _path is None:
            root = tempfile.gettempdir()
            sweep(root)
            folder = tempfile.mkdtemp(prefix=_PREFIX, dir=root)
            staged = os.path.join(folder, f"{_LOCK}.new")
            fd = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(staged, os.path.join(folder, _LOCK))
            _path, _lock_fd = folder, fd
            atexit.register(_remove, folder, os.getpid())
        return _path


def holds(file: str) -> bool:
    """Whether ``file`` lies in the process's private directory."""
    return _path is not None and os.path.dirname(file) == _path


def new_file(where: str, kind: str, pending: str | None) -> tuple[int, str]:
    """A new empty file in ``where``: ``conveyor-*.{kind}``, or hidden ``.conveyor-*.{kind}``
    + ``pending`` while a copy fills it. Returns the open descriptor and the path."""
    if pending is None:
        return tempfile.mkstemp(prefix="conveyor-", suffix=f".{kind}", dir=where)
    return tempfile.mkstemp(prefix=".conveyor-", suffix=f".{kind}{pending}", dir=where)
