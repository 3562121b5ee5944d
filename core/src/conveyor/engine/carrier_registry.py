"""Carrier definitions: the registry that makes an exact carrier class definition-backed.

``register_carrier_definition`` binds one ``CarrierDefinition`` (its providers) to one exact
class, with no base-class traversal; the first use seals it together with the kernel packs that
target it. Registration also installs provider-backed storage hooks on the class, so the
``Carrier`` storage contract (liveness, mutability and range checks) stays the one entry point.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar, final

import attrs

from conveyor.engine import journal as _journal
from conveyor.engine.carrier import Carrier, is_closed_carrier
from conveyor.engine.plugin_access import scanned_host as _scanned_host
from conveyor.engine.providers import (
    CarrierFacet,
    CompositeProvider,
    KernelPack,
    KernelPattern,
    KernelProvider,
    StorageProvider,
    TransferRoute,
    _facets,
    _routes,
)
from conveyor.engine.tensor import Tensor
from conveyor.types.capabilities import (
    CapabilitySet,
    OperationCapability,
    _key,
    declared_capabilities,
    register_operation_capabilities,
)
from conveyor.types.dtypes import DType
from conveyor.types.layout import Layout
from conveyor.types.policy import VIEW_OPERATIONS, OperationPlan, is_planned, registered_operations

_F = TypeVar("_F", bound=CarrierFacet)

__all__ = [
    "CarrierDefinition",
    "adopt_storage",
    "carrier_definition",
    "carrier_facet",
    "check_contributed_pack",
    "check_contributed_pack_names",
    "definition_capabilities",
    "register_carrier_definition",
    "register_kernel_pack",
    "storage_handle",
]


# -- names a provider may cover ------------------------------------------------------------------


def _undefined(name: str, defined: Callable[[str], bool]) -> bool:
    """Whether ``name`` has no central definition: built-in names are the planned and view
    names; a dotted (custom) name is asked of ``defined``."""
    if is_planned(name) or name in VIEW_OPERATIONS:
        return False
    return "." not in name or not defined(name)


def _check_names(
    names: Iterable[str], where: str, defined: Callable[[str], bool] = lambda _: True
) -> None:
    """Refuse a provider covering a name with no central definition (it could never dispatch).

    A dotted custom name passes ``defined`` (by default: it may still be contributed by a plugin
    hook, and dispatch names the gap if it never is).

    Raises:
        ValueError: the first such name, with ``where`` (the registration and its owner).
    """
    for name in names:
        if _undefined(name, defined):
            msg = (
                f"{where}: {name!r} has no central operation definition, so no call of it could "
                f"dispatch; cover a name listed by conveyor.operation_definitions(), or define a "
                f"namespaced custom operation with conveyor.define_operation first"
            )
            raise ValueError(msg)


def _definition_names(definition: CarrierDefinition) -> list[str]:
    names = [p.operation for p in definition.kernels.patterns] if definition.kernels else []
    if definition.composite is not None:
        caps = definition.composite.capabilities
        names += sorted(caps.names) if type(caps) is CapabilitySet else [c.operation for c in caps]
    return names


def check_contributed_pack_names(item: object, defined: Callable[[str], bool]) -> None:
    """Refuse what a plugin's ``conveyor_kernel_packs`` hook may not contribute.

    The plugin host calls it while loading the plugin, so the refusal marks that plugin broken
    (the host's message names the plugin); ``defined`` says whether a dotted name is defined
    (already, or by the same plugin's ``conveyor_operation_definitions``).

    Raises:
        TypeError: ``item`` is not a ``KernelPack``.
        ValueError: a pattern covers a name with no central definition.
    """
    if not isinstance(item, KernelPack):
        msg = (
            f"contributed {item!r} ({type(item).__name__}); contribute conveyor.KernelPack records"
        )
        raise TypeError(msg)
    where = f"kernel pack {item.name!r} for {item.carrier.__name__}"
    _check_names((p.operation for p in item.patterns), where, defined)


# -- carrier definitions ------------------------------------------------------------------------


def _definition_operation_class(
    instance: object, attribute: attrs.Attribute[Any], value: Any
) -> None:
    if not (isinstance(value, type) and issubclass(value, DefinitionOperation)):
        msg = (
            f"CarrierDefinition: operation_class must be a subclass of DefinitionOperation, got "
            f"{value!r}"
        )
        raise TypeError(msg)
    if value.__init__ is not DefinitionOperation.__init__:
        msg = (
            f"CarrierDefinition: operation_class {value.__name__} must keep DefinitionOperation's "
            f"constructor (the framework builds it for every dispatch)"
        )
        raise TypeError(msg)


def _fallback_carrier(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    from conveyor.engine.carrier import DependentCarrier

    if not (isinstance(value, type) and issubclass(value, Carrier)) or issubclass(
        value, DependentCarrier
    ):
        msg = (
            f"CarrierDefinition: fallback must be an independent Carrier class (the one that "
            f"runs the names you have no kernel for, e.g. CPU), got {value!r}"
        )
        raise TypeError(msg)


@final
@attrs.frozen(kw_only=False)
class CarrierDefinition:
    """How a sibling carrier stores data and which providers execute its operations.

    ``storage`` is the ``StorageProvider``. A definition with neither ``kernels`` nor
    ``composite`` is storage-only: every computational dispatch name is refused. ``transfers``
    become ``cv.move`` routes when the definition is registered; ``facets`` are
    ``CarrierFacet`` subclasses served by ``carrier.facet(T)``. ``operation_class``, a subclass
    of ``DefinitionOperation``, is the class every dispatch of the carrier instantiates (to give
    its operations a backward of their own, as TiledEvictable streams gradients tile by tile);
    by default ``DefinitionOperation`` itself. ``fallback``, an independent carrier class
    (opt-in), runs every planned name the definition has no kernel or composite for: the
    operands move to it, its kernel runs the same plan, the results move back.
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
    operation_class: type[DefinitionOperation] | None = attrs.field(
        default=None, validator=attrs.validators.optional(_definition_operation_class)
    )
    fallback: type[Carrier] | None = attrs.field(
        default=None, validator=attrs.validators.optional(_fallback_carrier)
    )

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
        return self.kernels is None and self.composite is None and self.fallback is None


def _names(records: tuple[OperationCapability, ...] | CapabilitySet) -> frozenset[str]:
    if type(records) is CapabilitySet:
        return records.names
    return frozenset(c.operation for c in records)


def _of(records: tuple[OperationCapability, ...] | CapabilitySet, name: str) -> Iterable[Any]:
    if type(records) is CapabilitySet:
        return records.of(name)
    return (c for c in records if c.operation == name)


def _owner(cls: type, attribute: str) -> type:
    """The class of ``cls``'s MRO that defines ``attribute``."""
    return next(c for c in cls.__mro__ if attribute in c.__dict__)


@final
class _Sealed:
    """A definition-backed class's execution table, frozen at its first observation.

    Patterns whose plans are a rule-declared ``CapabilitySet`` (``ruled``, one per name) and a
    rule-declared composite set stay lazy: the sealed set is then itself by rule, building a
    name's records (kernel plans first, then composite plans no kernel covers) on first query.
    """

    __slots__ = (
        "_composite",
        "_eager",
        "_plain_allocate",
        "_plain_init",
        "_stores",
        "_uninitialized",
        "_zeroed",
        "allocators",
        "capabilities",
        "composite_names",
        "fallback",
        "fallback_names",
        "plain_flat",
        "planned",
        "ruled",
        "storage",
        "unplanned",
    )

    def __init__(self, cls: type, definition: CarrierDefinition, packs: list[KernelPack]) -> None:
        storage = definition.storage
        self.storage = storage if isinstance(storage, StorageProvider) else None
        # Whether results may skip the public allocate (the class does not override it).
        self._plain_allocate = _owner(cls, "allocate") is Carrier
        # Whether a result carrier may be built without running a constructor (the class keeps
        # Carrier's, whose two attributes are also class defaults), as CPU's results are.
        self._plain_init = _owner(cls, "__init__") is Carrier and _owner(cls, "__new__") is object
        self._stores: set[DType] = set()  # dtypes the storage provider accepted
        # How results are allocated once a dtype is known stored: zero-filled, and for results
        # a kernel writes whole the provider's optional hook, else its zero-filled allocate
        # (what the hook's default would call).
        self._zeroed: Callable[[int, DType], Any] | None = None
        self._uninitialized: Callable[[int, DType], Any] | None = None
        if self.storage is not None:
            self._zeroed = self._uninitialized = self.storage.allocate
            if type(self.storage).allocate_uninitialized is not (
                StorageProvider.allocate_uninitialized
            ):
                self._uninitialized = self.storage.allocate_uninitialized
        # What the kernel interface allocates results with itself, when a result carrier is
        # only its storage slots (no allocate, __init__ or __new__ of the class's own):
        # (zero-filled, uninitialized, the dtypes the provider accepted).
        self.allocators: tuple[Any, Any, set[DType]] | None = None
        if self.storage is not None and self._plain_allocate and self._plain_init:
            self.allocators = (self._zeroed, self._uninitialized, self._stores)
        # Whether the provider keeps the default flat_array, which the kernel interface then
        # applies inline (a one-dimensional NumPy handle is its own flat array).
        self.plain_flat = (
            self.storage is not None and type(self.storage).flat_array is StorageProvider.flat_array
        )
        patterns = list(definition.kernels.patterns if definition.kernels else ())
        for pack in packs:
            patterns.extend(pack.patterns)
        self.planned: dict[tuple[Any, ...], KernelPattern] = {}
        self.ruled: dict[str, KernelPattern] = {}
        self.unplanned: dict[str, KernelPattern] = {}
        self._eager: dict[str, list[OperationCapability]] = {}
        for pattern in patterns:
            name = pattern.operation
            plans = pattern.plans
            lazy = type(plans) is CapabilitySet
            if is_planned(name):
                if lazy and (name in self.ruled or name in self._eager):
                    msg = f"{name} on {cls.__name__}: two kernels cover it"
                    raise ValueError(msg)
                if lazy:
                    self.ruled[name] = pattern
                    continue
                if not plans:
                    msg = (
                        f"{name} on {cls.__name__}: a kernel pattern of a "
                        f"dtype-planned operation must list the exact plans it executes"
                    )
                    raise ValueError(msg)
                if name in self.ruled:
                    msg = f"{name} on {cls.__name__}: two kernels cover it"
                    raise ValueError(msg)
                for cap in plans:
                    if _key(cap) in self.planned:
                        msg = f"{name} on {cls.__name__}: two kernels cover {cap!r}"
                        raise ValueError(msg)
                    self.planned[_key(cap)] = pattern
                    self._eager.setdefault(name, []).append(cap)
            else:
                if lazy or plans:
                    msg = (
                        f"{name} on {cls.__name__}: the operation is not "
                        f"dtype-planned, so its kernel pattern lists no plans"
                    )
                    raise ValueError(msg)
                if name in self.unplanned:
                    msg = f"{name} on {cls.__name__}: two kernels cover it"
                    raise ValueError(msg)
                self.unplanned[name] = pattern
        composite = definition.composite
        self._composite = composite.capabilities if composite is not None else ()
        self.composite_names = _names(self._composite)
        self.fallback = definition.fallback
        own = {*self._eager, *self.ruled, *self.composite_names}
        # The planned names nothing of the definition covers, run through the fallback class.
        self.fallback_names: frozenset[str] = (
            frozenset(n for n in registered_operations() if is_planned(n) and n not in own)
            if self.fallback is not None
            else frozenset()
        )
        if self.ruled or type(self._composite) is CapabilitySet or self.fallback_names:
            names = own | self.fallback_names
            self.capabilities = CapabilitySet.by_rule(names, self._records)
        else:
            self.capabilities = CapabilitySet(
                [cap for caps in self._eager.values() for cap in caps]
                + [c for c in self._composite if _key(c) not in self.planned]
            )

    def _records(self, name: str) -> list[OperationCapability]:
        """The sealed records of ``name``: its kernels' plans, then composite plans beyond them
        (a fallback name: the fallback class's plans)."""
        if name in self.fallback_names:
            assert self.fallback is not None  # only a fallback has fallback names
            return [
                cap
                for cap in _class_capabilities(self.fallback).of(name)
                if self._stores_every_tensor_of(cap)
            ]
        found = list(self._eager.get(name, ()))
        ruled = self.ruled.get(name)
        if ruled is not None:
            found.extend(ruled.plans.of(name) if type(ruled.plans) is CapabilitySet else ())
        if name in self.composite_names:
            covered = {_key(c) for c in found}
            found.extend(c for c in _of(self._composite, name) if _key(c) not in covered)
        return found

    def pattern(self, plan: OperationPlan) -> KernelPattern | None:
        """The kernel pattern executing ``plan``, or ``None`` (composite execution)."""
        found = self.planned.get(_key(plan))
        if found is None:
            ruled = self.ruled.get(plan.operation)
            if (
                ruled is not None
                and type(ruled.plans) is CapabilitySet
                and ruled.plans.supports(plan)
            ):
                return ruled
        return found

    def _stores_every_tensor_of(self, cap: OperationCapability) -> bool:
        """Whether this class's storage holds every tensor operand and result of ``cap``: a
        fallback plan that would need another dtype here is not advertised (the gate refuses
        it) instead of failing at the result's allocation."""
        storage = self.storage
        if storage is None:
            return False
        dtypes = {*cap.outputs, *(o.dtype for o in cap.operands if o.dtype and not o.weak)}
        return all(storage.supports_dtype(dtype) for dtype in dtypes)

    def fresh(self, cls: type[Carrier], layout: Layout, dtype: DType, initialized: bool) -> Tensor:
        """A result tensor over a fresh carrier of ``cls`` with the contiguous ``layout``: after
        the first of a dtype (the public ``allocate``, which asks the storage provider whether it
        stores it), straight from the storage provider, and without the zero fill when not
        ``initialized`` (``allocate_uninitialized``). ``layout`` comes from a result spec.

        The kernel interface builds a result itself (``allocators``, with ``publish``) when the
        class's carriers are only their slots and the dtype is known stored; it asks here for
        every other result."""
        size = layout.size
        if _WITHDRAWN or dtype not in self._stores or not self._plain_allocate:
            carrier = cls.allocate(size, dtype)
            self._stores.add(dtype)
            return Tensor._wrap(carrier, layout, dtype)
        allocate = self._zeroed if initialized else self._uninitialized
        assert allocate is not None  # a class with storage: it allocated before
        handle = allocate(size, dtype)
        return Tensor._wrap(_adopted(cls, handle, size, dtype), layout, dtype)

    def covers(self, name: str) -> bool:
        return (
            name in self.unplanned
            or name in self.capabilities.names
            or name in self.composite_names
        )


def fallback_route(cls: type) -> tuple[type[Carrier] | None, frozenset[str]]:
    """The fallback class of definition-backed ``cls`` and the names that run through it."""
    definition = carrier_definition(cls)
    if definition is None or definition.fallback is None:
        return None, frozenset()
    return definition.fallback, _sealed(cls, definition).fallback_names


def _class_capabilities(cls: type) -> CapabilitySet:
    """The sealed capability set of an independent class, definition-backed or not."""
    definition = carrier_definition(cls)
    return _sealed(cls, definition).capabilities if definition else declared_capabilities(cls)


_DEFINITIONS: dict[type, CarrierDefinition | None] = {}
_SEALED: dict[type, _Sealed] = {}
_PACKS: dict[type, list[KernelPack]] = {}
_LOCK = threading.RLock()
#: Used definition-backed classes whose plugin ended broken -> why (naming the plugin).
_WITHDRAWN: dict[type, str] = {}


def withdrawal_refusal(what: str, cls: type) -> RuntimeError | None:
    """The refusal of ``what`` on a class whose definition was withdrawn, else ``None``."""
    reason = _WITHDRAWN.get(cls)
    if reason is None:
        return None
    msg = (
        f"{what} on {cls.__name__}: its definition was withdrawn because {reason}; its tensors "
        f"can still be read and moved off (cv.move(tensor, 'cpu')); fix the plugin, or block "
        f"it with CONVEYOR_DISABLE_PLUGINS"
    )
    return RuntimeError(msg)


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
        ValueError: ``cls`` already has a definition, was already observed without one,
            already declared capabilities with ``register_operation_capabilities``, or a
            kernel pattern or composite capability covers a name with no central definition.
    """
    from conveyor.types.capabilities import _DECLARED

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
    _check_names(_definition_names(definition), f"register_carrier_definition {cls.__name__}")
    _journal.admit("register_carrier_definition")
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
        installed = _install_hooks(cls)
    _journal.record(
        lambda: _unregister_definition(cls, definition, installed), "register_carrier_definition"
    )
    if definition.transfers:
        for route in definition.transfers:
            _register_move_route(
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
        ValueError: the class is not definition-backed, was already observed (sealed), or a
            pattern covers a name with no central definition.
    """
    if not isinstance(pack, KernelPack):
        msg = f"register_kernel_pack: expected a KernelPack, got {pack!r} ({type(pack).__name__})"
        raise TypeError(msg)
    cls = pack.carrier
    _check_names((p.operation for p in pack.patterns), f"register_kernel_pack {pack.name!r}")
    _journal.admit("register_kernel_pack")
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
    _journal.record(lambda: _unregister_pack(pack), "register_kernel_pack")


def _unregister_pack(pack: KernelPack) -> None:
    """Withdraw ``pack`` unless its class was sealed with it already (then it is in use)."""
    with _LOCK:
        if pack.carrier not in _SEALED and pack.carrier in _PACKS:
            _PACKS[pack.carrier] = [p for p in _PACKS[pack.carrier] if p is not pack]


def _contributed_packs(cls: type) -> list[KernelPack]:
    """Packs for ``cls`` from the default plugin host, when it has already scanned.

    Only a host that already scanned is asked: a first observation during plugin loading must not
    start a scan from inside a scan.
    """
    default = _scanned_host()
    if default is None:
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
            # so the gate) reads this table instead. A DependentCarrier (TypeError) computes
            # its set per instance, so it has no class-level declaration.
            with contextlib.suppress(ValueError, TypeError):
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
    return _adopted(cls, handle, size, dtype)


def _adopted(cls: type[Carrier], handle: Any, size: int, dtype: DType) -> Any:
    """A new ``cls`` over ``handle``, once ``cls`` is known to be a sealed storage class."""
    carrier = cls()
    carrier._cv_storage_handle = handle  # type: ignore[attr-defined]  # framework-owned slot
    carrier._cv_storage_size = size  # type: ignore[attr-defined]
    carrier._cv_storage_dtype = dtype  # type: ignore[attr-defined]
    return carrier


def _allocate(cls: type[Carrier], /, size: int, dtype: DType, **options: Any) -> Any:
    if _WITHDRAWN:
        refusal = withdrawal_refusal("allocate", cls)
        if refusal is not None:
            raise refusal
    storage = _storage_of(cls, "_allocate")
    if not storage.supports_dtype(dtype):
        msg = (
            f"allocate on {cls.__name__}: the storage provider does not store {dtype.name}; "
            f"choose another dtype or carrier"
        )
        raise TypeError(msg)
    handle = storage.allocate(size, dtype, **options)
    if cls not in _SEALED:
        return adopt_storage(cls, handle, size, dtype)
    return _adopted(cls, handle, size, dtype)


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
    self.__dict__.pop("_cv_read_view", None)  # a kernel's kept view of the storage goes too
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


def _install_hooks(cls: type) -> tuple[str, ...]:
    """Give ``cls`` the definition's implementation of each hook it leaves at the default."""
    installed = []
    for hook in _HOOKS:
        owner = next(c for c in cls.__mro__ if hook in c.__dict__)
        if owner is Carrier:  # still the base default
            setattr(cls, hook, _IMPLEMENTATIONS[hook])
            installed.append(hook)
    return tuple(installed)


def _unregister_definition(
    cls: type, definition: CarrierDefinition, installed: tuple[str, ...]
) -> None:
    """Withdraw ``cls``'s definition and hooks (its plugin ended broken).

    A class already used keeps them, so its tensors can still be read and moved off, but it
    allocates and computes no more (``withdrawn``).
    """
    with _LOCK:
        if _DEFINITIONS.get(cls) is not definition:
            return
        if cls in _SEALED:
            _WITHDRAWN[cls] = _journal.reason() or "its plugin is broken"
            return
        del _DEFINITIONS[cls]
        for hook in installed:
            if cls.__dict__.get(hook) is _IMPLEMENTATIONS[hook]:
                delattr(cls, hook)


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


def check_contributed_pack(item: KernelPack, earlier: Iterable[tuple[KernelPack, str]]) -> None:
    """Refuse a plugin's kernel pack that would break its carrier class at first use.

    The plugin host calls it once every plugin has loaded (``check_contributed_pack_names``
    already checked the record's kind and names), so a bad pack marks that plugin broken
    (named in the error) instead of failing the carrier for everyone. ``earlier`` holds the packs
    of plugins loaded before this one, each with how to name its plugin. A class already sealed
    ignores new packs, as ``register_kernel_pack`` documents, so nothing is checked for it.

    Raises:
        ValueError: its class is not definition-backed, or a pattern is malformed or covers what
            the class, a registered pack or an earlier plugin's pack already covers.
    """
    cls = item.carrier
    with _LOCK:
        definition = _DEFINITIONS.get(cls)
        if definition is None:
            msg = (
                f"kernel pack {item.name!r}: {cls.__name__} is not definition-backed; contribute "
                f"packs only for classes with a CarrierDefinition"
            )
            raise ValueError(msg)
        if cls in _SEALED:
            return
        registered = list(_PACKS.get(cls, ()))
    # Building the sealed table is the one place that knows every collision rule.
    _Sealed(cls, definition, [*registered, item])
    for pack, owner in earlier:
        if pack.carrier is cls:
            try:
                _Sealed(cls, definition, [*registered, pack, item])
            except ValueError as exc:
                msg = (
                    f"{exc} (kernel pack {item.name!r} collides with pack {pack.name!r} of {owner})"
                )
                raise ValueError(msg) from None


# A definition's transfers become move routes, and its operations are DefinitionOperations;
# both modules build on this registry, so they are imported last.
from conveyor.engine.definition_dispatch import DefinitionOperation  # noqa: E402
from conveyor.engine.move import register_move_route as _register_move_route  # noqa: E402
