"""Capabilities: which exact operation plans a carrier executes, declared once as data.

An independent carrier class declares its complete set once with
``register_operation_capabilities``; the first query of an undeclared class seals it empty, and
subclasses inherit nothing (the set is keyed by exact class). A set may be declared by rule
(``CapabilitySet.by_rule``, or ``policy_capabilities`` for "every plan the policy resolves"):
the exact records of a name are materialised the first time that name is queried, so a carrier
that executes thousands of plans costs nothing at import and only what it is asked about. A
``DependentCarrier`` computes its set per instance from the carriers it composes. Every query
is a dict hit: the first lookup of a plan object is memoised on that object, and
``resolve_plan`` returns the same object for the same signature, so the hot path never
compares plans field by field twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, final

import attrs

from conveyor.types.dtypes import DType
from conveyor.types.policy import OperandPlan, OperationPlan, enumerate_plans, registered_operations

__all__ = [
    "CapabilitySet",
    "OperandCapability",
    "OperationCapability",
    "UnsupportedOperationPlan",
    "declared_capabilities",
    "policy_capabilities",
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


_Rule = Callable[[str], Iterable[OperationCapability]]


@final
class CapabilitySet:
    """The frozen set of plans one carrier class (or dependent instance) executes.

    Built from records, or by rule (``by_rule``): then ``names`` is known at once and each
    name's records are materialised, validated, on its first query; ``len`` and iteration
    materialise every name, so counts stay exact.
    """

    __slots__ = ("_by_key", "_memo", "_memo_lock", "_pending", "_rule", "names")

    names: frozenset[str]

    def __init__(self, capabilities: Iterable[OperationCapability] = ()) -> None:
        self._by_key: dict[tuple[Any, ...], OperationCapability] = {}
        self._add(capabilities, None)
        self.names = frozenset(cap.operation for cap in self._by_key.values())
        self._rule: _Rule | None = None
        self._pending: frozenset[str] = frozenset()
        # plan object -> supported?  Plans from resolve_plan are interned, so after the first
        # query of a signature this is an identity dict hit.
        self._memo: dict[OperationPlan, bool] = {}
        self._memo_lock = threading.Lock()

    @classmethod
    def by_rule(cls, names: Iterable[str], rule: _Rule) -> CapabilitySet:
        """The set whose records for each of ``names`` are ``rule(name)``, built when first asked.

        The records are checked as the constructor checks them (and must be of that name) when
        materialised: a bad rule raises there, at the first query of the name.
        """
        built = cls()
        built.names = frozenset(names)
        built._rule = rule
        built._pending = built.names
        return built

    def _add(self, capabilities: Iterable[OperationCapability], name: str | None) -> None:
        by_key = self._by_key
        for cap in capabilities:
            if not isinstance(cap, OperationCapability):
                msg = (
                    f"capabilities must be OperationCapability records, "
                    f"got {cap!r} ({type(cap).__name__})"
                )
                raise TypeError(msg)
            if name is not None and cap.operation != name:
                msg = f"the capability rule gave a {cap.operation} record for {name}: {cap!r}"
                raise ValueError(msg)
            key = _key(cap)
            if key in by_key:
                msg = f"duplicate capability for {cap.operation}: {cap!r}"
                raise ValueError(msg)
            by_key[key] = cap

    def _materialise(self, name: str) -> None:
        """Build the records of ``name`` from the rule, once (records of a name go in whole)."""
        rule = self._rule
        assert rule is not None  # only rule-declared sets have pending names
        with self._memo_lock:
            if name in self._pending:
                records = list(rule(name))
                staged = CapabilitySet()
                staged._add(records, name)
                self._by_key.update(staged._by_key)
                self._pending = self._pending - {name}

    def _complete(self) -> dict[tuple[Any, ...], OperationCapability]:
        for name in sorted(self._pending):
            self._materialise(name)
        return self._by_key

    def __len__(self) -> int:
        return len(self._complete())

    def of(self, name: str) -> tuple[OperationCapability, ...]:
        """The records of ``name`` alone (a rule-declared set builds only that name)."""
        if name in self._pending:
            self._materialise(name)
        return tuple([cap for cap in self._by_key.values() if cap.operation == name])

    def __iter__(self) -> Iterator[OperationCapability]:
        return iter(list(self._complete().values()))

    def __repr__(self) -> str:
        return f"<CapabilitySet: {len(self)} plans over {len(self.names)} operations>"

    def supports(self, plan: OperationPlan) -> bool:
        found = self._memo.get(plan)
        if found is None:
            name = plan.operation
            if name in self._pending:
                self._materialise(name)
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


def register_operation_capabilities(cls: type, capabilities: Iterable[OperationCapability]) -> None:
    """Declare the complete capability set of an independent carrier class, once.

    ``cls`` is a ``conveyor.Carrier`` subclass; this layer knows it only by the
    ``_capability_source`` class attribute every carrier class has (``"class"`` or
    ``"instance"`` for a ``DependentCarrier``).

    Atomic: every record is validated before anything is stored (a rule-declared
    ``CapabilitySet`` is kept as it is and checks each name's records when it first builds
    them). The class must not have been declared or observed before (an observation seals an
    undeclared class empty).

    Raises:
        TypeError: ``cls`` is not a Carrier class, is a DependentCarrier, or an item is not an
            ``OperationCapability``.
        ValueError: duplicate records, or the class was already declared or sealed.
    """
    kind = getattr(cls, "_capability_source", None) if isinstance(cls, type) else None
    if kind is None:
        msg = f"register_operation_capabilities: {cls!r} is not a Carrier class"
        raise TypeError(msg)
    if kind == "instance":
        msg = (
            f"register_operation_capabilities: {cls.__name__} is a DependentCarrier; "
            f"it computes capabilities per instance in _compute_operation_capabilities()"
        )
        raise TypeError(msg)
    built = capabilities if type(capabilities) is CapabilitySet else CapabilitySet(capabilities)
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


def policy_capabilities(names: Iterable[str] | None = None) -> CapabilitySet:
    """By rule: every plan the dtype policy resolves for ``names`` (default: every planned name).

    What a carrier that executes the whole policy declares; no plan is enumerated until a name
    is first queried.

    Raises:
        NotImplementedError: a name is not a planned dispatch name.
    """
    chosen = registered_operations() if names is None else tuple(names)
    planned = set(registered_operations())
    for name in chosen:
        if name not in planned:
            msg = (
                f"policy_capabilities: {name!r} is not a planned dispatch name; planned names "
                f"are listed by conveyor.registered_operations()"
            )
            raise NotImplementedError(msg)
    return CapabilitySet.by_rule(chosen, _every_plan)


def _every_plan(name: str) -> list[OperationCapability]:
    return [OperationCapability.from_plan(plan) for plan in enumerate_plans(name)]
