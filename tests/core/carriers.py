"""Test-only carriers: the core is tested without any shipped carrier.

``ArrayCarrier`` is a small definition-free sibling carrier backed by a NumPy array; it counts
allocations and kernel entries so tests can prove that refusals happen before any work.
The other classes each misbehave in one specific way the dispatch contract must catch.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import conveyor as cv
from conveyor.types.policy import enumerate_plans

# Names ArrayCarrier implements, and the compute dtypes it advertises plans for.
ARRAY_NAMES = ("add", "mul", "neg", "exp", "reduce_sum", "matmul", "relu", "argmax")
ARRAY_DTYPES = (cv.float32, cv.float64, cv.int32, cv.int64)


class ArrayCarrier(cv.Carrier):
    """NumPy-backed storage with a handful of planned operations and their VJPs."""

    allocations: ClassVar[int] = 0
    kernel_entries: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.array = np.zeros(0, np.float32)
        self._dt = cv.float32

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> ArrayCarrier:
        cls.allocations += 1
        carrier = cls()
        carrier.array = np.zeros(size, dtype.numpy)
        carrier._dt = dtype
        return carrier

    def _storage_size(self) -> int:
        return int(self.array.size)

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _read(self, index: int) -> Any:
        return self.array[index].item()

    def _write(self, index: int, value: Any) -> None:
        self.array[index] = value

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        return _strided(self.array, layout).copy()

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        view = _strided(self.array, layout, writeable=True)
        view[...] = values

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in ARRAY_NAMES:
            return ArrayOperation()
        if operation_name in ("reshape", "view", "broadcast_to", "permute"):
            return ArrayView()
        return super()._dispatch_op(operation_name)


def _strided(array: np.ndarray[Any, Any], layout: cv.Layout, writeable: bool = False) -> Any:
    item = array.itemsize
    return np.lib.stride_tricks.as_strided(
        array[layout.offset :],
        shape=layout.shape,
        strides=tuple(s * item for s in layout.strides),
        writeable=writeable,
    )


def array_of(t: cv.Tensor) -> np.ndarray[Any, Any]:
    return t.numpy()


def from_array(values: np.ndarray[Any, Any], dtype: cv.DType) -> cv.Tensor:
    carrier = ArrayCarrier.allocate(values.size, dtype)
    carrier.array[...] = np.asarray(values, dtype.numpy).reshape(-1)
    return cv.Tensor(carrier, cv.Layout(values.shape))


_KERNELS: dict[str, Any] = {
    "add": np.add,
    "mul": np.multiply,
    "neg": np.negative,
    "exp": np.exp,
    "relu": lambda x: np.maximum(x, 0),
}


class ArrayOperation(cv.Operation):
    """Executes the accepted plan literally with NumPy (convert, compute, round once)."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        ArrayCarrier.kernel_entries += 1
        plan = self.plan
        assert plan is not None
        name = self._operation_name
        args = [
            np.asarray(x.numpy() if isinstance(x, cv.Tensor) else x, o.convert_to.numpy)
            for x, o in zip(inputs, plan.operands, strict=True)
        ]
        opts = options or cv.OperationExecutionOptions(name)
        if name == "reduce_sum":
            acc = plan.accumulator_dtype.numpy if plan.accumulator_dtype else None
            out = np.sum(args[0], axis=opts.axis, keepdims=opts.keepdims, dtype=acc)
        elif name == "matmul":
            out = np.matmul(args[0], args[1])
        elif name == "argmax":
            out = np.argmax(args[0], axis=opts.axis, keepdims=opts.keepdims)
        else:
            out = _KERNELS[name](*args)
        return from_array(np.asarray(out), plan.outputs[0])

    def backward(self, gradient: Any) -> tuple[cv.Tensor | None, ...]:
        inputs = self.saved_inputs
        name = self._operation_name
        g = gradient.numpy()
        tensors = [x for x in inputs if isinstance(x, cv.Tensor)]
        values = [x.numpy() for x in tensors]
        if name == "add":
            grads = [g for _ in tensors]
        elif name == "mul":
            a, b = (x.numpy() if isinstance(x, cv.Tensor) else x for x in inputs)
            full = [g * b, g * a]
            grads = [gr for gr, x in zip(full, inputs, strict=True) if isinstance(x, cv.Tensor)]
        elif name == "neg":
            grads = [-g]
        elif name == "exp":
            grads = [g * np.exp(values[0])]
        elif name == "relu":
            grads = [g * (values[0] > 0)]
        elif name == "reduce_sum":
            opts = self.options or cv.OperationExecutionOptions("reduce_sum")
            shape = values[0].shape
            if not opts.keepdims and opts.axis is not None:
                g = np.expand_dims(g, opts.axis)
            grads = [np.broadcast_to(g, shape)]
        elif name == "matmul":
            a, b = values
            grads = [g @ b.swapaxes(-1, -2), a.swapaxes(-1, -2) @ g]
        else:
            raise NotImplementedError(name)
        return tuple(
            from_array(np.asarray(gr), t.dtype) for gr, t in zip(grads, tensors, strict=True)
        )


class ArrayView(cv.Operation):
    """View names as layout algebra over the same carrier (no copy)."""

    def _forward(self, x: cv.Tensor, *, options: cv.OperationExecutionOptions | None) -> cv.Tensor:
        assert options is not None
        name = self._operation_name
        if name == "reshape":
            layout = x.layout.reshape(options.shape)
            assert layout is not None
        elif name == "view":
            layout = x.layout.index(options.key)
        elif name == "permute":
            layout = x.layout.permute(options.axes)
        else:
            layout = x.layout.broadcast_to(options.shape)
        self._input_shape = x.shape
        return cv.Tensor(x.carrier, layout)

    def backward(self, gradient: cv.Tensor) -> tuple[cv.Tensor | None, ...]:
        (x,) = self.saved_inputs
        name = self._operation_name
        g = gradient.numpy()
        if name == "reshape":
            out = g.reshape(x.shape)
        elif name == "permute":
            assert self.options is not None
            out = g.transpose(np.argsort(self.options.axes))
        elif name == "view":
            assert self.options is not None
            out = np.zeros(x.shape, g.dtype)
            out[self.options.key] = g
        else:
            out = g  # the engine sums broadcast gradients back to the input shape
        return (from_array(np.asarray(out), x.dtype),)


def _array_capabilities() -> list[cv.OperationCapability]:
    caps = []
    for name in ARRAY_NAMES:
        for plan in enumerate_plans(name):
            tensor_dtypes = [o.dtype for o in plan.operands if not o.weak]
            if plan.compute in ARRAY_DTYPES and all(d in ARRAY_DTYPES for d in tensor_dtypes):
                caps.append(cv.OperationCapability.from_plan(plan))
    return caps


cv.register_operation_capabilities(ArrayCarrier, _array_capabilities())


class NullCarrier(ArrayCarrier):
    """Same storage as ArrayCarrier, but its operations must never be entered.

    It advertises nothing (subclasses inherit no capabilities), so every planned call is refused.
    """


class CachingCarrier(ArrayCarrier):
    """A broken hook: returns the same operation object on every dispatch."""

    def __init__(self) -> None:
        super().__init__()
        self.cached = ArrayOperation()

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return self.cached


class WrongTypeCarrier(ArrayCarrier):
    """A broken hook: returns something that is not an Operation."""

    def _dispatch_op(self, operation_name: str) -> Any:
        return lambda *a: None


class CategoryCarrier(ArrayCarrier):
    """Storage whose logical dtype is an abstract category; counts capability lookups."""

    capability_lookups: ClassVar[int] = 0

    def _storage_dtype(self) -> cv.DType:
        return cv.floating

    def require_operation_plan(self, plan: cv.OperationPlan) -> None:
        CategoryCarrier.capability_lookups += 1
        super().require_operation_plan(plan)


class StorageOnlyCarrier(cv.Carrier):
    """A definition-backed carrier whose definition has storage and nothing else."""


cv.register_carrier_definition(StorageOnlyCarrier, cv.CarrierDefinition(storage=object()))
