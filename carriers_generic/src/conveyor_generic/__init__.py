"""conveyor-generic: the Generic reference carrier and the CPU performance carrier.

The carrier modules load on first use of ``CPU`` or ``Generic`` (PEP 562), so importing the
plugin entry point ``conveyor_generic.plugin`` loads neither them nor NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor_generic.cpu import CPU
    from conveyor_generic.generic import Generic

__all__ = ["CPU", "Generic"]


def __getattr__(name: str) -> Any:
    if name == "CPU":
        from conveyor_generic.cpu import CPU

        return CPU
    if name == "Generic":
        from conveyor_generic.generic import Generic

        return Generic
    msg = f"module 'conveyor_generic' has no attribute {name!r}"
    raise AttributeError(msg)
