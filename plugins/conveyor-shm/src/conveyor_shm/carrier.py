"""SharedMemoryCarrier: slots in a ``multiprocessing.shared_memory`` segment, shareable by name.

The carrier is an open sibling of ``conveyor.Carrier`` and writes no ``Operation``: it
registers a ``CarrierDefinition`` with a storage provider (one segment per carrier), a kernel
provider (NumPy kernels for the central definitions, one pattern per operation listing the
exact plans it executes), transfer routes to and from CPU and Generic, and a facet that tells
other processes where the data lives. Conveyor binds, plans, gates, validates results and
differentiates; this module only stores and computes.

A segment is unlinked when its carrier is released, when the carrier is garbage collected, and
at interpreter exit, by the process that created it. Another process attaches with
``SharedMemoryCarrier.attach(name, size, dtype)`` and reads the same memory without a copy.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.policy import enumerate_plans
from conveyor_generic import CPU, Generic

__all__ = ["SharedMemoryCarrier", "SharedMemoryFacet"]

_Array = np.ndarray[Any, Any]


def _close(shm: shared_memory.SharedMemory, owner: bool) -> None:
    """Close the mapping and, in the creating process, unlink the segment (idempotent)."""
    # A NumPy view still alive keeps the mapping (it goes with the view); the name goes now.
    with contextlib.suppress(BufferError):
        shm.close()
    if owner:
        with contextlib.suppress(FileNotFoundError):  # already unlinked
            shm.unlink()


class _Segment:
    """One shared-memory segment and the flat NumPy array over it (the storage handle)."""

    __slots__ = ("__weakref__", "_finalizer", "array", "name", "owner")

    def __init__(self, shm: shared_memory.SharedMemory, size: int, dtype: cv.DType, owner: bool):
        self.name: str = shm.name
        self.owner = owner
        self.array: _Array = np.ndarray((size,), dtype.numpy, buffer=shm.buf)
        # Runs on release, on garbage collection, or at interpreter exit, whichever is first.
        self._finalizer = weakref.finalize(self, _close, shm, owner)

    def close(self) -> None:
        self.array = np.empty(0, self.array.dtype)  # drop the export before closing
        self._finalizer()


def _strided(flat: _Array, layout: cv.Layout) -> _Array:
    item = flat.itemsize
    return np.ndarray(
        layout.shape,
        flat.dtype,
        buffer=flat,
        offset=layout.offset * item,
        strides=tuple(s * item for s in layout.strides),
    )


class _SharedMemoryStorage(cv.StorageProvider):
    """Storage provider: one named segment per carrier, zero-filled at creation."""

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return not dtype.is_abstract

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return max(size * np.dtype(dtype.numpy).itemsize, 1)  # a segment is never empty

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> _Segment:
        name = options.pop("name", None)
        if options:
            msg = f"allocate on SharedMemoryCarrier: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        shm = shared_memory.SharedMemory(name, create=True, size=self.physical_size(size, dtype))
        segment = _Segment(shm, size, dtype, owner=True)
        segment.array[...] = 0
        return segment

    def attach(self, name: str, size: int, dtype: cv.DType) -> _Segment:
        shm = shared_memory.SharedMemory(name)
        # Python 3.11 registers attached segments with this process's resource tracker, which
        # would unlink them at exit; only the creating process owns the name.
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # CPython's private name
        if shm.size < size * np.dtype(dtype.numpy).itemsize:
            shm.close()
            msg = f"attach on SharedMemoryCarrier: segment {name!r} is smaller than {size} slots"
            raise ValueError(msg)
        return _Segment(shm, size, dtype, owner=False)

    def release(self, handle: _Segment) -> None:
        handle.close()

    def read(self, handle: _Segment, index: int) -> Any:
        return handle.array[index].item()

    def write(self, handle: _Segment, index: int, value: Any) -> None:
        handle.array[index] = value

    def export_span(self, handle: _Segment, layout: cv.Layout, dtype: cv.DType) -> _Array:
        return _strided(handle.array, layout).copy()

    def import_span(
        self, handle: _Segment, layout: cv.Layout, dtype: cv.DType, values: _Array
    ) -> None:
        _strided(handle.array, layout)[...] = values


_STORAGE: Final = _SharedMemoryStorage()

# -- kernels -----------------------------------------------------------------------------------

# Compute dtypes with kernels; other plans are not advertised, so the gate refuses them.
_DTYPES: Final = frozenset({cv.float32, cv.float64, cv.int32, cv.int64})
_OPERAND_DTYPES: Final = _DTYPES | {cv.bool}


def _plans(name: str) -> tuple[cv.OperationPlan, ...]:
    return tuple(
        plan
        for plan in enumerate_plans(name)
        if plan.compute in _DTYPES
        and all(o.dtype in _OPERAND_DTYPES for o in plan.operands if o.dtype is not None)
        and all(out in _OPERAND_DTYPES for out in plan.outputs)
    )


def _operand(ctx: cv.KernelExecutionInterface, index: int) -> Any:
    """Operand ``index`` as NumPy, converted as the plan says; floats evaluate in float64."""
    x = ctx.operands[index]
    plan = ctx.invocation.plan
    assert plan is not None  # only planned names use this
    target = plan.operands[index].convert_to or plan.operands[index].dtype
    values = _strided(cv.storage_handle(x.carrier).array, x.layout) if type(x) is cv.Tensor else x
    values = np.asarray(values, target.numpy if target is not None else None)
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
    return values


def _publish(ctx: cv.KernelExecutionInterface, values: Any) -> cv.ProviderResult:
    out = ctx.allocate_result(0)
    flat = cv.storage_handle(out.carrier).array
    flat[...] = np.asarray(values).astype(flat.dtype).reshape(-1)
    return cv.ProviderResult(out)


def _elementwise(function: Callable[..., Any]) -> Callable[[cv.KernelExecutionInterface], Any]:
    def kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
        with np.errstate(all="ignore"):
            return _publish(ctx, function(*(_operand(ctx, i) for i in range(len(ctx.operands)))))

    return kernel


def _relu(x: _Array) -> _Array:
    return np.where(x > 0, x, np.zeros_like(x)) if x.dtype.kind != "f" else np.maximum(x, 0.0)


def _accumulator(ctx: cv.KernelExecutionInterface) -> Any:
    plan = ctx.invocation.plan
    assert plan is not None
    if plan.accumulation == "float":
        return (plan.accumulator_dtype or cv.float64).numpy
    return np.float64 if plan.compute.is_floating else plan.compute.numpy


def _reduce_sum(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    x = _operand(ctx, 0)
    spec = ctx.invocation.results[0]
    options = ctx.invocation.options or cv.OperationExecutionOptions("reduce_sum")
    axis = options.axis if x.ndim else None
    with np.errstate(all="ignore"):  # inf - inf is NaN, as in Generic
        values = np.sum(x, axis=axis, dtype=_accumulator(ctx), keepdims=options.keepdims)
    return _publish(ctx, np.reshape(values, spec.shape))


def _matmul(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    a, b = _operand(ctx, 0), _operand(ctx, 1)
    acc = _accumulator(ctx)
    with np.errstate(all="ignore"):
        return _publish(ctx, np.matmul(a.astype(acc), b.astype(acc)))


def _view(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    """Views alias their operand; a reshape that cannot be a view copies in row-major order."""
    if ctx.invocation.results[0].alias is not None:
        return cv.ProviderResult(ctx.alias_result(0))
    x = ctx.operands[0]
    return _publish(ctx, _strided(cv.storage_handle(x.carrier).array, x.layout))


_PLANNED: Final[dict[str, Callable[[cv.KernelExecutionInterface], Any]]] = {
    "add": _elementwise(np.add),
    "mul": _elementwise(np.multiply),
    "elementwise_mul": _elementwise(np.multiply),
    "relu": _elementwise(_relu),
    "lt": _elementwise(np.less),
    "select": _elementwise(np.where),
    "reduce_sum": _reduce_sum,
    "matmul": _matmul,
}
_VIEWS: Final = ("broadcast_to", "permute", "reshape", "squeeze", "unsqueeze")


def _kernels() -> cv.KernelProvider:
    patterns = [
        cv.KernelPattern(operation=name, kernel=kernel, plans=_plans(name))
        for name, kernel in _PLANNED.items()
    ]
    patterns += [cv.KernelPattern(operation=name, kernel=_view) for name in _VIEWS]
    return cv.KernelProvider(patterns)


# -- transfers and facets ----------------------------------------------------------------------


class _BulkTransfer(cv.TransferProvider):
    """One bulk copy through the public span contract: export on one side, import on the other."""

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        carrier = destination.allocate(source.size, source.dtype, **options)
        if source.size:
            values = source.carrier.export_span(source.layout).reshape(-1)
            carrier.import_span(cv.Layout((source.size,)), values)
        return cv.Tensor(carrier, cv.Layout(source.shape))


class SharedMemoryFacet(cv.CarrierFacet):
    """Where a shared-memory carrier's slots live, so another process can attach."""

    @property
    def name(self) -> str:
        """The segment name ``SharedMemoryCarrier.attach`` takes."""
        segment: _Segment = cv.storage_handle(self.carrier)
        return segment.name


class SharedMemoryCarrier(cv.Carrier):
    """Tensors in POSIX shared memory; open, so vendors may build on it with their own class.

    ``SharedMemoryCarrier.allocate(size, dtype, name=None)`` creates a segment (a random name
    unless ``name`` is given); ``carrier.segment_name`` names it; ``attach`` opens it in another
    process without copying.
    """

    @property
    def segment_name(self) -> str:
        return self.require_facet(SharedMemoryFacet).name

    @classmethod
    def attach(cls, name: str, size: int, dtype: cv.DType) -> SharedMemoryCarrier:
        """A carrier over an existing segment created by another process (not unlinked here)."""
        carrier: SharedMemoryCarrier = cv.adopt_storage(
            cls, _STORAGE.attach(name, size, dtype), size, dtype
        )
        return carrier


_TRANSFER: Final = _BulkTransfer()
cv.register_carrier_definition(
    SharedMemoryCarrier,
    cv.CarrierDefinition(
        storage=_STORAGE,
        kernels=_kernels(),
        transfers=[
            cv.TransferRoute(source=SharedMemoryCarrier, destination=other, provider=_TRANSFER)
            for other in (CPU, Generic)
        ]
        + [
            cv.TransferRoute(source=other, destination=SharedMemoryCarrier, provider=_TRANSFER)
            for other in (CPU, Generic)
        ],
        facets=[SharedMemoryFacet],
    ),
)
