"""Metal: the closed Apple-GPU carrier, every advertised plan run by a TileLang kernel.

A Metal carrier owns one private MPS buffer (a flat torch tensor on ``mps``). Each planned
call passes the central capability gate (the base ``Operation`` does it before ``_forward``,
so nothing is compiled or launched for a refused plan), then the engine finds the kernel for
(plan, layout class) in its cache or lowers it with ``target="metal"``, and launches it with
``torch.mps.compile_shader`` with arguments bound by name. Strided and broadcast operands are
read in place through their strides. The eight view names are layout algebra on the same
buffer. Gradients are the shared rules of ``conveyor.sdk.vjp``.

torch and tilelang are imported only when a Metal carrier is first allocated or a kernel
first runs; importing this module stays cheap.
"""

from __future__ import annotations

import threading
import typing
from typing import TYPE_CHECKING, Any, Final

import conveyor as cv
from conveyor.sdk import Tensor, VJPOperation, wrap
from conveyor_metal._platform import REASON, unavailable_reason
from conveyor_metal._storage import TorchStorage
from conveyor_metal._surface import FAMILIES, advertised_capabilities
from conveyor_metal._views import VIEW_OPERATIONS

if TYPE_CHECKING:
    from conveyor_metal._engine import Engine

__all__ = ["Metal"]


@typing.final
@cv.closed_carrier
class Metal(TorchStorage):
    """The Apple-GPU carrier: the advertised plans (``conveyor carriers``) and the view names.

    Allocate with ``Metal.allocate(size, dtype)`` or by name: ``cv.tensor(data,
    carrier="metal")``, on macOS arm64 with MPS. float64 and complex cannot be stored (Metal
    has no double precision); move such data to ``"cpu"``.
    """

    _device = "mps"

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Metal:
        reason = _device_reason()
        if reason is not None:
            msg = f"allocate on Metal: {reason}; use carrier 'cpu' on this machine"
            raise RuntimeError(msg)
        return super()._allocate(size, dtype, **kwargs)


def _device_reason() -> str | None:
    """Why no MPS device is usable here, or ``None`` (imports torch on macOS arm64 only)."""
    reason = unavailable_reason()
    if reason is not None:
        return reason
    import torch

    return None if torch.backends.mps.is_available() else f"{REASON} (torch sees no MPS device)"


_ENGINE: list[Engine] = []
_ENGINE_LOCK: Final = threading.Lock()


def _engine() -> Engine:
    """The process-wide Metal engine (one kernel cache), made on first use."""
    if not _ENGINE:
        with _ENGINE_LOCK:
            if not _ENGINE:
                from conveyor_metal._engine import Engine
                from conveyor_metal._launch import MetalLauncher

                _ENGINE.append(Engine("mps", MetalLauncher()))
    return _ENGINE[0]


class MetalOperation(VJPOperation):
    """One planned call on Metal: a TileLang kernel forward, the shared VJP backward."""

    def _forward(
        self, *inputs: Any, options: cv.OperationExecutionOptions | None
    ) -> Tensor | tuple[Tensor, ...]:
        from conveyor_metal._calls import run_plan

        plan = self.plan
        name = self._operation_name
        assert plan is not None and name is not None  # planned and dispatched
        if options is None:
            options = cv.OperationExecutionOptions(name)
        results = run_plan(_engine(), plan, options, inputs, "Metal")
        tensors = tuple(
            wrap(Metal._from_buffer(buffer, dtype), layout, dtype)
            for (buffer, layout), dtype in zip(results, plan.outputs, strict=True)
        )
        return tensors if len(tensors) > 1 else tensors[0]


# Dispatch table: every name maps to a class, so each dispatch returns a fresh instance.
# The declarative dispatch table (see Carrier._dispatch_op); it also binds the public
# functions' fast path, as on CPU.
Metal._dispatch_classes = {
    **{name: MetalOperation for name in FAMILIES},
    **VIEW_OPERATIONS,
}

# Metal advertises exactly what its kernels implement (``_surface``), once, sealed.
cv.register_operation_capabilities(Metal, advertised_capabilities())
