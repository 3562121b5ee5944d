"""Providers: the records and bases a definition-backed carrier plugs into its CarrierDefinition.

A sibling carrier that registers a ``CarrierDefinition`` never writes an ``Operation``. It
supplies *providers*: storage (slots of one dtype), kernels (patterns naming the exact plans
they execute), transfers (bulk copies to and from other carriers), an optional composite
(execution through other carriers) and facets (optional, typed extra contracts). The framework
owns everything around them: binding, central resolution, the capability gate, result
validation, autograd. This module only declares what a provider is; ``conveyor.definitions``
drives them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs

from conveyor.capabilities import (
    CapabilitySet,
    OperationCapability,
    _key,
    declared_capabilities,
    register_operation_capabilities,
)
from conveyor.dtypes import DType
from conveyor.layout import Layout
from conveyor.policy import OperationPlan, is_planned
from conveyor.tensor import Tensor

if TYPE_CHECKING:
    import numpy as np

    from conveyor.carrier import Carrier
    from conveyor.definitions import ResolvedInvocation

__all__ = [
    "CarrierDefinition",
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
    "adopt_storage",
    "carrier_definition",
    "carrier_facet",
    "definition_capabilities",
    "register_carrier_definition",
    "register_kernel_pack",
    "storage_handle",
]

_F = TypeVar("_F", bound="CarrierFacet")


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


def _capabilities(values: Iterable[OperationPlan | OperationCapability]) -> tuple[Any, ...]:
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
    capabilities); they become the carrier's capability set. For an unplanned operation (a view,
    a custom ``define_operation``) ``plans`` is empty and the pattern matches every invocation.
    ``kernel(context)`` receives a ``KernelExecutionInterface`` and returns a ``ProviderResult``.
    """

    operation: str = attrs.field(validator=attrs.validators.instance_of(str))
    kernel: Callable[[KernelExecutionInterface], ProviderResult] = attrs.field(
        validator=_is_callable
    )
    plans: tuple[OperationCapability, ...] = attrs.field(default=(), converter=_capabilities)

    def __attrs_post_init__(self) -> None:
        for cap in self.plans:
            if cap.operation != self.operation:
                msg = (
                    f"KernelPattern for {self.operation}: a plan of {cap.operation} cannot "
                    f"belong to it"
                )
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


def _outputs(value: Tensor | Iterable[Tensor]) -> tuple[Any, ...]:
    return (value,) if isinstance(value, Tensor) else tuple(value)


@final
@attrs.frozen
class ProviderResult:
    """What a kernel or prepared composite returns: one tensor per result spec, in order."""

    outputs: tuple[Tensor, ...] = attrs.field(converter=_outputs)
    completion: ProviderCompletion | None = attrs.field(default=None, kw_only=True)


@final
class KernelExecutionInterface:
    """What a kernel sees: the carrier, the resolved invocation, and result allocation.

    Mutable on purpose: it records the result carriers it allocated so the framework can release
    them when the kernel fails or breaks its contract. One instance serves exactly one call.
    """

    __slots__ = ("_allocated", "carrier", "invocation")

    def __init__(self, carrier: Carrier, invocation: ResolvedInvocation) -> None:
        self.carrier = carrier
        self.invocation = invocation
        self._allocated: list[Carrier] = []

    def __repr__(self) -> str:
        where = f"{self.invocation.operation} on {type(self.carrier).__name__}"
        return f"<KernelExecutionInterface {where}>"

    @property
    def operands(self) -> tuple[Any, ...]:
        """The bound positional operands (Tensors, Python scalars, ``None``)."""
        return self.invocation.operands

    def allocate_result(self, index: int) -> Tensor:
        """A fresh zero-filled result tensor for result spec ``index`` on the dispatch class."""
        spec = self.invocation.results[index]
        if spec.alias is not None:
            msg = (
                f"{self.invocation.operation}: result {index} aliases operand {spec.alias}; "
                f"build it with alias_result({index})"
            )
            raise ValueError(msg)
        carrier = type(self.carrier).allocate(max(spec.layout.size, 0), spec.dtype)
        self._allocated.append(carrier)
        return Tensor._wrap(carrier, spec.layout, spec.dtype)

    def alias_result(self, index: int) -> Tensor:
        """The view that result spec ``index`` declares over its aliased operand."""
        spec = self.invocation.results[index]
        if spec.alias is None:
            msg = f"{self.invocation.operation}: result {index} is fresh, not an alias"
            raise ValueError(msg)
        source = self.invocation.operands[spec.alias]
        return Tensor._wrap(source.carrier, spec.layout, spec.dtype)


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

    ``capabilities`` are the exact plans the outer carrier advertises through it;
    ``result_carriers`` the carrier classes its results may live on (the declared dense compute
    carriers); ``prepare(carrier, invocation)`` sees the immutable invocation only after the
    capability gate, and returns ``PreparedComposite`` or ``Unsupported``.
    """

    capabilities: tuple[OperationCapability, ...] = attrs.field(converter=_capabilities)
    result_carriers: tuple[type, ...] = attrs.field(converter=_classes)
    prepare: Callable[[Carrier, ResolvedInvocation], PreparedComposite | Unsupported] = attrs.field(
        validator=_is_callable
    )


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


# -- carrier definitions ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=False)
class CarrierDefinition:
    """How a sibling carrier stores data and which providers execute its operations.

    ``storage`` is the ``StorageProvider``. A definition with neither ``kernels`` nor
    ``composite`` is storage-only: every computational dispatch name is refused. ``transfers``
    become ``cv.move`` routes when the definition is registered; ``facets`` are
    ``CarrierFacet`` subclasses served by ``carrier.facet(T)``.
    """

    storage: Any
    kernels: KernelProvider | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(KernelProvider)),
    )
    transfers: tuple[TransferRoute, ...] = attrs.field(default=(), converter=_routes)
    composite: CompositeProvider | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(CompositeProvider)),
    )
    facets: tuple[type[CarrierFacet], ...] = attrs.field(default=(), converter=_facets)

    def __attrs_post_init__(self) -> None:
        for route in self.transfers:
            if not isinstance(route, TransferRoute):
                msg = f"CarrierDefinition: transfers must be TransferRoute records, got {route!r}"
                raise TypeError(msg)
        for facet in self.facets:
            if not (isinstance(facet, type) and issubclass(facet, CarrierFacet)):
                msg = f"CarrierDefinition: facets must be CarrierFacet subclasses, got {facet!r}"
                raise TypeError(msg)

    @property
    def is_storage_only(self) -> bool:
        return self.kernels is None and self.composite is None


@final
class _Sealed:
    """A definition-backed class's execution table, frozen at its first observation."""

    __slots__ = ("capabilities", "composite_names", "planned", "unplanned")

    def __init__(self, cls: type, definition: CarrierDefinition, packs: list[KernelPack]) -> None:
        patterns = list(definition.kernels.patterns if definition.kernels else ())
        for pack in packs:
            patterns.extend(pack.patterns)
        self.planned: dict[tuple[Any, ...], KernelPattern] = {}
        self.unplanned: dict[str, KernelPattern] = {}
        capabilities: list[OperationCapability] = []
        for pattern in patterns:
            if is_planned(pattern.operation):
                if not pattern.plans:
                    msg = (
                        f"{pattern.operation} on {cls.__name__}: a kernel pattern of a "
                        f"dtype-planned operation must list the exact plans it executes"
                    )
                    raise ValueError(msg)
                for cap in pattern.plans:
                    if _key(cap) in self.planned:
                        msg = f"{pattern.operation} on {cls.__name__}: two kernels cover {cap!r}"
                        raise ValueError(msg)
                    self.planned[_key(cap)] = pattern
                    capabilities.append(cap)
            else:
                if pattern.plans:
                    msg = (
                        f"{pattern.operation} on {cls.__name__}: the operation is not "
                        f"dtype-planned, so its kernel pattern lists no plans"
                    )
                    raise ValueError(msg)
                if pattern.operation in self.unplanned:
                    msg = f"{pattern.operation} on {cls.__name__}: two kernels cover it"
                    raise ValueError(msg)
                self.unplanned[pattern.operation] = pattern
        composite = definition.composite
        self.composite_names: frozenset[str] = frozenset()
        if composite is not None:
            capabilities.extend(c for c in composite.capabilities if _key(c) not in self.planned)
            self.composite_names = frozenset(c.operation for c in composite.capabilities)
        self.capabilities = CapabilitySet(capabilities)

    def covers(self, name: str) -> bool:
        return (
            name in self.unplanned
            or name in self.capabilities.names
            or name in self.composite_names
        )


_DEFINITIONS: dict[type, CarrierDefinition | None] = {}
_SEALED: dict[type, _Sealed] = {}
_PACKS: dict[type, list[KernelPack]] = {}
_LOCK = threading.RLock()
# Storage hooks (and the capability query) a definition-backed class gets from its definition
# unless it resolves the hook to something other than the Carrier default.
_HOOKS: Final = (
    "_allocate",
    "_storage_size",
    "_storage_dtype",
    "_storage_mutable",
    "_read",
    "_write",
    "_export",
    "_import",
    "_release",
    "operation_capabilities",
)


def register_carrier_definition(cls: type[Carrier], definition: CarrierDefinition) -> None:
    """Make the exact class ``cls`` definition-backed; once per class, before first use.

    The class's storage hooks and capability query then go through the definition (those it
    does not define itself), and its transfers become ``cv.move`` routes. Subclasses inherit
    nothing: each exact class registers its own definition.

    Raises:
        TypeError: ``cls`` is not a Carrier class, is a closed shipped carrier, or
            ``definition`` is not a ``CarrierDefinition``.
        ValueError: ``cls`` already has a definition, was already observed without one, or
            already declared capabilities with ``register_operation_capabilities``.
    """
    from conveyor.capabilities import _DECLARED
    from conveyor.carrier import Carrier, is_closed_carrier

    if not isinstance(cls, type) or not issubclass(cls, Carrier):
        msg = f"register_carrier_definition: {cls!r} is not a Carrier class"
        raise TypeError(msg)
    if is_closed_carrier(cls):
        msg = f"register_carrier_definition: {cls.__name__} is a closed shipped carrier"
        raise TypeError(msg)
    if not isinstance(definition, CarrierDefinition):
        msg = (
            f"register_carrier_definition: expected a CarrierDefinition for {cls.__name__}, "
            f"got {definition!r} ({type(definition).__name__})"
        )
        raise TypeError(msg)
    with _LOCK:
        if cls in _DEFINITIONS:
            state = "a definition" if _DEFINITIONS[cls] else "been used without a definition"
            msg = (
                f"register_carrier_definition: {cls.__name__} has already {state}; register "
                f"exactly once, before the class is first used"
            )
            raise ValueError(msg)
        if cls in _DECLARED:
            msg = (
                f"register_carrier_definition: {cls.__name__} already has a capability set; a "
                f"definition-backed class derives its capabilities from its kernel patterns"
            )
            raise ValueError(msg)
        _DEFINITIONS[cls] = definition
        _install_hooks(cls)
    if definition.transfers:
        from conveyor.move import register_move_route

        for route in definition.transfers:
            register_move_route(
                source=route.source,
                destination=route.destination,
                copy=route.provider.transfer,
            )


def carrier_definition(cls: type) -> CarrierDefinition | None:
    """The definition of the exact class ``cls``, or ``None`` (which seals it definition-free)."""
    try:
        return _DEFINITIONS[cls]
    except KeyError:
        with _LOCK:
            return _DEFINITIONS.setdefault(cls, None)


def register_kernel_pack(pack: KernelPack) -> None:
    """Add ``pack``'s patterns to its definition-backed carrier class, before first use.

    Raises:
        TypeError: ``pack`` is not a ``KernelPack``.
        ValueError: the class is not definition-backed, or was already observed (sealed).
    """
    if not isinstance(pack, KernelPack):
        msg = f"register_kernel_pack: expected a KernelPack, got {pack!r} ({type(pack).__name__})"
        raise TypeError(msg)
    cls = pack.carrier
    with _LOCK:
        if _DEFINITIONS.get(cls) is None:
            msg = (
                f"register_kernel_pack {pack.name!r}: {cls.__name__} is not definition-backed; "
                f"register its CarrierDefinition first"
            )
            raise ValueError(msg)
        if cls in _SEALED:
            msg = (
                f"register_kernel_pack {pack.name!r}: {cls.__name__} is sealed (it was already "
                f"used); register kernel packs before the carrier's first use"
            )
            raise ValueError(msg)
        _PACKS.setdefault(cls, []).append(pack)


def _contributed_packs(cls: type) -> list[KernelPack]:
    """Packs for ``cls`` from the default plugin host, when it has already scanned.

    Only a host that already scanned is asked: a first observation during plugin loading must not
    start a scan from inside a scan.
    """
    from conveyor.plugins import _host

    default = _host._default
    if default is None or default._discovery is None:
        return []
    found = []
    for item in default.kernel_packs():
        if not isinstance(item, KernelPack):
            msg = (
                f"a plugin's conveyor_kernel_packs hook contributed {item!r} "
                f"({type(item).__name__}); contribute conveyor.KernelPack records"
            )
            raise TypeError(msg)
        if item.carrier is cls:
            found.append(item)
    return found


def _sealed(cls: type, definition: CarrierDefinition) -> _Sealed:
    """The sealed table of ``cls``; the first call seals it with the packs known then."""
    found = _SEALED.get(cls)
    if found is not None:
        return found
    contributed = _contributed_packs(cls)
    with _LOCK:
        found = _SEALED.get(cls)
        if found is None:
            found = _Sealed(cls, definition, [*_PACKS.get(cls, ()), *contributed])
            _SEALED[cls] = found
            # Also declared, so class-level readers (the CLI) see the same set. When someone
            # queried the class first it is sealed empty there; operation_capabilities (and
            # so the gate) reads this table instead.
            with contextlib.suppress(ValueError):
                register_operation_capabilities(cls, found.capabilities)
    return found


def definition_capabilities(cls: type) -> CapabilitySet:
    """The capability set of a definition-backed class (sealing it), else its declared set."""
    definition = carrier_definition(cls)
    if definition is None:
        return declared_capabilities(cls)
    return _sealed(cls, definition).capabilities


# -- storage hooks installed on definition-backed classes ----------------------------------------


def _storage_of(cls: type, hook: str) -> StorageProvider:
    definition = _DEFINITIONS.get(cls)
    if definition is None:
        base = next((c for c in cls.__mro__[1:] if _DEFINITIONS.get(c) is not None), None)
        if base is None:
            msg = f"{hook} on {cls.__name__}: the class is not definition-backed"
        else:
            msg = (
                f"{cls.__name__} does not implement the storage hook {hook}: its base "
                f"{base.__name__} is definition-backed, but definitions are not inherited; "
                f"register a CarrierDefinition for {cls.__name__}"
            )
        raise NotImplementedError(msg)
    storage = definition.storage
    if not isinstance(storage, StorageProvider):
        msg = (
            f"{cls.__name__}: its CarrierDefinition's storage {storage!r} is not a "
            f"StorageProvider, so it cannot {hook.lstrip('_')}"
        )
        raise NotImplementedError(msg)
    return storage


def _handle(carrier: Any, hook: str) -> Any:
    """The storage handle of ``carrier``, after the identity check (exact class, own handle)."""
    cls = type(carrier)
    _storage_of(cls, hook)
    try:
        return carrier._cv_storage_handle
    except AttributeError:
        msg = (
            f"{hook} on {cls.__name__}: this instance has no storage; create carriers with "
            f"{cls.__name__}.allocate(size, dtype) or conveyor.adopt_storage"
        )
        raise RuntimeError(msg) from None


def storage_handle(carrier: Carrier) -> Any:
    """The storage handle behind a definition-backed carrier, for its own provider's kernels.

    Raises:
        NotImplementedError: ``carrier``'s exact class is not definition-backed.
        RuntimeError: the carrier was released.
    """
    carrier._check_alive("storage_handle")
    return _handle(carrier, "storage_handle")


def adopt_storage(cls: type[Carrier], handle: Any, size: int, dtype: DType) -> Any:
    """A new ``cls`` instance over an existing storage ``handle`` (e.g. attached by name).

    For storage providers that can reach storage another process or library created; the
    handle is released with the carrier.
    """
    carrier_definition(cls)
    _storage_of(cls, "adopt_storage")
    _sealed(cls, _DEFINITIONS[cls])  # type: ignore[arg-type]  # checked by _storage_of
    carrier = cls()
    carrier._cv_storage_handle = handle  # type: ignore[attr-defined]  # framework-owned slot
    carrier._cv_storage_size = size  # type: ignore[attr-defined]
    carrier._cv_storage_dtype = dtype  # type: ignore[attr-defined]
    return carrier


def _allocate(cls: type[Carrier], /, size: int, dtype: DType, **options: Any) -> Any:
    storage = _storage_of(cls, "_allocate")
    if not storage.supports_dtype(dtype):
        msg = (
            f"allocate on {cls.__name__}: the storage provider does not store {dtype.name}; "
            f"choose another dtype or carrier"
        )
        raise TypeError(msg)
    return adopt_storage(cls, storage.allocate(size, dtype, **options), size, dtype)


def _storage_size(self: Any) -> int:
    _handle(self, "_storage_size")
    size: int = self._cv_storage_size
    return size


def _storage_dtype(self: Any) -> DType:
    _handle(self, "_storage_dtype")
    dtype: DType = self._cv_storage_dtype
    return dtype


def _storage_mutable(self: Any) -> bool:
    return _storage_of(type(self), "_storage_mutable").mutable(_handle(self, "_storage_mutable"))


def _read(self: Any, index: int) -> Any:
    return _storage_of(type(self), "_read").read(_handle(self, "_read"), index)


def _write(self: Any, index: int, value: Any) -> None:
    _storage_of(type(self), "_write").write(_handle(self, "_write"), index, value)


def _export(self: Any, layout: Layout) -> Any:
    storage = _storage_of(type(self), "_export")
    return storage.export_span(_handle(self, "_export"), layout, self._cv_storage_dtype)


def _import(self: Any, layout: Layout, values: Any) -> None:
    storage = _storage_of(type(self), "_import")
    storage.import_span(_handle(self, "_import"), layout, self._cv_storage_dtype, values)


def _release(self: Any) -> None:
    _storage_of(type(self), "_release").release(_handle(self, "_release"))


def _operation_capabilities(self: Any) -> CapabilitySet:
    return definition_capabilities(type(self))


_IMPLEMENTATIONS: Final[dict[str, Any]] = {
    "_allocate": classmethod(_allocate),
    "_storage_size": _storage_size,
    "_storage_dtype": _storage_dtype,
    "_storage_mutable": _storage_mutable,
    "_read": _read,
    "_write": _write,
    "_export": _export,
    "_import": _import,
    "_release": _release,
    "operation_capabilities": _operation_capabilities,
}


def _install_hooks(cls: type) -> None:
    from conveyor.carrier import Carrier

    for hook in _HOOKS:
        owner = next(c for c in cls.__mro__ if hook in c.__dict__)
        if owner is Carrier:  # still the base default
            setattr(cls, hook, _IMPLEMENTATIONS[hook])


def carrier_facet(carrier: Carrier, facet: type[_F]) -> _F | None:
    """The first facet of ``carrier``'s exact definition that is a ``facet``, built around it."""
    if not (isinstance(facet, type) and issubclass(facet, CarrierFacet)):
        msg = f"facet: expected a CarrierFacet subclass, got {facet!r} ({type(facet).__name__})"
        raise TypeError(msg)
    definition = carrier_definition(type(carrier))
    if definition is not None:
        for offered in definition.facets:
            if issubclass(offered, facet):
                return offered(carrier)
    return None
