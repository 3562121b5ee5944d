"""A definition-backed test carrier that runs every planned name through one kernel pattern.

``ReferenceVendor`` keeps its slots in NumPy arrays (a ``StorageProvider``) and advertises every
plan of every planned name; its one kernel reads the operands through the span contract, runs
Generic's reference kernel of the invocation's plan and imports the results. Everything around
that kernel — binding, result shapes, refusals, views, gradients — is the central definitions',
so comparing it with Generic checks the central definitions, not the arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor.types.policy import enumerate_plans, registered_operations
from conveyor_generic.kernels import run_kernel

__all__ = ["ReferenceVendor", "reference_kernels"]


def _strided(handle: np.ndarray[Any, Any], layout: cv.Layout) -> np.ndarray[Any, Any]:
    item = handle.itemsize
    return np.ndarray(
        layout.shape,
        handle.dtype,
        buffer=handle,
        offset=layout.offset * item,
        strides=tuple(s * item for s in layout.strides),
    )


class _ArrayStorage(cv.StorageProvider):
    """Slots in one flat NumPy array per carrier."""

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return not dtype.is_abstract

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return size * np.dtype(dtype.numpy).itemsize

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Any:
        return np.zeros(size, dtype.numpy)

    def release(self, handle: Any) -> None:
        """The array goes with its last reference."""

    def read(self, handle: Any, index: int) -> Any:
        return handle[index].item()

    def write(self, handle: Any, index: int, value: Any) -> None:
        handle[index] = value

    def export_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType) -> Any:
        if layout.size == 0:
            return np.zeros(layout.shape, handle.dtype)
        return _strided(handle, layout).copy()

    def import_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType, values: Any) -> None:
        if layout.size:
            _strided(handle, layout)[...] = values


def _kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    """The one kernel: Generic's reference kernel of the plan, over exported operands."""
    invocation = ctx.invocation
    plan = invocation.plan
    assert plan is not None  # every pattern here is of a planned name
    options = invocation.options or cv.OperationExecutionOptions(invocation.operation)
    operands = [x.numpy() if isinstance(x, cv.Tensor) else x for x in ctx.operands]
    values = run_kernel(type(ctx.carrier), plan, options, operands)
    arrays = values if isinstance(values, tuple) else (values,)
    outputs = []
    for i, array in enumerate(arrays):
        out = ctx.allocate_result(i)
        out.carrier.import_span(out.layout, np.asarray(array, out.dtype.numpy).reshape(out.shape))
        outputs.append(out)
    return cv.ProviderResult(outputs)


def reference_kernels() -> cv.KernelProvider:
    """One pattern per planned name, each listing every plan the policy resolves."""
    return cv.KernelProvider(
        [
            cv.KernelPattern(operation=name, kernel=_kernel, plans=enumerate_plans(name))
            for name in registered_operations()
        ]
    )


class ReferenceVendor(cv.Carrier):
    """A sibling carrier whose whole surface comes from the central definitions."""


cv.register_carrier_definition(
    ReferenceVendor, cv.CarrierDefinition(storage=_ArrayStorage(), kernels=reference_kernels())
)
