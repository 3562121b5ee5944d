"""conveyor-generic: the Generic reference carrier and the CPU performance carrier.

Besides the two carriers, the package offers its kernels to sibling carriers that compute
through them: Generic's reference kernels (``KERNELS`` and ``run_kernel``, for the
shared-memory carrier's kernels and Metal's host-side index checks), CPU's kernels
(``run_cpu_kernel``, for the Dask carrier's tasks, which need CPU's speed per block), the
quiet error state CPU's kernels run in (``quiet_on`` / ``quiet_off``, for the shared-memory
carrier's direct NumPy calls: overflow and NaN are values, not warnings), the operand
conversions and axis rules they use, and the geometry of ``conv_general``. Everything
loads on first use (PEP 562), so importing the plugin entry point ``conveyor_generic.plugin``
loads neither NumPy nor a carrier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from conveyor_generic.cpu import CPU, run_cpu_kernel
    from conveyor_generic.generic import Generic
    from conveyor_generic.kernels import KERNELS, KernelIndexError, KernelValueError, run_kernel
    from conveyor_generic.kernels._common import convert, lane_axes, reduced_axes
    from conveyor_generic.kernels.contraction import conv_layouts, conv_output_shape
    from conveyor_generic.kernels.cpu_runtime import quiet_off, quiet_on
    from conveyor_generic.kernels.elementwise import BINARY_KERNELS
    from conveyor_generic.kernels.indexing import check_index
    from conveyor_generic.kernels.unary import UNARY_KERNELS

__all__ = [
    "BINARY_KERNELS",
    "CPU",
    "KERNELS",
    "UNARY_KERNELS",
    "Generic",
    "KernelIndexError",
    "KernelValueError",
    "check_index",
    "conv_layouts",
    "conv_output_shape",
    "convert",
    "lane_axes",
    "quiet_off",
    "quiet_on",
    "reduced_axes",
    "run_cpu_kernel",
    "run_kernel",
]

# Public name -> the module that defines it, imported on first access.
_HOMES: Final = {
    "CPU": "conveyor_generic.cpu",
    "Generic": "conveyor_generic.generic",
    "KERNELS": "conveyor_generic.kernels",
    "KernelIndexError": "conveyor_generic.kernels",
    "KernelValueError": "conveyor_generic.kernels",
    "run_kernel": "conveyor_generic.kernels",
    "run_cpu_kernel": "conveyor_generic.cpu",
    "convert": "conveyor_generic.kernels._common",
    "lane_axes": "conveyor_generic.kernels._common",
    "reduced_axes": "conveyor_generic.kernels._common",
    "conv_layouts": "conveyor_generic.kernels.contraction",
    "conv_output_shape": "conveyor_generic.kernels.contraction",
    "quiet_on": "conveyor_generic.kernels.cpu_runtime",
    "quiet_off": "conveyor_generic.kernels.cpu_runtime",
    "BINARY_KERNELS": "conveyor_generic.kernels.elementwise",
    "check_index": "conveyor_generic.kernels.indexing",
    "UNARY_KERNELS": "conveyor_generic.kernels.unary",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'conveyor_generic' has no attribute {name!r}"
        raise AttributeError(msg)
    # __import__ is the import statement's own machinery (importlib.import_module is not), so
    # `python -X importtime` reports the carrier module a first lookup loads.
    return getattr(__import__(home, fromlist=[name]), name)
