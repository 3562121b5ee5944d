"""Stress: four threads mixing writes, reads, operations, evict / promote and backward on shared
Evictable tensors, checked against a single-threaded replay of what each thread saw returned.

Each thread owns a quarter of the shared data tensor's slots (so the replay does not depend on
how the threads interleaved) but evicts and promotes the whole shared hierarchy, runs
operations over all of it, and runs backward passes into one shared Evictable leaf. Only calls
that returned are logged; refusals must be the documented ``RuntimeError`` naming promote. The
replay applies every logged write in each thread's order; the final data must equal it and the
leaf's gradient must equal the sum of every logged backward pass. Bounded: each thread stops at
its deadline and is joined with a timeout.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU
from conveyor_storage import Evictable, FileBacked

THREADS = 4
SLOTS = 64  # per thread
DURATION_S = 10.0
JOIN_TIMEOUT_S = 60.0


@dataclass
class _Log:
    """What one thread saw return (the input of the replay) and what it found wrong."""

    writes: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (first slot, values)
    backward: list[float] = field(default_factory=list)  # the scale of each returned pass
    operations: int = 0
    refused: int = 0
    mismatches: list[str] = field(default_factory=list)


def _hierarchy(n: int, tmp_path: Path) -> Evictable:
    return Evictable(
        CPU.allocate(n, cv.float64), FileBacked.allocate(n, cv.float64, directory=tmp_path)
    )


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Switch threads often, so the interleavings the locks must handle actually happen."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _worker(index: int, data: cv.Tensor, leaf: cv.Tensor, log: _Log, deadline: float) -> None:
    rng = np.random.default_rng(index)
    ev = data.carrier
    assert isinstance(ev, Evictable)
    low, high = index * SLOTS, (index + 1) * SLOTS
    model = np.zeros(SLOTS)  # this thread's slots as its own returned writes left them
    while time.monotonic() < deadline:
        log.operations += 1
        kind = int(rng.integers(0, 8))
        try:
            if kind == 0:  # one slot
                j, v = int(rng.integers(low, high)), float(rng.integers(1, 1000))
                data[j] = v
                log.writes.append((j, np.array([v])))
                model[j - low] = v
            elif kind == 1:  # the thread's whole range, one import_span
                values = rng.integers(0, 1000, SLOTS).astype(np.float64)
                data[low:high] = values
                log.writes.append((low, values))
                model[:] = values
            elif kind == 2:  # read back, evicted or not
                got = np.asarray(data[low:high].numpy())
                if not np.array_equal(got, model):
                    log.mismatches.append(f"thread {index}: read {got[:3]} expected {model[:3]}")
            elif kind == 3:  # an operation over the whole shared tensor
                doubled = np.asarray((data * 2.0).numpy())[low:high]
                if not np.array_equal(doubled, 2.0 * model):
                    log.mismatches.append(f"thread {index}: 2x gave {doubled[:3]}")
            elif kind == 4:
                ev.evict()
            elif kind == 5:
                ev.promote()
            else:  # backward into the shared leaf
                scale = float(rng.integers(1, 5))
                (leaf * scale).sum().backward()
                log.backward.append(scale)
        except RuntimeError as exc:
            if "promote()" not in str(exc):
                raise
            log.refused += 1


@pytest.mark.slow
@pytest.mark.usefixtures("frequent_switches")
def test_four_threads_of_mixed_storage_work_match_the_single_threaded_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No returned write or backward pass is lost; every read and result matches the replay."""
    data = cv.Tensor(_hierarchy(THREADS * SLOTS, tmp_path))
    leaf = cv.Tensor(_hierarchy(SLOTS, tmp_path))
    leaf.requires_grad = True
    logs = [_Log() for _ in range(THREADS)]
    errors: list[BaseException] = []
    deadline = time.monotonic() + DURATION_S

    def run(index: int) -> None:
        try:
            _worker(index, data, leaf, logs[index], deadline)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + JOIN_TIMEOUT_S - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a stress thread hung"
    assert errors == [], errors[:1]

    replay = np.zeros(THREADS * SLOTS)
    for log in logs:
        for first, values in log.writes:
            replay[first : first + values.size] = values
    data.carrier.promote()  # type: ignore[attr-defined]  # an Evictable
    final = np.asarray(data.numpy())
    lost = int(np.count_nonzero(final != replay))
    expected_grad = np.full(SLOTS, sum(sum(log.backward) for log in logs))
    grad = np.zeros(SLOTS) if leaf.grad is None else np.asarray(leaf.grad.numpy())
    mismatches = [m for log in logs for m in log.mismatches]
    operations = sum(log.operations for log in logs)
    with capsys.disabled():
        print(
            f"\nstress: {operations} operations in {DURATION_S:.0f} s x {THREADS} threads "
            f"({sum(len(log.writes) for log in logs)} writes, "
            f"{sum(len(log.backward) for log in logs)} backward passes, "
            f"{sum(log.refused for log in logs)} refused naming promote); "
            f"{len(mismatches)} mismatches, {lost} lost slots"
        )
    assert mismatches == []
    assert lost == 0
    np.testing.assert_array_equal(grad, expected_grad)
    assert all(len(log.backward) and len(log.writes) for log in logs)  # every kind ran
