"""CPU runtime: aligned output memory, a buffer pool, quiet NumPy errors and the core threads.

Besides arithmetic, three costs dominate CPU kernels: asking NumPy for an address to align an
output (microseconds, more than a tiny kernel), first-touch page faults on a freshly mapped
output (about a third of a 16M-element ``add``), and one core idling. So tiny outputs are
carved from per-thread 64-byte aligned slabs, large ones come from a small pool of aligned
buffers that dead CPU results and finished scratch buffers return, and elementwise kernels over
``PARALLEL_MIN`` elements split their output into one chunk per core on a lazily created
thread pool (NumPy releases the GIL inside its loops). ``quiet_on`` / ``quiet_off`` make
overflow and NaN plain values, as on Generic, for a fraction of ``np.errstate``'s cost.
"""

from __future__ import annotations

import contextvars
import math
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from conveyor_generic._storage import buffer_address

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = [
    "ALIGN",
    "MEMORY_BOUND_SCALE",
    "PARALLEL_MIN",
    "POOL_MIN_BYTES",
    "QUIET_SWITCH",
    "QUIET_VALUE",
    "THREADS",
    "Array",
    "blocks_off",
    "blocks_on",
    "chunked",
    "empty",
    "fresh_buffers",
    "pool_bytes",
    "quiet",
    "quiet_off",
    "quiet_on",
    "recycle",
    "recycle_when_dead",
    "run_parallel",
    "scratch",
    "size_class",
]

Array = np.ndarray[Any, Any]
_UINT8 = np.dtype(np.uint8)

ALIGN = 64
# Elementwise work at or above this many output elements is split across the cores. Tests lower
# it (monkeypatch) to exercise the threaded path on small tensors.
PARALLEL_MIN = 1 << 20
# Memory-bound families (arithmetic, comparisons, select, clamp, sign-like unary functions) split
# only from MEMORY_BOUND_SCALE times that: one core nearly saturates memory bandwidth, and on the
# 2-core reference machine a second thread never beat serial below 4M elements (add: 0.5-0.6x
# at 256K-4M, under load), while exp and tanh broke even from about 256K to 4M elements.
MEMORY_BOUND_SCALE = 4
# Buffers at least this large are recycled; smaller ones are cheap for malloc to hand out. From
# 256 KiB, glibc returns freed buffers to the kernel when several are alive at once, and the next
# one page-faults: a chain of two 64K-float32 adds cost 240-290 us with 96 faults, 48 us pooled.
POOL_MIN_BYTES = 256 << 10
# The pool keeps at most this many bytes of dead buffers, and this many per size.
POOL_MAX_BYTES = 512 << 20
# A training step frees its whole working set at once, often several buffers of one size: with
# two per size, a step of four 1 MiB products and their gradients page-faulted 224 times per
# step (median 3.45 ms); with sixteen, none (2.33 ms). What the pool keeps is memory the process
# used a moment ago, so it never raises the peak, and POOL_MAX_BYTES bounds it.
POOL_PER_SIZE = 16
THREADS = max(1, os.cpu_count() or 1)

# size class -> free buffers of exactly that many bytes (anonymous mappings, see _window).
_pool: dict[int, list[mmap.mmap]] = {}
_pool_bytes = 0
# Pooled-size buffers that had to be allocated because the pool had none of their size.
_fresh = 0
# Flat buffers of results whose carrier died, waiting for recycle (see recycle_when_dead).
_dead: list[Array] = []
_pool_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
# Set while a kernel computes a block for a sibling carrier (``blocks_on``, through
# ``run_cpu_kernel``): see ``blocks_on`` for why large outputs and splitting differ then.
_BLOCKS: contextvars.ContextVar[bool] = contextvars.ContextVar("cpu_blocks", default=False)


def blocks_on() -> Any:
    """Enter block mode (for ``run_cpu_kernel``); pass the token to ``blocks_off``.

    A block leaves the kernels for its caller (a Dask task's result): nothing returns its
    buffer to the pool, so a pooled output would be a fresh mapping that page-faults on every
    block, where NumPy's allocator reuses freed memory; and the caller already runs one block
    per core, so splitting a block across the cores again only oversubscribes them. In block
    mode large outputs are plain aligned NumPy memory and elementwise work stays on the
    calling thread.
    """
    return _BLOCKS.set(True)


def blocks_off(token: Any) -> None:
    """Leave the block mode ``blocks_on`` entered."""
    _BLOCKS.reset(token)


# Small outputs are sliced from 64-byte aligned slabs, one per thread and dtype: asking NumPy
# for an array's address costs microseconds, more than a tiny kernel, and a basic slice is the
# cheapest array NumPy makes. A live piece keeps its slab alive, so slabs stay small: a piece
# is at most a sixteenth of its slab. Up to 4 KiB (1K float32): a 1K add took 7.5 us with its
# own aligned buffer, 6.4 us with a slab piece.
SMALL_MAX = 4 << 10
SLAB_BYTES = 64 << 10
_local = threading.local()


def _new_slab(dtype: np.dtype[Any]) -> list[Any]:
    """[typed slab, next free element, element count, elements per cache line] for this thread."""
    slab = _aligned_raw(SLAB_BYTES).view(dtype)
    state = [slab, 0, slab.size, max(1, ALIGN // dtype.itemsize)]
    slabs: dict[Any, Any] = _local.__dict__  # keyed by dtype, not by attribute name
    slabs[dtype] = state
    return state


def _aligned_raw(nbytes: int) -> Array:
    """A fresh uint8 array of ``nbytes`` starting on an ``ALIGN`` boundary (a view of its base)."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = (-buffer_address(raw)) % ALIGN
    return raw[start : start + nbytes]


def size_class(nbytes: int) -> int:
    """The pool's size class of ``nbytes``: rounded up to a sixteenth of its power of two.

    Classes let a result reuse a buffer of a slightly different size (at most 1/16 wasted).
    """
    found = _CLASSES.get(nbytes)
    if found is None:
        step = 1 << max(0, nbytes.bit_length() - 5)
        found = -(-nbytes // step) * step
        if len(_CLASSES) >= _CLASSES_MAX:
            _CLASSES.clear()
        _CLASSES[nbytes] = found
    return found


# nbytes -> size class, for the sizes seen: a dict hit instead of the arithmetic above.
_CLASSES: dict[int, int] = {}
_CLASSES_MAX = 4096


def _window(cls: int) -> mmap.mmap:
    """A new buffer of ``cls`` bytes for the pool: an anonymous mapping, page-aligned.

    A mapping rather than an ndarray with alignment slack: an array built over it keeps the
    mapping itself as its ``base`` (NumPy resolves views of an ndarray to the ndarray), so a
    dead result leads straight back to a buffer that starts aligned, and reusing it costs no
    address look-up and no slicing. glibc maps buffers of this size one by one anyway.
    """
    global _fresh
    _fresh += 1
    window = mmap.mmap(-1, cls)
    if cls >= _HUGE_MIN and _HUGEPAGE is not None:
        # As NumPy does for its own large buffers: with 4 KiB pages a 16M-element add into
        # a mapping took 7.1-9.4 ms, 6.0-6.1 ms with huge pages (np.empty: 5.2-6.1 ms).
        window.madvise(_HUGEPAGE)
    return window


# Transparent huge pages are asked for buffers of at least this size, where the OS has them.
_HUGE_MIN = 4 << 20
_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)


def _pooled(nbytes: int) -> mmap.mmap:
    """A buffer of at least ``nbytes``: a dead result's, a pooled one or a new one."""
    global _pool_bytes
    cls = size_class(nbytes)
    while _dead:  # the dead queued since the last allocation: take one of this class directly
        try:
            flat = _dead.pop()
        except IndexError:  # another thread drained it
            break
        window = _reusable(flat, 2)
        del flat
        if window is not None:
            if len(window) == cls:
                return window
            _keep(window)
    free = _pool.get(cls)
    if free:
        with _pool_lock:
            if free:
                _pool_bytes -= cls
                return free.pop()
    return _window(cls)


def empty(shape: tuple[int, ...], dtype: np.dtype[Any], size: int) -> Array:
    """An uninitialised C-contiguous array of ``shape`` starting on a 64-byte boundary.

    ``size`` is the product of ``shape`` (callers know it already). Only for outputs that the
    kernel overwrites completely: recycled buffers hold stale data.
    """
    nbytes = size * dtype.itemsize
    if nbytes <= SMALL_MAX:
        slabs: dict[Any, Any] = _local.__dict__  # keyed by dtype, not by attribute name
        state = slabs.get(dtype)
        if state is None or state[1] + size > state[2]:
            state = _new_slab(dtype)
        start = state[1]
        line = state[3]
        state[1] = start + -(-size // line) * line  # the next piece starts on a cache line
        piece = state[0][start : start + size]
        return piece if len(shape) == 1 else piece.reshape(shape)  # type: ignore[no-any-return]
    if nbytes < POOL_MIN_BYTES or _BLOCKS.get():
        return np.ndarray(shape, dtype, _aligned_raw(nbytes))
    return np.ndarray(shape, dtype, _pooled(nbytes))


def _reusable(flat: Array, holders: int) -> mmap.mmap | None:
    """The pool buffer behind ``flat`` if nothing but ``flat`` reaches it, else ``None``.

    ``holders`` counts the references to ``flat`` on the way here (the owner's variable and
    every parameter it passed through, this one included).
    """
    window: Any = flat.base  # NumPy types base as an ndarray; ours are mappings (_window)
    if window.__class__ is not mmap.mmap:
        # A flat view of a shaped result: NumPy stops resolving bases at the array built over
        # the mapping, so views of a result have that array as their base.
        under: Any = window.base if window.__class__ is np.ndarray else None
        if under.__class__ is not mmap.mmap:
            return None  # not a buffer of the pool's making (identity tests: flags cost a call)
        # References to the shaped array: flat's base, this local, getrefcount's argument.
        if sys.getrefcount(window) > 3:
            return None
        window = under
        del under  # the counts below allow one local reference to the mapping
    # getrefcount's argument adds one to each count. To the buffer: this local and its array's
    # base; an exported view, a DLPack capsule or another array over the buffer each add one.
    if sys.getrefcount(flat) > holders + 1 or sys.getrefcount(window) > 3:
        return None
    found: mmap.mmap = window
    return found


def _keep(window: mmap.mmap) -> None:
    """Put a free buffer in the pool, unless its size already has enough or the pool is full."""
    global _pool_bytes
    cls = len(window)
    if cls < POOL_MIN_BYTES or size_class(cls) != cls:
        return  # not a window of the pool's making
    with _pool_lock:
        free = _pool.setdefault(cls, [])
        if len(free) < POOL_PER_SIZE and _pool_bytes + cls <= POOL_MAX_BYTES:
            free.append(window)
            _pool_bytes += cls


def recycle(flat: Array) -> None:
    """Return the pooled buffer behind ``flat`` (a finished scratch buffer, a dead result).

    The caller passes its only reference to ``flat`` (a local variable). A buffer still reachable
    any other way (an exported view, a DLPack capsule, an array built over it) has a higher
    reference count on ``flat`` or on its buffer and is left alone.
    """
    window = _reusable(flat, 3)  # the caller's variable, this parameter, _reusable's
    if window is not None:
        _keep(window)


class _DeathWatch(weakref.ref):  # type: ignore[type-arg]  # refers to any carrier
    """A weak reference to a result's carrier that queues the carrier's buffer when it dies.

    A fifth of ``weakref.finalize``'s cost (no registry, no exit hook), which is what lets
    medium results be pooled at all. The carrier keeps its watch in its own attributes:
    CPython calls a dying object's weak reference callbacks before it clears those, so the
    watch is still alive when its callback runs.
    """

    __slots__ = ("flat",)
    flat: Array


def _queue_dead(watch: _DeathWatch) -> None:
    # The dying carrier still holds ``flat`` (and views of it) while this runs, so reference
    # counts cannot tell yet whether anything else keeps the memory; once it is gone they can.
    _dead.append(watch.flat)


def recycle_when_dead(carrier: object, flat: Array) -> object:
    """A watch that queues ``flat`` for ``recycle`` (on the next pooled allocation) when
    ``carrier`` dies; the caller stores it on ``carrier`` itself."""
    watch = _DeathWatch(carrier, _queue_dead)
    watch.flat = flat
    return watch


def _recycle_dead() -> None:
    while _dead:
        try:
            flat = _dead.pop()
        except IndexError:  # another thread drained it
            return
        recycle(flat)
        del flat


def fresh_buffers() -> int:
    """How many pooled-size buffers were allocated new so far (the pool had none to give)."""
    return _fresh


def pool_bytes() -> int:
    """Bytes of dead buffers the pool holds now (dead results queued are counted once pooled)."""
    if _dead:
        _recycle_dead()
    return _pool_bytes


def _quiet_context() -> Any:
    # NumPy's error state lives in a context variable; np.errstate rebuilds its value on every
    # entry (microseconds), so the "ignore everything" value is built once and swapped in.
    try:
        # Private NumPy names, guarded: any other layout falls back to np.errstate below.
        from numpy._core._ufunc_config import (  # type: ignore[attr-defined]
            _extobj_contextvar,
        )
        from numpy._core.umath import _make_extobj
    except ImportError:  # another NumPy layout: fall back to the public, slower context manager
        return None
    return _extobj_contextvar, _make_extobj(all="ignore")


class _ErrstateSwitch:
    """``np.errstate`` behind a context variable's ``set`` / ``reset`` (another NumPy layout)."""

    def set(self, value: object) -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def reset(self, token: Any) -> None:
        token.__exit__(None, None, None)


# QUIET_SWITCH.set(QUIET_VALUE) enters quiet mode and returns a token for QUIET_SWITCH.reset:
# NumPy's own context variable (C calls only, for hot paths), else the errstate fallback.
QUIET_SWITCH, QUIET_VALUE = _quiet_context() or (_ErrstateSwitch(), None)


class _Quiet:
    """Context manager: floating-point overflow, division by zero and NaN are values, not warnings.

    Re-entrant and thread-safe (the state is a context variable), unlike one ``np.errstate``.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = quiet_on()

    def __exit__(self, *exc: object) -> None:
        quiet_off(self._token)


def quiet() -> _Quiet:
    """A fresh ``_Quiet`` context (one per ``with``: tokens are per entry)."""
    return _Quiet()


def quiet_on() -> Any:
    """Enter quiet mode without a context manager (hot paths); pass the token to quiet_off."""
    return QUIET_SWITCH.set(QUIET_VALUE)


def quiet_off(token: Any) -> None:
    """Leave the quiet mode ``quiet_on`` entered."""
    QUIET_SWITCH.reset(token)


def scratch(shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """An uninitialised aligned work buffer; large ones come from the pool (``recycle`` them)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, _pooled(nbytes))


def _pool_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                # concurrent.futures (with logging) loads with the first parallel kernel, not
                # with every process that discovers the CPU carrier.
                from concurrent.futures import ThreadPoolExecutor

                _executor = ThreadPoolExecutor(THREADS, thread_name_prefix="conveyor-cpu")
    return _executor


def run_parallel(tasks: Sequence[Callable[[], object]]) -> None:
    """Run ``tasks`` on the pool and the calling thread; re-raise the first failure.

    Tasks are leaf kernels (they never submit work themselves), so the caller can run the last
    one itself and wait for the rest without risking a pool deadlock.
    """
    if len(tasks) == 1 or _BLOCKS.get():  # block mode: the caller runs a block per core
        for task in tasks:
            task()
        return
    pool = _pool_executor()
    # Each task runs in a copy of the caller's context, so NumPy's error state (quiet) holds there.
    futures: list[Future[object]] = [
        pool.submit(contextvars.copy_context().run, task) for task in tasks[:-1]
    ]
    error: BaseException | None = None
    try:
        tasks[-1]()
    except BaseException as exc:  # re-raised once every chunk has finished writing
        error = exc
    for future in futures:
        try:
            future.result()
        except BaseException as exc:  # the first failure wins; the rest finished anyway
            error = error or exc
    if error is not None:
        raise error


def _split(extent: int, parts: int, quantum: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(extent)``, boundaries on ``quantum``."""
    step = -(-extent // parts)
    step = -(-step // quantum) * quantum
    return [(lo, min(lo + step, extent)) for lo in range(0, extent, step)]


def chunked(
    kernel: Callable[..., object], out: Array, inputs: Sequence[Any], threads: int = 0
) -> None:
    """Call ``kernel(out_chunk, *input_chunks)`` over pieces of ``out``, one per core.

    ``out`` is C-contiguous; each input is an array broadcastable to ``out.shape`` or a scalar
    (passed through whole). Inputs with exactly ``out``'s shape and C order are split as flat
    ranges; otherwise the chunks are taken along the outermost axis long enough to split, with
    every array input broadcast (a view) to ``out.shape`` first.
    """
    threads = threads or THREADS
    shape = out.shape
    size = out.size
    if threads < 2 or size < 2 or size < PARALLEL_MIN or _BLOCKS.get():
        kernel(out, *inputs)
        return
    flat = all(
        not isinstance(x, np.ndarray) or x.ndim == 0 or (x.shape == shape and x.flags.c_contiguous)
        for x in inputs
    )
    if flat:
        o1 = out.reshape(-1)
        xs = [x.reshape(-1) if isinstance(x, np.ndarray) and x.ndim else x for x in inputs]
        quantum = max(1, ALIGN // out.itemsize)
        ranges = _split(size, threads, quantum)
        tasks = [_task(kernel, o1, xs, (slice(lo, hi),)) for lo, hi in ranges]
    else:
        # The outermost axis that splits into every core, else the longest one.
        axis = next(
            (a for a, extent in enumerate(shape) if extent >= threads),
            max(range(len(shape)), key=shape.__getitem__),
        )
        lead = (slice(None),) * axis
        xs = [
            np.broadcast_to(x, shape) if isinstance(x, np.ndarray) and x.ndim else x for x in inputs
        ]
        tasks = [
            _task(kernel, out, xs, (*lead, slice(lo, hi)))
            for lo, hi in _split(shape[axis], threads, 1)
        ]
    run_parallel(tasks)


def _task(kernel: Callable[..., object], out: Array, xs: list[Any], key: tuple[slice, ...]) -> Any:
    pieces = [x[key] if isinstance(x, np.ndarray) and x.ndim else x for x in xs]
    target = out[key]
    return lambda: kernel(target, *pieces)
