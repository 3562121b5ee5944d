"""The conveyor.plugins entry point of conveyor-storage: its carriers and its move routes.

Cheap to import: the carrier modules load only when the host calls the hooks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_storage.block_device_carrier import BlockDeviceCarrier
    from conveyor_storage.evictable import Evictable
    from conveyor_storage.file_backed import FileBacked
    from conveyor_storage.tiled_evictable import TiledEvictable

    return {
        "file": FileBacked,
        "block": BlockDeviceCarrier,
        "evictable": Evictable,
        "tiled": TiledEvictable,
    }


@hookimpl
def conveyor_move_routes() -> Iterable[object]:
    from conveyor_storage._routes import routes

    return routes()
