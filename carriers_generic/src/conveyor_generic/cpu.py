"""CPU: the closed performance carrier, NumPy and BLAS kernels with no needless temporaries.

CPU has Generic's surface (every planned name and the eight view names) and executes every plan
the policy resolves, with kernels written for speed (``conveyor_generic.kernels.cpu_*``):
results go into fresh 64-byte aligned buffers with ``out=``, large elementwise work runs on one
thread per core, contractions go through BLAS. Gradients are the shared rules of
``conveyor.sdk.vjp``; views are the shared ``_views`` operations.

Per-call overhead matters for tiny tensors, so the hot path avoids re-deriving anything: each
name has its own operation class bound to its kernel, kernels memoise per-plan choices, a
carrier remembers the NumPy view of the last layout read, and result layouts are shared values.

Data moves to and from NumPy and PyTorch without copies: ``np.asarray(t)`` is a read-only view,
``from_dlpack`` wraps any DLPack producer's memory, and ``to_dlpack`` / the carrier's
``_dlpack`` hook export it.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, ClassVar, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import Tensor, VJPOperation, from_numpy, policy_capabilities, publish, wrap
from conveyor_generic._storage import ArrayStorage, strided_view
from conveyor_generic._views import VIEW_OPERATIONS
from conveyor_generic.kernels import KERNELS, KernelIndexError, KernelValueError
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels.cpu_contraction import CONTRACTION_KERNELS
from conveyor_generic.kernels.cpu_elementwise import ELEMENTWISE_KERNELS
from conveyor_generic.kernels.cpu_reductions import REDUCTION_KERNELS
from conveyor_generic.kernels.cpu_sorting import SORTING_KERNELS

__all__ = ["CPU", "from_dlpack", "run_cpu_kernel", "to_dlpack"]

_Array = np.ndarray[Any, Any]
_DLPACK_CPU: Final = (1, 0)  # (kDLCPU, device 0)


@typing.final
@cv.closed_carrier
class CPU(ArrayStorage):
    """The performance carrier: every planned name and the eight view names, tuned for speed.

    Results equal Generic's bit for bit for integer, bool, comparison, arithmetic, reduction,
    sorting and indexing plans; float32 / float64 transcendental functions and activations are
    within a few ulps (NumPy's SIMD loops, in-place formulas), and ``conv_general`` within a
    summation tolerance (another contraction order). Allocate with
    ``CPU.allocate(size, dtype)`` or by name: ``cv.tensor(data, carrier="cpu")`` (the default).
    """

    # (layout, NumPy view) of the last layout read by a kernel: a tuple, replaced atomically.
    _cached: tuple[cv.Layout | None, _Array | None] = (None, None)

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> CPU:
        if size == 0 and not kwargs:  # NumPy gives empty slices their base's address
            return cls._from_flat(rt.empty((0,), dtype.numpy, 0), dtype)
        return super()._allocate(size, dtype, **kwargs)

    @classmethod
    def wrap(cls, values: _Array, dtype: cv.DType) -> Tensor:
        """A result tensor owning a 64-byte aligned copy of ``values`` in ``dtype``.

        For copies outside the kernels (a view no layout expresses); kernel results are
        published by ``CPUOperation._forward``.
        """
        out = rt.empty(values.shape, dtype.numpy, values.size)
        np.copyto(out, values, casting="unsafe")
        tensor = super().wrap(out, dtype)
        if out.nbytes >= rt.POOL_MIN_BYTES:
            _watch(tensor._carrier, tensor._carrier._array)  # type: ignore[attr-defined]  # a CPU
        return tensor

    def _storage_mutable(self) -> bool:
        return bool(self._array.flags.writeable)

    def _release(self) -> None:
        self._cached = (None, None)  # the cached view would keep the buffer alive
        super()._release()

    # -- DLPack -------------------------------------------------------------------------------

    def _dlpack(
        self,
        layout: cv.Layout,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the slots under ``layout`` (the hook behind ``Tensor.__dlpack__``).

        Versioned consumers (``max_version >= (1, 0)``) get a read-only export, like
        ``np.asarray(tensor)``; legacy consumers cannot be told that, and get the memory as is.
        ``copy=True`` exports a fresh copy.

        Raises:
            BufferError: ``dl_device`` names another device, or the carrier was released.
        """
        if self._released:
            msg = "__dlpack__ on CPU: the carrier was released; export a live tensor"
            raise BufferError(msg)
        if dl_device is not None and tuple(dl_device) != _DLPACK_CPU:
            msg = (
                f"__dlpack__ on CPU: the data lives on the CPU (device {_DLPACK_CPU!r}), not "
                f"{dl_device!r}; move it with cv.move first"
            )
            raise BufferError(msg)
        view = strided_view(self._array, layout)
        if copy:
            view = view.copy()
        elif max_version is not None and tuple(max_version) >= (1, 0):
            view = view.view()
            view.flags.writeable = False
        return view.__dlpack__(stream=stream, max_version=max_version, copy=copy)

    def _dlpack_device(self) -> tuple[int, int]:
        """(device type, device id) of the data: always the host CPU."""
        return _DLPACK_CPU


def from_dlpack(source: Any) -> Tensor:
    """A CPU tensor over the memory of ``source`` without a copy (any DLPack producer).

    ``source`` is anything ``np.from_dlpack`` accepts: a NumPy array, a PyTorch CPU tensor, a
    capsule-exporting object. Writes through either side are visible to the other; a read-only
    export gives a read-only carrier.

    Raises:
        BufferError: ``source`` lives on another device or has a dtype NumPy cannot receive
            (bfloat16 through DLPack, for instance); move or cast it first.
        TypeError: ``source`` is not a DLPack producer.
    """
    if not hasattr(source, "__dlpack__"):
        msg = (
            f"from_dlpack: {type(source).__name__} is not a DLPack producer (no __dlpack__); "
            f"pass a NumPy array, a PyTorch CPU tensor or another DLPack exporter, or build "
            f"the tensor with cv.tensor(...)"
        )
        raise TypeError(msg)
    array = np.from_dlpack(source)
    dtype = from_numpy(array.dtype)
    item = array.itemsize
    if any(s % item for s in array.strides):
        array = np.ascontiguousarray(array)  # byte strides between elements: not expressible
    if array.flags.c_contiguous:
        flat = array.reshape(-1)
        return wrap(CPU._from_flat(flat, dtype), _layout(array.shape), dtype)
    strides = tuple(s // item for s in array.strides)
    forward = array[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in strides)]
    span = 1 + sum((e - 1) * abs(s) for e, s in zip(array.shape, strides, strict=True))
    if array.size == 0:
        span, forward = 0, np.empty(0, array.dtype)
    flat = np.lib.stride_tricks.as_strided(
        forward, (span,), (item,), writeable=array.flags.writeable
    )
    offset = sum((e - 1) * -s for e, s in zip(array.shape, strides, strict=True) if s < 0)
    layout = cv.Layout(array.shape, strides, offset if array.size else 0)
    return wrap(CPU._from_flat(flat, dtype), layout, dtype)


def to_dlpack(tensor: Tensor, *, max_version: tuple[int, int] | None = None) -> Any:
    """A DLPack capsule sharing ``tensor``'s memory (what ``torch.utils.dlpack`` calls that).

    It goes through ``Tensor.__dlpack__``, so a tensor that requires grad, or whose memory a
    live graph saved for backward, is exported as a copy: a legacy capsule cannot be marked
    read-only, and a write through shared memory would make backward silently wrong.

    Raises:
        TypeError: ``tensor`` is not a CPU tensor.
    """
    carrier = tensor.carrier if isinstance(tensor, Tensor) else None
    if not isinstance(carrier, CPU):
        msg = (
            f"to_dlpack: expected a Tensor on CPU, got {tensor!r}; move it with "
            f"cv.move(tensor, CPU) first"
        )
        raise TypeError(msg)
    return tensor.__dlpack__(max_version=max_version)


# -- operations ---------------------------------------------------------------------------------

# Result layouts are values: one shared Layout per result shape saves building one per call.
_LAYOUTS: dict[tuple[int, ...], cv.Layout] = {}
_LAYOUT_CACHE_MAX = 4096


def _layout(shape: tuple[int, ...]) -> cv.Layout:
    layout = _LAYOUTS.get(shape)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUT_CACHE_MAX:
            _LAYOUTS.clear()
        layout = _LAYOUTS[shape] = cv.Layout(shape)
    return layout


def _watch(carrier: Any, flat: _Array) -> None:
    """Give a pooled result buffer back to the runtime pool when its CPU carrier dies.

    A watch the carrier holds rather than ``__del__``, which would tax every tiny result's
    deallocation.
    """
    carrier._watch = rt.recycle_when_dead(carrier, flat)


_QUIET_SET, _QUIET_RESET, _QUIET = rt.QUIET_SWITCH.set, rt.QUIET_SWITCH.reset, rt.QUIET_VALUE


def _read(name: str, x: Tensor) -> _Array:
    """The NumPy view of a CPU tensor operand (cached per carrier for its last layout)."""
    carrier = x._carrier
    if carrier.__class__ is not CPU:
        msg = (
            f"{name} on CPU: operand lives on {type(carrier).__name__}, not CPU; move it with "
            f"cv.move(tensor, CPU) first"
        )
        raise TypeError(msg)
    assert isinstance(carrier, CPU)  # the exact class was checked just above
    layout = x._layout
    cached_layout, view = carrier._cached
    if cached_layout is layout and view is not None:
        return view
    if carrier.released:
        msg = f"{name} on CPU: the operand's carrier was released"
        raise RuntimeError(msg)
    view = strided_view(carrier._array, layout)
    carrier._cached = (layout, view)
    return view


class CPUOperation(VJPOperation):
    """One planned call on CPU: its name's kernel forward, the shared VJP backward."""

    _kernel: ClassVar[Callable[..., Any]]

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        plan = self.plan
        name = self._operation_name
        assert plan is not None and name is not None  # planned and dispatched
        # Each tensor operand's cached view of its layout, else _read builds (and caches) it.
        if len(inputs) == 2:  # unrolled: most calls are binary
            a, b = inputs
            if a.__class__ is Tensor:
                c = a._carrier
                if c.__class__ is CPU and c._cached[0] is a._layout:
                    a = c._cached[1]
                else:
                    a = _read(name, a)
            if b.__class__ is Tensor:
                c = b._carrier
                if c.__class__ is CPU and c._cached[0] is b._layout:
                    b = c._cached[1]
                else:
                    b = _read(name, b)
            arrays: Any = (a, b)
        elif len(inputs) == 1 and inputs[0].__class__ is Tensor:  # unary: the same shortcut
            (a,) = inputs
            c = a._carrier
            if c.__class__ is CPU and c._cached[0] is a._layout:
                arrays = (c._cached[1],)
            else:
                arrays = (_read(name, a),)
        else:
            arrays = [_read(name, x) if x.__class__ is Tensor else x for x in inputs]
        # Overflow, division by zero and NaN are values, not NumPy warnings (as on Generic):
        # the quiet error state is swapped in directly, no call of our own on the way.
        token = _QUIET_SET(_QUIET)
        try:
            result = self._kernel(plan, options, *arrays)
        except KernelIndexError as exc:
            raise exc.public(f"{name} on CPU: {exc}") from None
        except KernelValueError as exc:
            raise ValueError(f"{name} on CPU: {exc}") from None
        finally:
            _QUIET_RESET(token)
        if result.__class__ is tuple:
            return tuple(_publish(v, dtype) for v, dtype in zip(result, plan.outputs, strict=True))
        # _publish inlined: every planned call passes here, and one call is 5% of a tiny add.
        flat = result if result.ndim == 1 else result.reshape(-1)
        layout = _LAYOUTS.get(result.shape) or _layout(result.shape)
        dtype = plan.outputs[0]
        tensor = publish(
            CPU, {"_array": flat, "_dt": dtype, "_cached": (layout, result)}, layout, dtype
        )
        if flat.nbytes >= rt.POOL_MIN_BYTES:
            _watch(tensor._carrier, flat)
        return tensor


def _publish(values: _Array, dtype: cv.DType) -> Tensor:
    """A kernel's fresh, aligned, C-contiguous result as a CPU tensor, through the SDK's publish.

    The carrier caches the NumPy view of its layout, so the next operation reading the result
    skips building it; pooled buffers return to the pool when the carrier dies.
    """
    flat = values if values.ndim == 1 else values.reshape(-1)
    layout = _LAYOUTS.get(values.shape) or _layout(values.shape)
    tensor = publish(
        CPU, {"_array": flat, "_dt": dtype, "_cached": (layout, values)}, layout, dtype
    )
    if flat.nbytes >= rt.POOL_MIN_BYTES:
        _watch(tensor._carrier, flat)
    return tensor


def _reference(name: str) -> Callable[..., Any]:
    """A reference kernel for a name CPU does not specialise, copied into aligned buffers."""
    kernel = KERNELS[name]

    def run(plan: cv.OperationPlan, options: Any, *operands: Any) -> Any:
        if options is None:
            options = cv.OperationExecutionOptions(name)
        result = kernel(plan, options, *operands)
        if isinstance(result, tuple):
            return tuple(_aligned(values) for values in result)
        return _aligned(result)

    return run


def _aligned(values: _Array) -> _Array:
    out = rt.empty(values.shape, values.dtype, values.size)
    np.copyto(out, values)
    return out


_SPECIALISED: Final[dict[str, Callable[..., Any]]] = {
    **ELEMENTWISE_KERNELS,
    **REDUCTION_KERNELS,
    **SORTING_KERNELS,
    **CONTRACTION_KERNELS,
}


def _operation_class(name: str) -> type[cv.Operation]:
    kernel = _SPECIALISED.get(name) or _reference(name)
    return type(f"CPU_{name}", (CPUOperation,), {"_kernel": staticmethod(kernel)})


def _block_kernel(name: str) -> Callable[..., Any]:
    """CPU's kernel of ``name`` for blocks: the specialised one, else the reference kernel as is.

    Blocks go back to their caller, not into a CPU carrier, so the reference kernel's result
    needs no copy into an aligned buffer (``_reference`` makes that copy for CPU results).
    """
    return _SPECIALISED.get(name) or KERNELS[name]


def run_cpu_kernel(
    carrier: type,
    plan: cv.OperationPlan,
    options: cv.OperationExecutionOptions | None,
    operands: Any,
) -> Any:
    """Run CPU's kernel of ``plan.operation`` on NumPy operands, for ``carrier``.

    For sibling carriers that compute NumPy blocks (the Dask carrier's tasks): the plan runs as
    it runs on CPU (float32 natively where the plan computes in float32, with ``out=`` and no
    needless temporaries), where ``run_kernel`` runs the reference kernels' float64 widening
    path, 3-10x slower on float32. Results are Generic's within CPU's documented tolerances
    (see ``CPU``). Overflow and NaN are values, not warnings, as on CPU. The kernel runs on
    the calling thread with unpooled outputs (``cpu_runtime.blocks_on``): the caller runs one
    block per core and keeps the results.

    Raises:
        IndexError: an index or axis is out of range (message prefixed with the operation and
            ``carrier``'s name); an axis raises NumPy's ``AxisError``.
        ValueError: operand shapes or option values do not fit.
    """
    name = plan.operation
    if options is None:
        options = cv.OperationExecutionOptions(name)
    token = _QUIET_SET(_QUIET)
    mode = rt.blocks_on()  # no pooled outputs, no splitting across cores: see blocks_on
    try:
        return _block_kernel(name)(plan, options, *operands)
    except KernelIndexError as exc:
        raise exc.public(f"{name} on {carrier.__name__}: {exc}") from None
    except KernelValueError as exc:
        raise ValueError(f"{name} on {carrier.__name__}: {exc}") from None
    finally:
        rt.blocks_off(mode)
        _QUIET_RESET(token)


# Dispatch table: every name maps to a class, so each dispatch returns a fresh instance.
_OPERATIONS: Final[dict[str, type[cv.Operation]]] = {
    **{name: _operation_class(name) for name in KERNELS},
    **VIEW_OPERATIONS,
}
CPU._dispatch_classes = _OPERATIONS  # the declarative dispatch table (see Carrier._dispatch_op)

# CPU executes every plan the policy can resolve (half precision and complex64 through their
# wide work dtypes), so it declares all of them.
cv.register_operation_capabilities(CPU, policy_capabilities())
