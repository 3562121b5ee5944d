"""Demo step: trained weights evicted to disk, the in-memory copies dropped, then promoted back.

The weights go into ``Evictable`` hierarchies (CPU primary, FileBacked secondary in the demo's
output folder). After ``evict()`` the only copy is the file; ``promote()`` reads it back into a
new CPU buffer, and the test accuracy recomputed from the promoted weights must be identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

import conveyor as cv
from conveyor import plugins
from conveyor_demo._train import Digits, accuracy, conveyor_logits

__all__ = ["evict_and_resume"]

_Array = np.ndarray[Any, Any]


def evict_and_resume(weights: Sequence[_Array], data: Digits, directory: Path) -> dict[str, Any]:
    """Evict every weight to a file, drop the in-memory state, promote, and re-score."""
    host = plugins.host()
    # Any: the classes come from the host by name, so their constructors are not visible here.
    cpu, file_backed, evictable = (cast(Any, host.carrier(n)) for n in ("cpu", "file", "evictable"))
    directory.mkdir(parents=True, exist_ok=True)
    hierarchies = []
    for w in weights:
        flat = np.ascontiguousarray(w).reshape(-1)
        primary = cpu.allocate(flat.size, cv.float32)
        primary.import_span(cv.Layout((flat.size,)), flat)
        secondary = file_backed.allocate(flat.size, cv.float32, directory=str(directory))
        hierarchies.append((evictable(primary, secondary), w.shape))
    before = accuracy(_logits(hierarchies, data), data.test_y)
    for hierarchy, _ in hierarchies:
        hierarchy.evict()
    evicted = all(h.is_evicted() for h, _ in hierarchies)
    on_disk = sum(int(np.prod(shape)) * 4 for _, shape in hierarchies)
    for hierarchy, _ in hierarchies:
        hierarchy.promote()
    after = accuracy(_logits(hierarchies, data), data.test_y)
    for hierarchy, _ in hierarchies:
        hierarchy.release()
    return {
        "evicted": evicted,
        "bytes_on_disk": on_disk,
        "accuracy_before": before,
        "accuracy_after": after,
        "identical": before == after,
    }


def _logits(hierarchies: Sequence[tuple[Any, tuple[int, ...]]], data: Digits) -> _Array:
    """The forward pass on the Evictable weights (operations run on their promoted primaries)."""
    params = [cv.Tensor(h, cv.Layout(shape)) for h, shape in hierarchies]
    x = cv.move(cv.tensor(data.test_x, carrier="cpu"), "evictable")
    with cv.no_grad():
        return cv.move(conveyor_logits(params, x), "cpu").numpy()
