"""Move routes contributed by conveyor-storage: bulk span copies through the carrier contract.

One copy function serves every pair: it allocates the destination and moves the source in
chunks of whole spans (``export_span`` -> ``import_span``). The storage carriers make each side
a bulk transfer: a FileBacked source streams ``preadv`` windows through one reused buffer, a
FileBacked destination imports spans with ``pwrite``, a block carrier reads and writes whole
aligned blocks. Compute carriers are reached through their public classes only.
"""

from __future__ import annotations

from typing import Any

import conveyor as cv
from conveyor.sdk import MoveRoute
from conveyor_storage._spans import copy_range, sibling_allocator
from conveyor_storage.block_device_carrier import BlockDeviceCarrier
from conveyor_storage.evictable import Evictable
from conveyor_storage.file_backed import FileBacked

__all__ = ["routes", "span_copy"]


def _fill(source: cv.Tensor, carrier: cv.Carrier) -> cv.Tensor:
    """Copy ``source`` into the fresh ``carrier`` (released again if the copy fails)."""
    layout, owner = source.layout, source.carrier
    try:
        if layout.is_contiguous:
            copy_range(owner, layout.offset, carrier, 0, source.size)
        elif source.size:
            values = owner.export_span(layout).reshape(-1)
            carrier.import_span(cv.Layout((source.size,)), values)
        commit = getattr(carrier, "_commit", None)
        if callable(commit):
            commit()  # a FileBacked filled under a hidden .partial name gets its final name
    except BaseException:
        carrier.release()
        raise
    return cv.Tensor(carrier, cv.Layout(source.shape))


def span_copy(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    """The bulk route: ``destination.allocate(size, dtype, **options)``, then span copies.

    A storage class of this distribution that offers ``_allocate_for_overwrite`` skips zeroing
    what the copy overwrites anyway, or (FileBacked) fills a hidden file renamed on commit; a
    failed copy releases the carrier unseen.
    """
    allocate = getattr(destination, "_allocate_for_overwrite", destination.allocate)
    return _fill(source, allocate(source.size, source.dtype, **options))


def _block_copy(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    """Block to block: onto ``device=`` when given, else onto the source's own device."""
    if options:
        return span_copy(source, destination, **options)
    return _fill(source, sibling_allocator(source.carrier)(source.size, source.dtype))


def _evictable_copy(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    """Evictable to Evictable: a hierarchy like the source's unless ``options`` say otherwise."""
    if options:
        return span_copy(source, destination, **options)
    like = source.carrier
    assert isinstance(like, Evictable)
    primary_class = like.tier_classes[0]
    hierarchy = Evictable._adopt(primary_class.allocate(source.size, source.dtype), like)
    return _fill(source, hierarchy)


def routes() -> list[MoveRoute]:
    """Every route this distribution contributes (compute pairs, and the routes into and out
    of TiledEvictable, only when conveyor-generic is importable)."""
    storage: tuple[type[cv.Carrier], ...] = (FileBacked, BlockDeviceCarrier)
    try:
        from conveyor_generic import CPU, Generic  # public classes only, never internals
    except ImportError:
        compute: tuple[type[cv.Carrier], ...] = ()
    else:
        compute = (CPU, Generic)
    pairs = [(a, b) for a in compute for b in storage]
    pairs += [(b, a) for a, b in pairs]
    pairs += [(FileBacked, BlockDeviceCarrier), (BlockDeviceCarrier, FileBacked)]
    pairs += [(a, Evictable) for a in compute] + [(Evictable, a) for a in compute]
    found = [MoveRoute(source=a, destination=b, copy=span_copy) for a, b in pairs]
    found.append(
        MoveRoute(source=BlockDeviceCarrier, destination=BlockDeviceCarrier, copy=_block_copy)
    )
    found.append(MoveRoute(source=Evictable, destination=Evictable, copy=_evictable_copy))
    found += _tiled_routes(compute)
    return found


def _tiled_routes(compute: tuple[type[cv.Carrier], ...]) -> list[MoveRoute]:
    """Compute classes and FileBacked into tiles, tiles back into the compute classes."""
    from conveyor_storage._tiled_moves import from_tiled, to_tiled
    from conveyor_storage.tiled_evictable import TiledEvictable

    found = [MoveRoute(source=a, destination=TiledEvictable, copy=to_tiled) for a in compute]
    found += [MoveRoute(source=TiledEvictable, destination=a, copy=from_tiled) for a in compute]
    if compute:  # a FileBacked file's tiles compute on CPU
        found.append(MoveRoute(source=FileBacked, destination=TiledEvictable, copy=to_tiled))
    return found
