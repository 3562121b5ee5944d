"""FileBacked: a storage-only carrier over a real, memory-mapped file."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import conveyor as cv
from conveyor.types.dtypes import CONCRETE_DTYPES
from conveyor.types.policy import registered_operations
from conveyor_storage import FileBacked

DTYPES = [pytest.param(d, id=d.name) for d in CONCRETE_DTYPES]


def _values(dtype: cv.DType, n: int = 7) -> np.ndarray:
    """Distinct, non-zero values of ``dtype`` (every bit pattern class a round trip can lose)."""
    rng = np.random.default_rng(7)
    if dtype is cv.bool:
        return rng.integers(0, 2, n).astype(bool)
    if dtype.is_complex:
        return (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype.numpy)
    if dtype.is_floating:
        return rng.normal(size=n).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, info.max, n, dtype=dtype.numpy, endpoint=True)


def _tensor(values: np.ndarray, dtype: cv.DType, directory: Path) -> cv.Tensor:
    carrier = FileBacked.allocate(values.size, dtype, directory=directory)
    carrier.import_span(cv.Layout((values.size,)), values.reshape(-1))
    return cv.Tensor(carrier, cv.Layout(values.shape))


class TestAllocate:
    """FileBacked.allocate(size, dtype, directory=None)."""

    def test_allocate_in_directory_creates_zero_filled_file(self, tmp_path: Path) -> None:
        """The file lives in the chosen directory, holds size * itemsize zero bytes."""
        carrier = FileBacked.allocate(10, cv.float64, directory=tmp_path)
        assert Path(carrier.path).parent == tmp_path
        assert os.path.getsize(carrier.path) == 80
        assert Path(carrier.path).read_bytes() == bytes(80)
        assert cv.Tensor(carrier).numpy().tolist() == [0.0] * 10
        assert carrier.owns_file and carrier.mutable
        carrier.release()

    def test_allocate_zero_size_works(self, tmp_path: Path) -> None:
        """A zero-slot carrier has an empty file and exports empty arrays."""
        carrier = FileBacked.allocate(0, cv.int8, directory=tmp_path)
        assert carrier.size == 0
        assert cv.Tensor(carrier).numpy().shape == (0,)
        carrier.release()
        assert list(tmp_path.iterdir()) == []

    def test_default_directory_is_private_and_removed_at_exit(self) -> None:
        """Without a directory the file goes to a private temporary directory gone at exit."""
        script = textwrap.dedent(
            """
            import os, conveyor as cv
            from conveyor_storage import FileBacked
            carrier = FileBacked.allocate(4, cv.float32)
            print(os.path.dirname(carrier.path))
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        folder = out.stdout.strip()
        assert "conveyor-storage-" in os.path.basename(folder)
        assert not os.path.exists(folder)

    @pytest.mark.parametrize(
        ("size", "dtype", "error"),
        [(-1, cv.float32, ValueError), ("3", cv.float32, TypeError), (3, cv.floating, TypeError)],
    )
    def test_bad_arguments_refused_before_creating_anything(
        self, tmp_path: Path, size: object, dtype: cv.DType, error: type[Exception]
    ) -> None:
        """Bad sizes and abstract dtypes raise the spec's types and create no file."""
        with pytest.raises(error, match="allocate on FileBacked"):
            FileBacked.allocate(size, dtype, directory=tmp_path)  # type: ignore[arg-type]
        assert list(tmp_path.iterdir()) == []

    def test_unknown_argument_refused_and_nothing_created(self, tmp_path: Path) -> None:
        """An unknown keyword is a TypeError naming it."""
        with pytest.raises(TypeError, match=r"unexpected argument.*mode"):
            FileBacked.allocate(3, cv.float32, directory=tmp_path, mode="w")
        assert list(tmp_path.iterdir()) == []

    def test_size_past_the_largest_file_value_error_and_nothing_created(
        self, tmp_path: Path
    ) -> None:
        """More bytes than a file offset can hold is refused with sizes, before any file."""
        with pytest.raises(ValueError) as info:
            FileBacked.allocate(2**62, cv.float64, directory=tmp_path)
        assert str(info.value) == (
            f"allocate on FileBacked: {2**62} float64 slots need {2**65} bytes, more than a "
            f"file can hold ({2**63 - 1} bytes); allocate fewer slots"
        )
        assert list(tmp_path.iterdir()) == []

    def test_missing_directory_raises_file_not_found(self, tmp_path: Path) -> None:
        """A directory that does not exist is an OSError, not a silent fallback."""
        with pytest.raises(FileNotFoundError):
            FileBacked.allocate(3, cv.float32, directory=tmp_path / "absent")

    def test_direct_construction_points_to_allocate(self) -> None:
        """FileBacked() is refused with a message naming allocate and open."""
        with pytest.raises(TypeError, match=r"FileBacked\.allocate.*FileBacked\.open"):
            FileBacked()


class TestPickle:
    """A FileBacked tensor is an open file of this process: pickle says how to persist it."""

    def test_pickling_type_error_says_how_to_persist(self, tmp_path: Path) -> None:
        import pickle

        t = _tensor(np.arange(3.0), cv.float64, tmp_path)
        version = t.version

        with pytest.raises(TypeError) as info:
            pickle.dumps(t)

        assert str(info.value) == (
            "pickle on FileBacked: a FileBacked tensor is a file this process holds open (its "
            "descriptor and locks cannot travel through pickle); pickle cv.move(tensor, 'cpu') "
            "instead, or share the file itself: FileBacked.open(carrier.path, dtype) reads it "
            "in another process (allocate it with directory= to keep the file after release)"
        )
        assert t.version == version and t.numpy().tolist() == [0.0, 1.0, 2.0]

    def test_the_advice_works(self, tmp_path: Path) -> None:
        """Both remedies the message names give the values back."""
        import pickle

        t = _tensor(np.arange(3.0), cv.float64, tmp_path)

        moved = pickle.loads(pickle.dumps(cv.move(t, "cpu")))
        opened = FileBacked.open(t.carrier.path, cv.float64)  # type: ignore[attr-defined]

        assert moved.numpy().tolist() == [0.0, 1.0, 2.0]
        assert cv.Tensor(opened).numpy().tolist() == [0.0, 1.0, 2.0]
        opened.release()


class TestOpen:
    """FileBacked.open(path, dtype): an existing file, read-only."""

    def test_open_reads_raw_little_endian_values(self, tmp_path: Path) -> None:
        """The file's raw little-endian values are the carrier's slots."""
        path = tmp_path / "data.bin"
        np.arange(6, dtype="<i4").tofile(path)
        carrier = FileBacked.open(path, cv.int32)
        assert carrier.size == 6 and not carrier.owns_file and not carrier.mutable
        assert cv.Tensor(carrier, cv.Layout((2, 3))).numpy().tolist() == [[0, 1, 2], [3, 4, 5]]

    def test_writes_raise_runtime_error_and_change_nothing(self, tmp_path: Path) -> None:
        """write and import_span on an opened file raise RuntimeError; the file is unchanged."""
        path = tmp_path / "data.bin"
        np.arange(4, dtype="<f8").tofile(path)
        before = path.read_bytes()
        carrier = FileBacked.open(path, cv.float64)
        with pytest.raises(RuntimeError, match="write on FileBacked: the carrier is read-only"):
            carrier.write(0, 9.0)
        with pytest.raises(RuntimeError, match=r"import_span on FileBacked.*read-only"):
            carrier.import_span(cv.Layout((4,)), np.ones(4))
        assert path.read_bytes() == before
        assert carrier.version == 0

    def test_release_never_deletes_an_opened_file(self, tmp_path: Path) -> None:
        """release() closes an opened file but leaves it on disk."""
        path = tmp_path / "data.bin"
        np.zeros(3, np.float32).tofile(path)
        carrier = FileBacked.open(path, cv.float32)
        carrier.release()
        assert path.exists()
        with pytest.raises(RuntimeError, match="released"):
            carrier.read(0)

    def test_length_not_a_multiple_of_itemsize_is_value_error(self, tmp_path: Path) -> None:
        """A file that does not hold whole items is refused, naming the sizes."""
        path = tmp_path / "odd.bin"
        path.write_bytes(b"\0" * 7)
        with pytest.raises(ValueError, match="7 bytes, not a whole number of float32 items"):
            FileBacked.open(path, cv.float32)

    def test_directory_is_value_error_and_missing_file_os_error(self, tmp_path: Path) -> None:
        """Only regular files open; a missing path is FileNotFoundError."""
        with pytest.raises(ValueError, match="not a regular file"):
            FileBacked.open(tmp_path, cv.float32)
        with pytest.raises(FileNotFoundError):
            FileBacked.open(tmp_path / "absent.bin", cv.float32)

    def test_truncated_file_refused_naming_the_path_and_both_sizes(self, tmp_path: Path) -> None:
        """open(size=) of a file shorter than declared: ValueError, nothing opened."""
        path = tmp_path / "data.bin"
        np.arange(8, dtype="<f4").tofile(path)
        os.truncate(path, 12)
        with pytest.raises(
            ValueError, match=r"data\.bin' holds 12 bytes but 8 float32 slots need 32"
        ):
            FileBacked.open(path, cv.float32, size=8)
        assert path.stat().st_size == 12  # never regrown
        assert FileBacked.open(path, cv.float32, size=3).size == 3

    def test_size_must_be_an_int(self, tmp_path: Path) -> None:
        """A non-int size is a TypeError before the file is opened."""
        path = tmp_path / "data.bin"
        path.write_bytes(bytes(8))
        with pytest.raises(TypeError, match="open on FileBacked: size must be an int"):
            FileBacked.open(path, cv.float32, size="2")  # type: ignore[arg-type]

    def test_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        """A FIFO with no writer is refused at once (in a child, killed if it blocks)."""
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        script = textwrap.dedent(
            f"""
            import conveyor as cv
            from conveyor_storage import FileBacked
            try:
                FileBacked.open({str(fifo)!r}, cv.float32)
            except ValueError as exc:
                print(exc)
            """
        )
        try:
            out = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
            )
        except subprocess.TimeoutExpired:
            pytest.fail("FileBacked.open blocked on a FIFO")
        assert out.returncode == 0, out.stderr
        assert "pipe' is not a regular file (a FIFO" in out.stdout

    def test_abstract_dtype_is_type_error(self, tmp_path: Path) -> None:
        """Opening with a category is refused like allocation."""
        path = tmp_path / "data.bin"
        path.write_bytes(bytes(8))
        with pytest.raises(TypeError, match="abstract dtype category"):
            FileBacked.open(path, cv.numeric)


class TestStorage:
    """read / write / export_span / import_span / release / flush."""

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_every_dtype_is_stored_as_raw_little_endian_bytes(
        self, tmp_path: Path, dtype: cv.DType
    ) -> None:
        """The file holds exactly the values' little-endian bytes, read back bit-exactly."""
        values = _values(dtype)
        t = _tensor(values, dtype, tmp_path)
        expected = (
            values.astype(values.dtype.newbyteorder("<")) if dtype is not cv.bfloat16 else values
        )
        assert Path(t.carrier.path).read_bytes() == expected.tobytes()
        assert t.numpy().tobytes() == values.tobytes()
        assert t.carrier.read(3) == values[3].item() or dtype.is_floating

    def test_bfloat16_is_its_two_byte_pattern(self, tmp_path: Path) -> None:
        """bfloat16 1.0 is stored as 0x3F80, little-endian."""
        t = _tensor(np.array([1.0, -2.0], ml_dtypes.bfloat16), cv.bfloat16, tmp_path)
        assert Path(t.carrier.path).read_bytes() == b"\x80\x3f\x00\xc0"

    def test_large_contiguous_import_goes_through_pwrite(self, tmp_path: Path) -> None:
        """A multi-megabyte span written in one call lands in the file and reads back."""
        values = np.arange(1 << 20, dtype=np.float32)
        carrier = FileBacked.allocate(values.size + 3, cv.float32, directory=tmp_path)
        carrier.import_span(cv.Layout((values.size,), None, 3), values)
        assert np.array_equal(cv.Tensor(carrier).numpy()[3:], values)
        on_disk = np.fromfile(carrier.path, "<f4")
        assert np.array_equal(on_disk[3:], values) and on_disk[:3].tolist() == [0, 0, 0]

    def test_strided_write_and_read(self, tmp_path: Path) -> None:
        """Strided layouts write and read only their slots; every write bumps the version."""
        carrier = FileBacked.allocate(6, cv.int16, directory=tmp_path)
        carrier.import_span(cv.Layout((3,), (2,), 1), np.array([7, 8, 9], np.int16))
        carrier.write(0, 5)
        assert cv.Tensor(carrier).numpy().tolist() == [5, 7, 0, 8, 0, 9]
        assert carrier.version == 2

    def test_export_is_a_read_only_snapshot_that_survives_release(self, tmp_path: Path) -> None:
        """Exports are read-only copies read from the file: later writes and release leave them."""
        t = _tensor(np.arange(4.0), cv.float64, tmp_path)
        view = t.numpy()
        assert not view.flags.writeable
        t.carrier.write(1, 10.0)
        assert view[1] == 1.0 and t.numpy()[1] == 10.0
        t.carrier.release()
        assert view.tolist() == [0.0, 1.0, 2.0, 3.0]

    def test_release_deletes_created_file_and_is_idempotent(self, tmp_path: Path) -> None:
        """release() deletes the file allocate created; a second release does nothing."""
        carrier = FileBacked.allocate(3, cv.float32, directory=tmp_path)
        path = Path(carrier.path)
        carrier.release()
        carrier.release()
        assert not path.exists()
        with pytest.raises(
            RuntimeError, match="export_span on FileBacked: the carrier was released"
        ):
            carrier.export_span(cv.Layout((3,)))

    def test_flush_syncs_the_file_and_its_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """flush() fsyncs the file and its directory."""
        carrier = FileBacked.allocate(3, cv.float32, directory=tmp_path)
        carrier.write(2, 4.0)
        synced: list[int] = []
        real = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
        carrier.flush()
        with carrier.descriptor() as fd:
            assert fd in synced and len(synced) == 2  # the file, then the directory
        assert np.fromfile(carrier.path, "<f4").tolist() == [0.0, 0.0, 4.0]

    def test_allocate_like_uses_the_same_directory(self, tmp_path: Path) -> None:
        """allocate_like places the sibling next to the original."""
        carrier = FileBacked.allocate(1, cv.float32, directory=tmp_path)
        sibling = carrier.allocate_like(5, cv.int8)
        assert Path(sibling.path).parent == tmp_path and sibling.size == 5


class TestRefuseFileBackedComputation:
    """Scenario: Refuse FileBacked computation."""

    @pytest.mark.parametrize("name", [*registered_operations(), "no_such_operation"])
    def test_computational_dispatch_is_not_implemented(self, tmp_path: Path, name: str) -> None:
        """Every computational name raises NotImplementedError naming it and pointing to move."""
        carrier = FileBacked.allocate(2, cv.float32, directory=tmp_path)
        with pytest.raises(NotImplementedError) as info:
            carrier.dispatch_op(name)
        assert str(info.value).startswith(f"{name} on FileBacked: FileBacked is storage only")
        assert "cv.move(tensor, 'cpu')" in str(info.value)

    def test_public_function_refuses_before_allocating(self, tmp_path: Path) -> None:
        """cv.exp on a FileBacked tensor raises and creates no file."""
        t = _tensor(np.ones(3), cv.float32, tmp_path)
        with pytest.raises(NotImplementedError, match="exp on FileBacked"):
            cv.exp(t)
        assert len(list(tmp_path.iterdir())) == 1


class TestViewsAsDataExport:
    """The eight representation-preserving names: new layouts over the same file."""

    @pytest.mark.parametrize(
        ("name", "fields", "reference"),
        [
            ("reshape", {"shape": (3, 4)}, lambda a: a.reshape(3, 4)),
            ("permute", {"axes": (1, 0)}, lambda a: a.T),
            ("view", {"key": (slice(1, None), slice(None, None, 2))}, lambda a: a[1:, ::2]),
            ("squeeze", {"axes": None}, lambda a: a),
            ("unsqueeze", {"axes": (0,)}, lambda a: a[None]),
            ("broadcast_to", {"shape": (2, 3, 4)}, lambda a: np.broadcast_to(a.T, (2, 3, 4))),
            ("as_strided", {"shape": (2, 2), "strides": (3, 1), "offset": 1}, None),
            ("rearrange", {"pattern": "(a b) c -> c b a", "sizes": {"a": 2}}, None),
        ],
    )
    def test_view_shares_the_carrier_and_exports_the_values(
        self, tmp_path: Path, name: str, fields: dict, reference: object
    ) -> None:
        """The result lives on the same FileBacked carrier and reads NumPy's values."""
        base = np.arange(12, dtype=np.float32).reshape(4, 3)
        t = _tensor(base, cv.float32, tmp_path)
        source = cv.permute(t, axes=(1, 0)) if name == "broadcast_to" else t
        out = getattr(cv, name)(source, **fields)
        assert out.carrier is t.carrier
        if name == "as_strided":
            expected = np.lib.stride_tricks.as_strided(base.reshape(-1)[1:], (2, 2), (12, 4))
        elif name == "rearrange":
            expected = base.reshape(2, 2, 3).transpose(2, 1, 0)
        else:
            expected = reference(base)  # type: ignore[operator]
        assert np.array_equal(out.numpy(), expected)

    def test_non_viewable_reshape_copies_into_a_sibling_file(self, tmp_path: Path) -> None:
        """A reshape no layout can express copies into a new FileBacked in the same directory."""
        t = _tensor(np.arange(6, dtype=np.int32).reshape(2, 3), cv.int32, tmp_path)
        out = cv.reshape(cv.permute(t, axes=(1, 0)), shape=(6,))
        assert isinstance(out.carrier, FileBacked) and out.carrier is not t.carrier
        assert Path(out.carrier.path).parent == tmp_path
        assert out.numpy().tolist() == [0, 3, 1, 4, 2, 5]

    def test_view_dispatch_is_fresh_and_stamped(self, tmp_path: Path) -> None:
        """Two dispatches of a view name are distinct operations stamped with FileBacked."""
        carrier = FileBacked.allocate(2, cv.float32, directory=tmp_path)
        first, second = carrier.dispatch_op("reshape"), carrier.dispatch_op("reshape")
        assert first is not second
        assert first._dispatch_carrier_class is FileBacked
        assert first._operation_name == "reshape"

    def test_view_gradient_flows_back_as_storage(self, tmp_path: Path) -> None:
        """A view's backward maps each output gradient to its source element."""
        t = _tensor(np.arange(6, dtype=np.float64).reshape(2, 3), cv.float64, tmp_path)
        op = t.carrier.dispatch_op("view")
        out = op.forward(t, options=cv.OperationExecutionOptions("view", key=(slice(None), 1)))
        g = _tensor(np.array([5.0, 7.0]), cv.float64, tmp_path)
        (grad,) = op.backward(g)
        assert grad.numpy().tolist() == [[0, 5, 0], [0, 7, 0]]
        assert out.numpy().tolist() == [1.0, 4.0]


class TestClosed:
    """FileBacked is a closed, final shipped carrier."""

    def test_subclassing_raises_the_closed_carrier_error(self) -> None:
        """Subclassing FileBacked fails at class creation and points to a sibling Carrier."""
        with pytest.raises(TypeError, match="cannot subclass FileBacked: it is a closed carrier"):
            type("Mine", (FileBacked,), {})
        assert cv.is_closed_carrier(FileBacked)
        assert getattr(FileBacked, "__final__", False)


class TestSharedDirectories:
    """Issue 25 item 3: a name another user took first is never followed or replaced."""

    def test_a_commit_whose_final_name_is_taken_picks_a_fresh_name(self, tmp_path: Path) -> None:
        """The file a copy filled gets a fresh random name; the squatter's file is untouched."""
        carrier = FileBacked._allocate_for_overwrite(3, cv.float32, directory=tmp_path)
        pending = carrier.path
        wanted = tmp_path / os.path.basename(pending)[1 : -len(".partial")]
        wanted.write_bytes(b"squatter")
        carrier._commit()
        assert carrier.path != str(wanted) and not carrier.path.endswith(".partial")
        assert os.path.basename(carrier.path).startswith("conveyor-")
        assert carrier.path.endswith(".float32")
        assert wanted.read_bytes() == b"squatter"
        assert not os.path.exists(pending)
        carrier.release()
        assert not os.path.exists(carrier.path) and wanted.exists()

    def test_a_move_into_a_directory_with_squatted_names_completes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``cv.move`` to FileBacked still commits when the first final names are all taken."""
        import conveyor_storage.file_backed as module

        taken = [tmp_path / f"conveyor-taken{i}.float32" for i in range(3)]
        for path in taken:
            path.write_bytes(b"x")
        names = iter(str(p) for p in taken)
        monkeypatch.setattr(module, "_final_name", lambda pending: next(names))
        moved = cv.move(cv.tensor([1.0, 2.0]), FileBacked, directory=tmp_path)
        assert moved.numpy().tolist() == [1.0, 2.0]
        assert os.path.dirname(moved.carrier.path) == str(tmp_path)
        assert all(p.read_bytes() == b"x" for p in taken)

    def test_the_hidden_name_of_a_large_delete_is_never_replaced(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import threading

        import conveyor_storage.file_backed as module

        monkeypatch.setattr(module, "_BACKGROUND_DELETE_MIN", 1)
        carrier = FileBacked.allocate(4, cv.float32, directory=tmp_path)
        doomed = tmp_path / f".{os.path.basename(carrier.path)}.deleted"
        doomed.write_bytes(b"squatter")
        path = carrier.path
        carrier.release()
        for thread in threading.enumerate():
            if thread.name == "conveyor-delete":
                thread.join()
        assert not os.path.exists(path)
        assert doomed.read_bytes() == b"squatter"
        assert [p.name for p in tmp_path.iterdir()] == [doomed.name]

    def test_every_name_taken_is_a_clear_file_exists_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When no fresh name is free either, the error names the directory; nothing moved."""
        import conveyor_storage.file_backed as module

        carrier = FileBacked._allocate_for_overwrite(2, cv.float32, directory=tmp_path)
        pending = carrier.path

        def link(source: str, target: str) -> None:
            raise FileExistsError(errno.EEXIST, "taken", target)

        monkeypatch.setattr(module.os, "link", link)
        with pytest.raises(FileExistsError, match="every name tried for") as info:
            carrier._commit()
        monkeypatch.undo()
        assert str(tmp_path) in str(info.value)
        assert carrier.path == pending and os.path.exists(pending)
        carrier.release()


class TestLeftoversOfKilledProcesses:
    """Issue 25 item 9: half-deleted large files of a killed process do not stay forever."""

    def test_deleted_leftovers_are_removed_when_the_folder_is_next_used(
        self, tmp_path: Path
    ) -> None:
        """A killed process leaves ``.conveyor-*.deleted``; the next allocation there removes
        it, and nothing else."""
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    import os, threading
                    import conveyor as cv
                    import conveyor_storage.file_backed as module
                    from conveyor_storage import FileBacked
                    module._BACKGROUND_DELETE_MIN = 1
                    # SIGKILL at the moment the release hands the unlink to its thread.
                    threading.Thread.start = lambda self: os.kill(os.getpid(), 9)
                    FileBacked.allocate(1024, cv.float32, directory={str(tmp_path)!r}).release()
                    """
                ),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == -9, child.stderr
        (left,) = tmp_path.iterdir()
        assert left.name.startswith(".conveyor-") and left.name.endswith(".deleted")
        keep = tmp_path / "unrelated.deleted"
        keep.write_bytes(b"not ours to delete")
        fresh = FileBacked.allocate(1, cv.float32, directory=tmp_path)
        assert not left.exists()
        assert keep.exists()
        fresh.release()
