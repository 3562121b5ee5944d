"""Worker process of ``sweep.prelower``: lower a share of the plans' kernels into the disk cache.

Run as ``python -m tests.metal.prelower CACHE_DIR`` with a JSON list of
``[target, plan index]`` pairs (indices into ``advertised_plans()``) on standard input. It
records every case of each plan on an engine with that target and the shared disk cache,
which lowers each kernel once and stores its source; the parent then reads them from disk.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conveyor_metal._engine import Engine
from conveyor_metal._surface import advertised_plans

from .sweep import RecordingLauncher, record


def main() -> None:
    cache = Path(sys.argv[1])
    plans = advertised_plans()
    by_target: dict[str, list[int]] = {}
    for target, index in json.load(sys.stdin):
        by_target.setdefault(target, []).append(index)
    for target, indices in by_target.items():
        engine = Engine("cpu", RecordingLauncher(target), cache)
        record(engine, [plans[i] for i in indices], parallel=False)


if __name__ == "__main__":
    main()
