"""conveyor-storage: storage-only carriers, block devices, and the Evictable / TiledEvictable
tiered carriers."""

from conveyor_storage._map_tiles import map_tiles
from conveyor_storage._projection import AwaitProjection, project, scatter
from conveyor_storage._residency import (
    AwaitResidency,
    LRUPolicy,
    ResidencyPlan,
    ResidencyPolicy,
)
from conveyor_storage._tiles import TileSelection, TileSet, TileState
from conveyor_storage._transitions import TiledResidencyFacet
from conveyor_storage.block_device import BlockDevice
from conveyor_storage.block_device_carrier import BlockDeviceCarrier
from conveyor_storage.evictable import Evictable, EvictableOperation
from conveyor_storage.file_backed import FileBacked
from conveyor_storage.tiled_evictable import TiledEvictable

__all__ = [
    "AwaitProjection",
    "AwaitResidency",
    "BlockDevice",
    "BlockDeviceCarrier",
    "Evictable",
    "EvictableOperation",
    "FileBacked",
    "LRUPolicy",
    "ResidencyPlan",
    "ResidencyPolicy",
    "TileSelection",
    "TileSet",
    "TileState",
    "TiledEvictable",
    "TiledResidencyFacet",
    "map_tiles",
    "project",
    "scatter",
]
