"""VendorNumpy: a definition-backed carrier covering every planned name with one kernel pattern.

Storage is one flat NumPy array per carrier. Every planned name gets the same kernel: it reads
the operands through the span contract, runs the name's reference kernel
(``conveyor_generic.kernels.run_kernel``) on the accepted plan and writes each result into a
freshly allocated result. Views, indexing, assignment and moves (through the generic bulk span
path) need nothing more; gradients are the central VJPs.
"""

import numpy as np

import conveyor as cv
from conveyor.types.policy import enumerate_plans, registered_operations
from conveyor_generic.kernels import run_kernel


def _strided(handle, layout):
    item = handle.itemsize
    return np.ndarray(
        layout.shape,
        handle.dtype,
        buffer=handle,
        offset=layout.offset * item,
        strides=tuple(s * item for s in layout.strides),
    )


class VendorStorage(cv.StorageProvider):
    """Slots in a flat NumPy array per carrier; every concrete dtype."""

    def supports_dtype(self, dtype):
        return not dtype.is_abstract

    def physical_size(self, size, dtype):
        return size * np.dtype(dtype.numpy).itemsize

    def allocate(self, size, dtype, **options):
        return np.zeros(size, dtype.numpy)

    def release(self, handle):
        pass

    def read(self, handle, index):
        return handle[index].item()

    def write(self, handle, index, value):
        handle[index] = value

    def export_span(self, handle, layout, dtype):
        if layout.size == 0:
            return np.zeros(layout.shape, handle.dtype)
        return _strided(handle, layout).copy()

    def import_span(self, handle, layout, dtype, values):
        if layout.size:
            _strided(handle, layout)[...] = values


def kernel(ctx):
    """The one kernel pattern, for every planned name."""
    invocation = ctx.invocation
    options = invocation.options or cv.OperationExecutionOptions(invocation.operation)
    operands = [x.numpy() if isinstance(x, cv.Tensor) else x for x in ctx.operands]
    values = run_kernel(VendorNumpy, invocation.plan, options, operands)
    outputs = []
    for i, array in enumerate(values if isinstance(values, tuple) else (values,)):
        out = ctx.allocate_result(i)
        out.carrier.import_span(out.layout, np.asarray(array).reshape(out.shape))
        outputs.append(out)
    return cv.ProviderResult(outputs)


class VendorNumpy(cv.Carrier):
    """The test vendor's carrier: open, definition-backed."""


cv.register_carrier_definition(
    VendorNumpy,
    cv.CarrierDefinition(
        storage=VendorStorage(),
        kernels=cv.KernelProvider(
            [
                cv.KernelPattern(operation=name, kernel=kernel, plans=enumerate_plans(name))
                for name in registered_operations()
            ]
        ),
    ),
)
