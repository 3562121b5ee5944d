"""SharedMemoryCarrier: slots in a ``multiprocessing.shared_memory`` segment, shareable by name.

The carrier is an open sibling of ``conveyor.Carrier`` and writes no ``Operation``: it registers a
``CarrierDefinition`` with a storage provider (one segment per carrier, its space reserved up
front; a small anonymous tensor gets its segment when first shared), a kernel provider (one
pattern per planned name, listing every plan: CPU's kernels (``conveyor_generic``'s
``run_cpu_kernel``) run over read-only views of the operands' slots, so inputs are never
copied and results are CPU's; native binary arithmetic is one NumPy ufunc straight into the
result), transfer routes to and from CPU and Generic, and a facet that tells other processes
where the data lives. The view names, indexing and assignment need no kernel: the framework
runs them over the storage provider's spans. Conveyor binds, plans, gates, validates results
and differentiates; this module only stores and computes.

Small tensors are not pooled in segments. A segment whose name was ever given out can never
be recycled (a process that attached would see the next tensor's values), so a pool could hold
only segments never shared, and that means giving every small tensor a segment of its own from
the start: an open descriptor and a mapping per live tensor, where the common limit of 1024
descriptors would stop a program holding a thousand small tensors. A small anonymous tensor
lives in process memory instead and moves into a segment once, when its name is first asked
for. Because that move replaces its array, the
framework cannot keep kernel views per carrier (``stable_arrays = False``); each handle keeps
the view of the last layout read and drops it when the array moves.

A segment is unlinked when its carrier is released, when the carrier is garbage collected, and
at interpreter exit, by the process that created it. Another process attaches with
``SharedMemoryCarrier.attach(name, size, dtype)`` and reads the same memory without a copy.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import policy_capabilities, registered_operations
from conveyor_generic import CPU, Generic, quiet_off, quiet_on, run_cpu_kernel

if TYPE_CHECKING:
    # Loaded by the first allocate or attach: with its helpers (secrets, subprocess, signal)
    # multiprocessing costs more than the rest of this module, and every carrier discovery
    # imports this module.
    from multiprocessing import shared_memory

__all__ = ["SharedMemoryCarrier", "SharedMemoryFacet"]

_Array = np.ndarray[Any, Any]


#: Names of the segments this process created and has not unlinked yet. Python registers every
#: segment it opens with the process's resource tracker (which unlinks what is left at exit), and
#: the tracker holds each name once, however often it is registered: only names missing here were
#: registered by an attach alone, and only those may be unregistered. A forked child shares its
#: parent's tracker and inherits this set, so it too leaves its parent's registrations alone.
_CREATED: set[str] = set()


def _close(shm: shared_memory.SharedMemory, owner: bool) -> None:
    """Close the mapping and, in the creating process, unlink the segment (idempotent)."""
    # A NumPy view still alive keeps the mapping (it goes with the view); the name goes now.
    with contextlib.suppress(BufferError):
        shm.close()
    if owner:
        with contextlib.suppress(FileNotFoundError):  # already unlinked
            shm.unlink()  # also drops the tracker's registration
        _CREATED.discard(shm.name)


_SHM_DIRECTORY: Final = "/dev/shm"
_NAME_MAX: Final = 255  # bytes of a segment name: one file name under /dev/shm (NAME_MAX)


def _free_bytes() -> int | None:
    """Bytes the shared-memory file system can still hand out, where it can say."""
    try:
        stats = os.statvfs(_SHM_DIRECTORY)
    except (AttributeError, OSError):  # no statvfs, or no /dev/shm (not Linux)
        return None
    return stats.f_bavail * stats.f_frsize


def _refusal(what: str, nbytes: int, free: int | None) -> MemoryError:
    room = f"{free} bytes are free" if free is not None else "the space could not be reserved"
    msg = (
        f"{what} on SharedMemoryCarrier: a segment of {nbytes} bytes does not fit in "
        f"{_SHM_DIRECTORY} ({room}); free shared memory, allocate less, or use another carrier"
    )
    return MemoryError(msg)


def _check_free(what: str, nbytes: int) -> None:
    """Refuse before creating anything when the segment cannot fit (no pages are touched)."""
    free = _free_bytes()
    if free is not None and nbytes > free:
        raise _refusal(what, nbytes, free)


def _reserve(what: str, shm: shared_memory.SharedMemory, nbytes: int) -> None:
    """Reserve every page of a new segment, so touching one later can never raise SIGBUS.

    ``ftruncate`` (what ``SharedMemory`` does) only sets the size: on tmpfs the pages are found
    at first touch, and a page that does not fit kills the process with SIGBUS. Reserving with
    ``posix_fallocate`` turns that into a clean refusal here.
    """
    fd = getattr(shm, "_fd", -1)  # CPython's private descriptor of the segment (POSIX only)
    if fd < 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        raise _refusal(what, nbytes, _free_bytes()) from exc


def _create(what: str, name: str | None, nbytes: int) -> shared_memory.SharedMemory:
    """A new segment of ``nbytes``, every page reserved, registered as this process's own."""
    _check_free(what, nbytes)
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name, create=True, size=nbytes)
    try:
        _reserve(what, shm, nbytes)
    except BaseException:
        _close(shm, owner=True)
        raise
    _CREATED.add(shm.name)
    return shm


#: Held while a private tensor moves into its segment (rare: once per shared tensor).
_SHARING: Final = threading.Lock()

#: Anonymous tensors of at most this many bytes stay in process memory until first shared.
PRIVATE_MAX_BYTES: Final = 64 << 10


class _Segment:
    """The storage handle: a flat NumPy array, in a shared-memory segment once it is shared.

    A small anonymous tensor (at most ``PRIVATE_MAX_BYTES``, no name asked for) starts in this
    process's memory: most are short-lived results that no other process ever sees, and a
    segment costs far more to create and unlink than the arithmetic on it. Asking for its
    ``name`` (``carrier.segment_name``, the facet) moves it into a new segment first, once.
    """

    __slots__ = ("__weakref__", "_finalizer", "_kept", "_name", "array", "owner")

    def __init__(self, array: _Array, owner: bool) -> None:
        self.array = array
        self.owner = owner
        self._name: str | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        # (layout, read-only view) of the last layout a kernel or transfer read: a tuple,
        # replaced whole, and dropped whenever ``array`` is replaced.
        self._kept: tuple[cv.Layout, _Array] | None = None

    def view(self, layout: cv.Layout) -> _Array:
        """A read-only NumPy view of ``layout`` over the slots (no copy), kept for the next read.

        The framework keeps kernel views per carrier only for stable arrays; this handle's
        array moves when it is first shared, so the handle keeps its own and drops it then.
        """
        kept = self._kept
        if kept is not None and kept[0] is layout:
            return kept[1]
        view = _strided(self.array, layout)
        view.flags.writeable = False  # a kernel can never write into its input
        self._kept = (layout, view)
        return view

    @classmethod
    def mapped(
        cls, shm: shared_memory.SharedMemory, size: int, dtype: cv.DType, owner: bool
    ) -> _Segment:
        """The handle of an open segment (unlinked by its creator when the handle goes)."""
        segment = cls(np.ndarray((size,), dtype.numpy, buffer=shm.buf), owner)
        segment._adopt(shm)
        return segment

    def _adopt(self, shm: shared_memory.SharedMemory) -> None:
        self._name = shm.name
        # Runs on release, on garbage collection, or at interpreter exit, whichever is first.
        self._finalizer = weakref.finalize(self, _close, shm, self.owner)

    @property
    def name(self) -> str:
        """The segment's name, creating the segment first for a private tensor."""
        if self._name is None:
            with _SHARING:
                if self._name is None:
                    private = self.array
                    shm = _create("segment_name", None, max(private.nbytes, 1))
                    shared: _Array = np.ndarray(private.shape, private.dtype, buffer=shm.buf)
                    shared[...] = private
                    self.array = shared
                    self._kept = None  # its view reads the private array
                    self._adopt(shm)
        assert self._name is not None  # set above
        return self._name

    def close(self) -> None:
        self._kept = None
        self.array = np.empty(0, self.array.dtype)  # drop the export before closing
        if self._finalizer is not None:
            self._finalizer()


def _strided(flat: _Array, layout: cv.Layout) -> _Array:
    """The NumPy view of ``layout`` over the segment's flat array."""
    if layout.size == 0:
        # An empty view may keep an offset past the end (``x[:, ::-1]`` of a 0x3 tensor), which
        # NumPy refuses over a buffer even though no element is read.
        return np.empty(layout.shape, flat.dtype)
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

    stable_arrays = False  # a private tensor's array is replaced when it is first shared

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return not dtype.is_abstract

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return max(size * dtype.itemsize, 1)  # a segment is never empty

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> _Segment:
        name = options.pop("name", None) if options else None  # kernel results pass no options
        if options:
            msg = f"allocate on SharedMemoryCarrier: unexpected argument(s) {sorted(options)}"
            raise TypeError(msg)
        if name is None:
            if size * dtype.itemsize <= PRIVATE_MAX_BYTES:
                return _Segment(np.zeros(size, dtype.numpy), owner=True)  # shared when first named
        elif not isinstance(name, str):
            msg = (
                f"allocate on SharedMemoryCarrier: name must be a str or None, got {name!r} "
                f"({type(name).__name__})"
            )
            raise TypeError(msg)
        # POSIX names one segment by one path component: shm_open refuses anything else with a
        # bare EINVAL (or ENAMETOOLONG) naming only the "/"-prefixed string it built.
        elif not name or "/" in name or "\0" in name or len(name.encode()) > _NAME_MAX:
            msg = (
                f"allocate on SharedMemoryCarrier: segment name {name!r} is not valid; pass 1 to "
                f"{_NAME_MAX} bytes without '/' or NUL, or name=None for a fresh random name"
            )
            raise ValueError(msg)
        # A new segment reads as zeros: no page is touched to zero-fill it.
        nbytes = self.physical_size(size, dtype)
        return _Segment.mapped(_create("allocate", name, nbytes), size, dtype, owner=True)

    def attach(self, name: str, size: int, dtype: cv.DType) -> _Segment:
        from multiprocessing import resource_tracker, shared_memory

        shm = shared_memory.SharedMemory(name)
        # Python 3.11 registers attached segments with this process's resource tracker, which
        # would unlink them at exit; only the creating process owns the name. Where this process
        # created the segment, the registration is the creator's own and must stay (``_CREATED``).
        if shm.name not in _CREATED:
            resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # CPython's private name
        if shm.size < size * dtype.itemsize:
            shm.close()
            msg = f"attach on SharedMemoryCarrier: segment {name!r} is smaller than {size} slots"
            raise ValueError(msg)
        return _Segment.mapped(shm, size, dtype, owner=False)

    def release(self, handle: _Segment) -> None:
        handle.close()

    def read(self, handle: _Segment, index: int) -> Any:
        return handle.array[index].item()

    def write(self, handle: _Segment, index: int, value: Any) -> None:
        handle.array[index] = value

    def flat_array(self, handle: _Segment, dtype: cv.DType) -> _Array:
        return handle.array

    def export_span(self, handle: _Segment, layout: cv.Layout, dtype: cv.DType) -> _Array:
        return _strided(handle.array, layout).copy()

    def import_span(
        self, handle: _Segment, layout: cv.Layout, dtype: cv.DType, values: _Array
    ) -> None:
        _strided(handle.array, layout)[...] = values


_STORAGE: Final = _SharedMemoryStorage()

# -- kernels -----------------------------------------------------------------------------------


def _operand(x: Any) -> Any:
    """A tensor operand as a read-only NumPy view of its slots (no copy); scalars as given."""
    if type(x) is not cv.Tensor:
        return x
    segment: _Segment = cv.storage_handle(x.carrier)
    return segment.view(x.layout)


#: Binary arithmetic that one NumPy ufunc computes straight into the result when both operands
#: already hold the plan's compute dtype and the result is of that dtype too: the very call
#: CPU's kernels make then, so the values are CPU's bit for bit.
_UFUNCS: Final = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "elementwise_mul": np.multiply,
    "div": np.true_divide,
}
#: Compute dtypes CPU's kernels widen (to float64 and complex128), so no direct ufunc call.
_WIDENED: Final = frozenset({cv.float16, cv.bfloat16, cv.complex64})


def _kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult | cv.Tensor:
    """The one kernel pattern: CPU's kernel of the plan, over views of the operands' slots.

    Results are copied into freshly allocated tensors of this class; the binary arithmetic of
    ``_UFUNCS`` writes into the result directly.
    """
    invocation = ctx.invocation
    plan = invocation.plan
    assert plan is not None  # every pattern here is of a planned name
    operands = [_operand(x) for x in invocation.operands]
    ufunc = _UFUNCS.get(plan.operation)
    compute = plan.compute
    if ufunc is not None and plan.outputs[0] is compute and compute not in _WIDENED:
        a, b = operands
        work = compute.numpy
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype is work and b.dtype is work:
            out = ctx.allocate_result(0)
            token = quiet_on()  # overflow and NaN are values, not warnings, as on CPU
            try:
                ufunc(a, b, out=ctx.array(out))
            finally:
                quiet_off(token)
            return out  # the one result itself: no ProviderResult to build
    values = run_cpu_kernel(SharedMemoryCarrier, plan, invocation.options, operands)
    outputs = []
    for i, array in enumerate(values if type(values) is tuple else (values,)):
        out = ctx.allocate_result(i)
        if array.size:
            ctx.array(out)[...] = array
        outputs.append(out)
    return cv.ProviderResult(outputs)


def _kernels() -> cv.KernelProvider:
    """One pattern per planned name, each listing every plan the policy resolves (by rule).

    View names need no pattern: the framework runs them over the storage provider's spans.
    """
    return cv.KernelProvider(
        [
            cv.KernelPattern(operation=name, kernel=_kernel, plans=policy_capabilities([name]))
            for name in registered_operations()
        ]
    )


# -- transfers and facets ----------------------------------------------------------------------


class _SegmentTransfer(cv.TransferProvider):
    """Bulk copies to and from another carrier class, reading or writing the segment in place.

    The generic span path would export a copy of the segment first; a route skips that copy.
    """

    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        carrier = destination.allocate(source.size, source.dtype, **options)
        if source.size:
            if type(source.carrier) is SharedMemoryCarrier:
                values = _operand(source)
            else:
                values = source.carrier.export_span(source.layout)
            flat = cv.Layout((source.size,))
            if destination is SharedMemoryCarrier:
                cv.storage_handle(carrier).array[...] = np.asarray(values).reshape(-1)
            else:
                carrier.import_span(flat, np.ascontiguousarray(values).reshape(-1))
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


_TRANSFER: Final = _SegmentTransfer()
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
