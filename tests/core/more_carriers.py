"""More test-only carriers: custom (unplanned) operations and a dependent carrier that counts.

``ProbeCarrier`` stores like ``ArrayCarrier`` and adds a few custom dispatch names whose
``backward`` misbehaves in one specific way, so tests can check what the autograd engine does
with what a backward returns. ``CountingDependent`` is a ``DependentCarrier`` whose capability
computation counts its calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import conveyor as cv
from conveyor.types.policy import enumerate_plans
from tests.core.carriers import ArrayCarrier

# Custom names: none is in the dtype-policy registry, so forward runs no plan preflight.
PROBE_NAMES = ("scale", "pair_sum", "bad_count", "bad_item", "bad_container", "fail_forward")


def probe_tensor(values: Any, dtype: cv.DType) -> cv.Tensor:
    """A contiguous tensor on a fresh ``ProbeCarrier`` holding ``values``."""
    return cv.tensor(np.asarray(values), dtype=dtype, carrier=ProbeCarrier)


class ProbeCarrier(ArrayCarrier):
    """ArrayCarrier storage with custom operations; advertises no planned capability."""

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in PROBE_NAMES:
            return ProbeOperation()
        return super()._dispatch_op(operation_name)


class ProbeOperation(cv.Operation):
    """``scale``: 3 * x. ``pair_sum``: a + b in the wider dtype. The ``bad_*`` names misbehave.

    ``scale`` and ``pair_sum`` return their gradients in the *output's* dtype and shape, leaving
    the conversion back to each input's dtype to the engine.
    """

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        name = self._operation_name
        if name == "fail_forward":
            msg = "fail_forward always fails"
            raise ArithmeticError(msg)
        if name == "pair_sum":
            a, b = inputs
            dtype = cv.promote_types(a.dtype, b.dtype)
            return probe_tensor(a.numpy().astype(dtype.numpy) + b.numpy(), dtype)
        (x,) = inputs
        return probe_tensor(3 * x.numpy(), x.dtype)

    def backward(self, gradient: Any) -> Any:
        name = self._operation_name
        g = gradient.numpy()
        if name == "pair_sum":
            return (probe_tensor(g, gradient.dtype), probe_tensor(g, gradient.dtype))
        if name == "bad_count":
            return (probe_tensor(3 * g, gradient.dtype), None)
        if name == "bad_item":
            return (3 * g,)
        if name == "bad_container":
            return {"input": probe_tensor(3 * g, gradient.dtype)}
        return (probe_tensor(3 * g, gradient.dtype),)


class CountingDependent(cv.DependentCarrier):
    """A dependent carrier advertising ``capabilities``; counts its capability computations."""

    def __init__(self, capabilities: list[cv.OperationCapability] | None = None) -> None:
        super().__init__()
        self.capabilities = capabilities if capabilities is not None else []
        self.computations = 0

    def _compute_operation_capabilities(self) -> list[cv.OperationCapability]:
        self.computations += 1
        return self.capabilities


# NumPy meaning of every name Tensor's operator sugar can reach.
REFERENCE_KERNELS: dict[str, Any] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "rem": np.remainder,
    "matmul": np.matmul,
    "neg": np.negative,
    "abs": np.abs,
    "logical_not": np.logical_not,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
}


class ReferenceCarrier(ArrayCarrier):
    """ArrayCarrier storage whose planned operations are the plain NumPy functions above.

    It advertises every plan of those names, converts operands as the plan says and returns the
    plan's output dtype, so operator sugar can be compared with NumPy's operators.
    """

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in REFERENCE_KERNELS:
            return ReferenceOperation()
        return super()._dispatch_op(operation_name)


class ReferenceOperation(cv.Operation):
    """Runs the NumPy kernel of its dispatch name on the plan's converted operands."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        plan = self.plan
        assert plan is not None  # every reference name is planned
        args = [
            np.asarray(x.numpy() if isinstance(x, cv.Tensor) else x, o.convert_to.numpy)
            for x, o in zip(inputs, plan.operands, strict=True)
        ]
        out = np.asarray(REFERENCE_KERNELS[str(self._operation_name)](*args))
        dtype = plan.outputs[0]
        return cv.tensor(out.astype(dtype.numpy), dtype=dtype, carrier=ReferenceCarrier)


cv.register_operation_capabilities(
    ReferenceCarrier,
    [
        cv.OperationCapability.from_plan(plan)
        for name in REFERENCE_KERNELS
        for plan in enumerate_plans(name)
    ],
)
