"""Carrier: the open base of every storage/compute backend, and instance dispatch.

A carrier instance owns one flat buffer of ``size`` slots of one dtype; tensors are views of it.
The public methods here validate arguments and then call underscore hooks that concrete carriers
override, so every carrier refuses bad input the same way. ``dispatch_op`` owns freshness and
dispatch metadata: a hook supplies an implementation, the base stamps it, and nothing a hook
returns can replace or share another dispatch's state.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, SupportsIndex, TypeVar

from conveyor.engine.operation import Operation
from conveyor.types import dtypes
from conveyor.types.capabilities import (
    _DECLARED,
    CapabilitySet,
    OperationCapability,
    UnsupportedOperationPlan,
    declared_capabilities,
)
from conveyor.types.dtypes import DType

if TYPE_CHECKING:
    import numpy as np

    from conveyor.engine.providers import CarrierFacet
    from conveyor.types.layout import Layout
    from conveyor.types.policy import OperationPlan

__all__ = [
    "Carrier",
    "DependentCarrier",
    "as_dispatched",
    "closed_carrier",
    "is_closed_carrier",
    "storage_only_refusal",
]

_C = TypeVar("_C", bound=type)
_Facet = TypeVar("_Facet", bound="CarrierFacet")


class _InstanceOnly:
    """Descriptor: the wrapped method works on instances; on a class it explains the mistake."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self._func = func
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Callable[..., Any]:
        if instance is not None:
            return types.MethodType(self._func, instance)
        func, name = self._func, self._name

        def unbound(carrier: object = None, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(carrier, Carrier):
                cls_name = owner.__name__ if owner is not None else "Carrier"
                msg = (
                    f"{name} is an instance operation: call it on a carrier instance (e.g. "
                    f"{cls_name}.allocate(size, dtype).{name}(...)), not on the class "
                    f"{cls_name}; got {carrier!r}"
                )
                raise TypeError(msg)
            return func(carrier, *args, **kwargs)

        return unbound


class Carrier:
    """Open base of every carrier: storage contract, capability queries and dispatch.

    A definition-free sibling is ``class Mine(cv.Carrier)`` overriding ``_dispatch_op`` and the
    storage hooks it supports; a definition-backed one registers a ``CarrierDefinition``.
    """

    _version: int = 0
    _released: bool = False
    # Where capabilities come from, read by conveyor.types.capabilities (a lower layer, which cannot
    # import this class): "class" (declared once per exact class) or "instance" (dependent).
    _capability_source: ClassVar[str] = "class"
    # The declarative dispatch table, read on the exact class only: name -> Operation class.
    # The default hook instantiates it; a class overriding _dispatch_op may keep one too, when
    # its hook returns _dispatch_classes[name]() (that is what the bound fast path relies on).
    _dispatch_classes: ClassVar[Mapping[str, type[Operation]]]

    def __init__(self) -> None:
        """Carriers take no required constructor argument; ``allocate`` builds usable ones."""
        self._version = 0
        self._released = False

    def __repr__(self) -> str:
        try:
            return f"<{type(self).__name__} size={self.size} dtype={self.dtype.name}>"
        except (NotImplementedError, RuntimeError):
            return f"<{type(self).__name__}>"

    # -- storage contract ---------------------------------------------------------------------

    @classmethod
    def allocate(cls, size: int, dtype: DType | str, **kwargs: Any) -> Self:
        """A zero-filled carrier of ``size`` slots of ``dtype`` (a DType or its name).

        Raises:
            TypeError: ``size`` is not an int, ``dtype`` names no concrete conveyor dtype.
            ValueError: ``size`` is negative.
        """
        if isinstance(size, bool) or not isinstance(size, int):
            msg = f"allocate on {cls.__name__}: size must be an int, got {size!r}"
            raise TypeError(msg)
        if size < 0:
            msg = f"allocate on {cls.__name__}: size must be >= 0, got {size!r}"
            raise ValueError(msg)
        if not isinstance(dtype, DType):
            try:  # a name ("float32") or a NumPy dtype, as everywhere a dtype is accepted
                dtype = dtypes.dtype(dtype)
            except TypeError:
                msg = f"allocate on {cls.__name__}: dtype must be a conveyor dtype, got {dtype!r}"
                raise TypeError(msg) from None
        if dtype.is_abstract:
            msg = (
                f"allocate on {cls.__name__}: {dtype.name} is an abstract dtype category and "
                f"cannot be storage; use a concrete dtype"
            )
            raise TypeError(msg)
        return cls._allocate(size, dtype, **kwargs)

    def allocate_like(self, size: int, dtype: DType) -> Carrier:
        """Another zero-filled carrier of this one's class and placement (a directory, a device).

        Copies that must stay beside their source (a view's copy, a gradient's scatter) allocate
        through it. The default is ``type(self).allocate(size, dtype)``; carriers whose
        ``allocate`` needs a placement argument override it.
        """
        return type(self).allocate(size, dtype)

    @classmethod
    def _allocate(cls, size: int, dtype: DType, **kwargs: Any) -> Self:
        msg = f"{cls.__name__} does not implement the storage hook _allocate"
        raise NotImplementedError(msg)

    @property
    def size(self) -> int:
        return self._storage_size()

    @property
    def dtype(self) -> DType:
        return self._storage_dtype()

    @property
    def version(self) -> int:
        """Bumped by every write, so saved tensors can detect in-place modification."""
        return self._version

    @property
    def mutable(self) -> bool:
        return self._storage_mutable()

    @property
    def released(self) -> bool:
        return self._released

    def read(self, index: int) -> Any:
        """The value of one slot, as a Python scalar."""
        self._check_index("read", index)
        return self._read(index)

    def write(self, index: int, value: Any) -> None:
        self._check_writable("write")
        self._check_index("write", index)
        # Counted before the data changes (see import_span).
        self._version += 1
        self._write(index, value)

    def export_span(self, layout: Layout) -> np.ndarray[Any, Any]:
        """The values under ``layout`` as a NumPy array (a fresh copy or a read-only view)."""
        self._check_layout("export_span", layout)
        return self._export(layout)

    def import_span(self, layout: Layout, values: np.ndarray[Any, Any]) -> None:
        """Write ``values`` (shaped like ``layout``) into the slots under ``layout``."""
        self._check_writable("import_span")
        self._check_layout("import_span", layout)
        shape = tuple(getattr(values, "shape", ()))
        if shape != layout.shape:
            msg = (
                f"import_span on {type(self).__name__}: values of shape {shape} do not match "
                f"the layout shape {layout.shape}"
            )
            raise ValueError(msg)
        # Counted before the data changes: a reader that checks the version once it has read
        # (backward, after a VJP read saved values) then sees every write that overlapped its
        # read; counted after, a write finishing between that read and that check would be
        # missed. A write that raises part-way counts too, since part of it may have landed.
        self._version += 1
        self._import(layout, values)

    def release(self) -> None:
        """Free the storage; later access raises ``RuntimeError``. Idempotent."""
        if not self._released:
            self._released = True
            self._release()

    def _mark_written(self) -> None:
        """Record an in-place write a kernel made outside ``write`` or ``import_span``."""
        self._version += 1

    # storage hooks (override in concrete carriers)
    def _storage_size(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not implement _storage_size")

    def _storage_dtype(self) -> DType:
        raise NotImplementedError(f"{type(self).__name__} does not implement _storage_dtype")

    def _storage_mutable(self) -> bool:
        return True

    def _read(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement the hook _read")

    def _write(self, index: int, value: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement the hook _write")

    def _export(self, layout: Layout) -> np.ndarray[Any, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not implement the hook _export")

    def _import(self, layout: Layout, values: np.ndarray[Any, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement the hook _import")

    def _release(self) -> None:
        """Free backing resources; optional (default: nothing to free)."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        """Pickle (or copy) the carrier, unless ``_pickle_refusal`` says why it cannot be.

        Raises:
            TypeError: the carrier holds what pickle cannot carry (an open file, a device); the
                message says how to persist or share its data instead.
        """
        why = self._pickle_refusal()
        if why is not None:
            msg = f"pickle on {type(self).__name__}: {why}"
            raise TypeError(msg)
        return super().__reduce_ex__(protocol)

    def _pickle_refusal(self) -> str | None:
        """Optional hook: why this carrier cannot be pickled and how to persist its data.

        ``None`` (the default) pickles it as any object. A carrier over process-bound resources
        (file descriptors, locks, device handles) returns one sentence naming what to do
        instead, so ``pickle.dumps(tensor)`` fails with that advice, not with an error about
        the lock inside it.
        """
        return None

    def _check_alive(self, what: str) -> None:
        if self._released:
            msg = f"{what} on {type(self).__name__}: the carrier was released"
            raise RuntimeError(msg)

    def _check_writable(self, what: str) -> None:
        self._check_alive(what)
        if not self.mutable:
            msg = f"{what} on {type(self).__name__}: the carrier is read-only"
            raise RuntimeError(msg)

    def _check_index(self, what: str, index: int) -> None:
        self._check_alive(what)
        if isinstance(index, bool) or not isinstance(index, int):
            msg = f"{what} on {type(self).__name__}: index must be an int, got {index!r}"
            raise TypeError(msg)
        if not 0 <= index < self.size:
            msg = f"{what} on {type(self).__name__}: index {index} out of range [0, {self.size})"
            raise IndexError(msg)

    def _check_layout(self, what: str, layout: Layout) -> None:
        self._check_alive(what)
        low, high = layout.span()
        if layout.size and (low < 0 or high > self.size):
            msg = (
                f"{what} on {type(self).__name__}: layout reaches slots [{low}, {high}) outside "
                f"the buffer of {self.size}"
            )
            raise IndexError(msg)

    # -- capabilities -------------------------------------------------------------------------

    def operation_capabilities(self) -> CapabilitySet:
        """The exact plans this carrier executes (its class's sealed declaration)."""
        found = _DECLARED.get(type(self))  # not `or`: truth would count a rule-declared set
        return found if found is not None else declared_capabilities(type(self))

    def supports_operation_plan(self, plan: OperationPlan) -> bool:
        return self.operation_capabilities().supports(plan)

    def unsupported_plan_reason(self, plan: OperationPlan) -> str | None:
        return self.operation_capabilities().reason(plan)

    def require_operation_plan(self, plan: OperationPlan) -> None:
        """Raise ``UnsupportedOperationPlan`` unless this carrier advertises ``plan`` exactly."""
        caps = self.operation_capabilities()
        if caps._memo.get(plan) is not True and not caps.supports(plan):
            reason = caps.reason(plan)
            assert reason is not None  # unsupported implies a reason
            raise UnsupportedOperationPlan(plan.operation, type(self), plan, reason)

    @classmethod
    def _companion_classes(cls) -> tuple[type, ...]:
        """The classes whose tensors may stand beside this class's tensors in one call.

        The ``companions`` of a definition's ``CompositeProvider`` (a tiled carrier accepts a
        small dense operand of its compute class); none for every other carrier, so the
        public functions refuse mixed carriers as before.
        """
        definition = _carrier_definition(cls)
        composite = definition.composite if definition is not None else None
        return composite.companions if composite is not None else ()

    # -- facets -------------------------------------------------------------------------------

    def facet(self, facet: type[_Facet]) -> _Facet | None:
        """The ``facet`` contract this carrier's exact definition offers, or ``None``."""
        return _carrier_facet(self, facet)

    def require_facet(self, facet: type[_Facet]) -> _Facet:
        """Like ``facet``, but a carrier without it raises ``NotImplementedError`` naming both."""
        found = self.facet(facet)
        if found is None:
            msg = (
                f"{facet.__name__} on {type(self).__name__}: the carrier does not offer this "
                f"facet; use a carrier whose CarrierDefinition lists it"
            )
            raise NotImplementedError(msg)
        return found

    # -- dispatch -----------------------------------------------------------------------------

    @_InstanceOnly
    def dispatch_op(self, operation_name: str) -> Operation:
        """A fresh operation for ``operation_name``, stamped with this carrier's exact class.

        Raises:
            TypeError: called on a class, a non-string name, or the implementation is not a
                fresh ``Operation`` (another type, or one a previous dispatch already marked).
            NotImplementedError: the carrier does not implement ``operation_name``.
        """
        cls = type(self)
        if not isinstance(operation_name, str):
            msg = (
                f"dispatch_op on {cls.__name__}: the operation name must be a str, got "
                f"{operation_name!r} ({type(operation_name).__name__})"
            )
            raise TypeError(msg)
        definition = _carrier_definition(cls)
        if definition is not None:
            op: object = _dispatch_definition(self, definition, operation_name)
        else:
            op = self._dispatch_op(operation_name)
        if not isinstance(op, Operation):
            msg = (
                f"{operation_name} on {cls.__name__}: the dispatch hook returned "
                f"{type(op).__name__}; it must return a fresh Operation"
            )
            raise TypeError(msg)
        if op._dispatched:
            msg = (
                f"{operation_name} on {cls.__name__}: the dispatch hook returned an operation "
                f"already dispatched as {op._operation_name!r} by "
                f"{getattr(op._dispatch_carrier_class, '__name__', None)}; return a fresh "
                f"Operation from every _dispatch_op call"
            )
            raise TypeError(msg)
        return as_dispatched(op, operation_name, self)

    @classmethod
    def _bound_class(cls, operation_name: str) -> type[Operation] | None:
        """The class every ``_dispatch_op(operation_name)`` of this exact class instantiates.

        A definition-free class whose hook always returns ``table[name]()`` names that table in
        its own ``_dispatch_classes``; a definition-backed class makes its definition's operation
        class. Public calls may then build the fresh operation themselves (same class, same
        stamps, same ``_fresh_state``) and cache the rest of the dispatch. ``None``: always ask.
        """
        definition = _carrier_definition(cls)
        if definition is not None:
            return _bound_definition_class(definition, operation_name)
        table = cls.__dict__.get("_dispatch_classes")
        if table is None:
            return None
        op_cls: type[Operation] | None = table.get(operation_name)
        if op_cls is None or op_cls.__init__ is not Operation.__init__:
            return None
        return op_cls

    def _dispatch_op(self, operation_name: str) -> Operation:
        """Dispatch hook: return a fresh carrier-specific ``Operation`` for ``operation_name``.

        The default is the declarative table: a class that names, in its own
        ``_dispatch_classes``, the operation class of each name it implements gets
        ``_dispatch_classes[name]()`` (and the bound fast path of the public functions).
        """
        table: Mapping[str, type[Operation]] | None = type(self).__dict__.get("_dispatch_classes")
        op_cls = table.get(operation_name) if table is not None else None
        if op_cls is None:
            msg = (
                f"{operation_name} on {type(self).__name__}: the carrier does not implement "
                f"this operation"
            )
            raise NotImplementedError(msg)
        return op_cls()


class DependentCarrier(Carrier):
    """Open base of carriers that execute through other carriers (composites, tiers).

    Capabilities are computed once per instance by ``_compute_operation_capabilities`` from the
    carriers it composes, then frozen for the instance's lifetime. Instances whose
    ``_capability_key()`` is equal (and not ``None``) share one frozen set, so a composite that
    makes many results of the same kinds computes it once.
    """

    _capability_source: ClassVar[str] = "instance"
    _capability_snapshot: CapabilitySet | None = None

    def _compute_operation_capabilities(self) -> Iterable[OperationCapability]:
        """The capabilities of this instance; override (default: none)."""
        return ()

    def _capability_key(self) -> Hashable | None:
        """What this instance's capabilities depend on, when that is less than the instance.

        Override to return a hashable key (the classes it composes, say) when every instance
        with an equal key computes the same set; ``None`` (the default) computes it per instance.
        """
        return None

    def operation_capabilities(self) -> CapabilitySet:
        snapshot = self._capability_snapshot
        if snapshot is None:
            key = self._capability_key()
            snapshot = None if key is None else _SHARED_SNAPSHOTS.get((type(self), key))
            if snapshot is None:
                snapshot = CapabilitySet(self._compute_operation_capabilities())
                if key is not None:
                    snapshot = _SHARED_SNAPSHOTS.setdefault((type(self), key), snapshot)
            self._capability_snapshot = snapshot
        return snapshot


# (exact DependentCarrier class, its instances' capability key) -> their one frozen set.
_SHARED_SNAPSHOTS: dict[tuple[type, Hashable], CapabilitySet] = {}


def as_dispatched(op: Operation, operation_name: str, carrier: Carrier) -> Operation:
    """Stamp the fresh ``op`` as ``carrier``'s dispatch of ``operation_name``; returns ``op``.

    ``dispatch_op`` stamps every operation it returns this way. Call it yourself for a graph
    node that no dispatch name produces (a move, a projection), so profiling, autograd and error
    messages name its boundary like any other operation's.

    Raises:
        TypeError: ``op`` is not an ``Operation`` or was already dispatched.
    """
    if not isinstance(op, Operation) or op._dispatched:
        msg = (
            f"{operation_name} on {type(carrier).__name__}: as_dispatched needs a fresh "
            f"Operation, got {op!r}"
        )
        raise TypeError(msg)
    op._operation_name = operation_name
    op._dispatch_carrier_class = type(carrier)
    op._dispatch_carrier = carrier
    op._dispatched = True
    return op


def storage_only_refusal(
    operation: str, carrier: type, *, why: str | None = None, move_to: str | None = None
) -> NotImplementedError:
    """The refusal of a computational name on a storage-only carrier, in one wording everywhere.

    Args:
        why: what makes the carrier storage-only (default: its definition has no kernel or
            composite provider).
        move_to: a compute carrier name the message suggests (the core itself names none).
    """
    why = why or "the carrier's definition is storage-only (no kernel or composite provider)"
    how = f"cv.move(tensor, {move_to!r})" if move_to else "cv.move"
    msg = (
        f"{operation} on {carrier.__name__}: {why}, so it executes no computational operation; "
        f"move the tensor to a compute carrier with {how}"
    )
    return NotImplementedError(msg)


_CLOSED: set[type] = set()


def closed_carrier(cls: _C) -> _C:
    """Close a shipped concrete carrier: subclassing it raises ``TypeError`` at class creation.

    Use together with ``typing.final`` so type checkers report the same at analysis time.
    """
    if not (isinstance(cls, type) and issubclass(cls, Carrier)):
        msg = f"closed_carrier decorates Carrier subclasses, got {cls!r}"
        raise TypeError(msg)

    def __init_subclass__(subclass: type, /, **kwargs: Any) -> None:
        msg = (
            f"cannot subclass {cls.__name__}: it is a closed carrier. Subclass "
            f"conveyor.Carrier (or conveyor.DependentCarrier) to write a sibling carrier, and "
            f"register a CarrierDefinition or override _dispatch_op"
        )
        raise TypeError(msg)

    cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]  # closing hook
    _CLOSED.add(cls)
    return cls


def is_closed_carrier(cls: type) -> bool:
    """Whether ``cls`` was closed with ``closed_carrier``."""
    return cls in _CLOSED


# -- definition-backed dispatch ---------------------------------------------------------------
# The definition registry and definition-backed dispatch build on Carrier, so they are imported
# once the class exists.
from conveyor.engine.carrier_registry import carrier_definition as _carrier_definition  # noqa: E402
from conveyor.engine.carrier_registry import carrier_facet as _carrier_facet  # noqa: E402
from conveyor.engine.definition_dispatch import (  # noqa: E402
    bound_definition_class as _bound_definition_class,
)
from conveyor.engine.definition_dispatch import (  # noqa: E402
    dispatch_definition as _dispatch_definition,
)
