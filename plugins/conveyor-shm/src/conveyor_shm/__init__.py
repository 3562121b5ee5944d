"""conveyor-shm: ``SharedMemoryCarrier``, a definition-backed sibling carrier in shared memory.

Importing this package registers the carrier's ``CarrierDefinition``; the plugin host imports it
only when a program asks for the ``"shm"`` carrier.
"""

from conveyor_shm.carrier import SharedMemoryCarrier, SharedMemoryFacet

__all__ = ["SharedMemoryCarrier", "SharedMemoryFacet"]
