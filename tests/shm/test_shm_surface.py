"""conveyor-shm uses the whole definition-backed surface: indexing, assignment, tensor methods,
moves, sharing between processes, and shared memory that never kills the host.

Every check compares the shared-memory carrier with CPU on the same call, so "the same semantics
and errors as on CPU" is tested directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.types.dtypes import CONCRETE_DTYPES
from conveyor_generic import CPU, Generic
from conveyor_shm import SharedMemoryCarrier

_DATA = np.arange(24.0).reshape(2, 3, 4) - 7.5


def _pair(dtype: cv.DType = cv.float64) -> tuple[cv.Tensor, cv.Tensor]:
    return (
        cv.tensor(_DATA, dtype, carrier=SharedMemoryCarrier),
        cv.tensor(_DATA, dtype, carrier=CPU),
    )


def _outcome(compute: Callable[[cv.Tensor], Any], t: cv.Tensor) -> Any:
    """The result's (shape, dtype, values), or the raised (type, message)."""
    try:
        out = compute(t)
    except Exception as exc:
        return (type(exc), str(exc).replace(type(t.carrier).__name__, "<carrier>"))
    if isinstance(out, cv.Tensor):
        return (out.shape, out.dtype.name, out.numpy().tolist())
    return out


def _run(code: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )


_READS: list[tuple[str, Callable[[cv.Tensor], Any]]] = [
    ("int", lambda t: t[0]),
    ("negative int", lambda t: t[-1, -2]),
    ("slice", lambda t: t[:, 1:3]),
    ("negative step", lambda t: t[::-1, ::-2]),
    ("ellipsis", lambda t: t[..., 1]),
    ("none", lambda t: t[None, 0, None]),
    ("scalar item", lambda t: t[1, 2, 3].item()),
    ("out of range", lambda t: t[5]),
    ("too many indices", lambda t: t[0, 0, 0, 0]),
    ("two ellipses", lambda t: t[..., ...]),
    ("reshape", lambda t: t.reshape(6, 4)),
    ("reshape copy", lambda t: t.permute(2, 0, 1).reshape(-1)),
    ("reshape bad", lambda t: t.reshape(5, 5)),
    ("permute", lambda t: t.permute(1, 2, 0)),
    ("transpose", lambda t: t[0].T),
    ("clone", lambda t: t[:, ::2].clone()),
    ("astype", lambda t: t.astype(cv.int32)),
    ("numpy", lambda t: t[1].numpy().tolist()),
    ("tolist", lambda t: t[0, 0].tolist()),
]


class TestIndexingLikeCPU:
    """Basic indexing and the tensor methods give CPU's results and CPU's refusals."""

    @pytest.mark.parametrize(("label", "compute"), _READS, ids=[r[0] for r in _READS])
    def test_read_matches_cpu(self, label: str, compute: Callable[[cv.Tensor], Any]) -> None:
        ours, cpu = _pair()
        assert _outcome(compute, ours) == _outcome(compute, cpu)

    def test_views_alias_and_copies_do_not(self) -> None:
        ours, _ = _pair()
        assert ours[0].carrier is ours.carrier and ours.T.carrier is ours.carrier
        assert ours.clone().carrier is not ours.carrier
        assert type(ours.permute(2, 0, 1).reshape(-1).carrier) is SharedMemoryCarrier


_WRITES: list[tuple[str, Callable[[cv.Tensor], None]]] = [
    ("int", lambda t: t.__setitem__(0, 1.25)),
    ("slice broadcast", lambda t: t.__setitem__((slice(None), 1), [9.0, 8.0, 7.0, 6.0])),
    ("negative step", lambda t: t.__setitem__((Ellipsis, slice(None, None, -1)), 3.0)),
    ("whole", lambda t: t.__setitem__(Ellipsis, -1.0)),
    ("tensor value", lambda t: t.__setitem__((0, 0), cv.tensor([5.0, 6.0, 7.0, 8.0]))),
    ("bad shape", lambda t: t.__setitem__(0, [1.0, 2.0])),
    ("out of range", lambda t: t.__setitem__(7, 0.0)),
]


class TestAssignmentLikeCPU:
    """``x[key] = value`` writes the same elements (or refuses the same way) as on CPU."""

    @pytest.mark.parametrize(("label", "write"), _WRITES, ids=[w[0] for w in _WRITES])
    def test_write_matches_cpu(self, label: str, write: Callable[[cv.Tensor], None]) -> None:
        results = []
        for t in _pair():
            version = t.version
            outcome = _outcome(lambda x: write(x), t)
            results.append((outcome, t.numpy().tolist(), t.version > version))
        assert results[0] == results[1]

    def test_write_into_grad_leaf_refused(self) -> None:
        ours = cv.tensor([1.0, 2.0], carrier=SharedMemoryCarrier, requires_grad=True)
        with pytest.raises(RuntimeError, match="cannot write in place into a leaf tensor"):
            ours[0] = 3.0
        assert ours.numpy().tolist() == [1.0, 2.0]


class TestMovesEveryDtype:
    """Round trips to and from CPU and Generic are bit-exact for every storable dtype."""

    @pytest.mark.parametrize("dtype", CONCRETE_DTYPES, ids=lambda d: d.name)
    @pytest.mark.parametrize("other", [CPU, Generic], ids=lambda c: c.__name__)
    def test_round_trip_bit_exact(self, dtype: cv.DType, other: type[cv.Carrier]) -> None:
        rng = np.random.default_rng(7)
        raw = rng.integers(0, 256, 3 * 5 * dtype.itemsize, dtype=np.uint8)
        values = raw.view(dtype.numpy).reshape(3, 5)
        source = cv.tensor(values, dtype, carrier=SharedMemoryCarrier)
        there = cv.move(source[:, ::-2], other)
        back = cv.move(there, SharedMemoryCarrier)
        assert type(there.carrier) is other and type(back.carrier) is SharedMemoryCarrier
        want = np.ascontiguousarray(values[:, ::-2]).view(np.uint8)
        assert np.array_equal(np.ascontiguousarray(there.numpy()).view(np.uint8), want)
        assert np.array_equal(np.ascontiguousarray(back.numpy()).view(np.uint8), want)


class TestTwoProcesses:
    """Two processes attached to one tensor see each other's writes, both ways."""

    def test_writes_visible_both_ways(self) -> None:
        x = cv.tensor([0.0, 0.0, 0.0], cv.float64, carrier=SharedMemoryCarrier)
        name = x.carrier.segment_name  # type: ignore[attr-defined]  # SharedMemoryCarrier
        x[2] = 7.0  # written before the other process attaches
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    import sys
                    import conveyor as cv
                    from conveyor_shm import SharedMemoryCarrier
                    t = cv.Tensor(SharedMemoryCarrier.attach({name!r}, 3, cv.float64))
                    t[0] = 1.5  # the parent must see this
                    print(t.numpy().tolist(), flush=True)
                    sys.stdin.readline()  # the parent writes meanwhile
                    print(t.numpy().tolist(), flush=True)
                    """
                ),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")},
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            first = child.stdout.readline().strip()
            assert first == "[1.5, 0.0, 7.0]"
            assert x.numpy().tolist() == [1.5, 0.0, 7.0]  # the child's write, seen here
            x[1] = -2.0
            child.stdin.write("go\n")
            child.stdin.flush()
            second = child.stdout.readline().strip()
            assert second == "[1.5, -2.0, 7.0]"  # the parent's write, seen there
            assert child.wait(timeout=60) == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)


class TestSegmentNames:
    """An impossible segment name is refused before any segment exists, saying what is valid."""

    @pytest.mark.parametrize("name", ["", "a/b", "/", "x\x00y", "n" * 256])
    def test_invalid_name_value_error_and_nothing_created(
        self, monkeypatch: pytest.MonkeyPatch, name: str
    ) -> None:
        from multiprocessing import shared_memory

        created: list[object] = []
        original = shared_memory.SharedMemory

        def record(*args: Any, **kwargs: Any) -> Any:
            created.append(args)
            return original(*args, **kwargs)

        monkeypatch.setattr(shared_memory, "SharedMemory", record)
        with pytest.raises(ValueError) as info:
            SharedMemoryCarrier.allocate(4, cv.float32, name=name)
        assert str(info.value) == (
            f"allocate on SharedMemoryCarrier: segment name {name!r} is not valid; pass 1 to 255 "
            f"bytes without '/' or NUL, or name=None for a fresh random name"
        )
        assert created == []

    def test_non_string_name_type_error(self) -> None:
        with pytest.raises(TypeError) as info:
            SharedMemoryCarrier.allocate(4, cv.float32, name=7)
        assert str(info.value) == (
            "allocate on SharedMemoryCarrier: name must be a str or None, got 7 (int)"
        )


class TestSharedMemoryNeverKillsTheHost:
    """Issue 9 item 6: a segment larger than the free /dev/shm is refused, never SIGBUS."""

    @pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs a /dev/shm file system")
    def test_allocation_larger_than_free_space_raises_memory_error(self) -> None:
        done = _run(
            """
            import os
            import conveyor as cv
            from conveyor_shm import SharedMemoryCarrier
            from multiprocessing import shared_memory
            created = []  # segments this process created (other processes share /dev/shm)
            original = shared_memory.SharedMemory
            def record(*args, **kwargs):
                segment = original(*args, **kwargs)
                created.append(segment.name)
                return segment
            shared_memory.SharedMemory = record
            stats = os.statvfs("/dev/shm")
            free = stats.f_bavail * stats.f_frsize
            size = free + (1 << 30)
            try:
                SharedMemoryCarrier.allocate(size, cv.uint8)
            except MemoryError as exc:
                print("MemoryError:", exc)
            print("created:", created)
            print("size:", size)
            """
        )
        assert done.returncode == 0, (done.returncode, done.stderr)  # -7 would be SIGBUS
        lines = done.stdout.splitlines()
        size = int(lines[-1].split()[-1])
        assert lines[0].startswith(
            f"MemoryError: allocate on SharedMemoryCarrier: a segment of {size} bytes does not "
            f"fit in /dev/shm ("
        )
        assert "bytes are free" in lines[0]
        assert lines[1] == "created: []"  # refused before any segment was created

    def test_reservation_failure_refused_and_unlinked(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When reserving fails after creation (a race), the segment is removed, not zero-filled."""
        from multiprocessing import shared_memory

        from conveyor_shm import carrier as module

        def fail(fd: int, offset: int, length: int) -> None:
            raise OSError(28, "No space left on device")

        created: list[str] = []
        original = shared_memory.SharedMemory

        def record(*args: Any, **kwargs: Any) -> Any:
            segment = original(*args, **kwargs)
            created.append(segment.name)
            return segment

        monkeypatch.setattr(module.os, "posix_fallocate", fail)
        monkeypatch.setattr(shared_memory, "SharedMemory", record)
        big = module.PRIVATE_MAX_BYTES // 8 + 1  # float64 slots past the private size
        with pytest.raises(MemoryError, match="allocate on SharedMemoryCarrier: a segment of "):
            SharedMemoryCarrier.allocate(big, cv.float64)
        small = SharedMemoryCarrier.allocate(10, cv.float64)  # private: no segment yet
        with pytest.raises(
            MemoryError, match="segment_name on SharedMemoryCarrier: a segment of 80 "
        ):
            _ = small.segment_name
        assert len(created) == 2
        for name in created:
            assert not os.path.exists(f"/dev/shm/{name.lstrip('/')}")
        small.write(0, 1.5)  # the tensor stays usable in this process
        assert small.read(0) == 1.5
