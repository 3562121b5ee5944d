"""An einops backend for Conveyor tensors, defined once einops loads its backends module.

einops finds a backend among the subclasses of ``einops._backends.AbstractBackend`` whose
``framework_name`` module is imported, so ``einops.rearrange(t, ...)`` works once such a
subclass exists; ``conveyor.lib.einops_hook`` calls ``define`` at the right moment. Every method
is a public Conveyor function, so rearrangements stay views where a layout can express them and
run on the tensor's own carrier.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, arange
from conveyor.lib import composed as C

__all__ = ["define"]

_DEFINED: dict[str, type] = {}  # einops keeps its subclasses weakly: this keeps ours alive


def define(backends: ModuleType) -> None:
    """Define the backend class on ``backends`` (einops' module), once."""
    if "backend" in _DEFINED:
        return
    base: Any = backends.AbstractBackend

    class ConveyorBackend(base):  # type: ignore[misc]  # einops ships no types for its base
        """einops' operations as Conveyor functions."""

        framework_name = "conveyor"

        def is_appropriate_type(self, tensor: object) -> bool:
            return isinstance(tensor, Tensor)

        def from_numpy(self, x: Any) -> Tensor:
            return C.from_numpy(x)

        def to_numpy(self, x: Tensor) -> Any:
            return x.numpy()

        def arange(self, start: int, stop: int) -> Tensor:
            return arange(start, stop)

        def reshape(self, x: Tensor, shape: Sequence[int]) -> Tensor:
            return F.reshape(x, shape=tuple(shape))

        def transpose(self, x: Tensor, axes: Sequence[int]) -> Tensor:
            return F.permute(x, axes=tuple(axes))

        def reduce(self, x: Tensor, operation: str, axes: Sequence[int]) -> Tensor:
            reductions = {
                "sum": F.reduce_sum,
                "prod": F.reduce_prod,
                "max": F.reduce_max,
                "min": F.reduce_min,
                "mean": C.mean,
                "any": C.any,
                "all": C.all,
            }
            if operation not in reductions:
                msg = (
                    f"einops reduce on {type(x.carrier).__name__}: unknown reduction {operation!r}"
                )
                raise NotImplementedError(msg)
            result: Tensor = reductions[operation](x, axis=tuple(axes))
            return result

        def stack_on_zeroth_dimension(self, tensors: list[Tensor]) -> Tensor:
            return C.stack(tensors, axis=0)

        def add_axis(self, x: Tensor, new_position: int) -> Tensor:
            return F.unsqueeze(x, axes=(new_position,))

        def add_axes(self, x: Tensor, n_axes: int, pos2len: dict[int, int]) -> Tensor:
            shape = []
            for position in sorted(pos2len):
                x = F.unsqueeze(x, axes=(position,))
            for axis in range(n_axes):
                shape.append(pos2len.get(axis, x.shape[axis]))
            return F.broadcast_to(x, shape=tuple(shape))

        def tile(self, x: Tensor, repeats: Sequence[int]) -> Tensor:
            return C.tile(x, tuple(repeats))

        def concat(self, tensors: list[Tensor], axis: int) -> Tensor:
            return C.concatenate(tensors, axis=axis)

        def is_float_type(self, x: Tensor) -> bool:
            return x.dtype.is_floating

        def einsum(self, pattern: str, *x: Tensor) -> Tensor:
            return C.einsum(pattern, *x)

    _DEFINED["backend"] = ConveyorBackend
