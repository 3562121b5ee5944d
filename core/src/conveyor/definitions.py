"""Carrier definitions: the registry that makes an exact carrier class definition-backed.

A carrier class with a registered ``CarrierDefinition`` dispatches through central operation
definitions and providers instead of its own ``_dispatch_op`` hook. The registry is keyed by the
exact class (no base-class traversal) and sealed at first observation, like capabilities.

This module holds the registry, the record, and the refusals every definition-backed carrier
shares (unknown names, storage-only definitions). Kernel and composite providers plug into
``dispatch_definition`` with the extension API.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, final

import attrs

from conveyor.policy import is_planned

if TYPE_CHECKING:
    from conveyor.carrier import Carrier
    from conveyor.operation import Operation

__all__ = ["CarrierDefinition", "carrier_definition", "register_carrier_definition"]


@final
@attrs.frozen
class CarrierDefinition:
    """How a sibling carrier stores data and which providers execute its operations.

    ``storage`` is the storage provider. A definition with neither ``kernels`` nor ``composite``
    is storage-only: every computational dispatch name is refused.
    """

    storage: Any
    kernels: Any = None
    transfers: tuple[Any, ...] = attrs.field(default=(), converter=tuple)
    composite: Any = None
    facets: tuple[Any, ...] = attrs.field(default=(), converter=tuple)

    @property
    def is_storage_only(self) -> bool:
        return self.kernels is None and self.composite is None


_DEFINITIONS: dict[type, CarrierDefinition | None] = {}
_LOCK = threading.Lock()


def register_carrier_definition(cls: type[Carrier], definition: CarrierDefinition) -> None:
    """Make the exact class ``cls`` definition-backed; once per class, before first use.

    Raises:
        TypeError: ``cls`` is not a Carrier class, is a closed shipped carrier, or
            ``definition`` is not a ``CarrierDefinition``.
        ValueError: ``cls`` already has a definition, or was already observed without one.
    """
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
        _DEFINITIONS[cls] = definition


def carrier_definition(cls: type) -> CarrierDefinition | None:
    """The definition of the exact class ``cls``, or ``None`` (which seals it definition-free)."""
    try:
        return _DEFINITIONS[cls]
    except KeyError:
        with _LOCK:
            return _DEFINITIONS.setdefault(cls, None)


def dispatch_definition(
    carrier: Carrier, definition: CarrierDefinition, operation_name: str
) -> Operation:
    """The definition-backed dispatch path of ``Carrier.dispatch_op``.

    Raises:
        NotImplementedError: the name is not a registered operation, or the definition is
            storage-only, or it names providers this core cannot execute.
    """
    cls_name = type(carrier).__name__
    if not is_planned(operation_name):
        msg = f"{operation_name} on {cls_name}: no central operation definition has this name"
        raise NotImplementedError(msg)
    if definition.is_storage_only:
        msg = (
            f"{operation_name} on {cls_name}: the carrier's definition is storage-only (no "
            f"kernel or composite provider), so it executes no computational operation; move "
            f"the tensor to a compute carrier with cv.move"
        )
        raise NotImplementedError(msg)
    msg = (
        f"{operation_name} on {cls_name}: kernel and composite providers are not supported by "
        f"this version of conveyor-core"
    )
    raise NotImplementedError(msg)
