"""The conveyor.plugins entry point of conveyor-shm: contributes the ``"shm"`` carrier.

Cheap to import: the carrier module (NumPy, shared memory) loads only when the host asks.
"""

from __future__ import annotations

from collections.abc import Mapping

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_shm.carrier import SharedMemoryCarrier

    return {"shm": SharedMemoryCarrier}
