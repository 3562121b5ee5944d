"""conveyor-metal: the Metal carrier, Apple-GPU kernels written in TileLang.

Importing this package imports neither torch nor tilelang; they load when a Metal carrier is
first allocated or a kernel first runs.
"""

from conveyor_metal.metal import Metal

__all__ = ["Metal"]
