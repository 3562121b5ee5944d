"""Residency of a TiledEvictable: plans, the default LRU policy under a budget, the byte ledger.

The policy only optimises: it proposes which tiles to promote, keep and evict. The carrier
checks every plan (required tiles present, the budget kept) before acting on it, so a poor
policy costs time, never correctness. The ledger counts resident bytes at every transition and
remembers the peak, which is what the budget tests read.
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Literal, final

import attrs

from conveyor_storage._tiles import Coord, TileSet

__all__ = [
    "AwaitResidency",
    "LRUPolicy",
    "Ledger",
    "ResidencyPlan",
    "ResidencyPolicy",
]

Purpose = Literal["promote", "stream", "project"]
PURPOSES: Final = ("promote", "stream", "project")


def _tile_set(value: object) -> TileSet:
    return value if isinstance(value, TileSet) else TileSet(value)  # type: ignore[arg-type]  # coords


@final
@attrs.frozen
class ResidencyPlan:
    """What a policy proposes: tiles to ``promote``, to keep resident (``retain``), to ``evict``."""

    promote: TileSet = attrs.field(converter=_tile_set)
    retain: TileSet = attrs.field(converter=_tile_set)
    evict: TileSet = attrs.field(converter=_tile_set)


@attrs.frozen(kw_only=True)
class ResidencyView:
    """What a policy may read about its carrier: resident tiles, tile bytes, the budget."""

    resident: Callable[[], TileSet]
    tile_bytes: int
    budget: int | None


class ResidencyPolicy:
    """Open base of residency policies; one instance serves one carrier.

    ``bind(view)`` is called once by the carrier; ``touched(tiles)`` after tiles were used;
    ``plan(required, purpose, room=0)`` proposes a ``ResidencyPlan`` for making ``required``
    resident (``purpose`` is ``"promote"``, ``"stream"`` or ``"project"``; streaming promotes
    nothing). ``room`` is extra bytes the caller needs besides the resident tiles (streaming
    buffers); a ``plan`` that takes only ``(required, purpose)`` is called without it, and the
    carrier then frees that room itself, oldest tiles first.
    """

    view: ResidencyView | None = None

    def bind(self, view: ResidencyView) -> None:
        if self.view is not None:
            msg = "ResidencyPolicy: a policy instance serves one TiledEvictable; create another"
            raise ValueError(msg)
        self.view = view

    def touched(self, tiles: TileSet) -> None:
        """Tiles an operation just used (default: nothing to remember)."""

    def plan(self, required: TileSet, purpose: Purpose, room: int = 0) -> ResidencyPlan:
        """Promote what is missing, evict nothing; override to free room under a budget."""
        assert self.view is not None  # bound by the carrier before any plan
        resident = self.view.resident()
        promote = required - resident if purpose != "stream" else TileSet(())
        return ResidencyPlan(promote, required & resident, TileSet(()))


Planner = Callable[[TileSet, Purpose, int], ResidencyPlan]


def planner(policy: ResidencyPolicy) -> Planner:
    """``policy.plan`` as a three-argument call, whether or not the policy takes ``room``."""
    plan = policy.plan
    try:
        signature = inspect.signature(plan)
    except (TypeError, ValueError):  # a builtin or C callable: trust the documented form
        return plan
    try:
        signature.bind(TileSet(()), "promote", 0)
    except TypeError:
        pass
    else:
        return plan
    try:
        signature.bind(TileSet(()), "promote")
    except TypeError:
        msg = (
            f"TiledEvictable: residency_policy {policy!r} has plan{signature}; a policy's plan "
            "takes (required, purpose) or (required, purpose, room)"
        )
        raise TypeError(msg) from None
    return lambda required, purpose, room: plan(required, purpose)


@final
class LRUPolicy(ResidencyPolicy):
    """The default: least recently used tiles leave first, whenever the budget needs room.

    ``room`` is extra bytes the caller needs besides the resident tiles (streaming buffers).
    """

    def __init__(self) -> None:
        self._recent: OrderedDict[Coord, None] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "LRUPolicy()"

    def touched(self, tiles: TileSet) -> None:
        with self._lock:
            for coord in tiles:
                self._recent.pop(coord, None)
                self._recent[coord] = None

    def plan(self, required: TileSet, purpose: Purpose, room: int = 0) -> ResidencyPlan:
        base = super().plan(required, purpose, room)
        view = self.view
        assert view is not None  # bound by the carrier
        if view.budget is None:
            return base
        resident = view.resident()
        after = len(resident | base.promote) * view.tile_bytes + room
        evict: list[Coord] = []
        with self._lock:
            order = list(self._recent)
        # Unused tiles first (never touched), then oldest use first.
        candidates = [c for c in resident if c not in self._recent] + order
        for coord in candidates:
            if after <= view.budget:
                break
            if coord in resident and coord not in required and coord not in evict:
                evict.append(coord)
                after -= view.tile_bytes
        return ResidencyPlan(base.promote, base.retain, TileSet(evict))


@final
class Ledger:
    """Resident and transient tile bytes of one carrier, with the peak, checked per transition.

    ``limit`` is the budget plus one tile of work space; exceeding it is a bug in the carrier,
    so the ledger refuses it with ``RuntimeError`` instead of silently going over.
    """

    __slots__ = ("_lock", "limit", "peak", "used")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = self.peak = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int, what: str) -> None:
        with self._lock:
            used = self.used + nbytes
            if self.limit is not None and used > self.limit:
                msg = (
                    f"{what} on TiledEvictable: {used} bytes of tiles would be resident, over "
                    f"the budget plus one tile of work space ({self.limit}); this is a bug"
                )
                raise RuntimeError(msg)
            self.used = used
            self.peak = max(self.peak, used)

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


@final
class AwaitResidency:
    """A pending residency transition; ``wait`` returns once it committed (or raises its error)."""

    __slots__ = ("_error", "_event", "label")

    def __init__(self, label: str) -> None:
        self.label = label
        self._event = threading.Event()
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<AwaitResidency {self.label} {'done' if self.done else 'pending'}>"

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the transition finished; re-raise what it raised.

        Raises:
            TimeoutError: it did not finish within ``timeout`` seconds.
        """
        if not self._event.wait(timeout):
            msg = f"{self.label} on TiledEvictable: not finished after {timeout} s; wait again"
            raise TimeoutError(msg)
        if self._error is not None:
            raise self._error

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._event.set()
