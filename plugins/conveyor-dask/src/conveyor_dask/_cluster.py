"""The cluster a DaskCarrier computes on: one process-wide ``distributed.Client``.

With no configuration the first use starts an embedded ``LocalCluster`` on 127.0.0.1 (worker
processes, one per core, one thread each) and closes it at interpreter exit.
``CONVEYOR_DASK_SCHEDULER=tcp://host:port`` or ``DaskCarrier.connect(address)`` attaches to a
running scheduler instead (one started by ``dask scheduler`` / ``dask worker``, for instance);
Conveyor never closes a cluster it did not start. Failures of the cluster itself (a scheduler
that went away, a worker lost mid-computation) become ``RuntimeError`` messages that say what
happened and what to do, so callers never see a half-computed or wrong result.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import distributed

__all__ = [
    "CHUNK_VARIABLE",
    "SCHEDULER_VARIABLE",
    "active_session",
    "chunk_limit",
    "close",
    "connect",
    "session",
]

SCHEDULER_VARIABLE: Final = "CONVEYOR_DASK_SCHEDULER"
CHUNK_VARIABLE: Final = "CONVEYOR_DASK_CHUNK"

# Chunk bytes are kept between these bounds: smaller chunks drown in task overhead (~1 ms each),
# larger ones stop spreading work across workers and strain a worker's memory limit.
_MIN_CHUNK: Final = 1 << 20
_MAX_CHUNK: Final = 128 << 20
# How long a wait sleeps between checks that the scheduler is still there.
_POLL_S: Final = 0.5


class _Session:
    """A connected client, the address it reached, and the cluster Conveyor owns (if any)."""

    __slots__ = ("_memory", "_threads", "address", "client", "cluster", "workers")

    def __init__(self, client: distributed.Client, cluster: Any, address: str) -> None:
        self.client = client
        self.cluster = cluster
        self.address = address
        info = client.scheduler_info()
        self.workers: set[str] = set(info["workers"])
        memory = [w.get("memory_limit") or 0 for w in info["workers"].values()]
        threads = sum(w.get("nthreads") or 1 for w in info["workers"].values())
        self._memory = min((m for m in memory if m), default=0)
        self._threads = max(threads, 1)

    @property
    def worker_memory(self) -> int:
        """The smallest worker memory limit in bytes (0: unlimited or unknown)."""
        return self._memory

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def dashboard(self) -> str | None:
        link: str | None = getattr(self.client, "dashboard_link", None)
        return link

    def check(self, operation: str) -> None:
        """Refuse to start work when the scheduler is gone (the client lost its connection)."""
        if self.client.status != "running":
            raise scheduler_gone(operation, self.address, f"client status {self.client.status!r}")

    def lost_workers(self) -> list[str]:
        """Workers seen before that the scheduler no longer lists (refreshes the record)."""
        try:
            now = set(self.client.scheduler_info()["workers"])
        except Exception:  # the scheduler itself may be gone; nothing to compare then
            return []
        lost = sorted(self.workers - now)
        self.workers = now
        return lost

    def close(self) -> None:
        if self.cluster is None:
            self.client.close()
            return
        # Closing the embedded cluster is the end of the program's use of it: the scheduler's
        # "removing worker ... lose already computed task(s)" (the persisted tensors go with
        # it) and the nannies' "still alive after 4.0 seconds, killing" describe exactly that
        # teardown, so they are not shown; errors still are. (logging is loaded by distributed
        # already; importing it here keeps it out of a plain plugin scan.)
        import logging

        loggers = [logging.getLogger(n) for n in ("distributed.scheduler", "distributed.nanny")]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            self.client.close()
            self.cluster.close()
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


_lock = threading.RLock()
_current: _Session | None = None


def scheduler_gone(operation: str, address: str, detail: str) -> RuntimeError:
    msg = (
        f"{operation} on DaskCarrier: the Dask scheduler at {address} is unreachable ({detail}); "
        f"start it again, then call DaskCarrier.connect({address!r}) (or set "
        f"{SCHEDULER_VARIABLE}) to reconnect"
    )
    return RuntimeError(msg)


def _client(address: str, timeout: float = 10.0) -> distributed.Client:
    import distributed

    try:
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise scheduler_gone("connect", address, str(exc) or type(exc).__name__) from exc


def _embedded() -> _Session:
    """A LocalCluster on loopback: worker processes, one per core, one thread each."""
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=os.cpu_count() or 1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    client = distributed.Client(cluster, set_as_default=False)
    # Registered after distributed's own exit handlers (atexit runs the latest first), so the
    # cluster is closed here, quietly, before distributed tears it down with warnings.
    atexit.register(close)
    return _Session(client, cluster, cluster.scheduler_address)


def session() -> _Session:
    """The current session, starting one on first use (the variable, else an embedded cluster)."""
    global _current
    found = _current
    if found is not None:
        return found
    with _lock:
        if _current is None:
            address = os.environ.get(SCHEDULER_VARIABLE, "").strip()
            _current = _Session(_client(address), None, address) if address else _embedded()
        return _current


def active_session() -> _Session | None:
    """The current session without starting one (for ``conveyor doctor``)."""
    return _current


def connect(address: str, timeout: float = 10.0) -> _Session:
    """Use the scheduler at ``address`` from now on; an embedded cluster we started closes."""
    global _current
    if not isinstance(address, str) or not address.strip():
        msg = (
            f"connect on DaskCarrier: address must be a scheduler address such as "
            f"'tcp://127.0.0.1:8786', got {address!r}"
        )
        raise ValueError(msg)
    fresh = _Session(_client(address, timeout), None, address)
    with _lock:
        old, _current = _current, fresh
    if old is not None:
        _close_quietly(old)
    return fresh


def _close_quietly(found: _Session) -> None:
    # A scheduler that already went away cannot be closed politely.
    with contextlib.suppress(Exception):
        found.close()


def close() -> None:
    """Close the session (and the embedded cluster, if Conveyor started it). Idempotent."""
    global _current
    with _lock:
        found, _current = _current, None
    if found is not None:
        _close_quietly(found)


atexit.register(close)


def chunk_limit(nbytes: int, found: _Session) -> int:
    """Bytes per chunk for an array of ``nbytes``: ``CONVEYOR_DASK_CHUNK``, else from its size.

    Large arrays are cut into about four chunks per worker thread so every worker has work,
    capped at an eighth of the smallest worker memory limit so a task's operands and result
    fit comfortably.
    """
    override = os.environ.get(CHUNK_VARIABLE, "").strip()
    if override:
        from dask.utils import parse_bytes

        try:
            value = int(parse_bytes(override))
        except (ValueError, TypeError):
            value = 0
        if value <= 0:
            msg = (
                f"allocate on DaskCarrier: {CHUNK_VARIABLE}={override!r} is not a positive byte "
                f"size; set it like '64MiB' or '1048576', or unset it"
            )
            raise ValueError(msg)
        return value
    ceiling = _MAX_CHUNK
    if found.worker_memory:
        ceiling = max(_MIN_CHUNK, min(ceiling, found.worker_memory // 8))
    return max(_MIN_CHUNK, min(ceiling, nbytes // (4 * found.threads) or 1))


def wait(operation: str, futures: Iterable[Any], found: _Session) -> None:
    """Block until ``futures`` finish; raise what a task raised, or a cluster fault as RuntimeError.

    The wait polls, so a scheduler that disappears mid-computation is reported within about
    ``_POLL_S`` of the client noticing instead of hanging.
    """
    from concurrent.futures import CancelledError  # loaded with distributed; not at plugin scan

    import distributed

    from conveyor.sdk import progress_active

    pending = list(futures)
    bridge = None
    if progress_active() and pending:
        from conveyor_dask._progress import Bridge

        bridge = Bridge(pending, found.client, f"{operation} on DaskCarrier")
    while pending:
        found.check(operation)
        try:
            # Listeners get a count about every 0.1 s; otherwise the wait only wakes to check
            # that the scheduler is still there.
            timeout = 0.1 if bridge is not None else _POLL_S
            done = distributed.wait(pending, timeout=timeout, return_when="ALL_COMPLETED")
        except TimeoutError:
            if bridge is not None:
                bridge.tell()
            continue
        except CancelledError as exc:  # their data went with a worker (FuturesCancelledError)
            raise lost(operation, found, type(exc).__name__) from exc
        except OSError as exc:
            raise scheduler_gone(operation, found.address, str(exc)) from exc
        pending = list(done.not_done)
        for future in done.done:
            if future.status == "error":
                raise _task_error(operation, future, found)
            if future.status != "finished":  # cancelled or lost with its worker
                raise lost(operation, found, f"task {future.key!r} was {future.status}")
    if bridge is not None:
        bridge.tell(finished=True)


def lost(operation: str, found: _Session, detail: str) -> RuntimeError:
    workers = found.lost_workers()
    if found.client.status != "running":
        return scheduler_gone(operation, found.address, detail)
    who = ", ".join(workers) if workers else "a worker (already replaced)"
    msg = (
        f"{operation} on DaskCarrier: the cluster lost worker {who} while computing ({detail}); "
        f"nothing was published; run the operation again"
    )
    return RuntimeError(msg)


def _task_error(operation: str, future: Any, found: _Session) -> BaseException:
    from distributed.scheduler import KilledWorker

    exc = future.exception()
    if isinstance(exc, KilledWorker):
        error = lost(operation, found, str(exc))
        error.__cause__ = exc
        return error
    assert isinstance(exc, BaseException)
    return exc


def describe(found: _Session) -> dict[str, str]:
    """``conveyor doctor``'s lines for a session: scheduler, dashboard, workers."""
    return {
        "scheduler": found.address,
        "dashboard": found.dashboard or "none (install bokeh for Dask's dashboard)",
        "workers": str(len(found.workers)),
    }


def probe(address: str) -> dict[str, str]:
    """``conveyor doctor``'s lines for a scheduler address, from a short-lived connection."""
    try:
        found = _Session(_client(address, timeout=3.0), None, address)
    except RuntimeError as exc:
        return {"scheduler": address, "state": f"unreachable ({exc.__cause__ or exc})"}
    try:
        return describe(found)
    finally:
        _close_quietly(found)
