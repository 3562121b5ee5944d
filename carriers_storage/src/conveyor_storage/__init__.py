"""conveyor-storage: storage-only carriers, block devices, and the two-tier Evictable carrier."""

from conveyor_storage.block_device import BlockDevice
from conveyor_storage.block_device_carrier import BlockDeviceCarrier
from conveyor_storage.evictable import Evictable, EvictableOperation
from conveyor_storage.file_backed import FileBacked

__all__ = ["BlockDevice", "BlockDeviceCarrier", "Evictable", "EvictableOperation", "FileBacked"]
