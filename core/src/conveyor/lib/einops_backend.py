"""An einops backend for Conveyor tensors, registered the way einops discovers backends.

einops finds a backend among the subclasses of ``einops._backends.AbstractBackend`` whose
``framework_name`` module is imported, so ``einops.rearrange(t, ...)`` works once such a
subclass exists. ``install()`` (called by ``import conveyor``) defines it at once when einops
is already imported, and otherwise right after einops imports its backends module, through a
one-shot import hook, so neither import order nor an einops import at ``import conveyor`` time
(it is optional) is needed. Every method is a public Conveyor function, so rearrangements
stay views where a layout can express them and run on the tensor's own carrier.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, arange
from conveyor.lib import composed as C

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec

__all__ = ["install"]

_MODULE: Final = "einops._backends"
_DEFINED: dict[str, type] = {}  # einops keeps its subclasses weakly: this keeps ours alive


def _define(backends: ModuleType) -> None:
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


# The hook's two classes follow importlib's finder and loader protocols without subclassing
# importlib.abc, whose import (through importlib.resources) would cost every `import conveyor`
# about a tenth of a second.


class _Loader:
    """einops' own loader for its backends module, defining ours right after it runs."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _define(module)


class _AfterEinops:
    """A one-shot hook: finds einops' backends module with the other finders, wraps its loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        import importlib.util  # 0.6 ms: only once einops imports its backends

        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]  # a Loader by protocol
        return spec


def install() -> None:
    """Make einops recognise Conveyor tensors, now or when einops is first imported."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        _define(loaded)
    elif not any(isinstance(finder, _AfterEinops) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterEinops())
