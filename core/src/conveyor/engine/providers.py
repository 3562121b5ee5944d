"""Providers: the records and bases a definition-backed carrier plugs into its CarrierDefinition.

A sibling carrier that registers a ``CarrierDefinition`` never writes an ``Operation``. It
supplies *providers*: storage (slots of one dtype), kernels (patterns naming the exact plans
they execute), transfers (bulk copies to and from other carriers), an optional composite
(execution through other carriers) and facets (optional, typed extra contracts). The framework
owns everything around them: binding, central resolution, the capability gate, result
validation, autograd. This module only declares what a provider is;
``conveyor.engine.definition_dispatch`` drives them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, final

import attrs

from conveyor.engine.tensor import Tensor, publish
from conveyor.types.capabilities import CapabilitySet, OperationCapability
from conveyor.types.dtypes import DType
from conveyor.types.layout import Layout
from conveyor.types.policy import OperationPlan

if TYPE_CHECKING:
    import numpy as np

    from conveyor.engine.carrier import Carrier
    from conveyor.engine.operation_definitions import ResolvedInvocation

_set = object.__setattr__
# NumPy's array type, once the default ``flat_array`` has run (NumPy is imported only then): the
# kernel interface applies that default inline to a handle of this exact type.
_ndarray: Any = None  # numpy.ndarray

__all__ = [
    "CarrierFacet",
    "CompositeProvider",
    "KernelExecutionInterface",
    "KernelPack",
    "KernelPattern",
    "KernelProvider",
    "PreparedComposite",
    "ProviderCompletion",
    "ProviderContractError",
    "ProviderResult",
    "StorageProvider",
    "TransferProvider",
    "TransferRoute",
    "Unsupported",
]


class ProviderContractError(RuntimeError):
    """A provider returned something that contradicts the central resolved invocation.

    Raised after the provider ran and before anything is published: the results it produced are
    dropped (and released when the framework allocated them). ``operation`` is the dispatch
    name and ``carrier`` the exact dispatch carrier class.
    """

    __module__ = "conveyor"

    def __init__(self, operation: str, carrier: type, reason: str) -> None:
        self.operation = operation
        self.carrier = carrier
        self.reason = reason
        msg = (
            f"{operation} on {carrier.__name__}: the provider broke its contract: {reason}; "
            f"nothing was published"
        )
        super().__init__(msg)


class StorageProvider:
    """Open base of storage providers: one opaque *handle* per carrier instance.

    Override ``supports_dtype``, ``physical_size``, ``allocate``, ``release``, ``read`` and
    ``write``; override ``export_span`` / ``import_span`` for bulk copies (the defaults go slot by
    slot through ``read`` / ``write``, which is correct but slow). The framework checks that the
    handle belongs to a live instance of the exact registered class, that the carrier is mutable
    before writes, and that indices and layouts are in range, before calling any method.
    """

    def supports_dtype(self, dtype: DType) -> bool:
        """Whether slots of ``dtype`` can be stored (the framework asks before ``allocate``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement supports_dtype")

    def physical_size(self, size: int, dtype: DType) -> int:
        """Bytes ``allocate(size, dtype)`` reserves (for reports and budgets)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement physical_size")

    def allocate(self, size: int, dtype: DType, **options: Any) -> Any:
        """A handle to ``size`` zero-filled slots of ``dtype``; ``options`` come from allocate."""
        raise NotImplementedError(f"{type(self).__name__} does not implement allocate")

    def allocate_uninitialized(self, size: int, dtype: DType) -> Any:
        """A handle to ``size`` slots of ``dtype`` whose values are unspecified (optional).

        The framework asks for it only for a kernel's result that the kernel writes whole
        (``KernelExecutionInterface.allocate_result(i, initialized=False)``), never for
        ``Carrier.allocate``. Override it when skipping the zero fill is cheaper (``np.empty``
        instead of ``np.zeros``); the default is ``allocate(size, dtype)``, zero-filled, which is
        also a valid answer.
        """
        return self.allocate(size, dtype)

    def release(self, handle: Any) -> None:
        """Free the storage behind ``handle``; called at most once per handle."""
        raise NotImplementedError(f"{type(self).__name__} does not implement release")

    def read(self, handle: Any, index: int) -> Any:
        """The value of slot ``index`` as a Python scalar."""
        raise NotImplementedError(f"{type(self).__name__} does not implement read")

    def write(self, handle: Any, index: int, value: Any) -> None:
        """Store ``value`` in slot ``index``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement write")

    def mutable(self, handle: Any) -> bool:
        """Whether writes are allowed (default: yes)."""
        return True

    #: Whether ``flat_array`` gives a handle the same array for its whole life. Kernel views
    #: are kept per carrier only then; a provider that may move a handle's slots (shm shares a
    #: small tensor by moving it into a segment) sets it to ``False``.
    stable_arrays: ClassVar[bool] = True

    #: Whether handles hold values computed only when read (a lazy graph). The central
    #: definitions then leave the checks that must read operand values (the index range of
    #: ``gather``, ``scatter`` and ``scatter_add``) to the kernels, which raise the same error
    #: when the values are computed, so a call does not force its operands' graphs.
    deferred_values: ClassVar[bool] = False

    def flat_array(self, handle: Any, dtype: DType) -> np.ndarray[Any, Any] | None:
        """The one-dimensional NumPy array the slots of ``handle`` live in, without a copy, or
        ``None`` when the storage is not NumPy-addressable (default: the handle itself when it
        is such an array, else a view of its DLPack export, else ``None``).

        It is what ``KernelExecutionInterface.arrays`` and ``array`` build their views on.
        """
        global _ndarray
        import numpy as np

        _ndarray = np.ndarray
        if type(handle) is np.ndarray and handle.ndim == 1:
            return handle
        if hasattr(handle, "__dlpack__"):
            flat: np.ndarray[Any, Any] = np.from_dlpack(handle).reshape(-1)
            return flat
        return None

    def export_span(self, handle: Any, layout: Layout, dtype: DType) -> np.ndarray[Any, Any]:
        """The slots under ``layout`` as a NumPy array (a copy or a read-only view)."""
        import numpy as np

        flat = [self.read(handle, i) for i in _slots(layout)]
        return np.asarray(flat, dtype=dtype.numpy).reshape(layout.shape)

    def import_span(
        self, handle: Any, layout: Layout, dtype: DType, values: np.ndarray[Any, Any]
    ) -> None:
        """Write ``values`` (shaped like ``layout``) into the slots under ``layout``."""
        for index, value in zip(_slots(layout), values.reshape(-1).tolist(), strict=True):
            self.write(handle, index, value)


def _slots(layout: Layout) -> list[int]:
    """The flat slot index of every element of ``layout``, in row-major order."""
    import itertools

    return [
        layout.offset + sum(i * s for i, s in zip(index, layout.strides, strict=True))
        for index in itertools.product(*(range(n) for n in layout.shape))
    ]


def _capabilities(
    values: Iterable[OperationPlan | OperationCapability],
) -> tuple[Any, ...] | CapabilitySet:
    if type(values) is CapabilitySet:
        return values  # kept as it is: a rule-declared set builds each name on first query
    found = []
    for value in values:
        if isinstance(value, OperationPlan):
            value = OperationCapability.from_plan(value)
        if not isinstance(value, OperationCapability):
            msg = (
                f"plans must be OperationPlan or OperationCapability records, got {value!r} "
                f"({type(value).__name__})"
            )
            raise TypeError(msg)
        found.append(value)
    return tuple(found)


def _patterns(values: Iterable[KernelPattern]) -> tuple[KernelPattern, ...]:
    return tuple(values)


def _routes(values: Iterable[TransferRoute]) -> tuple[TransferRoute, ...]:
    return tuple(values)


def _classes(values: Iterable[type]) -> tuple[type, ...]:
    return tuple(values)


def _facets(values: Iterable[type[CarrierFacet]]) -> tuple[type[CarrierFacet], ...]:
    return tuple(values)


def _is_callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        msg = (
            f"{type(instance).__name__}: {attribute.name} must be callable, got {value!r} "
            f"({type(value).__name__})"
        )
        raise TypeError(msg)


def _instances_of(kind: type) -> Callable[[object, attrs.Attribute[Any], tuple[Any, ...]], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for item in value:
            if not isinstance(item, kind):
                msg = (
                    f"{type(instance).__name__}: {attribute.name} must hold {kind.__name__} "
                    f"records, got {item!r} ({type(item).__name__})"
                )
                raise TypeError(msg)

    return check


@final
@attrs.frozen(kw_only=True)
class KernelPattern:
    """One kernel and the exact invocations it executes.

    For a dtype-planned operation ``plans`` lists every exact plan the kernel executes (plans or
    capabilities, or a ``CapabilitySet``: one declared ``by_rule`` is built only when the name
    is first queried); they become the carrier's capability set. For an unplanned operation (a view,
    a custom ``define_operation``) ``plans`` is empty and the pattern matches every invocation.
    ``kernel(context)`` receives a ``KernelExecutionInterface`` and returns a ``ProviderResult``
    or, when the invocation has one result, that result tensor itself (checked the same).
    """

    operation: str = attrs.field(validator=attrs.validators.instance_of(str))
    kernel: Callable[[KernelExecutionInterface], ProviderResult | Tensor] = attrs.field(
        validator=_is_callable
    )
    plans: tuple[OperationCapability, ...] | CapabilitySet = attrs.field(
        default=(), converter=_capabilities
    )

    def __attrs_post_init__(self) -> None:
        plans = self.plans
        names = (
            sorted(plans.names) if type(plans) is CapabilitySet else [c.operation for c in plans]
        )
        for name in names:
            if name != self.operation:
                msg = f"KernelPattern for {self.operation}: a plan of {name} cannot belong to it"
                raise ValueError(msg)


@final
@attrs.frozen
class KernelProvider:
    """The kernels of a definition-backed carrier, as patterns."""

    patterns: tuple[KernelPattern, ...] = attrs.field(
        converter=_patterns, validator=_instances_of(KernelPattern)
    )


@final
@attrs.frozen(kw_only=True)
class KernelPack:
    """Patterns a distribution adds to an existing definition-backed carrier class.

    Registered with ``register_kernel_pack`` or contributed through the plugin hook
    ``conveyor_kernel_packs``; a pack counts only if it is known when the class is sealed (its
    first observation), and it may not cover a plan or operation the class already covers.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    carrier: type = attrs.field(validator=attrs.validators.instance_of(type))
    patterns: tuple[KernelPattern, ...] = attrs.field(
        converter=_patterns, validator=_instances_of(KernelPattern)
    )


@final
@attrs.frozen
class ProviderCompletion:
    """How the framework waits for asynchronous provider work before publishing its results.

    ``done()`` says whether the work finished; ``wait()`` blocks until it has (and raises what
    the work raised). The framework waits before validating and publishing, so callers always
    see finished results.
    """

    done: Callable[[], bool] = attrs.field(validator=_is_callable)
    wait: Callable[[], None] = attrs.field(validator=_is_callable)


@final
@attrs.frozen(init=False)
class ProviderResult:
    """What a kernel or prepared composite returns: one tensor per result spec, in order.

    ``outputs`` is one tensor or an iterable of them (kept as a tuple).
    """

    outputs: tuple[Tensor, ...]
    completion: ProviderCompletion | None = None

    # Written out, not generated with a converter: every kernel call builds one, and the
    # converter would be a second Python call.
    def __init__(
        self,
        outputs: Tensor | Iterable[Tensor],
        *,
        completion: ProviderCompletion | None = None,
    ) -> None:
        _set(self, "outputs", (outputs,) if isinstance(outputs, Tensor) else tuple(outputs))
        _set(self, "completion", completion)


@final
class KernelExecutionInterface:
    """What a kernel sees: the carrier, the resolved invocation, and result allocation.

    Mutable on purpose: it records the result carriers it allocated so the framework can release
    them when the kernel fails or breaks its contract. One instance serves exactly one call.
    """

    __slots__ = (
        "_allocated",
        "_allocators",
        "_fresh",
        "_handle",
        "_plain_flat",
        "_storage",
        "carrier",
        "invocation",
    )

    def __init__(
        self,
        carrier: Carrier,
        invocation: ResolvedInvocation,
        storage: StorageProvider | None = None,
        handle: Callable[[Carrier], Any] | None = None,
        fresh: Callable[[type[Carrier], Layout, DType, bool], Tensor] | None = None,
    ) -> None:
        self.carrier = carrier
        self.invocation = invocation
        self._allocated: list[Carrier] = []
        # The dispatch class's storage provider and handle accessor, for the array views, and
        # its allocator of fresh result tensors: (class, contiguous layout, dtype, whether
        # zero-filled) -> tensor over a new carrier (``cls.allocate`` when none is given).
        self._storage = storage
        self._handle = handle
        self._fresh = fresh
        # The sealed table's allocators, when results may be built here (the dispatch sets them).
        self._allocators: tuple[Any, Any, set[DType]] | None = None
        # Whether the storage provider keeps the default flat_array (applied inline).
        self._plain_flat = storage is not None and (
            type(storage).flat_array is StorageProvider.flat_array
        )

    def __repr__(self) -> str:
        where = f"{self.invocation.operation} on {type(self.carrier).__name__}"
        return f"<KernelExecutionInterface {where}>"

    @property
    def operands(self) -> tuple[Any, ...]:
        """The bound positional operands (Tensors, Python scalars, ``None``)."""
        return self.invocation.operands

    def arrays(self, *, contiguous: bool = False) -> tuple[Any, ...]:
        """The operands as NumPy arrays over their storage, without a copy.

        Each tensor operand is a read-only view with its layout (shape, strides, offset)
        applied; Python scalars and ``None`` come as given. ``contiguous=True`` copies the
        operands that are not C-contiguous (a kernel that indexes flat memory asks for it).

        Raises:
            NotImplementedError: the storage provider's ``flat_array`` gives no array.
        """
        out = []
        for x in self.invocation.operands:
            if x.__class__ is Tensor:
                kept = x._carrier.__dict__.get("_cv_read_view")  # _read_view's cache, inline
                view = (
                    kept[1] if kept is not None and kept[0] is x._layout else _read_view(self, x)
                )  # (nothing is kept for a provider whose arrays are not stable)
                if contiguous and not view.flags.c_contiguous:
                    view = view.copy()
                    view.flags.writeable = False
                out.append(view)
            else:
                out.append(x)
        return tuple(out)

    def array(self, result: Tensor) -> Any:
        """A writable NumPy view of a result this interface allocated (``allocate_result``)."""
        carrier = result._carrier
        if carrier not in self._allocated:  # carriers compare by identity
            msg = (
                f"{self.invocation.operation}: array() gives writable views of results from "
                f"allocate_result only; read operands with arrays()"
            )
            raise ValueError(msg)
        storage, flat = self._storage, None
        if storage is not None and self._handle is not None:
            # Alive and of the dispatch class (this interface allocated it): its handle is read
            # directly, not through the checked accessor.
            handle = vars(carrier)["_cv_storage_handle"]
            if handle.__class__ is _ndarray and self._plain_flat and handle.ndim == 1:
                flat = handle  # the default flat_array, inline
            else:
                flat = storage.flat_array(handle, result._dtype)
        if flat is None:
            raise _no_array(self, carrier)
        layout = result._layout  # a fresh result: contiguous from its first slot (its spec)
        size = layout.size
        return (flat if flat.size == size else flat[:size]).reshape(layout.shape)

    def allocate_result(self, index: int, *, initialized: bool = True) -> Tensor:
        """A fresh result tensor for result spec ``index`` on the dispatch class, zero-filled.

        ``initialized=False`` promises that the kernel writes every element of the result
        before returning it (a ufunc's ``out=``): its slots may then hold anything, and a
        storage provider that implements ``allocate_uninitialized`` skips the zero fill.
        """
        spec = self.invocation.results[index]
        if spec.alias is not None:
            msg = (
                f"{self.invocation.operation}: result {index} aliases operand {spec.alias}; "
                f"build it with alias_result({index})"
            )
            raise ValueError(msg)
        cls, layout, dtype = type(self.carrier), spec.layout, spec.dtype
        allocators = self._allocators
        if allocators is not None and dtype in allocators[2]:
            # The provider stores this dtype and the carrier is only its slots: built here,
            # as the sealed table's fresh would (one Python call fewer per result).
            size = layout.size
            handle = (allocators[0] if initialized else allocators[1])(size, dtype)
            slots = {
                "_cv_storage_handle": handle,
                "_cv_storage_size": size,
                "_cv_storage_dtype": dtype,
            }
            result = publish(cls, slots, layout, dtype)
        elif self._fresh is None:
            result = Tensor._wrap(cls.allocate(layout.size, dtype), layout, dtype)
        else:
            result = self._fresh(cls, layout, dtype, initialized)
        self._allocated.append(result._carrier)
        return result

    def alias_result(self, index: int) -> Tensor:
        """The view that result spec ``index`` declares over its aliased operand."""
        spec = self.invocation.results[index]
        if spec.alias is None:
            msg = f"{self.invocation.operation}: result {index} is fresh, not an alias"
            raise ValueError(msg)
        source = self.invocation.operands[spec.alias]
        return Tensor._wrap(source.carrier, spec.layout, spec.dtype)


def _no_array(context: KernelExecutionInterface, carrier: Carrier) -> NotImplementedError:
    msg = (
        f"{context.invocation.operation} on {type(carrier).__name__}: its storage provider "
        f"gives no NumPy array (flat_array returned None); read operands with export_span"
    )
    return NotImplementedError(msg)


def _read_view(context: KernelExecutionInterface, x: Tensor) -> Any:
    """``x``'s elements as a read-only NumPy view of its storage's flat array (its layout
    applied).

    A read-only view is kept on the carrier beside its layout, so reading the same operand again
    (a loop, a training step) builds nothing; it shares the storage, so it sees every write.
    """
    carrier, layout = x._carrier, x._layout
    kept = carrier.__dict__.get("_cv_read_view")  # dropped when the carrier is released
    if kept is not None and kept[0] is layout:
        return kept[1]
    import numpy as np

    storage, accessor, flat = context._storage, context._handle, None
    if storage is not None and accessor is not None:
        # An operand of the dispatch class that is alive and has a handle passes the accessor's
        # checks by construction; any other goes through it (and is refused there).
        handle = None
        if type(carrier) is type(context.carrier) and not carrier._released:
            handle = carrier.__dict__.get("_cv_storage_handle")
        if handle is None:
            handle = accessor(carrier)
        if handle.__class__ is _ndarray and context._plain_flat and handle.ndim == 1:
            flat = handle  # the default flat_array, inline
        else:
            flat = storage.flat_array(handle, x._dtype)
    if flat is None:
        raise _no_array(context, carrier)
    if layout.size == 0:
        # An empty view may keep an offset past the end (``x[:, ::-1]`` of a 0x3 tensor), which
        # NumPy refuses over a buffer although no element is read.
        view = np.empty(layout.shape, flat.dtype)
        view.flags.writeable = False
        return view
    if layout._contiguous:
        # A row-major run of slots (every fresh result): a reshaped slice of the flat array,
        # half the cost of the strided constructor.
        start, size = layout.offset, layout.size
        run = flat if start == 0 and flat.size == size else flat[start : start + size]
        view = run.reshape(layout.shape)
    else:
        item = flat.itemsize
        strides: tuple[int, ...] = ()
        for step in layout.strides:  # a loop, not a generator: each item would be a Python call
            strides += (step * item,)
        view = np.ndarray(
            layout.shape, flat.dtype, buffer=flat, offset=layout.offset * item, strides=strides
        )
    view.setflags(write=False)
    if storage is not None and storage.stable_arrays:
        carrier._cv_read_view = (layout, view)  # type: ignore[attr-defined]  # framework-owned
    return view


class TransferProvider:
    """Open base of bulk copies between a definition-backed carrier and another carrier class."""

    def transfer(self, source: Tensor, destination: type[Carrier], **options: Any) -> Tensor:
        """A new contiguous ``destination`` tensor with ``source``'s shape, dtype and values."""
        raise NotImplementedError(f"{type(self).__name__} does not implement transfer")


@final
@attrs.frozen(kw_only=True)
class TransferRoute:
    """One exact ``(source class, destination class)`` route; ``cv.move`` takes it."""

    source: type = attrs.field(validator=attrs.validators.instance_of(type))
    destination: type = attrs.field(validator=attrs.validators.instance_of(type))
    provider: TransferProvider = attrs.field(
        validator=attrs.validators.instance_of(TransferProvider)
    )


@final
@attrs.frozen
class Unsupported:
    """A composite provider declines an invocation; ``reason`` goes into the refusal."""

    reason: str = attrs.field(validator=attrs.validators.instance_of(str))


@final
@attrs.frozen
class PreparedComposite:
    """Composite work ready to run: ``execute()`` returns the ``ProviderResult``."""

    execute: Callable[[], ProviderResult] = attrs.field(validator=_is_callable)


@final
@attrs.frozen(kw_only=True)
class CompositeProvider:
    """Execution through other carriers, for an outer definition-backed carrier.

    ``capabilities`` are the exact plans the outer carrier advertises through it (records, or
    a ``CapabilitySet``, kept lazy when declared by rule);
    ``result_carriers`` the carrier classes its results may live on (the declared dense compute
    carriers); ``prepare(carrier, invocation)`` sees the immutable invocation only after the
    capability gate, and returns ``PreparedComposite`` or ``Unsupported``.
    ``lower_saved(carrier, tensor)``, when given, is how the central VJP reads a saved outer
    operand: outer tensors the VJP's public functions cannot run on (a tiled tensor) are
    lowered to a result-carrier tensor first; the VJP itself stays the central one.
    ``companions`` are the classes whose tensors the public functions let stand beside the
    outer carrier's tensors in one call (instead of refusing mixed carriers): the call then
    dispatches on the outer carrier and ``prepare`` sees both kinds, accepting the shapes it
    streams (a tiled carrier: a dense operand broadcasting along whole tiles) and returning
    ``Unsupported`` for the rest. By default none.

    .. versionadded:: issue 23
        ``companions``, so a composite can take a small dense operand (a column mean) beside
        its own without a move.
    """

    capabilities: tuple[OperationCapability, ...] | CapabilitySet = attrs.field(
        converter=_capabilities
    )
    result_carriers: tuple[type, ...] = attrs.field(converter=_classes)
    prepare: Callable[[Carrier, ResolvedInvocation], PreparedComposite | Unsupported] = attrs.field(
        validator=_is_callable
    )
    lower_saved: Callable[[Carrier, Tensor], Tensor] | None = attrs.field(
        default=None, validator=attrs.validators.optional(_is_callable)
    )
    companions: tuple[type, ...] = attrs.field(default=(), converter=_classes)


class CarrierFacet:
    """Open base of optional typed contracts a carrier offers (``carrier.facet(T)``).

    A ``CarrierDefinition`` lists facet classes; ``carrier.facet(T)`` builds the first listed
    subclass of ``T`` around the carrier, or returns ``None``; ``require_facet(T)`` raises
    instead. Facets keep extras (a shared-memory name, a device handle) out of the core.
    """

    def __init__(self, carrier: Carrier) -> None:
        self.carrier = carrier

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {type(self.carrier).__name__}>"
