"""Capabilities: which exact operation plans a carrier executes, declared once as data.

An independent carrier class declares its complete set once with
``register_operation_capabilities``; the first query of an undeclared class seals it empty, and
subclasses inherit nothing (the set is keyed by exact class). A ``DependentCarrier`` computes its
set per instance from the carriers it composes. Every query is a dict hit: the first lookup of a
plan object is memoised on that object, and ``resolve_plan`` returns the same object for the same
signature, so the hot path never compares plans field by field twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, final

import attrs

from conveyor.dtypes import DType
from conveyor.policy import OperandPlan, OperationPlan

if TYPE_CHECKING:
    from conveyor.carrier import Carrier

__all__ = [
    "CapabilitySet",
    "OperandCapability",
    "OperationCapability",
    "UnsupportedOperationPlan",
    "declared_capabilities",
    "register_operation_capabilities",
]


@final
@attrs.frozen(cache_hash=True)
class OperandCapability:
    """One operand of a supported plan: its role, dtype, conversion and weak-scalar flag."""

    role: str
    dtype: DType | None
    convert_to: DType | None
    weak: bool = False

    @classmethod
    def from_plan(cls, operand: OperandPlan) -> OperandCapability:
        return cls(operand.role, operand.dtype, operand.convert_to, operand.weak)


@final
@attrs.frozen(cache_hash=True)
class OperationCapability:
    """One exact plan a carrier executes. ``matches`` compares every field; no near matches."""

    operation: str
    operands: tuple[OperandCapability, ...]
    compute: DType
    accumulation: str
    accumulator_dtype: DType | None
    outputs: tuple[DType, ...]

    @classmethod
    def from_plan(cls, plan: OperationPlan) -> OperationCapability:
        if not isinstance(plan, OperationPlan):
            msg = f"OperationCapability.from_plan expects an OperationPlan, got {plan!r}"
            raise TypeError(msg)
        return cls(
            plan.operation,
            tuple(OperandCapability.from_plan(o) for o in plan.operands),
            plan.compute,
            plan.accumulation,
            plan.accumulator_dtype,
            plan.outputs,
        )

    def matches(self, plan: OperationPlan) -> bool:
        return _key(self) == _key(plan)


def _key(item: OperationCapability | OperationPlan) -> tuple[Any, ...]:
    operands = tuple((o.role, o.dtype, o.convert_to, o.weak) for o in item.operands)
    return (
        item.operation,
        operands,
        item.compute,
        item.accumulation,
        item.accumulator_dtype,
        item.outputs,
    )


class UnsupportedOperationPlan(NotImplementedError):
    """A carrier was asked to execute a plan it does not advertise.

    Raised by the preflight gate before any allocation. ``reason`` says whether the operation is
    unknown to the carrier or only this plan shape is missing.
    """

    __module__ = "conveyor"

    def __init__(self, operation: str, carrier: type, plan: OperationPlan, reason: str) -> None:
        self.operation = operation
        self.carrier = carrier
        self.plan = plan
        self.reason = reason
        super().__init__(f"{operation} on {carrier.__name__}: {reason}")


@final
class CapabilitySet:
    """The frozen set of plans one carrier class (or dependent instance) executes."""

    __slots__ = ("_by_key", "_memo", "_memo_lock", "names")

    names: frozenset[str]

    def __init__(self, capabilities: Iterable[OperationCapability] = ()) -> None:
        by_key: dict[tuple[Any, ...], OperationCapability] = {}
        for cap in capabilities:
            if not isinstance(cap, OperationCapability):
                msg = (
                    f"capabilities must be OperationCapability records, "
                    f"got {cap!r} ({type(cap).__name__})"
                )
                raise TypeError(msg)
            key = _key(cap)
            if key in by_key:
                msg = f"duplicate capability for {cap.operation}: {cap!r}"
                raise ValueError(msg)
            by_key[key] = cap
        self._by_key = by_key
        self.names = frozenset(cap.operation for cap in by_key.values())
        # plan object -> supported?  Plans from resolve_plan are interned, so after the first
        # query of a signature this is an identity dict hit.
        self._memo: dict[OperationPlan, bool] = {}
        self._memo_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[OperationCapability]:
        return iter(self._by_key.values())

    def __repr__(self) -> str:
        return f"<CapabilitySet: {len(self)} plans over {len(self.names)} operations>"

    def supports(self, plan: OperationPlan) -> bool:
        found = self._memo.get(plan)
        if found is None:
            found = _key(plan) in self._by_key
            with self._memo_lock:
                self._memo[plan] = found
        return found

    def reason(self, plan: OperationPlan) -> str | None:
        """Why ``plan`` is unsupported, or ``None`` when it is supported."""
        if self.supports(plan):
            return None
        if plan.operation not in self.names:
            return f"the carrier does not implement {plan.operation} for any dtype"
        operands = ", ".join(
            f"{o.role}={o.dtype.name if o.dtype else None}{' (scalar)' if o.weak else ''}"
            for o in plan.operands
        )
        acc = f", accumulator {plan.accumulator_dtype.name}" if plan.accumulator_dtype else ""
        return (
            f"the carrier implements {plan.operation} but not this plan ({operands}{acc}); "
            f"cast the operands or move them to a carrier that advertises it"
        )


_DECLARED: dict[type, CapabilitySet] = {}
_DECLARE_LOCK = threading.Lock()


def register_operation_capabilities(
    cls: type[Carrier], capabilities: Iterable[OperationCapability]
) -> None:
    """Declare the complete capability set of an independent carrier class, once.

    Atomic: every record is validated before anything is stored. The class must not have been
    declared or observed before (an observation seals an undeclared class empty).

    Raises:
        TypeError: ``cls`` is not a Carrier class, is a DependentCarrier, or an item is not an
            ``OperationCapability``.
        ValueError: duplicate records, or the class was already declared or sealed.
    """
    from conveyor.carrier import Carrier, DependentCarrier

    if not isinstance(cls, type) or not issubclass(cls, Carrier):
        msg = f"register_operation_capabilities: {cls!r} is not a Carrier class"
        raise TypeError(msg)
    if issubclass(cls, DependentCarrier):
        msg = (
            f"register_operation_capabilities: {cls.__name__} is a DependentCarrier; "
            f"it computes capabilities per instance in _compute_operation_capabilities()"
        )
        raise TypeError(msg)
    built = CapabilitySet(capabilities)
    with _DECLARE_LOCK:
        if cls in _DECLARED:
            msg = (
                f"register_operation_capabilities: {cls.__name__} already has a sealed "
                f"capability set; declare the complete set once, before first use"
            )
            raise ValueError(msg)
        _DECLARED[cls] = built


def declared_capabilities(cls: type) -> CapabilitySet:
    """The sealed capability set of an exact independent carrier class (empty if undeclared)."""
    found = _DECLARED.get(cls)
    if found is None:
        with _DECLARE_LOCK:
            found = _DECLARED.setdefault(cls, CapabilitySet())
    return found
