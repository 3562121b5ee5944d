"""Evictable: a two-tier carrier, a compute primary plus a storage secondary, and its adapter.

An ``Evictable`` owns both tiers. While promoted, its data lives in the primary and operations
run there through a fresh ``EvictableOperation`` (the composite adapter: the only visible
dispatch and autograd node, lowering to the primary's own fresh operation). ``evict()`` copies
the data to the secondary and releases the primary's memory; ``promote()`` allocates a new
primary and copies the data back. Both are idempotent and failure-atomic: a copy that fails
half-way publishes nothing, so the data stays readable and unchanged.

Eviction never overwrites the only good copy. When the secondary already holds a committed copy
of older data, the new data goes to a fresh sibling of the secondary (same kind and placement)
that replaces the old one only once it is complete; a process killed mid-eviction leaves the
old secondary intact. This needs room for a second copy while it runs, like an atomic save. The
secondary given to the constructor holds no committed data yet, so the first eviction writes
into it in place; the secondary of a result stays empty (unallocated) until its first eviction.
A secondary offering ``_begin_overwrite`` / ``_commit`` (FileBacked) carries a hidden
``.partial`` name while it is being written, so a crash never leaves a torn file that looks
complete.

Concurrency: every access through the hierarchy (``read``, ``write``, ``export_span``,
``import_span``, the operations its adapter runs) holds the hierarchy's lock, and so do
``evict`` and ``promote``; a write therefore lands before an eviction's copy starts, or waits
for it and then finds the data evicted (``RuntimeError`` naming ``promote()``). A write made
straight into ``primary`` bypasses the lock: an eviction that sees the primary's version move
during its copy copies again, and refuses after ``_EVICT_ATTEMPTS`` tries.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable
from typing import Any, Final, Self, final

import conveyor as cv
from conveyor.sdk import CONCRETE_DTYPES
from conveyor_storage._adapter import EvictableOperation
from conveyor_storage._spans import Allocator, copy_whole, sibling_allocator

__all__ = ["Evictable", "EvictableOperation"]

_ALL_DTYPES: Final = frozenset(CONCRETE_DTYPES)
_EVICT_ATTEMPTS: Final = 3  # copies an eviction tries while the primary changes under it


def _storable(cls: type) -> frozenset[cv.DType]:
    """The dtypes a tier class declares it stores (``storable_dtypes``); undeclared: all."""
    declared = getattr(cls, "storable_dtypes", None)
    return frozenset(declared) if declared is not None else _ALL_DTYPES


def _carrier_class(what: str, value: object) -> type[cv.Carrier]:
    if isinstance(value, str):
        found: type[cv.Carrier] = cv.plugins.host().carrier(value)
        return found
    if isinstance(value, type) and issubclass(value, cv.Carrier):
        return value
    msg = f"allocate on Evictable: {what} must be a Carrier class or name, got {value!r}"
    raise TypeError(msg)


def _release_tiers(tiers: list[cv.Carrier | None]) -> None:
    """Finalizer: release whatever tiers the hierarchy still owns."""
    for tier in tiers:
        if tier is not None:
            tier.release()


def _check_tier(what: str, label: str, tier: cv.Carrier | None) -> None:
    """Refuse a tier someone released directly: the hierarchy owns it, its data is gone."""
    if tier is not None and tier.released:
        msg = (
            f"{what} on Evictable: the {label} {type(tier).__name__} was released outside the "
            f"hierarchy, which owns its tiers; the data it held is gone, release the hierarchy "
            f"and build a new one"
        )
        raise RuntimeError(msg)


@final
@cv.closed_carrier
class Evictable(cv.DependentCarrier):
    """A compute primary and a storage secondary holding one buffer; ``evict`` / ``promote``.

    Args:
        primary: the compute carrier holding the data now (the hierarchy takes ownership).
        secondary: a storage carrier of the same size and dtype that evictions write to (the
            hierarchy takes ownership; its current contents are ignored).
        durable: flush the secondary (``fsync``) before an eviction commits.

    Raises:
        TypeError: a tier is not a Carrier instance, or the dtypes differ.
        ValueError: the sizes differ, the tiers are one object, or a tier is released.
    """

    _primary: cv.Carrier | None
    _secondary: cv.Carrier | None
    _tiers: list[cv.Carrier | None]  # [primary, secondary], shared with the finalizer
    _committed: bool  # the secondary holds the current data
    _synced: int  # primary.version when the secondary last matched it
    _base: int  # primary.version when the primary became current
    _size: int
    _dt: cv.DType
    _classes: tuple[type[cv.Carrier], type[cv.Carrier]]
    _new_primary: Allocator
    _new_secondary: Allocator
    _durable: bool
    _lock: threading.RLock
    _finalizer: weakref.finalize[Any, Any] | None
    _own_version: int  # writes through the hierarchy, and drift folded in at eviction

    def __init__(
        self, primary: cv.Carrier, secondary: cv.Carrier, *, durable: bool = False
    ) -> None:
        super().__init__()
        tiers: tuple[tuple[str, object], ...] = (("primary", primary), ("secondary", secondary))
        for label, tier in tiers:  # checked at run time: callers pass any object
            if not isinstance(tier, cv.Carrier):
                msg = f"Evictable: {label} must be a Carrier instance, got {tier!r}"
                raise TypeError(msg)
            if tier.released:
                msg = f"Evictable: the {label} {type(tier).__name__} was already released"
                raise ValueError(msg)
        if primary is secondary:
            msg = "Evictable: primary and secondary must be two different carriers"
            raise ValueError(msg)
        if primary.dtype is not secondary.dtype:
            msg = (
                f"Evictable: the tiers store different dtypes ({primary.dtype.name} and "
                f"{secondary.dtype.name}); allocate the secondary with {primary.dtype.name}"
            )
            raise TypeError(msg)
        if primary.size != secondary.size:
            msg = (
                f"Evictable: the tiers have different sizes ({primary.size} and "
                f"{secondary.size} slots)"
            )
            raise ValueError(msg)
        fresh = sibling_allocator(secondary, overwrite=True)  # evictions write every slot
        self._setup(primary, secondary, type(secondary), fresh, durable)

    def _setup(
        self,
        primary: cv.Carrier,
        secondary: cv.Carrier | None,
        secondary_class: type[cv.Carrier],
        new_secondary: Allocator,
        durable: bool,
    ) -> None:
        self._primary, self._secondary = primary, secondary
        self._tiers = [primary, secondary]
        self._committed = False
        self._base = self._synced = primary.version
        self._size, self._dt = primary.size, primary.dtype
        self._classes = (type(primary), secondary_class)
        self._new_primary = sibling_allocator(primary)
        self._new_secondary = new_secondary
        self._durable = durable
        self._lock = threading.RLock()
        # Only a hierarchy holding a secondary has files to clean up when it is collected; a
        # fresh result (secondary empty) gets its finalizer at its first eviction.
        self._finalizer = None
        if secondary is not None:
            self._finalizer = weakref.finalize(self, _release_tiers, self._tiers)
        if isinstance(primary, cv.DependentCarrier):
            # Per-instance plans: snapshot them now, while the primary is present.
            self.operation_capabilities()

    @classmethod
    def _adopt(cls, primary: cv.Carrier, like: Evictable) -> Evictable:
        """A fresh hierarchy of ``like``'s tier classes around ``primary``, secondary empty."""
        if type(primary) is not like._classes[0]:
            msg = (
                f"Evictable: the primary operation returned a {type(primary).__name__} result; "
                f"expected {like._classes[0].__name__}"
            )
            raise TypeError(msg)
        ev = object.__new__(cls)
        cv.DependentCarrier.__init__(ev)
        ev._setup(primary, None, like._classes[1], like._new_secondary, like._durable)
        return ev

    @classmethod
    def _allocate(
        cls,
        size: int,
        dtype: cv.DType,
        primary: object = "cpu",
        secondary: object = "file",
        durable: bool = False,
        **kwargs: Any,
    ) -> Self:
        """A hierarchy whose primary is ``primary.allocate(size, dtype)``; secondary empty.

        The secondary is allocated at the first eviction with ``secondary.allocate(size,
        dtype)``; for a placed secondary (a block device), build ``Evictable(primary,
        device.allocate(size, dtype))`` instead.
        """
        if kwargs:
            msg = f"allocate on Evictable: unexpected argument(s) {', '.join(sorted(kwargs))}"
            raise TypeError(msg)
        primary_class = _carrier_class("primary", primary)
        secondary_class = _carrier_class("secondary", secondary)

        def new_secondary(n: int, dt: cv.DType) -> cv.Carrier:
            return secondary_class.allocate(n, dt)

        ev = object.__new__(cls)
        cv.DependentCarrier.__init__(ev)
        ev._setup(
            primary_class.allocate(size, dtype), None, secondary_class, new_secondary, durable
        )
        return ev

    # -- tiers --------------------------------------------------------------------------------

    @property
    def primary(self) -> cv.Carrier | None:
        """The primary while promoted, else ``None``."""
        return self._primary

    @property
    def secondary(self) -> cv.Carrier | None:
        """The secondary, or ``None`` while it is empty (never evicted to)."""
        return self._secondary

    @property
    def tier_classes(self) -> tuple[type[cv.Carrier], type[cv.Carrier]]:
        """The exact ``(primary class, secondary class)`` of this hierarchy."""
        return self._classes

    def is_evicted(self) -> bool:
        """Whether the data lives only in the secondary (the primary's memory is freed)."""
        return self._primary is None

    def evict(self) -> None:
        """Copy the data to the secondary and free the primary; no-op when already evicted.

        Waits for accesses through the hierarchy running in other threads (they hold its lock).

        Raises:
            RuntimeError: the hierarchy or one of its tiers was released, or the primary
                changed during each of ``_EVICT_ATTEMPTS`` copies (written straight into,
                bypassing the hierarchy): nothing changed, the data is still promoted.
            Exception: whatever the copy raised (``OSError``, ``MemoryError``...): nothing
                changed, the data is still promoted.
        """
        with self._lock:
            self._check_alive("evict")
            self._check_tiers("evict")
            primary = self._primary
            if primary is None:
                return
            for _ in range(_EVICT_ATTEMPTS):
                seen = primary.version
                if self._committed and seen == self._synced:
                    break
                self._write_secondary(primary, seen)
                if primary.version == seen:
                    break
            else:
                msg = (
                    f"evict on Evictable: the primary {type(primary).__name__} changed during "
                    f"each of {_EVICT_ATTEMPTS} copies (something writes into it directly, "
                    f"bypassing the hierarchy); write through the Evictable tensor, then evict"
                )
                raise RuntimeError(msg)
            self._own_version += primary.version - self._base  # keep the drift
            self._primary = self._tiers[0] = None
            primary.release()

    def _check_tiers(self, what: str) -> None:
        """Refuse a hierarchy whose tier someone released directly (the data there is gone)."""
        _check_tier(what, "primary", self._primary)
        _check_tier(what, "secondary", self._secondary)

    def _write_secondary(self, primary: cv.Carrier, version: int) -> None:
        """Copy ``primary`` (at ``version``) into the secondary and commit it."""
        old = self._secondary
        fresh = old is None or self._committed  # never overwrite the only committed copy
        target = self._new_secondary(self._size, self._dt) if fresh else old
        assert target is not None  # allocated just above when absent
        try:
            if type(target) is not self._classes[1]:
                msg = (
                    f"evict on Evictable: the secondary allocator returned "
                    f"{type(target).__name__}, expected {self._classes[1].__name__}"
                )
                raise TypeError(msg)
            begin = None if fresh else getattr(target, "_begin_overwrite", None)
            if callable(begin):
                begin()  # an in-place overwrite is torn until it commits: mark the file so
            copy_whole(primary, target)
            # Storage secondaries offer flush(); the data is synced before the commit renames
            # the file and the rename is synced after it, so a power cut keeps one whole copy.
            flush = getattr(target, "flush", None) if self._durable else None
            commit = getattr(target, "_commit", None)
            for step in (flush, commit, flush if callable(commit) else None):
                if callable(step):
                    step()
        except BaseException:
            if fresh:
                target.release()
            raise
        self._secondary = self._tiers[1] = target
        self._committed, self._synced = True, version
        if self._finalizer is None:
            self._finalizer = weakref.finalize(self, _release_tiers, self._tiers)
        if fresh and old is not None:
            old.release()

    def promote(self) -> None:
        """Copy the data back into a new primary; no-op when already promoted.

        Raises:
            RuntimeError: the hierarchy or one of its tiers was released.
            Exception: whatever the allocation or copy raised (``OSError`` from a secondary
                file another process truncated): nothing changed, the data is still evicted.
        """
        with self._lock:
            self._check_alive("promote")
            self._check_tiers("promote")
            if self._primary is not None:
                return
            secondary = self._secondary
            assert secondary is not None and self._committed  # evicted implies a committed copy
            primary = self._new_primary(self._size, self._dt)
            try:
                if type(primary) is not self._classes[0]:
                    msg = (
                        f"promote on Evictable: the primary allocator returned "
                        f"{type(primary).__name__}, expected {self._classes[0].__name__}"
                    )
                    raise TypeError(msg)
                copy_whole(secondary, primary)
            except BaseException:
                primary.release()
                raise
            self._base = self._synced = primary.version
            self._primary = self._tiers[0] = primary

    def _drift(self) -> int:
        """Writes made straight into the current primary since it became current."""
        primary = self.__dict__.get("_primary")
        return primary.version - self._base if primary is not None else 0

    # The write counter is a property here, so that every reader (``version``, and the core's
    # direct ``_version`` reads when it saves inputs for backward) sees writes made through the
    # hierarchy and writes made straight into its current primary; evict / promote change it
    # not at all.
    @property
    def _version(self) -> int:
        own: int = self.__dict__.get("_own_version", 0)
        return own + self._drift()

    @_version.setter
    def _version(self, value: int) -> None:
        self._own_version = value - self._drift()

    # -- storage hooks ------------------------------------------------------------------------

    def _current(self, what: str, *, write: bool) -> cv.Carrier:
        """The tier holding the data now; the caller holds ``_lock``."""
        primary = self._primary
        if primary is not None:
            _check_tier(what, "primary", primary)
            return primary
        if write:
            msg = f"{what} on Evictable: the data is evicted; call promote() before writing"
            raise RuntimeError(msg)
        assert self._secondary is not None  # evicted implies a committed secondary
        _check_tier(what, "secondary", self._secondary)
        return self._secondary

    def _storage_size(self) -> int:
        return self._size

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    # Each access holds the lock, so it never interleaves with an evict / promote (see the
    # module docstring).
    def _read(self, index: int) -> Any:
        with self._lock:
            return self._current("read", write=False).read(index)

    def _write(self, index: int, value: Any) -> None:
        with self._lock:
            self._current("write", write=True).write(index, value)

    def _export(self, layout: cv.Layout) -> Any:
        with self._lock:
            return self._current("export_span", write=False).export_span(layout)

    def _import(self, layout: cv.Layout, values: Any) -> None:
        with self._lock:
            self._current("import_span", write=True).import_span(layout, values)

    def _release(self) -> None:
        with self._lock:  # never while an access or an evict / promote runs
            self._primary = self._secondary = None
            if self._finalizer is not None:
                self._finalizer()
            else:
                _release_tiers(self._tiers)

    # -- capabilities and dispatch ------------------------------------------------------------

    def _compute_operation_capabilities(self) -> Iterable[cv.OperationCapability]:
        """The primary's plans whose every output dtype both tiers can store."""
        primary = self._primary
        if primary is not None:
            plans = primary.operation_capabilities()
        else:  # evicted: an independent class's plans are its sealed declaration
            plans = cv.declared_capabilities(self._classes[0])
        storable = _storable(self._classes[0]) & _storable(self._classes[1])
        return tuple(cap for cap in plans if all(out in storable for out in cap.outputs))

    def _capability_key(self) -> Hashable | None:
        """Independent primaries declare plans per class, so identical hierarchies share one
        frozen set instead of rebuilding it for every result; a dependent primary does not."""
        if issubclass(self._classes[0], cv.DependentCarrier):
            return None
        return self._classes

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        primary = self._primary
        if primary is None:
            self._check_alive(operation_name)
            msg = (
                f"{operation_name} on Evictable: the data is evicted; call promote() before "
                f"dispatching operations"
            )
            raise RuntimeError(msg)
        try:
            inner = primary.dispatch_op(operation_name)
        except NotImplementedError as exc:
            msg = (
                f"{operation_name} on Evictable: the primary {type(primary).__name__} does not "
                f"implement it ({exc})"
            )
            raise NotImplementedError(msg) from exc
        return EvictableOperation(inner)

    def _pickle_refusal(self) -> str:
        return (
            "an Evictable tensor lives in this process's memory and its secondary tier (an "
            "open file or device) at once; pickle cv.move(tensor, 'cpu') instead"
        )

    def __repr__(self) -> str:
        state = "evicted" if self._primary is None else "promoted"
        if self.released:
            state = "released"
        primary, secondary = self._classes
        return (
            f"<Evictable {primary.__name__}/{secondary.__name__} size={self._size} "
            f"dtype={self._dt.name} {state}>"
        )
