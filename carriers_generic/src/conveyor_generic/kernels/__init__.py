"""The reference kernels of conveyor-generic: one NumPy function per planned dispatch name.

``KERNELS[name](plan, options, *operands)`` executes an accepted plan literally (see
``_common.Kernel`` for the exact contract). ``Generic`` runs every planned name through
``run_kernel``; another carrier of this distribution may call a reference kernel for a name it
does not specialise, through ``run_kernel`` so refusals carry its own class name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import conveyor as cv
from conveyor_generic.kernels._common import (
    Array,
    Kernel,
    KernelIndexError,
    KernelValueError,
)
from conveyor_generic.kernels.contraction import CONTRACTION_KERNELS
from conveyor_generic.kernels.elementwise import BINARY_KERNELS, clamp, select
from conveyor_generic.kernels.indexing import INDEXING_KERNELS
from conveyor_generic.kernels.linalg import LINALG_KERNELS
from conveyor_generic.kernels.reductions import REDUCTION_KERNELS
from conveyor_generic.kernels.unary import UNARY_KERNELS

__all__ = ["KERNELS", "Kernel", "KernelIndexError", "KernelValueError", "run_kernel"]

KERNELS: dict[str, Kernel] = {
    **BINARY_KERNELS,
    **UNARY_KERNELS,
    "select": select,
    "clamp": clamp,
    **REDUCTION_KERNELS,
    **CONTRACTION_KERNELS,
    **INDEXING_KERNELS,
    **LINALG_KERNELS,
}
"""Every planned dispatch name -> its reference kernel."""


def run_kernel(
    carrier: type,
    plan: cv.OperationPlan,
    options: cv.OperationExecutionOptions,
    operands: Sequence[Any],
) -> Array | tuple[Array, ...]:
    """Run the reference kernel of ``plan.operation`` for ``carrier``.

    Raises:
        IndexError: an index or axis is out of range (message prefixed with the operation and
            ``carrier``'s name, per the error format); an axis raises NumPy's ``AxisError``.
        ValueError: operand shapes or option values do not fit.
    """
    name = plan.operation
    try:
        return KERNELS[name](plan, options, *operands)
    except KernelIndexError as exc:
        raise exc.public(f"{name} on {carrier.__name__}: {exc}") from None
    except KernelValueError as exc:
        raise ValueError(f"{name} on {carrier.__name__}: {exc}") from None
