"""Processes killed (SIGKILL) mid-write, and a file shrunk under a live process.

A child killed in the middle of an eviction or a move leaves every complete-looking file whole:
files still being filled carry a hidden ``.partial`` name until they commit, and the private
directory of a killed process is removed by the next process that needs its own. A child whose
file another process truncates survives with clean ``OSError``s (no ``SIGBUS``).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
N = 8 << 20  # float32 slots: 32 MiB, written in 4 chunks

CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import conveyor as cv
    from conveyor_storage import Evictable, FileBacked
    from tests.core.carriers import ArrayCarrier

    class SlowPrimary(ArrayCarrier):
        # Each exported chunk takes a while, so the parent can catch the copy half-way.
        def _export(self, layout):
            time.sleep(0.15)
            return super()._export(layout)

    directory, n = sys.argv[1], int(sys.argv[2])
    primary = SlowPrimary.allocate(n, cv.float32)
    primary.import_span(cv.Layout((n,)), np.full(n, 1.0, np.float32))
    ev = Evictable(primary, FileBacked.allocate(n, cv.float32, directory=directory))
    ev.evict()
    print("COMMITTED", ev.secondary.path, flush=True)
    ev.promote()
    cv.Tensor(ev)[...] = 2.0
    print("EVICTING", flush=True)
    ev.evict()
    print("COMMITTED", ev.secondary.path, flush=True)
    time.sleep(60)
    """
)


def _read_line(child: subprocess.Popen[str], timeout: float) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    if not ready:
        pytest.fail("the child process stopped reporting")
    return child.stdout.readline().strip()


def _value_at(path: Path, index: int) -> float:
    with open(path, "rb") as handle:
        handle.seek(index * 4)
        return float(np.frombuffer(handle.read(4), "<f4")[0])


def test_sigkill_mid_eviction_keeps_the_old_secondary_intact(tmp_path: Path) -> None:
    """Killed while writing B: the file committed with A is intact, the torn file unreported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(N)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        first = _read_line(child, 60)
        assert first.startswith("COMMITTED ")
        committed = Path(first.split(" ", 1)[1])
        assert _read_line(child, 60) == "EVICTING"
        torn: Path | None = None
        deadline = time.monotonic() + 30
        while torn is None and time.monotonic() < deadline:
            for candidate in tmp_path.iterdir():
                if candidate == committed or candidate.stat().st_size < N * 4:
                    continue
                if _value_at(candidate, 0) == 2.0 and _value_at(candidate, N - 1) == 0.0:
                    torn = candidate  # the first chunk of B is in, the last is not
            time.sleep(0.002)
        assert torn is not None, "never observed the eviction half-way"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        assert child.returncode == -signal.SIGKILL
        reported = [line for line in child.stdout.read().splitlines() if line]  # type: ignore[union-attr]
        assert reported == []  # the second eviction never reported a commit
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
    old = np.fromfile(committed, "<f4")
    assert old.size == N and np.all(old == 1.0)  # the old file is intact
    partial = np.fromfile(torn, "<f4")
    assert 0 < np.count_nonzero(partial == 2.0) < N  # and the new one really was torn
    assert torn.name.startswith(".conveyor-") and torn.name.endswith(".partial")
    assert [p for p in tmp_path.iterdir() if not p.name.endswith(".partial")] == [committed]


SHRINK_CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import conveyor as cv
    from conveyor.engine.move import move
    from conveyor_generic import CPU
    from conveyor_storage import Evictable, FileBacked

    directory, n = sys.argv[1], int(sys.argv[2])
    carrier = FileBacked.allocate(n, cv.float32, directory=directory)
    carrier.import_span(cv.Layout((n,)), np.ones(n, np.float32))
    t = cv.Tensor(carrier)
    held = t.numpy()  # an export taken before the file shrinks
    primary = CPU.allocate(n, cv.float32)
    ev = Evictable(primary, FileBacked.allocate(n, cv.float32, directory=directory))
    ev.evict()
    print(carrier.path, ev.secondary.path, flush=True)
    sys.stdin.readline()  # the parent truncates both files now
    attempts = {
        "read": lambda: carrier.read(n - 1),
        "export": lambda: t.numpy(),
        "write": lambda: carrier.write(n - 1, 2.0),
        "import": lambda: carrier.import_span(cv.Layout((n,)), np.zeros(n, np.float32)),
        "move": lambda: move(t, CPU),
        "promote": ev.promote,
    }
    for name, attempt in attempts.items():
        try:
            attempt()
        except OSError as exc:
            print(name, type(exc).__name__, "truncated" in str(exc), flush=True)
        else:
            print(name, "no error", flush=True)
    print("held", float(held[n - 1]), "evicted", ev.is_evicted(), flush=True)
    print("sizes", os.path.getsize(carrier.path), os.path.getsize(ev.secondary.path), flush=True)
    """
)


def test_file_truncated_by_another_process_gives_clean_errors(tmp_path: Path) -> None:
    """Every access to a file another process shrank raises OSError; the host exits 0."""
    n = 1 << 20
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", SHRINK_CHILD, str(tmp_path), str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        paths = _read_line(child, 60).split()
        assert len(paths) == 2
        for path in paths:  # shrink both files from another process
            subprocess.run(["truncate", "-s", "4096", path], check=True, timeout=30)
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, f"the host died with {child.returncode}: {err}"
    lines = out.splitlines()
    names = ("read", "export", "write", "import", "move", "promote")
    assert lines[:6] == [f"{name} OSError True" for name in names]
    assert lines[6] == "held 1.0 evicted True"  # the old export and the evicted state survive
    assert lines[7] == "sizes 4096 4096"  # the refused writes never regrew the files


MOVE_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import conveyor as cv
    from conveyor.engine.move import move
    from conveyor_generic import CPU
    from conveyor_storage import FileBacked

    directory, n = sys.argv[1], int(sys.argv[2])
    real = os.pwrite

    def slow(fd, data, offset):  # each chunk takes a while: the parent kills mid-copy
        time.sleep(0.2)
        return real(fd, data, offset)

    os.pwrite = slow
    source = cv.tensor(np.full(n, 3.0, np.float32), carrier=CPU)
    print("MOVING", flush=True)
    moved = move(source, FileBacked, directory=None if directory == "-" else directory)
    print("MOVED", moved.carrier.path, flush=True)
    time.sleep(60)
    """
)


def _kill_when_partial(child: subprocess.Popen[str], folder: Path) -> Path:
    """Wait until a full-size hidden .partial file appears in ``folder``, then SIGKILL."""
    assert _read_line(child, 60) == "MOVING"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [p for p in folder.glob(".conveyor-*.partial") if p.stat().st_size == N * 4]
        if found and _value_at(found[0], 0) == 3.0:  # the first chunk is in
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            return found[0]
        time.sleep(0.005)
    pytest.fail("never observed the move half-way under a .partial name")


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )


def test_sigkill_mid_move_leaves_only_a_hidden_partial_file(tmp_path: Path) -> None:
    """Killed while a move fills a new FileBacked file: no complete-looking file is left."""
    child = _spawn(MOVE_CHILD, str(tmp_path), str(N))
    try:
        partial = _kill_when_partial(child, tmp_path)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert [p.name for p in tmp_path.iterdir()] == [partial.name]  # nothing named conveyor-*
    assert np.count_nonzero(np.fromfile(partial, "<f4") == 3.0) < N  # it really was torn


def test_private_directory_of_a_killed_process_is_removed_by_the_next(tmp_path: Path) -> None:
    """A killed process's private directory (with its partial file) goes at the next start."""
    env_root = tmp_path / "tmp"
    env_root.mkdir()
    script = MOVE_CHILD.replace("import os, sys, time", "import os, sys, time, tempfile")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(env_root)}
    child = subprocess.Popen(
        [sys.executable, "-c", script, "-", str(N)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert _read_line(child, 60) == "MOVING"
        deadline = time.monotonic() + 30
        private: list[Path] = []
        while not private and time.monotonic() < deadline:
            private = list(env_root.glob("conveyor-storage-*/*conveyor-*"))
            time.sleep(0.005)
        assert private, "the child never created its private directory"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
    left = private[0].parent
    assert left.exists()  # SIGKILL ran no exit hook
    nxt = textwrap.dedent(
        """
        import os, conveyor as cv
        from conveyor_storage import FileBacked
        print(os.path.dirname(FileBacked.allocate(4, cv.float32).path))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", nxt], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert not left.exists()
    assert list(env_root.iterdir()) == []  # the next process's own directory went at its exit
