"""Building many C-target kernel sources into one shared library, cheaply.

Every lowered C source includes TileLang's ``common.h`` (about 70,000 lines once
preprocessed), so compiling one translation unit per kernel spends nearly all its time parsing
that header again. Instead the sources are joined into one unit per CPU core: the includes
are hoisted to the top, each kernel's own text sits in a namespace of its own (so no
file-level name of one kernel can meet another's; the ``extern "C"`` entry points keep their
unique names), the units compile concurrently at ``-O0`` (a correctness path, not a speed
one) and one link makes the library.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

__all__ = ["build_library", "parallel_jobs", "unit"]

_COMPILE: Final = ("-std=c++17", "-O0", "-fPIC", "-w", "-c")
_LINK: Final = ("-shared",)
#: Each compiler run is bounded; a unit of a few hundred small kernels takes well under this.
_TIMEOUT_S: Final = 900


def parallel_jobs() -> int:
    """How many compiler or lowering processes to run at once: the CPUs this process may use."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only; macOS has cpu_count
    cpus = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return max(1, min(cpus, 8))


def unit(sources: Sequence[str]) -> str:
    """One translation unit holding ``sources``: includes hoisted, each body in a namespace."""
    includes: dict[str, None] = {}
    bodies = []
    for number, source in enumerate(sources):
        lines = []
        for line in source.splitlines():
            if line.startswith("#include"):
                includes[line] = None
            else:
                lines.append(line)
        body = "\n".join(lines)
        bodies.append(f"namespace cv_unit_{number} {{\n{body}\n}}  // cv_unit_{number}\n")
    return "\n".join([*includes, *bodies])


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    if done.returncode != 0:
        msg = f"CLauncher: g++ failed {what}:\n{done.stderr[-4000:]}"
        raise RuntimeError(msg)


def build_library(sources: Sequence[str], library: Path, include_dir: Path) -> None:
    """Compile ``sources`` into the shared library ``library`` (written atomically)."""
    library.parent.mkdir(parents=True, exist_ok=True)
    jobs = min(parallel_jobs(), len(sources))
    shares = [list(sources[j::jobs]) for j in range(jobs)]
    with tempfile.TemporaryDirectory(dir=library.parent) as work:
        objects = []
        commands = []
        for number, share in enumerate(shares):
            path = Path(work) / f"unit{number}.cc"
            path.write_text(unit(share))
            objects.append(str(path.with_suffix(".o")))
            flags = [*_COMPILE, "-I", str(include_dir)]
            commands.append(["g++", *flags, str(path), "-o", objects[-1]])
        with ThreadPoolExecutor(jobs) as pool:
            for done in [pool.submit(_run, c, "on the lowered C sources") for c in commands]:
                done.result()
        partial = Path(work) / "lib.so"
        _run(["g++", *_LINK, *objects, "-o", str(partial)], "linking the kernels")
        os.replace(partial, library)
