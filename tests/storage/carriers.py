"""Test-only carriers for the storage tests: tiers that fail in one specific way.

``FlakySecondary`` writes half of a span and then fails, like a disk that dies mid-write.
``NarrowSecondary`` declares that it cannot store 64-bit floats, so an Evictable over it must
not advertise plans that produce them.
"""

from __future__ import annotations

import errno
from typing import Any, ClassVar

import numpy as np

import conveyor as cv
from tests.core.carriers import ArrayCarrier


class FlakySecondary(ArrayCarrier):
    """NumPy storage whose bulk writes fail half-way while ``failing`` is set."""

    failing: ClassVar[bool] = True

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        if not type(self).failing:
            super()._import(layout, values)
            return
        half = layout.size // 2
        flat = np.asarray(values).reshape(-1)
        if layout.is_contiguous and half:
            super()._import(cv.Layout((half,), None, layout.offset), flat[:half])
        raise OSError(errno.EIO, "simulated media error half-way through the write")


class NarrowSecondary(ArrayCarrier):
    """NumPy storage that declares it stores everything except float64 and complex128."""

    storable_dtypes: ClassVar[frozenset[cv.DType]] = frozenset(
        d for d in (cv.float32, cv.int32, cv.int64, cv.bool, cv.float16)
    )


class ScarcePrimary(ArrayCarrier):
    """NumPy storage whose allocation fails with MemoryError while ``exhausted`` is set."""

    exhausted: ClassVar[bool] = False

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> ArrayCarrier:
        if cls.exhausted:
            msg = "simulated out-of-memory while allocating the primary"
            raise MemoryError(msg)
        return super()._allocate(size, dtype, **kwargs)


# Custom (unplanned) names whose backward misbehaves in one specific way each.
PROBE_NAMES = ("first_none", "too_many", "not_tensor", "foreign", "twice")


class ProbePrimary(ArrayCarrier):
    """ArrayCarrier with custom two-operand sums whose backward returns odd gradients."""

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in PROBE_NAMES:
            return ProbeSum()
        return super()._dispatch_op(operation_name)


class ProbeSum(cv.Operation):
    """``a + b``; backward: ``first_none`` -> (None, g), ``too_many`` -> three gradients,
    ``not_tensor`` -> NumPy arrays, ``foreign`` -> a tensor of another class, ``twice`` -> the
    incoming gradient itself for both inputs."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        a, b = inputs
        total = a.numpy() + b.numpy()
        carrier = ProbePrimary.allocate(total.size, a.dtype)
        carrier.array[...] = total.reshape(-1)
        return cv.Tensor(carrier, cv.Layout(total.shape))

    def backward(self, gradient: Any) -> Any:
        self.saved_inputs  # noqa: B018  # the version check, as every real backward does
        name = self._operation_name
        if name == "first_none":
            return (None, gradient)
        if name == "too_many":
            return (gradient, gradient, gradient)
        if name == "not_tensor":
            return (gradient.numpy(), gradient.numpy())
        if name == "foreign":
            return (cv.Tensor(ArrayCarrier.allocate(gradient.size, gradient.dtype)), None)
        return (gradient, gradient)
