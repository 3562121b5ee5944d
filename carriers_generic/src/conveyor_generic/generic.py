"""Generic: the closed reference carrier, straightforward NumPy that defines every operation.

Generic is the oracle every other carrier is tested against, so it favours clarity over speed:
each planned call reads its operands, runs the reference kernel of its name on the accepted
plan (``conveyor_generic.kernels``) and wraps the fresh result arrays. Gradients come from the
shared rules in ``conveyor.sdk.vjp``; views from ``conveyor_generic._views``.
"""

from __future__ import annotations

import typing
from typing import Any

import conveyor as cv
from conveyor.sdk import Tensor, VJPOperation, policy_capabilities
from conveyor_generic._storage import ArrayStorage
from conveyor_generic._views import VIEW_OPERATIONS
from conveyor_generic.kernels import KERNELS, run_kernel

__all__ = ["Generic"]


@typing.final
@cv.closed_carrier
class Generic(ArrayStorage):
    """The reference carrier: every planned name and the eight view names, in plain NumPy.

    Use it to check results, never for speed (``CPU`` is the performance sibling). Allocate
    with ``Generic.allocate(size, dtype)`` or name it: ``cv.tensor(data, carrier="generic")``.
    """


class GenericOperation(VJPOperation):
    """One planned call on Generic: reference kernel forward, shared VJP backward."""

    def _forward(
        self, *inputs: Any, options: cv.OperationExecutionOptions | None
    ) -> Tensor | tuple[Tensor, ...]:
        plan = self.plan
        name = self._operation_name
        assert plan is not None and name is not None  # planned and dispatched
        if options is None:
            options = cv.OperationExecutionOptions(name)
        operands = [x.numpy() if isinstance(x, Tensor) else x for x in inputs]
        result = run_kernel(Generic, plan, options, operands)
        if isinstance(result, tuple):
            return tuple(
                Generic.wrap(values, dtype)
                for values, dtype in zip(result, plan.outputs, strict=True)
            )
        return Generic.wrap(result, plan.outputs[0])


# Dispatch table: every name maps to a class, so each dispatch returns a fresh instance.
_OPERATIONS: dict[str, type[cv.Operation]] = {
    **{name: GenericOperation for name in KERNELS},
    **VIEW_OPERATIONS,
}
Generic._dispatch_classes = _OPERATIONS  # the declarative dispatch table (see Carrier._dispatch_op)

# Generic executes every plan the policy can resolve: each kernel handles every dtype its
# name accepts (half precision through float32 / float64, complex through complex128).
cv.register_operation_capabilities(Generic, policy_capabilities())
