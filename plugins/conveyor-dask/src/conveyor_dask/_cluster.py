"""The cluster a DaskCarrier computes on: one process-wide ``distributed.Client``.

With no configuration the first use starts an embedded ``LocalCluster`` on 127.0.0.1 (worker
processes, one per core, one thread each) and closes it at interpreter exit. It speaks only TLS,
with a certificate made for this process alone (``distributed.Security.temporary()``) that every
side must present, so no other process can connect to it and run code in its workers.
``CONVEYOR_DASK_SCHEDULER=tcp://host:port`` or ``DaskCarrier.connect(address)`` attaches to a
running scheduler instead (one started by ``dask scheduler`` / ``dask worker``, for instance);
Conveyor never closes a cluster it did not start. Before a client is made for such an address,
a bounded probe checks that a Dask scheduler answers there, so a wrong address is a
``RuntimeError`` naming it within the connect timeout. ``CONVEYOR_DASK_SCHEDULER=threads`` (or
``synchronous``) computes on Dask's schedulers inside this process instead: no processes, no
ports, no client. Failures of the cluster itself (a scheduler
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
    "EAGER_VARIABLE",
    "LAYERS_VARIABLE",
    "LOCAL_SCHEDULERS",
    "SCHEDULER_VARIABLE",
    "active_session",
    "chunk_limit",
    "close",
    "connect",
    "eager",
    "max_layers",
    "session",
]

SCHEDULER_VARIABLE: Final = "CONVEYOR_DASK_SCHEDULER"
CHUNK_VARIABLE: Final = "CONVEYOR_DASK_CHUNK"
# "1": every operation computes its result and waits for it (errors at the call), not lazily.
EAGER_VARIABLE: Final = "CONVEYOR_DASK_EAGER"
# A lazy result whose graph has more layers than this is persisted (0: never).
LAYERS_VARIABLE: Final = "CONVEYOR_DASK_MAX_LAYERS"
# About one to four layers per operation (a reduction is a partial and an aggregate layer, a
# conversion one more): a few hundred operations, far more than one pipeline or a training
# step, and a graph dask optimises in milliseconds.
_DEFAULT_MAX_LAYERS: Final = 256
# Names of Dask's own schedulers that run in this process, accepted where an address is.
LOCAL_SCHEDULERS: Final = ("threads", "synchronous")

# Chunk bytes are kept between these bounds: smaller chunks drown in task overhead (~1 ms each),
# larger ones stop spreading work across workers and strain a worker's memory limit.
_MIN_CHUNK: Final = 1 << 20
_MAX_CHUNK: Final = 128 << 20
# How long a wait sleeps between checks that the scheduler is still there.
_POLL_S: Final = 0.5
# How long connecting to a scheduler named by CONVEYOR_DASK_SCHEDULER may take, in seconds.
_CONNECT_TIMEOUT_S = 10.0
# An example address for messages.
_EXAMPLE: Final = "tcp://127.0.0.1:8786"


class _Session:
    """A connected client, the address it reached, and the cluster Conveyor owns (if any)."""

    local: Final = False  # a distributed cluster: futures, workers that can be lost

    __slots__ = ("_memory", "_threads", "address", "client", "cluster", "security", "workers")

    def __init__(
        self,
        client: distributed.Client,
        cluster: Any,
        address: str,
        security: distributed.Security | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.address = address
        # The credentials the client connected with: the embedded cluster's own, the ones given
        # to connect, or those of Dask's configuration.
        self.security = security
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


class _LocalSession:
    """Dask's threaded or synchronous scheduler in this process: no client, no workers.

    It answers what a ``_Session`` answers, so storage and kernels need no other path than
    choosing ``dask.persist`` / ``dask.compute`` over the client's. Nothing here can be lost
    or go away: every failure is a task's own exception.
    """

    local: Final = True
    client: Final = None
    cluster: Final = None
    security: Final = None
    dashboard: Final = None
    worker_memory: Final = 0  # this process's memory: chunks keep the size bounds alone
    workers: Final[frozenset[str]] = frozenset()

    __slots__ = ("address", "threads")

    def __init__(self, kind: str) -> None:
        self.address = kind
        # Chunks are sized for about four per thread, as on a cluster.
        self.threads = (os.cpu_count() or 1) if kind == "threads" else 1

    def check(self, operation: str) -> None:
        """Nothing to check: the scheduler is this process."""

    def lost_workers(self) -> list[str]:
        return []

    def close(self) -> None:
        """Nothing to close: the local schedulers hold no resources between computations."""


_AnySession = _Session | _LocalSession

_lock = threading.RLock()
_current: _AnySession | None = None


def scheduler_gone(operation: str, address: str, detail: str) -> RuntimeError:
    msg = (
        f"{operation} on DaskCarrier: the Dask scheduler at {address} is unreachable ({detail}); "
        f"start it again, then call DaskCarrier.connect({address!r}) (or set "
        f"{SCHEDULER_VARIABLE}) to reconnect"
    )
    return RuntimeError(msg)


def not_a_scheduler(address: str, detail: str, *, variable: bool) -> RuntimeError:
    """The error for an address where no Dask scheduler answers as one."""
    where = _where(address, variable)
    if variable:
        fix = (
            f"set {SCHEDULER_VARIABLE} to the address `dask scheduler` prints (such as "
            f"{_EXAMPLE!r}), or unset it to use the embedded cluster"
        )
    else:
        fix = (
            f"pass the address `dask scheduler` prints, such as {_EXAMPLE!r} (the form "
            f"{SCHEDULER_VARIABLE} takes too)"
        )
    msg = f"connect on DaskCarrier: {where} is not a Dask scheduler ({detail}); {fix}"
    return RuntimeError(msg)


def _resolve_security(address: str, security: Any) -> distributed.Security:
    """What ``distributed.Client`` would use: the argument, the configured loader, the config."""
    import dask
    import distributed

    if security is None:
        loader = dask.config.get("distributed.client.security-loader", None)
        if loader:
            from dask.utils import import_term

            security = import_term(loader)({"address": address})
    if security is None:
        security = distributed.Security()  # reads distributed.comm.tls.* from Dask's config
    if not isinstance(security, distributed.Security):
        msg = (
            f"connect on DaskCarrier: security must be a distributed.Security, got "
            f"{type(security).__name__}; build one with distributed.Security(tls_ca_file=..., "
            f"tls_client_cert=..., tls_client_key=...)"
        )
        raise TypeError(msg)
    found: distributed.Security = security
    return found


def _where(address: str, variable: bool) -> str:
    if variable:
        return f"{SCHEDULER_VARIABLE}={address!r}"
    return f"the address {address!r} given to DaskCarrier.connect"


def _credentials(address: str, detail: str, variable: bool) -> RuntimeError:
    msg = (
        f"connect on DaskCarrier: {_where(address, variable)} is a TLS scheduler address, but "
        f"{detail}; pass security=distributed.Security(tls_ca_file=..., tls_client_cert=..., "
        f"tls_client_key=...) to DaskCarrier.connect, or give the same files through Dask's "
        f"configuration (distributed.comm.tls.ca-file, distributed.comm.tls.client.cert, "
        f"distributed.comm.tls.client.key; as variables DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
        f"DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY)"
    )
    return RuntimeError(msg)


# Past the connect timeout, how long the probe still waits for the handshake's answer, so a
# port where nothing listens is told apart from a server that accepts and never answers.
_ANSWER_MARGIN_S: Final = 1.0


def _probe(address: str, timeout: float, security: distributed.Security, variable: bool) -> None:
    """Refuse ``address`` unless a Dask scheduler answers there within about ``timeout`` s.

    ``distributed.Client`` waits for the other side's handshake without a limit and reads any
    bytes it gets as a Dask frame (an HTTP server's reply becomes an exabyte allocation), so
    this asks first, on a private event loop in a helper thread (the caller may be inside a
    running loop, as in Jupyter): Dask's own connection (retried until ``timeout``), its
    handshake and an ``identity`` request, bounded together.
    """
    import asyncio
    import time

    from distributed.comm import connect as comm_connect
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.core import CommClosedError, FatalCommClosedError
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)  # an unknown scheme is a ValueError naming the known ones
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)  # "missing port number"
        arguments = security.get_connection_args("client")
    except (ValueError, TypeError) as exc:
        raise not_a_scheduler(address, str(exc), variable=variable) from exc
    if scheme in ("tls", "wss") and arguments.get("ssl_context") is None:
        raise _credentials(address, "no TLS credentials were given", variable)
    deadline = time.monotonic() + timeout

    async def ask() -> Any:
        comm = await comm_connect(address, timeout=timeout, **arguments)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(asyncio.wait_for(ask(), timeout + _ANSWER_MARGIN_S)))
        except BaseException as exc:  # reported on the calling thread
            outcome.append(exc)

    helper = threading.Thread(target=run, name="conveyor-dask connect probe", daemon=True)
    helper.start()
    helper.join(max(deadline - time.monotonic(), 0) + _ANSWER_MARGIN_S + 5.0)  # ends first
    reply = outcome[0] if outcome else TimeoutError()
    if type(reply) is OSError:  # Dask's connect gave up: nothing accepted the connection
        raise scheduler_gone("connect", address, str(reply)) from reply
    if isinstance(reply, FatalCommClosedError):  # the TLS handshake refused the certificates
        raise _credentials(address, f"its TLS handshake failed ({reply})", variable) from reply
    if isinstance(reply, (TimeoutError, asyncio.TimeoutError)):
        detail = (
            f"it accepted a connection but gave no Dask handshake within "
            f"{timeout + _ANSWER_MARGIN_S:g} s"
        )
        raise not_a_scheduler(address, detail, variable=variable)
    if isinstance(reply, CommClosedError) and scheme in ("tls", "wss"):
        detail = "it closed the connection after the TLS handshake: its CA does not trust ours"
        raise _credentials(address, detail, variable) from reply
    if isinstance(reply, BaseException):
        text = " ".join(str(reply).split())[:160]
        detail = f"its answer to Dask's handshake was not Dask's: {type(reply).__name__}: {text}"
        raise not_a_scheduler(address, detail, variable=variable) from reply
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        detail = f"it answered as a Dask {kind}" if kind else f"it answered {reply!r:.80}"
        raise not_a_scheduler(address, detail, variable=variable)


def _client(
    address: str, timeout: float, security: Any = None, *, variable: bool = False
) -> tuple[distributed.Client, distributed.Security]:
    import distributed

    found = _resolve_security(address, security)
    _probe(address, timeout, found, variable)
    try:
        client = distributed.Client(address, timeout=timeout, security=found, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise scheduler_gone("connect", address, str(exc) or type(exc).__name__) from exc
    return client, found


def _embedded() -> _Session:
    """A LocalCluster on loopback: worker processes, one per core, one thread each.

    Every connection is TLS with this process's own certificate, required both ways, so only
    this process (and the workers it starts) can connect.
    """
    import distributed

    security = distributed.Security.temporary()  # a fresh self-signed certificate, in memory
    cluster = distributed.LocalCluster(
        n_workers=os.cpu_count() or 1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        protocol="tls://",
        security=security,
        dashboard_address="127.0.0.1:0",
    )
    client = distributed.Client(cluster, security=security, set_as_default=False)
    # Registered after distributed's own exit handlers (atexit runs the latest first), so the
    # cluster is closed here, quietly, before distributed tears it down with warnings.
    atexit.register(close)
    return _Session(client, cluster, cluster.scheduler_address, security)


def session() -> _AnySession:
    """The current session, starting one on first use (the variable, else an embedded cluster)."""
    global _current
    found = _current
    if found is not None:
        return found
    with _lock:
        if _current is None:
            address = os.environ.get(SCHEDULER_VARIABLE, "").strip()
            if address in LOCAL_SCHEDULERS:
                _current = _LocalSession(address)
            elif address:
                client, security = _client(address, _CONNECT_TIMEOUT_S, variable=True)
                _current = _Session(client, None, address, security)
            else:
                _current = _embedded()
        return _current


def active_session() -> _AnySession | None:
    """The current session without starting one (for ``conveyor doctor``)."""
    return _current


def connect(address: str, timeout: float = 10.0, security: Any = None) -> _AnySession:
    """Use the scheduler at ``address`` from now on; an embedded cluster we started closes.

    ``security`` (a ``distributed.Security``) holds the TLS credentials for a ``tls://``
    scheduler; without it Dask's configuration (``distributed.comm.tls.*``) applies.
    ``"threads"`` and ``"synchronous"`` name Dask's schedulers in this process.
    """
    global _current
    if not isinstance(address, str) or not address.strip():
        msg = (
            f"connect on DaskCarrier: address must be a scheduler address such as "
            f"'tcp://127.0.0.1:8786', got {address!r}"
        )
        raise ValueError(msg)
    fresh: _AnySession
    if address.strip() in LOCAL_SCHEDULERS:
        fresh = _LocalSession(address.strip())
    else:
        client, found = _client(address, timeout, security)
        fresh = _Session(client, None, address, found)
    with _lock:
        old, _current = _current, fresh
    if old is not None:
        _close_quietly(old)
    return fresh


def _close_quietly(found: _AnySession) -> None:
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


def chunk_limit(nbytes: int, found: _AnySession) -> int:
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


def eager() -> bool:
    """Whether ``CONVEYOR_DASK_EAGER`` asks every operation to compute before it returns.

    Read at every call (a dict lookup), so a program or a test may switch it at any time.

    Raises:
        ValueError: the variable holds something other than ``0``/``1`` (or empty).
    """
    value = os.environ.get(EAGER_VARIABLE, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    msg = f"DaskCarrier: {EAGER_VARIABLE}={value!r} must be '1' (eager) or '0' (lazy), or unset"
    raise ValueError(msg)


def max_layers() -> int:
    """The graph layers past which a lazy result is persisted (``CONVEYOR_DASK_MAX_LAYERS``).

    Raises:
        ValueError: the variable is not a non-negative integer.
    """
    value = os.environ.get(LAYERS_VARIABLE, "").strip()
    if not value:
        return _DEFAULT_MAX_LAYERS
    if not value.isdigit():
        msg = (
            f"DaskCarrier: {LAYERS_VARIABLE}={value!r} must be a whole number of graph layers "
            f"(0: never persist automatically), or unset for {_DEFAULT_MAX_LAYERS}"
        )
        raise ValueError(msg)
    return int(value)


def wait(operation: str, futures: Iterable[Any], found: _Session, *, reading: bool = False) -> None:
    """Block until ``futures`` finish; raise what a task raised, or a cluster fault as RuntimeError.

    ``reading``: the futures compute a lazy result being read (its operation returned long
    ago), so a fault message says no value was read rather than that nothing was published.
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
            raise lost(operation, found, _cancelled(exc), cancelled=True, reading=reading) from exc
        except OSError as exc:
            raise scheduler_gone(operation, found.address, str(exc)) from exc
        pending = list(done.not_done)
        for future in done.done:
            if future.status == "error":
                raise _task_error(operation, future, found, reading)
            if future.status == "lost":
                # Its worker died after it finished: the scheduler recomputes it from inputs
                # it can still reach, or cancels it (the CancelledError above), so wait on.
                pending.append(future)
            elif future.status != "finished":
                detail = f"task {future.key!r} was {future.status}"
                raise lost(operation, found, detail, reading=reading)
    if bridge is not None:
        bridge.tell(finished=True)


def _cancelled(exc: BaseException) -> str:
    groups = getattr(exc, "error_groups", None) or []
    reasons = sorted({str(getattr(group, "reason", "")) for group in groups} - {""})
    return f"{type(exc).__name__}: {', '.join(reasons)}" if reasons else type(exc).__name__


def _outcome(reading: bool) -> str:
    return "no value was read" if reading else "nothing was published"


def lost(
    operation: str,
    found: _Session,
    detail: str,
    *,
    cancelled: bool = False,
    reading: bool = False,
) -> RuntimeError:
    """A worker went away with data the operation needs, and Dask could not recompute it.

    Dask recomputes what it has a recipe for (data read from a file, intermediate results).
    What it cancels (``cancelled``) is data sent from this process: it was only on that worker,
    and running the operation again on the same tensors fails the same way. A result reported
    lost without a cancellation may have been either kind, so both remedies are named.
    """
    workers = found.lost_workers()
    if found.client.status != "running":
        return scheduler_gone(operation, found.address, detail)
    who = f"worker {', '.join(workers)}" if workers else "a worker"
    head = (
        f"{operation} on DaskCarrier: the cluster lost {who} and data this operation needs "
        f"({detail}); {_outcome(reading)}. "
    )
    resend = (
        "Send the values again (cv.tensor(values, carrier='dask') or cv.move(t, DaskCarrier) "
        "from a copy outside the cluster) and run it on the new tensors; to survive a worker's "
        "loss, keep the data in a file (cv.move from FileBacked), which Dask can read again"
    )
    if cancelled:
        msg = head + (
            "Values sent from this process (cv.tensor, cv.move from CPU or Generic) larger than "
            "1 MiB were held only by the worker that received them and cannot be recomputed, so "
            "they are lost: running the operation again on these tensors fails the same way. "
            + resend
        )
    else:
        msg = head + (
            "If its operands hold values sent from this process (cv.tensor, cv.move from CPU or "
            "Generic, larger than 1 MiB), those were only on that worker and are lost. "
            + resend
            + "; data read from a file is read again, so then running the operation again works"
        )
    return RuntimeError(msg)


def _killed(operation: str, found: _Session, detail: str, reading: bool) -> RuntimeError:
    found.lost_workers()  # the record of workers moves on
    if found.client.status != "running":
        return scheduler_gone(operation, found.address, detail)
    msg = (
        f"{operation} on DaskCarrier: the cluster lost worker after worker while they ran one "
        f"task ({detail}); {_outcome(reading)}. A task that ends every worker running it "
        f"usually needs more memory than a worker has: set {CHUNK_VARIABLE} smaller (e.g. "
        f"'16MiB') or give the workers more memory, then run the operation again"
    )
    return RuntimeError(msg)


def _task_error(operation: str, future: Any, found: _Session, reading: bool) -> BaseException:
    from distributed.scheduler import KilledWorker

    exc = future.exception()
    if isinstance(exc, KilledWorker):
        error = _killed(operation, found, str(exc), reading)
        error.__cause__ = exc
        return error
    assert isinstance(exc, BaseException)
    return exc


def describe(found: _AnySession) -> dict[str, str]:
    """``conveyor doctor``'s lines for a session: scheduler, dashboard, workers."""
    if found.local:
        where = f"{found.address} (Dask's scheduler, in this process)"
        return {"scheduler": where, "threads": str(found.threads)}
    return {
        "scheduler": found.address,
        "dashboard": found.dashboard or "none (install bokeh for Dask's dashboard)",
        "workers": str(len(found.workers)),
    }


def probe(address: str) -> dict[str, str]:
    """``conveyor doctor``'s lines for a scheduler address, from a short-lived connection."""
    try:
        client, security = _client(address, 3.0, variable=True)
    except RuntimeError as exc:
        return {"scheduler": address, "state": f"unreachable ({exc.__cause__ or exc})"}
    found = _Session(client, None, address, security)
    try:
        return describe(found)
    finally:
        _close_quietly(found)
