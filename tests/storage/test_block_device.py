"""BlockDevice (a resource) and BlockDeviceCarrier (storage on one of its extents)."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import conveyor as cv
from conveyor.types.policy import registered_operations
from conveyor_storage import BlockDevice, BlockDeviceCarrier

MIB = 1 << 20


@pytest.fixture
def device(tmp_path: Path) -> Iterator[BlockDevice]:
    """A 1 MiB image with 4 KiB blocks."""
    with BlockDevice.create_image(tmp_path / "disk.img", MIB) as dev:
        yield dev


def _raw(dev: BlockDevice, carrier: BlockDeviceCarrier, dtype: str) -> np.ndarray:
    """The carrier's bytes as they are on the image file (after the header block)."""
    data = Path(dev.path).read_bytes()
    start = dev.logical_block_size + carrier.offset
    return np.frombuffer(data[start : start + carrier.size * np.dtype(dtype).itemsize], dtype)


class TestCreateImage:
    """BlockDevice.create_image(path, capacity_bytes, block_size=4096)."""

    def test_image_reports_its_geometry(self, tmp_path: Path) -> None:
        """An image reports its capacity and block size as both logical and physical size."""
        with BlockDevice.create_image(tmp_path / "a.img", 64 * 1024, block_size=512) as dev:
            assert (dev.capacity, dev.logical_block_size, dev.physical_block_size) == (
                65536,
                512,
                512,
            )
            assert dev.is_image and dev.free_bytes == 65536
        with BlockDevice(tmp_path / "a.img") as again:  # the header keeps the geometry
            assert again.logical_block_size == 512 and again.capacity == 65536

    @pytest.mark.parametrize(
        ("capacity", "block", "error", "text"),
        [
            (4096, 1000, ValueError, "power of two"),
            (4096, 256, ValueError, "power of two"),
            (5000, 4096, ValueError, "positive multiple of block_size"),
            (0, 4096, ValueError, "positive multiple"),
            (4096.0, 4096, TypeError, "capacity_bytes must be an int"),
        ],
    )
    def test_bad_geometry_is_refused_before_creating_a_file(
        self, tmp_path: Path, capacity: int, block: int, error: type[Exception], text: str
    ) -> None:
        """Bad sizes raise with the offending value and leave no file behind."""
        with pytest.raises(error, match=text):
            BlockDevice.create_image(tmp_path / "a.img", capacity, block_size=block)
        assert not (tmp_path / "a.img").exists()

    def test_existing_path_is_never_overwritten(self, tmp_path: Path) -> None:
        """create_image refuses an existing path."""
        (tmp_path / "a.img").write_bytes(b"precious")
        with pytest.raises(FileExistsError):
            BlockDevice.create_image(tmp_path / "a.img", 4096)
        assert (tmp_path / "a.img").read_bytes() == b"precious"

    def test_plain_file_is_not_a_device(self, tmp_path: Path) -> None:
        """A regular file without the image header is refused with a pointer to create_image."""
        (tmp_path / "plain").write_bytes(bytes(8192))
        with pytest.raises(ValueError, match=r"not a Conveyor block image.*create_image"):
            BlockDevice(tmp_path / "plain")

    @pytest.mark.parametrize(
        ("field", "at", "value"),
        [
            ("logical_block_size", 24, 0),
            ("logical_block_size", 24, 3),
            ("physical_block_size", 28, 3),
            ("capacity", 32, 0),
        ],
    )
    def test_corrupt_header_field_is_refused_on_open(
        self, tmp_path: Path, field: str, at: int, value: int
    ) -> None:
        """A header whose block size is 0 or 3 (or capacity 0) is a ValueError naming the field;
        the image is left as it was."""
        BlockDevice.create_image(tmp_path / "a.img", 16384).close()
        raw = bytearray((tmp_path / "a.img").read_bytes())
        width = 8 if field == "capacity" else 4
        raw[at : at + width] = value.to_bytes(width, "little")
        (tmp_path / "a.img").write_bytes(bytes(raw))
        with pytest.raises(
            ValueError, match=rf"header of .*a\.img' is corrupt: {field} is {value}"
        ):
            BlockDevice(tmp_path / "a.img")
        assert (tmp_path / "a.img").read_bytes() == bytes(raw)

    def test_fifo_is_neither_device_nor_image(self, tmp_path: Path) -> None:
        """A FIFO is refused at once (open O_RDWR never waits for a peer)."""
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(ValueError, match="neither a block device nor a block image"):
            BlockDevice(tmp_path / "pipe")

    def test_device_is_a_resource_not_a_carrier(self, device: BlockDevice) -> None:
        """Scenario: Allocate through a block device resource."""
        assert not isinstance(device, cv.Carrier)
        carrier = device.allocate(4, cv.float32)
        t = cv.Tensor(carrier, cv.Layout((2, 2)))
        assert type(t.carrier) is BlockDeviceCarrier and carrier.device is device


class TestAllocate:
    """device.allocate(size, dtype=cv.float32): lowest free aligned extent."""

    def test_extents_are_aligned_lowest_first_and_reused(self, device: BlockDevice) -> None:
        """Extents round up to whole blocks, start at the lowest free offset, and are reused."""
        a = device.allocate(10)  # 40 bytes -> one 4 KiB block
        b = device.allocate(1025)  # 4100 bytes -> two blocks
        c = device.allocate(1)
        assert (a.offset, b.offset, c.offset) == (0, 4096, 12288)
        assert a.dtype is cv.float32
        a.release()
        assert device.allocate(1024).offset == 0  # the freed extent is the lowest again
        b.release()
        assert device.allocate(2048, cv.float32).offset == 4096  # freed blocks merged
        assert device.free_bytes == MIB - 4 * 4096

    def test_allocation_is_zero_filled_even_over_old_data(self, device: BlockDevice) -> None:
        """A reused extent reads as zeros."""
        a = device.allocate(100, cv.int64)
        a.import_span(cv.Layout((100,)), np.arange(1, 101))
        a.release()
        b = device.allocate(100, cv.int64)
        assert b.offset == 0 and not cv.Tensor(b).numpy().any()

    def test_no_free_extent_is_memory_error_and_changes_nothing(self, device: BlockDevice) -> None:
        """A request larger than every free extent raises MemoryError; the free list stays."""
        device.allocate(MIB // 8, cv.int8)
        free = device.free_bytes
        with pytest.raises(MemoryError, match="no free extent of 1048576 bytes"):
            device.allocate(MIB, cv.int8)
        assert device.free_bytes == free

    @pytest.mark.parametrize(
        ("size", "dtype", "error"),
        [(-1, cv.float32, ValueError), (1.5, cv.float32, TypeError), (3, cv.integer, TypeError)],
    )
    def test_bad_arguments_are_refused(
        self, device: BlockDevice, size: object, dtype: object, error: type[Exception]
    ) -> None:
        """Bad sizes and dtypes raise the types Carrier.allocate raises; nothing is taken."""
        with pytest.raises(error, match="allocate on BlockDevice"):
            device.allocate(size, dtype)  # type: ignore[arg-type]
        assert device.free_bytes == MIB

    def test_direct_construction_points_to_block_device_allocate(self) -> None:
        """BlockDeviceCarrier(...) is refused, naming BlockDevice.allocate."""
        with pytest.raises(TypeError, match=r"BlockDevice\(path\)\.allocate"):
            BlockDeviceCarrier()
        with pytest.raises(TypeError, match=r"pass device=BlockDevice\(path\)"):
            BlockDeviceCarrier.allocate(3, cv.float32)

    def test_class_allocate_with_device_keyword(self, device: BlockDevice) -> None:
        """BlockDeviceCarrier.allocate(size, dtype, device=...) allocates on that device."""
        carrier = BlockDeviceCarrier.allocate(3, cv.uint8, device=device)
        assert carrier.device is device and carrier.size == 3


# Run in a child process (it tunes the garbage collector). A dead TiledEvictable lies in a
# reference cycle, so only the collector frees it (and releases its secondary, an extent of the
# device); the collector runs at an allocation, and ``nudge`` moves that allocation through
# ``free_bytes`` or ``allocate`` until it lands inside the device's lock. One line per nudge:
# nudge, ok / hung, whether a collection started inside the lock, what the probe returned,
# and the free bytes once everything was collected and released.
_COLLECTED_INSIDE_THE_LOCK = r"""
import gc, sys, threading
import conveyor as cv
from conveyor_generic import Generic
from conveyor_storage import BlockDevice, TiledEvictable, TiledResidencyFacet

folder, probe = sys.argv[1], sys.argv[2]
seen = {}


def scenario(dev, nudge):
    gc.collect()
    gc.disable()  # the tiled tensor stays in the youngest generation
    tiled = TiledEvictable(
        Generic.allocate(0, cv.float32), dev.allocate(0, cv.float32), (1, 2), (1, 1)
    )
    res = tiled.require_facet(TiledResidencyFacet)
    res.promote([(0, 0)])
    tiled.write(0, 1.0)
    res.evict([(0, 0)])  # the secondary holds one 4 KiB extent
    rest = dev.allocate(1024, cv.float32)  # and this one the other: the device is full
    del tiled, res
    inside = lambda phase, info: phase == "start" and seen.setdefault("inside", dev._lock.locked())
    gc.callbacks.append(inside)
    gc.set_threshold(gc.get_count()[0] + nudge)
    gc.enable()
    try:
        if probe == "free_bytes":
            seen["result"] = dev.free_bytes
        else:
            taken = dev.allocate(1, cv.float32)
            seen["result"] = taken.offset
            taken.release()
    except MemoryError:
        seen["result"] = "MemoryError"
    finally:
        gc.callbacks.remove(inside)
    rest.release()


for nudge in range(12):
    seen.clear()
    dev = BlockDevice.create_image(f"{folder}/{probe}-{nudge}.img", 8192)
    worker = threading.Thread(target=scenario, args=(dev, nudge), daemon=True)
    worker.start()
    worker.join(timeout=5)
    gc.set_threshold(700, 10, 10)
    gc.enable()
    gc.collect()
    if worker.is_alive():
        print(nudge, "hung", int(seen.get("inside", False)), "-", "-", flush=True)
    else:
        row = (nudge, "ok", int(seen.get("inside", False)), seen["result"], dev.free_bytes)
        print(*row, flush=True)
"""


class TestReleaseFromAFinalizer:
    """A carrier released while its device's lock is held by the releasing thread itself.

    That is what happens when the garbage collector, run at an allocation inside
    ``allocate`` / ``free_bytes`` / another release, frees a dead hierarchy owning a carrier of
    the same device. Before the fix the release waited for its own thread: a deadlock.
    """

    def test_release_inside_the_devices_lock_neither_waits_nor_loses_the_extent(
        self, tmp_path: Path
    ) -> None:
        dev = BlockDevice.create_image(tmp_path / "disk.img", MIB)
        carrier = dev.allocate(1024, cv.float32)

        def release_inside() -> None:
            with dev._lock:
                carrier.release()

        worker = threading.Thread(target=release_inside, daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive(), "release waited for the lock its own thread holds"
        assert carrier.released and dev.free_bytes == MIB
        assert dev.allocate(2048, cv.float32).offset == 0  # merged, and allocatable again
        dev.close()

    def test_extent_queued_while_the_lock_was_held_is_merged_by_the_next_allocate(
        self, tmp_path: Path
    ) -> None:
        with BlockDevice.create_image(tmp_path / "disk.img", 8192) as dev:
            first, second = dev.allocate(1024, cv.float32), dev.allocate(1024, cv.float32)
            queued: list[tuple[list[list[int]], int]] = []

            def release_inside() -> None:  # as a finalizer run inside the lock
                with dev._lock:
                    first.release()
                    queued.append((list(dev._free), len(dev._returned)))

            worker = threading.Thread(target=release_inside, daemon=True)
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), "release waited for the lock its own thread holds"
            assert queued == [([], 1)]  # queued, not merged, while the lock was held
            assert dev.allocate(1024, cv.float32).offset == 0
            second.release()
            assert dev.free_bytes == 4096

    @pytest.mark.parametrize("probe", ["free_bytes", "allocate"])
    def test_collector_freeing_a_tiled_secondary_inside_the_lock_neither_hangs_nor_loses_it(
        self, tmp_path: Path, probe: str
    ) -> None:
        """Before the fix some nudges hung (the release waited for its own thread's lock);
        an extent freed by a collection inside ``allocate``'s search is found by it."""
        done = subprocess.run(
            [sys.executable, "-c", _COLLECTED_INSIDE_THE_LOCK, str(tmp_path), probe],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        rows = [line.split() for line in done.stdout.splitlines()]
        assert len(rows) == 12 and all(row[1] == "ok" for row in rows), rows
        assert all(row[4] == "8192" for row in rows), rows  # nothing lost
        inside = [row for row in rows if row[2] == "1"]
        assert inside, f"no nudge landed a collection inside the lock on this Python: {rows}"
        if probe == "allocate":
            assert all(row[3] == "0" for row in inside), rows


class TestAlignedIO:
    """Whole-block pread/pwrite, read-modify-write of partial blocks, retries."""

    def test_partial_block_writes_keep_neighbouring_bytes(self, device: BlockDevice) -> None:
        """Writes inside and across block edges change exactly their own bytes."""
        carrier = device.allocate(3000, cv.int16)  # 6000 bytes: two blocks
        carrier.import_span(cv.Layout((3000,)), np.arange(3000, dtype=np.int16))
        carrier.import_span(cv.Layout((10,), None, 2040), np.full(10, -1, np.int16))  # across
        carrier.write(7, 700)
        expected = np.arange(3000, dtype=np.int16)
        expected[2040:2050] = -1
        expected[7] = 700
        assert np.array_equal(_raw(device, carrier, "<i2"), expected)
        assert np.array_equal(cv.Tensor(carrier).numpy(), expected)
        assert carrier.read(2045) == -1

    def test_strided_import_and_export(self, device: BlockDevice) -> None:
        """A strided layout reads and writes only its elements."""
        carrier = device.allocate(12, cv.float64)
        carrier.import_span(cv.Layout((3, 2), (4, 2), 1), np.arange(6.0).reshape(3, 2))
        flat = cv.Tensor(carrier).numpy()
        assert flat.tolist() == [0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5]
        assert carrier.export_span(cv.Layout((2, 3), (1, 4), 1)).tolist() == [[0, 2, 4], [0, 0, 0]]

    def test_short_reads_and_writes_are_retried(
        self, device: BlockDevice, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A transfer that moves fewer bytes than asked continues where it stopped."""
        real_pwrite, real_preadv = os.pwrite, os.preadv
        calls = {"write": 0, "read": 0}

        def short_pwrite(fd: int, data: object, offset: int) -> int:
            calls["write"] += 1
            view = memoryview(data)  # type: ignore[arg-type]
            return real_pwrite(fd, view[: max(1, len(view) // 3)], offset)

        def short_preadv(fd: int, buffers: list, offset: int) -> int:
            calls["read"] += 1
            (view,) = buffers
            return real_preadv(fd, [memoryview(view)[: max(1, len(view) // 3)]], offset)

        carrier = device.allocate(5000, cv.int32)
        values = np.arange(5000, dtype=np.int32)
        monkeypatch.setattr(os, "pwrite", short_pwrite)
        monkeypatch.setattr(os, "preadv", short_preadv)
        carrier.import_span(cv.Layout((5000,)), values)
        back = cv.Tensor(carrier).numpy()
        monkeypatch.undo()
        assert np.array_equal(back, values)
        assert calls["write"] > 2 and calls["read"] > 2

    def test_terminal_error_faults_the_device(
        self, device: BlockDevice, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first OSError is raised; later access raises RuntimeError; release still works."""
        carrier = device.allocate(4, cv.float32)
        other = device.allocate(4, cv.float32)

        def broken(*args: object) -> int:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "pwrite", broken)
        with pytest.raises(OSError, match="Input/output error"):
            carrier.write(0, 1.0)
        monkeypatch.undo()
        assert isinstance(device.fault, OSError)
        for action in (
            lambda: carrier.read(0),
            lambda: other.export_span(cv.Layout((4,))),
            lambda: other.import_span(cv.Layout((4,)), np.ones(4)),
            lambda: device.allocate(1),
            device.flush,
        ):
            with pytest.raises(RuntimeError, match="faulted after an I/O error") as info:
                action()
            assert info.value.__cause__ is device.fault
        free = device.free_bytes
        carrier.release()
        other.release()
        assert device.free_bytes == free + 2 * 4096

    def test_end_of_device_is_terminal(
        self, device: BlockDevice, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A read that returns no bytes is an I/O error, not an endless retry."""
        carrier = device.allocate(4, cv.float32)
        monkeypatch.setattr(os, "preadv", lambda *args: 0)
        with pytest.raises(OSError, match="unexpected end of device"):
            carrier.read(0)
        assert device.fault is not None

    def test_closed_device_refuses_access_but_release_works(self, tmp_path: Path) -> None:
        """After close() carriers raise RuntimeError on access; release returns the extent."""
        dev = BlockDevice.create_image(tmp_path / "d.img", 16384)
        carrier = dev.allocate(2, cv.float32)
        dev.close()
        with pytest.raises(RuntimeError, match="the device is closed"):
            carrier.read(0)
        carrier.release()
        assert dev.free_bytes == 16384

    def test_direct_io_mode_round_trips(self, tmp_path: Path) -> None:
        """With O_DIRECT every transfer is aligned in memory, offset and length."""
        try:
            dev = BlockDevice.create_image(tmp_path / "d.img", MIB)
            dev.close()
            dev = BlockDevice(tmp_path / "d.img", direct=True)
        except OSError as exc:  # pragma: no cover - filesystems without O_DIRECT
            pytest.skip(f"O_DIRECT is not supported here: {exc}")
        with dev:
            carrier = dev.allocate(3001, cv.float64)
            values = np.random.default_rng(1).normal(size=3001)
            carrier.import_span(cv.Layout((3001,)), values)
            carrier.import_span(cv.Layout((3,), None, 1), values[:3])  # unaligned source
            values[1:4] = values[:3]
            assert np.array_equal(cv.Tensor(carrier).numpy(), values)


class TestRefuseBlockStorageComputation:
    """Scenario: Refuse block-storage computation."""

    @pytest.mark.parametrize("name", [*registered_operations(), "no_such_operation"])
    def test_computational_dispatch_is_not_implemented(
        self, device: BlockDevice, name: str
    ) -> None:
        """Every computational name raises NotImplementedError naming it."""
        carrier = device.allocate(2)
        with pytest.raises(
            NotImplementedError, match=f"{name} on BlockDeviceCarrier: .*storage only"
        ):
            carrier.dispatch_op(name)

    def test_views_export_data(self, device: BlockDevice) -> None:
        """The view names work as layout algebra over the same extent."""
        carrier = device.allocate(6, cv.int32)
        carrier.import_span(cv.Layout((6,)), np.arange(6, dtype=np.int32))
        t = cv.Tensor(carrier, cv.Layout((2, 3)))
        assert t.T.carrier is carrier and t.T.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        assert t[1, 1:].numpy().tolist() == [4, 5]

    def test_subclassing_raises_the_closed_carrier_error(self) -> None:
        """BlockDeviceCarrier is closed and final."""
        with pytest.raises(TypeError, match="cannot subclass BlockDeviceCarrier"):
            type("Mine", (BlockDeviceCarrier,), {})
        assert getattr(BlockDeviceCarrier, "__final__", False)


def _loop_device(tmp_path: Path) -> Iterator[str]:
    losetup = shutil.which("losetup")
    if losetup is None or os.geteuid() != 0:
        pytest.skip("creating a loop device needs losetup and root")
    backing = tmp_path / "loop.img"
    with open(backing, "wb") as handle:
        handle.truncate(4 * MIB)
    made = subprocess.run(
        [losetup, "--find", "--show", str(backing)], capture_output=True, text=True, check=False
    )
    if made.returncode != 0:
        pytest.skip(f"losetup could not attach a loop device: {made.stderr.strip()}")
    name = made.stdout.strip()
    try:
        yield name
    finally:
        subprocess.run([losetup, "--detach", name], check=False)


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    yield from _loop_device(tmp_path)


class TestRealBlockDevice:
    """The same contract on a real block device (a loop device, when one can be made)."""

    def test_loop_device_geometry_and_io(self, loop_device: str, tmp_path: Path) -> None:
        """ioctl geometry; data lands at the allocated extent of the device itself."""
        with BlockDevice(loop_device) as dev:
            assert not dev.is_image and dev.capacity == 4 * MIB
            assert dev.logical_block_size in (512, 1024, 2048, 4096)
            assert dev.physical_block_size >= dev.logical_block_size
            first = dev.allocate(100, cv.float32)
            second = dev.allocate(10, cv.int64)
            assert second.offset == dev.physical_block_size
            second.import_span(cv.Layout((10,)), np.arange(10, 20))
            second.write(0, -5)
            second.flush()
            with open(loop_device, "rb") as raw:
                raw.seek(second.offset)
                on_device = np.frombuffer(raw.read(80), "<i8")
            assert on_device.tolist() == [-5, *range(11, 20)]
            first.release()
            again = dev.allocate(3, cv.float32)
            assert again.offset == 0 and not cv.Tensor(again).numpy().any()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path / "loop.img")

    def test_direct_io_on_loop_device(self, loop_device: str) -> None:
        """O_DIRECT on a real device round-trips unaligned spans through aligned buffers."""
        with BlockDevice(loop_device, direct=True) as dev:
            carrier = dev.allocate(999, cv.int16)
            values = np.arange(999, dtype=np.int16)
            carrier.import_span(cv.Layout((999,)), values)
            carrier.import_span(cv.Layout((2,), None, 5), np.array([-1, -2], np.int16))
            values[5:7] = (-1, -2)
            assert np.array_equal(cv.Tensor(carrier).numpy(), values)


class TestImagePermissions:
    """Issue 25 item 2: an image holds every carrier's data, so only its owner may read it."""

    def test_an_image_is_created_0600_under_umask_022(self, tmp_path: Path) -> None:
        previous = os.umask(0o022)
        try:
            with BlockDevice.create_image(tmp_path / "d.img", 16384):
                pass
        finally:
            os.umask(previous)
        assert stat.S_IMODE(os.stat(tmp_path / "d.img").st_mode) == 0o600


class TestRefusedWritesAreNotFaults:
    """Issue 25 item 8: a write refused for space is a refused write; the device stays usable."""

    @pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT])
    def test_a_full_file_system_refuses_one_write_and_nothing_else(
        self, device: BlockDevice, monkeypatch: pytest.MonkeyPatch, number: int
    ) -> None:
        """The refused write raises OSError (its errno), acknowledged data stays readable and a
        later write succeeds once there is space again."""
        kept = device.allocate(4, cv.float32)
        kept.import_span(cv.Layout((4,)), np.arange(4, dtype=np.float32))
        target = device.allocate(4, cv.float32)
        version = target.version

        def full(*args: object) -> int:
            raise OSError(number, os.strerror(number))

        monkeypatch.setattr(os, "pwrite", full)
        with pytest.raises(OSError, match="the device refused it") as info:
            target.import_span(cv.Layout((4,)), np.ones(4, np.float32))
        monkeypatch.undo()
        assert info.value.errno == number
        assert device.fault is None
        assert kept.export_span(cv.Layout((4,))).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert target.version > version  # part of the span may have changed
        target.import_span(cv.Layout((4,)), np.full(4, 5.0, np.float32))
        assert target.export_span(cv.Layout((4,))).tolist() == [5.0] * 4
        assert device.allocate(1).size == 1

    def test_a_write_that_moves_no_byte_is_refused_not_faulted(
        self, device: BlockDevice, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        carrier = device.allocate(2, cv.float32)
        monkeypatch.setattr(os, "pwrite", lambda *args: 0)
        with pytest.raises(OSError, match="the device refused it") as info:
            carrier.write(0, 1.0)
        monkeypatch.undo()
        assert info.value.errno == errno.ENOSPC
        assert device.fault is None
        assert carrier.read(0) == 0.0


def test_pickling_a_block_device_or_its_carrier_says_how_to_share_it(tmp_path: Path) -> None:
    device = BlockDevice.create_image(tmp_path / "img", 1 << 20)
    carrier = device.allocate(8, cv.float64)
    with pytest.raises(TypeError, match=r"BlockDeviceCarrier.*BlockDevice\(path\)"):
        pickle.dumps(carrier)
    with pytest.raises(TypeError, match=r"pickle on BlockDevice.*BlockDevice\(path\)"):
        pickle.dumps(device)
    device.close()
