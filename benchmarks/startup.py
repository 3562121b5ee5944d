"""Start-up cost: ``import conveyor``, first discovery and first CPU tensor, in fresh processes.

Run: ``.venv/bin/python benchmarks/startup.py``. Every figure is the best of ``ROUNDS`` fresh
interpreters (a shared machine only ever adds time), measured inside the child with
``time.perf_counter`` around the statement, beside ``python -c pass`` (whole process),
``import numpy`` and ``import torch`` measured the same way. The goals restate the issue's.

Children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` dropped) after one warm-up,
as an installed package runs: NumPy and PyTorch ship their bytecode, and compiling conveyor's
sources on every start would be measured otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROUNDS = 5
TIMEOUT = 120.0
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# Each probe prints the wall and CPU seconds its statement took inside a fresh interpreter (CPU
# time is what a loaded, shared machine distorts least).
_PROBE = """
import time
start, cpu = time.perf_counter(), time.process_time()
{statement}
print(time.perf_counter() - start, time.process_time() - cpu)
"""

CASES: tuple[tuple[str, str], ...] = (
    ("import numpy", "import numpy"),
    ("import torch", "import torch"),
    ("import conveyor", "import conveyor"),
    ("import conveyor + discovery", "import conveyor as cv\ncv.plugins.host().carriers"),
    (
        "first cv.tensor(carrier='cpu') + add",
        "import conveyor as cv\nt = cv.tensor([1.0, 2.0], carrier='cpu')\n(t + t).numpy()",
    ),
)


def _child(code: str) -> tuple[float, float] | None:
    """(wall, CPU) seconds reported by one fresh interpreter, or None when it failed."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
            env=ENV,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _process_pass() -> float:
    """Wall time of a whole ``python -c pass`` process (start-up the others pay on top)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=TIMEOUT, env=ENV)
    return time.perf_counter() - start


def _best(code: str) -> tuple[float, float] | None:
    """The best wall and the best CPU time over ``ROUNDS`` children (each minimum on its own)."""
    _child(code)  # warm-up: writes the bytecode caches
    times = [t for t in (_child(code) for _ in range(ROUNDS)) if t is not None]
    if not times:
        return None
    return min(t[0] for t in times), min(t[1] for t in times)


def _numpy_loaded_by_import() -> bool:
    code = "import sys, conveyor\nprint(0.0 if 'numpy' in sys.modules else 1.0, 0.0)"
    found = _child(code)
    return found is not None and found[0] == 0.0


def main() -> None:
    print(
        f"conveyor start-up benchmark: best of {ROUNDS} fresh processes, {sys.version.split()[0]}"
    )
    process = min(_process_pass() for _ in range(ROUNDS))
    results = {name: _best(_PROBE.format(statement=stmt)) for name, stmt in CASES}
    numpy_time = results["import numpy"]
    goals = {
        "import conveyor": "<= 60 ms, no NumPy",
        "first cv.tensor(carrier='cpu') + add": "<= import numpy + 150 ms",
    }
    rows: list[tuple[str, ...]] = [
        ("python -c pass (whole process)", f"{process * 1e3:.1f} ms", "", "", "", "")
    ]
    for name, _ in CASES:
        found = results[name]
        cells = []
        for i in (0, 1):
            if found is None:
                cells += ["-", ""]
                continue
            cells.append(f"{found[i] * 1e3:.1f} ms")
            over = ""
            if numpy_time is not None and name != "import numpy":
                over = f"{(found[i] - numpy_time[i]) * 1e3:+.1f} ms"
            cells.append(over)
        rows.append((name, *cells, goals.get(name, "info")))
    numpy_note = "yes" if _numpy_loaded_by_import() else "no"
    rows.append(("import conveyor loads NumPy", numpy_note, "", "", "", "goal: no"))
    headers = ("what", "wall", "vs numpy", "CPU", "vs numpy", "goal")
    widths = [max(len(r[i]) for r in (headers, *rows)) for i in range(len(headers))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))


if __name__ == "__main__":
    main()
