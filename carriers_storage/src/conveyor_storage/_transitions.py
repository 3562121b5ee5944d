"""Residency transitions of a TiledEvictable: promote, evict, their async forms, discard.

Each transition marks its tiles busy under the carrier's lock, copies outside the lock, and
publishes the new state only once every copy succeeded, so a failure commits nothing and
requests on disjoint tiles run concurrently. Room for a promotion is made first (the policy
chooses what leaves); evicting never changes a value, so that room stays made if the
promotion then fails.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, final

import conveyor as cv
from conveyor.sdk import progress_active, report_progress
from conveyor_storage._residency import AwaitResidency, ResidencyPlan
from conveyor_storage._tiles import Coord, TileSet

if TYPE_CHECKING:
    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = [
    "TiledResidencyFacet",
    "checked_plan",
    "claim",
    "evict",
    "promote",
    "start_async",
    "write_back",
]


def claim(tiled: TiledEvictable, what: str, tiles: object, *, materialize: bool = True) -> TileSet:
    """Check ``tiles`` and mark them busy (caller holds the lock).

    A lazy ``map_tiles`` result is materialised first (its tiles computed and stored), unless
    the caller only reads tiles (``materialize=False``: streaming, projection), which compute
    lazy tiles as they read them.
    """
    found = tiled._grid.tile_set(what, tiles)  # type: ignore[arg-type]  # checked inside
    tiled._check_alive(what)
    if materialize and tiled._recipe is not None:
        tiled.materialize()
    busy = sorted(found.coords & tiled._busy)
    if busy:
        msg = (
            f"{what} on TiledEvictable: tiles {busy} have a pending residency request or "
            f"operation; wait for it first"
        )
        raise RuntimeError(msg)
    tiled._busy.update(found.coords)
    return found


def checked_plan(
    tiled: TiledEvictable, plan: object, required: TileSet, what: str
) -> ResidencyPlan:
    """The policy's plan after checking it keeps correctness and the budget."""
    if not isinstance(plan, ResidencyPlan):
        msg = (
            f"{what} on TiledEvictable: the residency policy returned {plan!r}, not a ResidencyPlan"
        )
        raise TypeError(msg)
    resident = tiled._resident_set()
    missing = required - resident - plan.promote
    if len(plan.evict & required) or (len(missing) and what != "stream"):
        msg = f"{what} on TiledEvictable: the residency policy's plan {plan!r} drops required tiles"
        raise RuntimeError(msg)
    return plan


def promote(tiled: TiledEvictable, tiles: object) -> None:
    with tiled._lock:
        required = claim(tiled, "promote", tiles)
    try:
        check_promote(tiled, required, "promote")
        promote_claimed(tiled, required)
    finally:
        with tiled._lock:
            tiled._busy.difference_update(required.coords)


def check_promote(tiled: TiledEvictable, required: TileSet, what: str) -> None:
    """Refuse, before any copy, a promotion that can never succeed."""
    invalid = sorted(required.coords & tiled._invalid)
    if invalid:
        msg = (
            f"{what} on TiledEvictable: tiles {invalid} are invalid (no value); scatter them first"
        )
        raise RuntimeError(msg)
    if tiled._budget is not None and len(required) * tiled._tile_bytes > tiled._budget:
        msg = (
            f"{what} on TiledEvictable: {len(required)} tiles of {tiled._tile_bytes} bytes "
            f"exceed max_resident_bytes={tiled._budget}; promote fewer tiles"
        )
        raise ValueError(msg)


def promote_claimed(tiled: TiledEvictable, required: TileSet) -> None:
    need = len(required - tiled._resident_set()) * tiled._tile_bytes
    plan = checked_plan(tiled, tiled._plan(required, "promote", 0), required, "promote")
    make_room(tiled, plan.evict, need)
    load(tiled, plan.promote)
    tiled._policy.touched(required)


def make_room(tiled: TiledEvictable, evict: TileSet, need: int) -> None:
    """Evict the policy's choice, then anything else unbusy (oldest first) still in the way."""
    if len(evict):
        with tiled._lock:
            evict = TileSet(evict.coords - tiled._busy)
            tiled._busy.update(evict.coords)
        try:
            write_back(tiled, evict, "evict")
        finally:
            with tiled._lock:
                tiled._busy.difference_update(evict.coords)
    if tiled._budget is not None and tiled._ledger.used + need > tiled._budget:
        msg = (
            f"promote on TiledEvictable: {need} more bytes do not fit under "
            f"max_resident_bytes={tiled._budget} beside {tiled._ledger.used} resident bytes "
            f"the policy kept; evict tiles first"
        )
        raise ValueError(msg)


def load(tiled: TiledEvictable, tiles: TileSet) -> None:
    """Copy ``tiles`` into fresh primaries; publish all of them or none."""
    new: dict[Coord, cv.Carrier] = {}
    taken = 0
    try:
        for done, coord in enumerate(tiles, 1):
            tiled._ledger.take(tiled._tile_bytes, "promote")
            taken += tiled._tile_bytes
            if coord in tiled._implicit and tiled._implicit[coord] == 0:
                new[coord] = tiled._fresh_tile(None)  # allocate zero-fills
            else:
                new[coord] = tiled._fresh_tile(tiled._values(coord, "promote"))
            if progress_active():
                report_progress(done, len(tiles), "promote tiles")
    except BaseException:
        for tile in new.values():
            tile.release()
        tiled._ledger.give(taken)
        raise
    with tiled._lock:
        tiled._resident.update(new)
        for coord in new:
            tiled._implicit.pop(coord, None)


def evict(tiled: TiledEvictable, tiles: object) -> None:
    with tiled._lock:
        found = claim(tiled, "evict", tiles)
    try:
        write_back(tiled, found, "evict")
    finally:
        with tiled._lock:
            tiled._busy.difference_update(found.coords)


def write_back(tiled: TiledEvictable, tiles: TileSet, what: str) -> None:
    """Copy the dirty ones of ``tiles`` to the secondary, then drop every primary."""
    resident = [c for c in tiles if c in tiled._resident]
    dirty = [c for c in resident if c not in tiled._current]
    if dirty:
        with tiled._lock:
            secondary = tiled._secondary_for(what)
        for done, coord in enumerate(dirty, 1):
            values = tiled._resident[coord].export_span(cv.Layout(tiled._grid.tile_shape))
            tiled._write_secondary(secondary, coord, values)
            if progress_active():
                report_progress(done, len(dirty), "evict tiles")
    with tiled._lock:
        for coord in resident:
            tiled._current.add(coord)
            tiled._resident.pop(coord).release()
            tiled._ledger.give(tiled._tile_bytes)


def start_async(tiled: TiledEvictable, kind: str, tiles: object) -> AwaitResidency:
    """Run a transition on a background thread; its tiles are busy until it finishes."""
    with tiled._lock:
        found = claim(tiled, f"{kind}_async", tiles)
    if kind == "promote":
        try:
            check_promote(tiled, found, "promote_async")
        except BaseException:
            with tiled._lock:
                tiled._busy.difference_update(found.coords)
            raise
    handle = AwaitResidency(kind)

    def run(tiles: TileSet) -> None:
        if kind == "promote":
            promote_claimed(tiled, tiles)
        else:
            write_back(tiled, tiles, "evict")

    def work() -> None:
        error: BaseException | None = None
        try:
            run(found)
        except BaseException as exc:  # handed to wait()
            error = exc
        finally:
            with tiled._lock:
                tiled._busy.difference_update(found.coords)
            handle._finish(error)

    threading.Thread(target=work, name=f"conveyor-tiled-{kind}", daemon=True).start()
    return handle


@final
class TiledResidencyFacet(cv.CarrierFacet):
    """Explicit residency control of a TiledEvictable (``tiled.facet(TiledResidencyFacet)``).

    Every transition is all-or-nothing; a tile with a pending asynchronous request is refused
    with ``RuntimeError`` until that request finishes.
    """

    carrier: TiledEvictable

    def promote(self, tiles: object) -> None:
        """Make ``tiles`` resident in the primary (the policy may evict others for room)."""
        promote(self.carrier, tiles)

    def evict(self, tiles: object) -> None:
        """Move ``tiles`` to the secondary; clean tiles with a current copy move no bytes."""
        evict(self.carrier, tiles)

    def promote_async(self, tiles: object) -> AwaitResidency:
        return start_async(self.carrier, "promote", tiles)

    def evict_async(self, tiles: object) -> AwaitResidency:
        return start_async(self.carrier, "evict", tiles)
