"""The move routes conveyor-storage contributes, through the real plugin host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.move import MoveRoute, move, move_routes
from conveyor.types.dtypes import CONCRETE_DTYPES
from conveyor_generic import CPU, Generic
from conveyor_storage import BlockDevice, BlockDeviceCarrier, Evictable, FileBacked
from conveyor_storage._spans import CHUNK_BYTES


@pytest.fixture
def device(tmp_path: Path) -> Iterator[BlockDevice]:
    with BlockDevice.create_image(tmp_path / "disk.img", 64 << 20) as dev:
        yield dev


def _bits(dtype: cv.DType, n: int = 41) -> np.ndarray:
    raw = np.random.default_rng(5).integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
    return raw.astype(bool) if dtype is cv.bool else raw.view(dtype.numpy)


def _options(destination: type[cv.Carrier], tmp_path: Path, device: BlockDevice) -> dict[str, Any]:
    if destination is FileBacked:
        return {"directory": tmp_path}
    if destination is BlockDeviceCarrier:
        return {"device": device}
    return {}


STORAGE = [FileBacked, BlockDeviceCarrier]
COMPUTE = [CPU, Generic]


class TestContributedRoutes:
    """The storage plugin contributes bulk routes for every compute/storage pair."""

    def test_routes_come_from_the_plugin_host(self) -> None:
        """The default host contributes MoveRoute records; move uses them."""
        contributed = cv.plugins.host().move_routes()
        assert contributed and all(isinstance(r, MoveRoute) for r in contributed)
        table = move_routes()
        for a in COMPUTE:
            for b in STORAGE:
                assert (a, b) in table and (b, a) in table
        assert (FileBacked, BlockDeviceCarrier) in table and (Evictable, CPU) in table

    @pytest.mark.parametrize("dtype", CONCRETE_DTYPES, ids=lambda d: d.name)
    @pytest.mark.parametrize("storage", STORAGE, ids=lambda c: c.__name__)
    @pytest.mark.parametrize("compute", COMPUTE, ids=lambda c: c.__name__)
    def test_round_trip_is_bit_exact(
        self,
        tmp_path: Path,
        device: BlockDevice,
        compute: type[cv.Carrier],
        storage: type[cv.Carrier],
        dtype: cv.DType,
    ) -> None:
        """compute -> storage -> compute keeps every bit, shape and dtype."""
        values = _bits(dtype).reshape(41, 1)
        source = cv.tensor(values, dtype=dtype, carrier=compute)
        stored = move(source, storage, **_options(storage, tmp_path, device))
        assert type(stored.carrier) is storage and stored.shape == (41, 1)
        back = move(stored, compute)
        assert type(back.carrier) is compute and back.dtype is dtype
        assert back.numpy().tobytes() == values.tobytes()

    def test_storage_to_storage_and_non_contiguous_sources(
        self, tmp_path: Path, device: BlockDevice
    ) -> None:
        """FileBacked <-> BlockDeviceCarrier, from strided views."""
        base = cv.tensor(np.arange(24, dtype=np.int32).reshape(4, 6), carrier=CPU)
        on_file = move(base.T[::2], FileBacked, directory=tmp_path)
        on_block = move(on_file, BlockDeviceCarrier, device=device)
        again = move(on_block.T, "file", directory=tmp_path)
        expected = np.arange(24).reshape(4, 6).T[::2].T
        assert np.array_equal(again.numpy(), expected)

    def test_block_source_streams_unaligned_spans(self, device: BlockDevice) -> None:
        """A block source read from an odd offset across several read windows is exact."""
        n = (5 << 20) // 4 + 3  # more than two 2 MiB windows of int32
        values = np.arange(n, dtype=np.int32)
        stored = move(cv.tensor(values, carrier=CPU), BlockDeviceCarrier, device=device)
        for start in (0, 1, 1023, 1025):
            assert np.array_equal(move(stored[start:], CPU).numpy(), values[start:])
        assert np.array_equal(move(stored[7:9], Generic).numpy(), values[7:9])

    def test_block_to_block_defaults_to_the_same_device(self, device: BlockDevice) -> None:
        """A block-to-block move without options copies onto the source's device."""
        src = move(cv.tensor([1, 2, 3], carrier=CPU), BlockDeviceCarrier, device=device)
        copy = move(src, BlockDeviceCarrier)
        assert copy.carrier.device is device and copy.carrier.offset != src.carrier.offset
        assert copy.numpy().tolist() == [1, 2, 3]

    def test_block_destination_needs_a_device(self) -> None:
        """Without device= the destination cannot allocate; the message says how."""
        with pytest.raises(TypeError, match=r"BlockDevice\(path\)\.allocate"):
            move(cv.tensor([1.0], carrier=CPU), BlockDeviceCarrier)

    def test_routes_are_bulk_never_element_by_element(
        self, tmp_path: Path, device: BlockDevice, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Large moves use a handful of span transfers and never read or write one slot."""
        for cls in (FileBacked, BlockDeviceCarrier, CPU):
            monkeypatch.setattr(cls, "_read", lambda *a: pytest.fail("element read"))
            monkeypatch.setattr(cls, "_write", lambda *a: pytest.fail("element write"))
        calls = {"import": 0}
        real = cv.Carrier.import_span

        def counting(self: cv.Carrier, layout: cv.Layout, values: Any) -> None:
            calls["import"] += 1
            real(self, layout, values)

        monkeypatch.setattr(cv.Carrier, "import_span", counting)
        n = 3 * CHUNK_BYTES // 4 + 5  # a little over three chunks of float32
        source = cv.tensor(np.arange(n, dtype=np.float32), carrier=CPU)
        calls["import"] = 0
        on_file = move(source, FileBacked, directory=tmp_path)
        on_block = move(on_file, BlockDeviceCarrier, device=device)
        back = move(on_block, CPU)
        assert calls["import"] <= 4 + 13 + 13  # 8 MiB spans from CPU; 2 MiB read windows else
        assert np.array_equal(back.numpy(), np.arange(n, dtype=np.float32))

    def test_failed_copy_releases_the_destination(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A route that fails half-way leaves no destination file behind."""
        monkeypatch.setattr(
            FileBacked, "_import", lambda *a: (_ for _ in ()).throw(OSError(5, "EIO"))
        )
        with pytest.raises(OSError, match="EIO"):
            move(cv.tensor(np.ones(4), carrier=CPU), FileBacked, directory=tmp_path)
        assert list(tmp_path.iterdir()) == []


class TestEvictableMoves:
    """Evictable <-> compute carriers, and Evictable copies."""

    def test_cpu_to_evictable_and_back(self, tmp_path: Path) -> None:
        """Into the default hierarchy (cpu, file) and out again, evicted or not."""
        t = move(cv.tensor([[1.0, 2.0]], carrier=CPU), Evictable)
        assert t.carrier.tier_classes == (CPU, FileBacked)
        t.carrier.evict()
        assert move(t, CPU).numpy().tolist() == [[1.0, 2.0]]  # read from the secondary

    def test_evictable_copy_keeps_the_hierarchy_kinds(self, tmp_path: Path) -> None:
        """An Evictable-to-Evictable move is an independent hierarchy of the same kinds."""
        primary = CPU.allocate(2, cv.float32)
        ev = Evictable(primary, FileBacked.allocate(2, cv.float32, directory=tmp_path))
        t = cv.Tensor(ev)
        t[...] = 3.0
        copy = move(t, Evictable)
        assert copy.carrier is not ev and copy.carrier.tier_classes == ev.tier_classes
        copy.carrier.evict()
        assert Path(copy.carrier.secondary.path).parent == tmp_path
        assert copy.numpy().tolist() == [3.0, 3.0]

    def test_default_hierarchy_by_name(self) -> None:
        """cv.zeros(..., carrier="evictable") builds the default (cpu, file) hierarchy."""
        t = cv.zeros((2, 2), carrier="evictable")
        assert t.carrier.tier_classes == (CPU, FileBacked) and t.carrier.secondary is None
        t.carrier.evict()
        assert t.numpy().tolist() == [[0.0, 0.0], [0.0, 0.0]]

    def test_differentiable_end_to_end(self) -> None:
        """CPU -> Evictable -> compute -> backward: the gradient comes back on CPU."""
        x = cv.tensor([1.0, 2.0, 3.0], carrier=CPU, requires_grad=True)
        ev = move(x, Evictable)
        loss = cv.reduce_sum(cv.mul(ev, ev))
        ev.carrier.evict()
        ev.carrier.promote()
        loss.backward()
        assert x.grad is not None and type(x.grad.carrier) is CPU
        assert x.grad.numpy().tolist() == [2.0, 4.0, 6.0]
