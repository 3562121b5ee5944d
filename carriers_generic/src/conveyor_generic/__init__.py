"""conveyor-generic: the Generic reference carrier and the CPU performance carrier."""

from conveyor_generic.cpu import CPU
from conveyor_generic.generic import Generic

__all__ = ["CPU", "Generic"]
