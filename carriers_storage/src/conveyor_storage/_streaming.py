"""Direct operations of a TiledEvictable, streamed tile by tile under the residency budget.

The composite provider's ``prepare`` checks everything before work: tile footprints
(``ValueError``), the shapes it streams (others are ``Unsupported``: project first) and that
the budget holds the tiles one step needs. ``execute`` then frees room through the policy,
marks the operands' tiles busy, and walks the tiles while a background thread loads the next
one (disk and compute overlap). Elementwise names write each tile into the dense result;
``reduce_sum`` adds each tile's partial sums into the plan's accumulator; ``matmul`` is a
blocked GEMM that keeps a row panel of B and streams the column of A tiles past it, so every B
tile is read once and A once per panel chunk. Tiles move only as whole spans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

import conveyor as cv
from conveyor.sdk import normalize_axes, progress_active, report_progress
from conveyor_storage._spans import aligned_bytes
from conveyor_storage._tiles import Coord, TileMap, TileSet
from conveyor_storage._transitions import checked_plan, claim, write_back
from conveyor_storage.file_backed import FileBacked

if TYPE_CHECKING:
    from concurrent.futures import Future

    from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = ["composite_provider", "prepare"]

_Array = np.ndarray[Any, Any]
_ELEMENTWISE: Final[dict[str, Callable[..., _Array]]] = {
    "add": np.add,
    "mul": np.multiply,
    "elementwise_mul": np.multiply,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
}


def _operand(x: cv.Tensor) -> tuple[TiledEvictable, TileMap]:
    carrier: TiledEvictable = x.carrier  # type: ignore[assignment]  # bound on TiledEvictable
    return carrier, carrier.footprint(x.layout, "direct operation")


class _Session:
    """The carriers one direct operation reads: budget checks, busy marks, loads with bytes."""

    def __init__(self, name: str, carriers: Sequence[TiledEvictable]) -> None:
        self.name = name
        self.carriers = list({id(c): c for c in carriers}.values())
        self._free: list[_Array] = []  # read buffers no tile uses now (list ops are atomic)

    def room(self, held: dict[int, int], what: str) -> None:
        """Refuse (before work) unless each carrier can hold ``held[id]`` tiles at once."""
        for carrier in self.carriers:
            tiles = held.get(id(carrier), 0)
            budget = carrier.max_resident_bytes
            if budget is not None and tiles * carrier.tile_bytes > budget + carrier.tile_bytes:
                msg = (
                    f"{self.name} on TiledEvictable: {what} needs {tiles} tiles of "
                    f"{carrier.tile_bytes} bytes at once, more than max_resident_bytes={budget} "
                    f"plus one tile of work space; raise the budget or use smaller tiles"
                )
                raise ValueError(msg)

    def fits(self, held: dict[int, int]) -> bool:
        """Whether each carrier can hold ``held[id]`` tiles at once (budget plus work space)."""
        return all(
            c.max_resident_bytes is None
            or held.get(id(c), 0) * c.tile_bytes <= c.max_resident_bytes + c.tile_bytes
            for c in self.carriers
        )

    def ahead(self, per_step: dict[int, int]) -> tuple[dict[int, int], bool]:
        """What one step holds with prefetching when the budget allows it, else without."""
        doubled = {k: 2 * v for k, v in per_step.items()}
        return (doubled, True) if self.fits(doubled) else (per_step, False)

    def begin(self, held: dict[int, int]) -> None:
        """Mark every tile busy and let each policy free the room streaming needs."""
        claimed: list[TiledEvictable] = []
        try:
            for carrier in self.carriers:
                everything = TileSet(carrier._grid.coords())
                with carrier._lock:
                    claim(carrier, self.name, everything)
                claimed.append(carrier)
                room = max(0, held.get(id(carrier), 0) - 1) * carrier.tile_bytes
                plan = checked_plan(
                    carrier,
                    carrier._plan(TileSet(()), "stream", room),
                    TileSet(()),
                    "stream",
                )
                if len(plan.evict):
                    write_back(carrier, plan.evict, "evict")
                budget = carrier.max_resident_bytes
                if budget is not None and carrier.resident_bytes + room > budget:
                    # The policy kept too much: evict oldest-first until streaming fits.
                    extra = list(carrier._resident_set())
                    while extra and carrier.resident_bytes + room > budget:
                        write_back(carrier, TileSet([extra.pop(0)]), "evict")
        except BaseException:
            self.end(claimed)
            raise

    def end(self, carriers: Sequence[TiledEvictable] | None = None) -> None:
        for carrier in self.carriers if carriers is None else carriers:
            with carrier._lock:
                carrier._busy.difference_update(TileSet(carrier._grid.coords()).coords)

    def load(
        self, carrier: TiledEvictable, mapping: TileMap, coord: Coord, *, count: bool = False
    ) -> tuple[_Array, Hold]:
        """Tile ``coord`` as the tensor sees it, and what it holds until ``give``.

        ``count`` charges a tile the caller copies even when it is resident or implicit. A
        tile read from a FileBacked secondary lands in a buffer the session reuses, so
        streaming faults in no fresh memory per tile.
        """
        nbytes = 0
        if count or (coord not in carrier._resident and coord not in carrier._implicit):
            carrier._ledger.take(carrier.tile_bytes, self.name)
            nbytes = carrier.tile_bytes
        buffer = None
        try:
            if nbytes and not count:
                buffer = self._read_reused(carrier, coord)
            if buffer is None:
                values = carrier._values(coord, self.name)
            else:
                values = buffer.view(carrier._dt.numpy).reshape(carrier._grid.tile_shape)
            values = mapping.view(values)
        except BaseException:
            carrier._ledger.give(nbytes)
            if buffer is not None:
                self._free.append(buffer)
            raise
        return values, Hold(nbytes, buffer)

    def _read_reused(self, carrier: TiledEvictable, coord: Coord) -> _Array | None:
        """Secondary tile ``coord`` read into a reused buffer, where the secondary is a
        FileBacked and the tile's box is one contiguous byte range; else ``None``."""
        secondary = carrier._owned["secondary"]
        box = carrier._grid.box(coord)
        if (
            type(secondary) is not FileBacked
            or coord not in carrier._current
            or coord in carrier._resident
            or not box.is_contiguous
        ):
            return None
        try:
            buffer = self._free.pop()
        except IndexError:
            buffer = aligned_bytes(carrier.tile_bytes, 4096)
        if buffer.size != carrier.tile_bytes:
            buffer = aligned_bytes(carrier.tile_bytes, 4096)
        try:
            secondary._pread(self.name, buffer, box.offset * carrier._dt.itemsize)
        except BaseException:
            self._free.append(buffer)
            raise
        return buffer

    def give(self, carrier: TiledEvictable, hold: Hold | int) -> None:
        """Return what one load (or ``count`` bytes of held tiles) took."""
        if isinstance(hold, int):
            carrier._ledger.give(hold)
            return
        carrier._ledger.give(hold.nbytes)
        if hold.buffer is not None:
            self._free.append(hold.buffer)


class Hold(NamedTuple):
    """What one tile load holds: ledger bytes, and the reused read buffer (if any)."""

    nbytes: int
    buffer: _Array | None


def _prefetched(jobs: list[Callable[[], Any]], ahead: bool, label: str) -> Iterator[Any]:
    """Run ``jobs`` in order, the next one on a background thread while the caller works.

    ``job()`` returns ``(value, release)``; values not consumed (an early exit) are released.
    """
    total = len(jobs)
    if not ahead:
        for done, job in enumerate(jobs, 1):
            yield job()
            if progress_active():
                report_progress(done, total, label)
        return
    # Loaded by the first prefetching stream, not by every discovery of the storage carriers.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="conveyor-prefetch") as pool:
        future: Future[Any] | None = pool.submit(jobs[0]) if jobs else None
        try:
            for done in range(1, total + 1):
                assert future is not None  # one future per job
                result = future.result()
                future = pool.submit(jobs[done]) if done < total else None
                yield result
                if progress_active():
                    report_progress(done, total, label)
        finally:
            if future is not None:
                try:
                    _, release = future.result()
                    release()
                except Exception:  # a failed prefetch holds nothing
                    pass


def _convert(value: Any, target: cv.DType | None, widen: bool) -> Any:
    """An operand in its plan dtype; floating values widened like the reference carrier."""
    assert target is not None  # every operand of the direct surface converts
    with np.errstate(all="ignore"):
        array = np.asarray(value).astype(target.numpy, copy=False)
        if widen and (array.dtype.kind == "f" or array.dtype.name == "bfloat16"):
            return array.astype(np.float64, copy=False)
        if widen and array.dtype.kind == "c":
            return array.astype(np.complex128, copy=False)
        return array


def _result(like: TiledEvictable, spec: cv.ResultSpec) -> cv.Tensor:
    carrier = like._new_tile(spec.layout.size, spec.dtype)
    return cv.Tensor(carrier, spec.layout)


def _box(shape: tuple[int, ...], origin: tuple[int, ...], extent: tuple[int, ...]) -> cv.Layout:
    strides = cv.Layout(shape).strides
    offset = sum(o * s for o, s in zip(origin, strides, strict=True))
    return cv.Layout(extent, strides, offset)


def _elementwise(invocation: cv.ResolvedInvocation) -> cv.Tensor:
    plan = invocation.plan
    assert plan is not None  # every direct name is dtype-planned
    tensors = [x for x in invocation.operands if type(x) is cv.Tensor]
    operands = [_operand(x) for x in tensors]
    first = operands[0][0]
    session = _Session(invocation.operation, [c for c, _ in operands])
    per_step = {id(c): 0 for c, _ in operands}
    for c, _ in operands:
        per_step[id(c)] += 1
    held, ahead = session.ahead(per_step)
    spec = invocation.results[0]
    out = _result(first, spec)
    function = _ELEMENTWISE[invocation.operation]
    grid = first._grid

    def job(coord: Coord) -> Callable[[], Any]:
        def run() -> Any:
            loaded = [(c, *session.load(c, m, coord)) for c, m in operands]

            def release() -> None:
                for carrier, _, hold in loaded:
                    session.give(carrier, hold)

            return (coord, [v for _, v, _ in loaded]), release

        return run

    session.begin(held)
    try:
        jobs = [job(coord) for coord in grid.coords()]
        for (coord, values), release in _prefetched(jobs, ahead, invocation.operation):
            try:
                arrays = iter(values)
                args = [
                    _convert(next(arrays) if type(x) is cv.Tensor else x, p.convert_to, True)
                    for x, p in zip(invocation.operands, plan.operands, strict=True)
                ]
                with np.errstate(all="ignore"):
                    tile = np.asarray(function(*args)).astype(spec.dtype.numpy)
                out.carrier.import_span(_box(spec.shape, grid.origin(coord), grid.tile_shape), tile)
            finally:
                release()
    except BaseException:
        out.carrier.release()
        raise
    finally:
        session.end()
    return out


def _reduce_sum(invocation: cv.ResolvedInvocation) -> cv.Tensor:
    plan = invocation.plan
    assert plan is not None  # reduce_sum is dtype-planned
    (x,) = invocation.operands
    carrier, mapping = _operand(x)
    options = invocation.options or cv.OperationExecutionOptions("reduce_sum")
    axes = tuple(normalize_axes(options.axis, x.ndim)) if x.ndim else ()
    accumulator = plan.operands[0].convert_to
    assert accumulator is not None  # the input converts to the accumulator
    kept = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
    total = np.zeros(kept, accumulator.numpy)
    grid = carrier._grid
    session = _Session("reduce_sum", [carrier])

    def job(coord: Coord) -> Callable[[], Any]:
        def run() -> Any:
            values, hold = session.load(carrier, mapping, coord)
            return (coord, values), lambda: session.give(carrier, hold)

        return run

    held, ahead = session.ahead({id(carrier): 1})
    session.begin(held)
    try:
        jobs = [job(coord) for coord in grid.coords()]
        for (coord, values), release in _prefetched(jobs, ahead, "reduce_sum"):
            try:
                region = tuple(
                    slice(0, 1) if k in axes else r for k, r in enumerate(grid.region(coord))
                )
                with np.errstate(all="ignore"):
                    part = np.sum(
                        values.astype(accumulator.numpy, copy=False),
                        axis=axes,
                        keepdims=True,
                        dtype=accumulator.numpy,
                    )
                    total[region] += part
            finally:
                release()
    finally:
        session.end()
    spec = invocation.results[0]
    out = _result(carrier, spec)
    with np.errstate(all="ignore"):
        values = total.astype(spec.dtype.numpy, copy=False).reshape(spec.shape)
    out.carrier.import_span(spec.layout, values)
    return out


def _held(a: TiledEvictable, b: TiledEvictable, holder: TiledEvictable, extent: int) -> int:
    """How many tiles of one panel of ``holder`` fit beside the other operand's two streamed
    tiles (its current one and the prefetched next one) under the budget plus work space."""
    budget = holder.max_resident_bytes
    if budget is None:
        return extent
    if a is b:  # one budget: the panel plus two streamed tiles
        return max(0, min(extent, budget // holder.tile_bytes - 1))
    return max(0, min(extent, budget // holder.tile_bytes + 1))


def _plan_gemm(a: TiledEvictable, b: TiledEvictable) -> tuple[bool, int]:
    """``(hold_b, chunk)``: which operand's panels to keep, chosen for the fewest tile bytes read.

    Holding chunks of a row panel of B reads B once and A once per chunk; holding chunks of a
    column panel of A reads A once and B once per chunk.
    """
    (gm, gk), gn = a._grid.grid_shape, b._grid.grid_shape[1]
    cb, ca = _held(a, b, b, gn), _held(a, b, a, gm)

    def cost(chunk: int, held: int, held_bytes: int, streamed: int, streamed_bytes: int) -> float:
        if chunk < 1:
            return float("inf")
        return gk * (held * held_bytes + -(-held // chunk) * streamed * streamed_bytes)

    by_b = cost(cb, gn, b.tile_bytes, gm, a.tile_bytes)
    by_a = cost(ca, gm, a.tile_bytes, gn, b.tile_bytes)
    return (True, cb) if by_b <= by_a else (False, ca)


def _matmul(invocation: cv.ResolvedInvocation, hold_b: bool, chunk: int) -> cv.Tensor:
    plan = invocation.plan
    assert plan is not None  # matmul is dtype-planned
    x, y = invocation.operands
    (a, amap), (b, bmap) = _operand(x), _operand(y)
    accumulator = plan.operands[0].convert_to
    assert accumulator is not None  # operands convert to the accumulator
    (gm, gk), (tm, _) = a._grid.grid_shape, a._grid.tile_shape
    gn, tn = b._grid.grid_shape[1], b._grid.tile_shape[1]
    c = np.zeros((x.shape[0], y.shape[1]), accumulator.numpy)
    session = _Session("matmul", [a, b])
    # (holder, its map, streamed operand, its map, panel extent, streamed extent)
    held, hmap, streamed, smap = (b, bmap, a, amap) if hold_b else (a, amap, b, bmap)
    extent, other = (gn, gm) if hold_b else (gm, gn)
    counts = {id(streamed): 2, id(held): chunk} if a is not b else {id(a): chunk + 2}

    def panel_tile(kk: int, p: int) -> Coord:
        return (kk, p) if hold_b else (p, kk)

    def job(coord: Coord) -> Callable[[], Any]:
        def run() -> Any:
            values, hold = session.load(streamed, smap, coord)
            return (coord, values), lambda: session.give(streamed, hold)

        return run

    session.begin(counts)
    steps, total = 0, gk * -(-extent // max(chunk, 1))
    try:
        for kk in range(gk):
            for p0 in range(0, extent, chunk):
                ps = range(p0, min(extent, p0 + chunk))
                # The panel is one contiguous copy (one large GEMM per streamed tile): it counts
                # as held tiles even where the source tile is resident.
                taken = 0
                try:
                    parts = []
                    for q in ps:
                        values, _ = session.load(held, hmap, panel_tile(kk, q), count=True)
                        taken += held.tile_bytes
                        parts.append(values.astype(accumulator.numpy, copy=False))
                    panel = np.concatenate(parts, axis=1 if hold_b else 0)
                    del parts
                    span = tn if hold_b else tm
                    block = slice(p0 * span, p0 * span + len(ps) * span)
                    coords = [(q, kk) if hold_b else (kk, q) for q in range(other)]
                    jobs = [job(coord) for coord in coords]
                    for (coord, values), release in _prefetched(jobs, True, "matmul"):
                        try:
                            tile = values.astype(accumulator.numpy, copy=False)
                            with np.errstate(all="ignore"):
                                if hold_b:
                                    i = coord[0]
                                    c[i * tm : (i + 1) * tm, block] += tile @ panel
                                else:
                                    j = coord[1]
                                    c[block, j * tn : (j + 1) * tn] += panel @ tile
                        finally:
                            release()
                    del panel
                finally:
                    session.give(held, taken)
                steps += 1
                if progress_active():
                    report_progress(steps, total, "matmul panels")
    finally:
        session.end()
    spec = invocation.results[0]
    out = _result(a, spec)
    with np.errstate(all="ignore"):
        out.carrier.import_span(spec.layout, c.astype(spec.dtype.numpy, copy=False))
    return out


def prepare(
    carrier: cv.Carrier, invocation: cv.ResolvedInvocation
) -> cv.PreparedComposite | cv.Unsupported:
    """Check a direct call completely, then hand back the streaming work (or decline it)."""
    name = invocation.operation
    tensors = [x for x in invocation.operands if type(x) is cv.Tensor]
    found = [_operand(x) for x in tensors]  # footprint refusals (ValueError) come first
    classes = {c.tier_classes[0] for c, _ in found}
    if len(classes) > 1:
        return cv.Unsupported(
            "the operands' tiles live on different compute classes; project them onto one"
        )
    if name == "matmul":
        (a, _), (b, _) = found
        x, y = tensors
        if x.ndim != 2 or y.ndim != 2 or a._grid.tile_shape[1] != b._grid.tile_shape[0]:
            return cv.Unsupported(
                "direct matmul takes two 2-D tiled operands whose inner tile extents match; "
                "project the tiles into compact tensors for other shapes"
            )
        hold_b, chunk = _plan_gemm(a, b)
        if chunk < 1 and a._grid.grid_shape[0] and b._grid.grid_shape[1]:
            msg = (
                f"matmul on TiledEvictable: max_resident_bytes={b.max_resident_bytes} holds no "
                f"panel tile beside two streamed tiles; raise the budget"
            )
            raise ValueError(msg)
        chunk = max(chunk, 1)
        return cv.PreparedComposite(lambda: cv.ProviderResult(_matmul(invocation, hold_b, chunk)))
    if name == "reduce_sum":
        _Session(name, [found[0][0]]).room({id(found[0][0]): 1}, "one tile")
        return cv.PreparedComposite(lambda: cv.ProviderResult(_reduce_sum(invocation)))
    grids = {(c._grid.grid_shape, c._grid.tile_shape) for c, _ in found}
    if len(grids) > 1 or any(x.shape != invocation.results[0].shape for x in tensors):
        return cv.Unsupported(
            "direct elementwise operations take tiled operands of one shape and one tiling "
            "(no broadcasting); project the tiles into compact tensors first"
        )
    session = _Session(name, [c for c, _ in found])
    held: dict[int, int] = {}
    for c, _ in found:
        held[id(c)] = held.get(id(c), 0) + 1
    session.room(held, "one step")
    return cv.PreparedComposite(lambda: cv.ProviderResult(_elementwise(invocation)))


def composite_provider(names: frozenset[str]) -> cv.CompositeProvider:
    """The composite of TiledEvictable: the compute classes' plans for ``names``, streamed."""
    try:
        from conveyor_generic import CPU, Generic  # public classes only
    except ImportError:
        compute: tuple[type[cv.Carrier], ...] = ()
    else:
        compute = (CPU, Generic)

    def plans(name: str) -> list[cv.OperationCapability]:
        # By rule: the compute classes' records of one name, built when it is first queried.
        found = {cap for cls in compute for cap in cv.declared_capabilities(cls).of(name)}
        return sorted(found, key=repr)

    return cv.CompositeProvider(
        capabilities=cv.CapabilitySet.by_rule(names, plans),
        result_carriers=compute,
        prepare=prepare,
    )
