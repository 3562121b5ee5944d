"""DaskCarrier: tensors as chunked dask arrays, lazy graphs computed when read.

The carrier is an open, definition-backed sibling of ``conveyor.Carrier``: it writes no
``Operation``. Its ``CarrierDefinition`` supplies storage (``_storage``: one dask array per
carrier, stored data or a lazy graph), kernels (``_kernels``: every planned name as a dask graph
over CPU's kernels, with the plans it executes) and moves (``_routes``). Conveyor binds, plans,
gates, validates and differentiates at the call, so gradients come from the central VJPs and
build graphs too. Values are computed when something reads them (``numpy()``, ``item()``,
``cv.move(t, "cpu")``) or asks for them (``DaskCarrier.persist``). Dask itself is imported on
first use, not when this module loads.
"""

from __future__ import annotations

from typing import Any, Final

import conveyor as cv
from conveyor.sdk import enumerate_plans, operation_definition
from conveyor_dask import _cluster, _kernels, _routes, _storage
from conveyor_generic import CPU, Generic

__all__ = ["DaskCarrier"]

STORAGE: Final = _storage.DaskStorage()


class DaskCarrier(cv.Carrier):
    """A carrier whose slots live on a Dask cluster; open, so others may build siblings on it.

    With no configuration the first tensor starts an embedded ``LocalCluster`` on 127.0.0.1
    (one worker process per core), closed at exit. ``CONVEYOR_DASK_SCHEDULER`` or
    ``DaskCarrier.connect(address)`` uses an existing scheduler instead, or Dask's schedulers in
    this process (``"threads"``, ``"synchronous"``). Operations are lazy (``persist`` computes,
    ``CONVEYOR_DASK_EAGER=1`` computes every result at its call). Chunks are sized from
    the data and the workers' memory limit; ``CONVEYOR_DASK_CHUNK`` (bytes, e.g. ``"64MiB"``)
    overrides the limit, and ``repr`` shows both.
    """

    @staticmethod
    def connect(address: str, *, timeout: float = 10.0, security: Any = None) -> None:
        """Compute on the scheduler at ``address`` (``tcp://host:port``) from now on.

        ``timeout`` bounds, in seconds, how long the first connection may take. ``security``, a
        ``distributed.Security``, holds the TLS credentials for a ``tls://`` scheduler; without
        it Dask's own configuration applies (``distributed.comm.tls.*``, or the
        ``distributed.client.security-loader`` it names).

        Tensors made before keep their old cluster's data only while that cluster lives; an
        embedded cluster Conveyor started is closed.

        Raises:
            ValueError: ``address`` is empty or not a string.
            TypeError: ``security`` is not a ``distributed.Security``.
            RuntimeError: no Dask scheduler answers at ``address`` within ``timeout`` (nothing
                listens, something else answers, the address has no port, or a TLS scheduler
                refused the credentials); the cluster in use stays in use.
        """
        _cluster.connect(address, timeout, security)

    @staticmethod
    def persist(*tensors: cv.Tensor) -> None:
        """Compute the values of ``tensors`` now and keep them, in place.

        Kept on the workers (on a local scheduler, in this process), so later operations and
        reads start from the values instead of recomputing their graphs: persist what a loop
        reads again and again (weights in training), or to see a task's error at a chosen
        point. Graphs the tensors share are computed once. Already computed tensors cost
        nothing.

        Raises:
            TypeError: a tensor does not live on a DaskCarrier; nothing is computed.
            RuntimeError: a cluster fault (a lost worker, the scheduler gone), naming the
                operations whose results were being computed; the tensors stay lazy.
            Exception: what a task raised (a ``gather`` index out of range is ``IndexError``
                naming ``gather``); the tensors stay lazy.
        """
        handles: dict[int, _storage.Distributed] = {}
        for tensor in tensors:
            carrier = tensor.carrier if isinstance(tensor, cv.Tensor) else None
            if not isinstance(carrier, DaskCarrier):
                where = type(carrier).__name__ if carrier is not None else type(tensor).__name__
                msg = (
                    f"persist on DaskCarrier: expected tensors on a DaskCarrier, got {where}; "
                    f"move it with cv.move(tensor, DaskCarrier) first"
                )
                raise TypeError(msg)
            handle = carrier._handle()
            if not handle.stored:
                handles[id(handle)] = handle
        by_session: dict[int, list[_storage.Distributed]] = {}
        for handle in handles.values():
            by_session.setdefault(id(handle.session), []).append(handle)
        for group in by_session.values():
            names = ", ".join(sorted({h.origin for h in group}))
            done = _storage.persist(names, [h.base for h in group], group[0].session, reading=True)
            for handle, array in zip(group, done, strict=True):
                handle.base, handle.stored = array, True

    @staticmethod
    def close() -> None:
        """Disconnect (and stop the embedded cluster, if Conveyor started it); idempotent."""
        _cluster.close()

    @staticmethod
    def dashboard_link() -> str | None:
        """The dashboard of the cluster in use, or ``None`` when none is active."""
        found = _cluster.active_session()
        return found.dashboard if found is not None else None

    def _handle(self) -> _storage.Distributed:
        handle: _storage.Distributed = cv.storage_handle(self)
        return handle

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of the largest chunk of the stored array."""
        return self._handle().chunks

    @property
    def chunk_limit(self) -> int:
        """The byte limit chunks were sized under (``CONVEYOR_DASK_CHUNK`` when set)."""
        return self._handle().limit

    @property
    def scheduler_address(self) -> str:
        """The scheduler holding this carrier's data."""
        return self._handle().session.address

    def __repr__(self) -> str:
        try:
            handle = self._handle()
        except (NotImplementedError, RuntimeError):
            return "<DaskCarrier>"
        from dask.utils import format_bytes

        return (
            f"<DaskCarrier size={handle.size} dtype={handle.dtype.name} chunks={handle.chunks} "
            f"chunk_limit={format_bytes(handle.limit)} scheduler={handle.session.address}>"
        )


def _plans(name: str) -> list[cv.OperationCapability]:
    """The plans of ``name`` over storable dtypes; a rule, so enumerated on first query only."""
    storable = STORAGE.supports_dtype
    return [
        cv.OperationCapability.from_plan(plan)
        for plan in enumerate_plans(name)
        if all(storable(o.dtype) for o in plan.operands if o.dtype is not None and not o.weak)
        and all(storable(o.convert_to) for o in plan.operands if o.convert_to is not None)
        and all(storable(out) for out in plan.outputs)
    ]


def _kernel_provider() -> cv.KernelProvider:
    # Only names with a central definition can dispatch; advertising others would be a lie.
    patterns = [
        cv.KernelPattern(
            operation=name, kernel=kernel, plans=cv.CapabilitySet.by_rule([name], _plans)
        )
        for name, kernel in _kernels.PLANNED.items()
        if operation_definition(name) is not None
    ]
    patterns += [
        cv.KernelPattern(operation=name, kernel=_kernels.view)
        for name in _kernels.VIEWS
        if operation_definition(name) is not None
    ]
    return cv.KernelProvider(patterns)


def _transfers() -> list[cv.TransferRoute]:
    into, out = _routes.IntoDask(), _routes.OutOfDask()
    routes = [
        cv.TransferRoute(source=DaskCarrier, destination=DaskCarrier, provider=_routes.WithinDask())
    ]
    for other in (CPU, Generic):
        routes.append(cv.TransferRoute(source=other, destination=DaskCarrier, provider=into))
        routes.append(cv.TransferRoute(source=DaskCarrier, destination=other, provider=out))
    try:
        from conveyor_storage import FileBacked
    except ImportError:  # conveyor-storage is optional: no file route without it
        return routes
    routes.append(
        cv.TransferRoute(source=FileBacked, destination=DaskCarrier, provider=_routes.FromFile())
    )
    return routes


cv.register_carrier_definition(
    DaskCarrier,
    cv.CarrierDefinition(storage=STORAGE, kernels=_kernel_provider(), transfers=_transfers()),
)
