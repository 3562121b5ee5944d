"""Races between threads on one storage carrier: writes vs evict, I/O vs release / close, and
hierarchies whose tiers were released behind their back.

Every race repeats a bounded number of rounds under a deadline, and every worker thread is
joined with a timeout, so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU
from conveyor_storage import BlockDevice, Evictable, FileBacked
from tests.core.carriers import ArrayCarrier

N = 1 << 20  # float32 slots: 4 MiB, so a copy lasts long enough for the other thread to act


def _hierarchy(tmp_path: Path, n: int = N, primary: type[cv.Carrier] = CPU) -> Evictable:
    first = primary.allocate(n, cv.float32)
    return Evictable(first, FileBacked.allocate(n, cv.float32, directory=tmp_path))


def _identity(carrier: FileBacked) -> tuple[int, int]:
    """The (device, inode) of the carrier's open file."""
    with carrier.descriptor() as fd:
        info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _still_open(fd: int, identity: tuple[int, int]) -> bool:
    """Whether descriptor ``fd`` still refers to that file (closed or reused: no)."""
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == identity


def _run(workers: list[Callable[[], None]], timeout: float = 30.0) -> list[BaseException]:
    """Run each worker in a thread; join them all within ``timeout``; return their errors."""
    errors: list[BaseException] = []

    def guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(w,), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in threads):
        pytest.fail(f"a worker thread did not finish within {timeout} s")
    return errors


class TestWritesRacingEvict:
    """A write that returned is never lost; one racing an eviction lands or names promote."""

    def test_acknowledged_writes_survive_concurrent_evict_and_promote(self, tmp_path: Path) -> None:
        """Every returned write reads back later, evicted or not; refusals name promote()."""

        class SlowCopy(ArrayCarrier):
            def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
                out = super()._export(layout)  # the copy's snapshot is taken here...
                time.sleep(0.002)  # ...and committed only later: writes in between are at risk
                return out

        ev = _hierarchy(tmp_path, 1024, SlowCopy)
        t = cv.Tensor(ev)
        stop = threading.Event()
        lost: list[tuple[int, Any]] = []
        refused: list[str] = []
        writes = 0

        def writer() -> None:
            nonlocal writes
            last = 0.0  # the last value whose write returned
            try:
                for k in range(1, 1_000_000):
                    seen = ev.read(0)  # from the primary or, if evicted since, the secondary
                    if seen != last:
                        lost.append((int(last), seen))
                        return
                    if stop.is_set():
                        return
                    try:
                        t[0] = float(k)
                    except RuntimeError as exc:
                        refused.append(str(exc))
                        continue
                    writes += 1
                    last = float(k)
            finally:
                stop.set()

        def evictor() -> None:
            deadline = time.monotonic() + 2.0
            while not stop.is_set() and time.monotonic() < deadline:
                ev.evict()
                ev.promote()
            stop.set()

        assert _run([writer, evictor]) == []
        assert lost == [], f"write {lost[0][0]} returned, then read back {lost[0][1]}"
        assert writes > 0
        assert all("promote()" in message for message in refused), refused[:1]
        ev.promote()
        ev.release()

    def test_writes_into_the_primary_during_the_copy_are_copied_again(self, tmp_path: Path) -> None:
        """A direct write into the primary while evict copies it is not lost: evict copies again."""

        class WrittenDuringCopy(ArrayCarrier):
            pending: ClassVar[list[float]] = [5.0]  # written into the primary by the 1st copy

            def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
                out = super()._export(layout)
                if type(self).pending:
                    self.write(0, type(self).pending.pop())  # another writer, mid-copy
                return out

        ev = _hierarchy(tmp_path, 4, WrittenDuringCopy)
        ev.evict()
        ev.promote()
        assert ev.read(0) == 5.0
        ev.release()

    def test_primary_that_never_settles_refuses_the_eviction(self, tmp_path: Path) -> None:
        """A primary written during every copy: RuntimeError, still promoted, nothing lost."""

        class AlwaysWritten(ArrayCarrier):
            def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
                out = super()._export(layout)
                self.write(1, self.read(1) + 1.0)
                return out

        ev = _hierarchy(tmp_path, 4, AlwaysWritten)
        with pytest.raises(RuntimeError, match=r"evict on Evictable: the primary AlwaysWritten"):
            ev.evict()
        assert not ev.is_evicted() and ev.read(1) == 3.0
        ev.release()

    def test_direct_write_into_the_old_primary_after_evict_is_refused(self, tmp_path: Path) -> None:
        """Once evict() returned, a write through a kept reference to the old primary raises
        RuntimeError (released) and the evicted data is unchanged."""
        ev = _hierarchy(tmp_path, 4)
        ev.write(1, 2.0)
        old = ev.primary
        assert old is not None
        ev.evict()
        with pytest.raises(RuntimeError, match="write on CPU: the carrier was released"):
            old.write(1, 9.0)
        ev.promote()
        assert [ev.read(i) for i in range(4)] == [0.0, 2.0, 0.0, 0.0]
        ev.release()


class TestReleaseRacingIO:
    """release() / close() wait for transfers in flight; later ones raise; no descriptor reuse."""

    ROUNDS = 40

    def test_release_waits_for_io_through_the_descriptor_block(self, tmp_path: Path) -> None:
        """release() in another thread waits until a `descriptor()` block ends before closing
        the descriptor; afterwards the block is refused."""
        carrier = FileBacked.allocate(4, cv.float32, directory=tmp_path)
        opened = _identity(carrier)
        released = threading.Event()
        releaser = threading.Thread(target=lambda: (carrier.release(), released.set()))
        with carrier.descriptor() as fd:
            releaser.start()
            assert not released.wait(0.3)  # still inside the block: the descriptor stays open
            assert os.fstat(fd).st_size == 16
            assert os.pread(fd, 16, 0) == bytes(16)
        releaser.join(10)
        assert released.is_set()
        assert not _still_open(fd, opened)
        refused = pytest.raises(RuntimeError, match="descriptor on FileBacked: the carrier was")
        with refused, carrier.descriptor():
            pass

    def test_release_inside_its_own_descriptor_block_closes_at_the_end(
        self, tmp_path: Path
    ) -> None:
        """release() called inside the block cannot wait for itself: it returns at once and
        the descriptor is closed when the block ends."""
        carrier = FileBacked.allocate(4, cv.float32, directory=tmp_path)
        opened = _identity(carrier)
        with carrier.descriptor() as fd:
            carrier.release()
            assert carrier.released
            assert _still_open(fd, opened)
        assert not _still_open(fd, opened)

    def test_file_release_racing_writes_never_reaches_another_file(self, tmp_path: Path) -> None:
        """Writes racing release() land in the carrier's file or raise; other files stay intact."""
        pattern = np.full(N // 4, 7.0, np.float32)  # 1 MiB per write
        victims: list[Path] = []
        unexpected: list[BaseException] = []
        for round_ in range(self.ROUNDS):
            carrier = FileBacked.allocate(pattern.size, cv.float32, directory=tmp_path)
            started = threading.Event()

            def writer(carrier: FileBacked = carrier, started: threading.Event = started) -> None:
                for _ in range(10_000):
                    try:
                        carrier.import_span(cv.Layout((pattern.size,)), pattern)
                    except RuntimeError as exc:
                        assert "the carrier was released" in str(exc)
                        return
                    except OSError as exc:  # a write through a closed descriptor
                        unexpected.append(exc)
                        return
                    finally:
                        started.set()

            thread = threading.Thread(target=writer, daemon=True)
            thread.start()
            started.wait(10)
            carrier.release()
            for i in range(4):  # reuse the freed descriptor number at once
                path = tmp_path / f"victim-{round_}-{i}"
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                os.write(fd, bytes(len(pattern) * 4))
                victims.append(path)
                os.close(fd)
            thread.join(10)
            assert not thread.is_alive()
        assert unexpected == []
        touched = [p for p in victims if np.any(np.fromfile(p, np.float32) == 7.0)]
        assert touched == []

    def test_block_close_racing_reads_never_returns_another_files_bytes(
        self, tmp_path: Path
    ) -> None:
        """Reads racing close() return the carrier's values or raise RuntimeError, never others."""
        wrong: list[float] = []
        unexpected: list[BaseException] = []
        victim_data = np.full(1 << 16, 9.0, np.float32).tobytes()
        for round_ in range(self.ROUNDS):
            device = BlockDevice.create_image(tmp_path / f"disk-{round_}.img", 1 << 20)
            carrier = device.allocate(1 << 16, cv.float32)
            carrier.import_span(cv.Layout((1 << 16,)), np.full(1 << 16, 1.0, np.float32))
            started = threading.Event()

            def reader(carrier: Any = carrier, started: threading.Event = started) -> None:
                for _ in range(10_000):
                    try:
                        values = carrier.export_span(cv.Layout((1 << 16,)))
                    except RuntimeError as exc:
                        assert "closed" in str(exc)
                        return
                    except OSError as exc:  # a read through a closed descriptor
                        unexpected.append(exc)
                        return
                    finally:
                        started.set()
                    if np.any(values != 1.0):
                        wrong.append(float(values[values != 1.0][0]))
                        return

            thread = threading.Thread(target=reader, daemon=True)
            thread.start()
            started.wait(10)
            device.close()
            fds = []
            for i in range(4):  # a file at the same offsets, on the freed descriptor number
                path = tmp_path / f"other-{round_}-{i}"
                path.write_bytes(victim_data * 4)
                fds.append(os.open(path, os.O_RDONLY))
            thread.join(10)
            for fd in fds:
                os.close(fd)
            assert not thread.is_alive()
        assert unexpected == [] and wrong == []


class TestTierReleasedBehindTheHierarchy:
    """An Evictable whose tier was released directly refuses evict and promote, naming it."""

    def test_released_primary_refuses_evict(self, tmp_path: Path) -> None:
        """evict() of a hierarchy whose primary was released: RuntimeError naming the primary."""
        ev = _hierarchy(tmp_path, 4)
        assert ev.primary is not None
        ev.primary.release()
        with pytest.raises(RuntimeError, match=r"evict on Evictable: the primary CPU was released"):
            ev.evict()
        assert ev.secondary is not None and not ev.secondary.released  # nothing changed
        ev.release()

    def test_released_secondary_refuses_promote(self, tmp_path: Path) -> None:
        """promote() from a released secondary: RuntimeError naming the secondary."""
        ev = _hierarchy(tmp_path, 4)
        ev.write(0, 3.0)
        ev.evict()
        assert ev.secondary is not None
        ev.secondary.release()
        with pytest.raises(
            RuntimeError, match=r"promote on Evictable: the secondary FileBacked was released"
        ):
            ev.promote()
        assert ev.is_evicted()
        with pytest.raises(RuntimeError, match=r"read on Evictable: the secondary FileBacked"):
            ev.read(0)
        ev.release()

    def test_released_secondary_refuses_evict(self, tmp_path: Path) -> None:
        """evict() into a released secondary: RuntimeError naming it; the data stays promoted."""
        ev = _hierarchy(tmp_path, 4)
        ev.write(0, 3.0)
        assert ev.secondary is not None
        ev.secondary.release()
        with pytest.raises(RuntimeError, match=r"evict on Evictable: the secondary FileBacked"):
            ev.evict()
        assert not ev.is_evicted() and ev.read(0) == 3.0
        ev.release()
