"""Tensor: a view (carrier + flat strided layout) with autograd state, and its constructors.

A tensor owns no data: it names a carrier instance and a ``Layout`` into that carrier's buffer.
Every computation goes through a dispatched operation of the tensor's carrier (operator sugar
calls the public functions), so the tensor itself never computes and never picks a carrier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

from conveyor import dtypes
from conveyor.dtypes import DType
from conveyor.layout import Layout, normalize_axes

if TYPE_CHECKING:
    import numpy as np

    from conveyor.carrier import Carrier
    from conveyor.operation import Operation

__all__ = [
    "Subtensor",
    "Tensor",
    "arange",
    "empty",
    "full",
    "ones",
    "ones_like",
    "tensor",
    "zeros",
    "zeros_like",
]

DEFAULT_CARRIER = "cpu"


@final
class Subtensor:
    """One (carrier, layout) piece of a tensor. Shipped constructors make exactly one."""

    __slots__ = ("carrier", "layout")

    def __init__(self, carrier: Carrier, layout: Layout) -> None:
        self.carrier = carrier
        self.layout = layout

    def __repr__(self) -> str:
        return f"Subtensor({self.carrier!r}, {self.layout!r})"


@final
class Tensor:
    """An n-dimensional view of a carrier's buffer, with autograd state.

    ``Tensor(carrier, layout)`` wraps existing storage; the module-level constructors
    (``cv.tensor``, ``cv.zeros``, ...) allocate it.
    """

    __slots__ = (
        "__weakref__",
        "_carrier",
        "_dtype",
        "_grad_fn",
        "_layout",
        "_output_index",
        "_requires_grad",
        "grad",
    )

    _carrier: Carrier
    _layout: Layout
    _dtype: DType
    _grad_fn: Operation | None
    _output_index: int
    _requires_grad: bool
    grad: Tensor | None

    def __init__(
        self, carrier: Carrier, layout: Layout | None = None, *, requires_grad: bool = False
    ) -> None:
        from conveyor.carrier import Carrier

        if not isinstance(carrier, Carrier):
            msg = f"Tensor: carrier must be a Carrier instance, got {carrier!r}"
            raise TypeError(msg)
        if layout is None:
            layout = Layout((carrier.size,))
        elif not isinstance(layout, Layout):
            msg = f"Tensor: layout must be a conveyor.Layout, got {layout!r}"
            raise TypeError(msg)
        low, high = layout.span()
        if layout.size and (low < 0 or high > carrier.size):
            msg = (
                f"Tensor: layout reaches slots [{low}, {high}) outside the {carrier.size} slots "
                f"of {type(carrier).__name__}"
            )
            raise IndexError(msg)
        self._carrier = carrier
        self._layout = layout
        self._dtype = carrier.dtype
        self._grad_fn = None
        self._output_index = 0
        self._requires_grad = False
        self.grad = None
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, carrier: Carrier, layout: Layout, dtype: DType) -> Tensor:
        """Fast constructor for carriers that built a valid layout over their own buffer."""
        self = object.__new__(cls)
        self._carrier = carrier
        self._layout = layout
        self._dtype = dtype
        self._grad_fn = None
        self._output_index = 0
        self._requires_grad = False
        self.grad = None
        return self

    # -- structure ----------------------------------------------------------------------------

    @property
    def carrier(self) -> Carrier:
        return self._carrier

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def subtensors(self) -> tuple[Subtensor, ...]:
        return (Subtensor(self._carrier, self._layout),)

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._layout.shape

    @property
    def strides(self) -> tuple[int, ...]:
        return self._layout.strides

    @property
    def ndim(self) -> int:
        return len(self._layout.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._layout.size

    @property
    def version(self) -> int:
        """The carrier's write counter: it changes when any view of this storage is written."""
        return self._carrier.version

    def __len__(self) -> int:
        if not self._layout.shape:
            msg = "len() of a 0-d tensor"
            raise TypeError(msg)
        return self._layout.shape[0]

    def __repr__(self) -> str:
        carrier = type(self._carrier).__name__
        grad = ", requires_grad=True" if self._requires_grad else ""
        try:
            values = repr(self.numpy().tolist())
        except Exception:  # repr must not fail for released or exotic carriers
            values = "<unreadable>"
        return f"Tensor({values}, dtype={self._dtype.name}, carrier={carrier}{grad})"

    # -- autograd -----------------------------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self._grad_fn is not None:
            msg = "requires_grad can only be set on leaf tensors; use detach() for a new leaf"
            raise RuntimeError(msg)
        if value and not self._dtype.is_differentiable:
            msg = (
                f"only floating and complex tensors can require gradients, this one is "
                f"{self._dtype.name}"
            )
            raise RuntimeError(msg)
        self._requires_grad = bool(value)

    @property
    def autograd_ctx(self) -> Operation | None:
        """The operation that produced this tensor (``None`` for leaves)."""
        return self._grad_fn

    grad_fn = autograd_ctx

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after backward (leaves always keep it)."""
        op = self._grad_fn
        if op is not None:
            op._retained = {**op._retained, self._output_index: self}

    def backward(self, gradient: Tensor | None = None, *, retain_graph: bool = False) -> None:
        from conveyor.autograd import backward

        backward(self, gradient, retain_graph=retain_graph)

    def detach(self) -> Tensor:
        """The same storage as a new leaf that does not require grad."""
        return Tensor._wrap(self._carrier, self._layout, self._dtype)

    # -- data access --------------------------------------------------------------------------

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a NumPy array (read-only when it shares the carrier's memory)."""
        return self._carrier.export_span(self._layout)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        if copy:
            return array.copy()
        return array

    def __dlpack__(self, **kwargs: Any) -> Any:
        """Export through the carrier's ``_dlpack(layout, **kwargs)`` hook, when it has one.

        Zero-copy interchange is a carrier capability (only memory a consumer can address can be
        shared), so carriers without the hook refuse with ``BufferError`` like any producer.
        A tensor that requires grad, or whose storage a live graph saved for backward, is
        exported as a copy: consumers may ignore DLPack's read-only flag (PyTorch does), and a
        write through shared memory would bypass the version check and corrupt gradients.

        Raises:
            BufferError: the carrier cannot share memory, or ``copy=False`` was asked for a
                tensor that is part of a graph.
        """
        from conveyor.autograd import saved_for_backward

        carrier = type(self._carrier).__name__
        hook = getattr(self._carrier, "_dlpack", None)
        if hook is None:
            msg = (
                f"__dlpack__ on {carrier}: the carrier cannot share its "
                f"memory; use tensor.numpy() or cv.move the tensor to 'cpu'"
            )
            raise BufferError(msg)
        if self._requires_grad or saved_for_backward(self._carrier):
            if kwargs.get("copy") is False:
                msg = (
                    f"__dlpack__ on {carrier}: copy=False, but the tensor is part of an "
                    f"autograd graph and is only exported as a copy; pass copy=None or detach "
                    f"a clone first"
                )
                raise BufferError(msg)
            kwargs["copy"] = True
        return hook(self._layout, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        hook = getattr(self._carrier, "_dlpack_device", None)
        if hook is None:
            msg = f"__dlpack_device__ on {type(self._carrier).__name__}: no DLPack export"
            raise BufferError(msg)
        device: tuple[int, int] = hook()
        return device

    def item(self) -> Any:
        if self.size != 1:
            msg = f"item() needs a single-element tensor, this one has shape {self.shape}"
            raise ValueError(msg)
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def astype(self, dtype: DType | str) -> Tensor:
        """A copy converted to ``dtype`` (a DType or its name) on the same carrier class.

        NumPy casting rules apply.

        Complex to real keeps the real part, as NumPy does, but deliberately: no ComplexWarning.
        """
        import numpy as np

        target = _check_dtype(dtype)
        values = self.numpy()
        if self._dtype.is_complex and not target.is_complex:
            values = np.real(values)
        return _from_array(values.astype(target.numpy), target, type(self._carrier))

    def clone(self) -> Tensor:
        """A contiguous copy in fresh storage of the same carrier class."""
        return _from_array(self.numpy(), self._dtype, type(self._carrier))

    def __getitem__(self, key: Any) -> Tensor:
        from conveyor import functional as F

        return F.view(self, key=key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (broadcast) into the elements ``self[key]`` selects, in place.

        Refused for a leaf that requires grad and for views of one, as PyTorch does: the write
        would silently change what autograd differentiates.
        """
        import numpy as np

        from conveyor.options import OperationExecutionOptions

        if self._writes_into_grad_leaf():
            msg = (
                "cannot write in place into a leaf tensor that requires grad (or a view of "
                "one); write into leaf.detach() or build a new tensor"
            )
            raise RuntimeError(msg)
        key = OperationExecutionOptions("view", key=key).key  # the same key rules as indexing
        layout = self._layout.index(key)
        source = value.numpy() if isinstance(value, Tensor) else value
        values = np.broadcast_to(np.asarray(source, dtype=self._dtype.numpy), layout.shape)
        self._carrier.import_span(layout, values)

    def _writes_into_grad_leaf(self) -> bool:
        from conveyor.functional import VIEW_OPERATIONS

        t: Tensor | None = self
        while t is not None:
            op = t._grad_fn
            if op is None:
                return t._requires_grad
            if op._operation_name not in VIEW_OPERATIONS or not op._grad_inputs:
                return False
            t = op._grad_inputs[0]
        return False

    __hash__ = object.__hash__

    # -- operator sugar: each calls the public function of the same meaning -------------------

    def __add__(self, other: Any) -> Tensor:
        return _F.add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _F.add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _F.sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _F.sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _F.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _F.mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _F.div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _F.div(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _F.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _F.pow(other, self)

    def __mod__(self, other: Any) -> Tensor:
        return _F.rem(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return _F.rem(other, self)

    def __matmul__(self, other: Tensor) -> Tensor:
        return _F.matmul(self, other)

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return _F.matmul(other, self)

    def __neg__(self) -> Tensor:
        return _F.neg(self)

    def __abs__(self) -> Tensor:
        return _F.abs(self)

    def __invert__(self) -> Tensor:
        return _F.logical_not(self)

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]  # elementwise, as NumPy
        return _F.eq(self, other)

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]  # elementwise, as NumPy
        return _F.ne(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _F.lt(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _F.le(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _F.lt(other, self)

    def __ge__(self, other: Any) -> Tensor:
        return _F.le(other, self)

    # -- method forms of common functions -----------------------------------------------------

    def exp(self) -> Tensor:
        return _F.exp(self)

    def log(self) -> Tensor:
        return _F.log(self)

    def sqrt(self) -> Tensor:
        return _F.sqrt(self)

    def tanh(self) -> Tensor:
        return _F.tanh(self)

    def sigmoid(self) -> Tensor:
        return _F.sigmoid(self)

    def relu(self) -> Tensor:
        return _F.relu(self)

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _F.reduce_sum(self, axis=axis, keepdims=keepdims)

    def prod(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _F.reduce_prod(self, axis=axis, keepdims=keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _F.reduce_max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _F.reduce_min(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """``sum / count``: composed from planned operations, so it differentiates for free."""
        count = math.prod(self.shape[a] for a in normalize_axes(axis, self.ndim))
        return _F.div(self.sum(axis=axis, keepdims=keepdims), count)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _F.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return _F.argmin(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any) -> Tensor:
        target = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return _F.reshape(self, shape=tuple(target))

    def permute(self, *axes: Any) -> Tensor:
        order = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return _F.permute(self, axes=tuple(order))

    @property
    def T(self) -> Tensor:  # NumPy's name
        return _F.permute(self, axes=tuple(reversed(range(self.ndim))))

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return _F.broadcast_to(self, shape=tuple(shape))

    def squeeze(self, axes: int | Sequence[int] | None = None) -> Tensor:
        return _F.squeeze(self, axes=axes)

    def unsqueeze(self, axes: int | Sequence[int]) -> Tensor:
        return _F.unsqueeze(self, axes=axes)


# -- constructors ---------------------------------------------------------------------------


def _resolve_carrier(carrier: Any) -> type[Carrier]:
    from conveyor.carrier import Carrier

    if carrier is None:
        carrier = DEFAULT_CARRIER
    if isinstance(carrier, str):
        from conveyor import plugins

        resolved: type[Carrier] = plugins.host().carrier(carrier)
        return resolved
    if isinstance(carrier, type) and issubclass(carrier, Carrier):
        return carrier
    msg = (
        f"carrier must be a Carrier class or a registered carrier name (see `conveyor "
        f"carriers`), got {carrier!r} ({type(carrier).__name__})"
    )
    raise TypeError(msg)


def _from_array(values: np.ndarray[Any, Any], dtype: DType, cls: type[Carrier]) -> Tensor:
    carrier = cls.allocate(values.size, dtype)
    if values.size:
        carrier.import_span(Layout((values.size,)), values.reshape(-1))
    return Tensor._wrap(carrier, Layout(values.shape), dtype)


def _infer_dtype(data: Any, array: np.ndarray[Any, Any]) -> DType:
    import numpy as np

    if isinstance(data, np.ndarray | np.generic):
        return dtypes.from_numpy(array.dtype)
    # Python data: PyTorch's defaults (float32 for floats, int64 for ints).
    kind = array.dtype.kind
    if kind == "b":
        return dtypes.bool_
    if kind in "iu":
        return dtypes.default_int
    if kind == "f":
        return dtypes.default_float
    if kind == "c":
        return dtypes.complex64
    msg = f"cannot build a tensor from {type(data).__name__} data of NumPy kind {kind!r}"
    raise TypeError(msg)


def tensor(
    data: Any,
    dtype: DType | None = None,
    carrier: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor holding a copy of ``data`` (nested sequences, scalars, NumPy arrays, tensors).

    Args:
        dtype: the dtype to store; inferred like PyTorch when ``None``.
        carrier: a Carrier class or a registered name (``"cpu"``); default ``"cpu"``.
    """
    import numpy as np

    cls = _resolve_carrier(carrier)
    if isinstance(data, Tensor):
        data = data.numpy()
    if dtype is not None and _check_dtype(dtype).is_integer and not _is_numpy(data):
        # Built in the requested dtype directly: inferring first would round large Python
        # ints through float64 (2**64 - 1 became 0 in uint64).
        target = _check_dtype(dtype)
        array = _integer_array(data, target)
    else:
        array = np.asarray(data)
        target = _check_dtype(dtype) if dtype is not None else _infer_dtype(data, array)
    result = _from_array(np.asarray(array, dtype=target.numpy), target, cls)
    if requires_grad:
        result.requires_grad = True
    return result


def _is_numpy(data: Any) -> bool:
    import numpy as np

    return isinstance(data, np.ndarray | np.generic)


def _integer_array(data: Any, target: DType) -> np.ndarray[Any, Any]:
    """Python data as an array of the integer dtype ``target``; a value that does not fit is
    refused (``OverflowError`` naming it and the dtype) instead of wrapping or rounding."""
    import numpy as np

    try:
        return np.asarray(data, dtype=target.numpy)
    except OverflowError as exc:
        info = np.iinfo(target.numpy)
        values = np.asarray(data, dtype=object).reshape(-1)
        bad = next((v for v in values if not info.min <= v <= info.max), None)
        msg = (
            f"tensor: value {bad!r} does not fit in {target.name} (range [{info.min}, "
            f"{info.max}]); pass a wider dtype or change the value"
        )
        raise OverflowError(msg) from exc


def _check_dtype(dtype: Any) -> DType:
    if not isinstance(dtype, DType):
        return dtypes.dtype(dtype)
    if dtype.is_abstract:
        msg = f"{dtype.name} is an abstract dtype category; tensors need a concrete dtype"
        raise TypeError(msg)
    return dtype


def _shape(shape: Any) -> tuple[int, ...]:
    return Layout(shape).shape


def full(
    shape: Sequence[int] | int,
    fill_value: Any,
    dtype: DType | None = None,
    carrier: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (dtype inferred from it when ``None``)."""
    import numpy as np

    dims = _shape(shape)
    target = (
        _check_dtype(dtype)
        if dtype is not None
        else _infer_dtype(fill_value, np.asarray(fill_value))
    )
    values = np.full(dims, fill_value, dtype=target.numpy)
    result = _from_array(values, target, _resolve_carrier(carrier))
    if requires_grad:
        result.requires_grad = True
    return result


def zeros(
    shape: Sequence[int] | int,
    dtype: DType | None = None,
    carrier: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """A zero-filled tensor (``float32`` by default); allocation already zero-fills."""
    dims = _shape(shape)
    target = _check_dtype(dtype) if dtype is not None else dtypes.default_float
    storage = _resolve_carrier(carrier).allocate(math.prod(dims), target)
    result = Tensor._wrap(storage, Layout(dims), target)
    if requires_grad:
        result.requires_grad = True
    return result


empty = zeros  # storage is always zero-filled, so "uninitialised" costs nothing extra


def ones(
    shape: Sequence[int] | int,
    dtype: DType | None = None,
    carrier: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    return full(shape, 1, dtype or dtypes.default_float, carrier, requires_grad=requires_grad)


def zeros_like(t: Tensor) -> Tensor:
    return zeros(t.shape, t.dtype, type(t.carrier))


def ones_like(t: Tensor) -> Tensor:
    return full(t.shape, 1, t.dtype, type(t.carrier))


def arange(
    start: int | float,
    stop: int | float | None = None,
    step: int | float = 1,
    dtype: DType | None = None,
    carrier: Any = None,
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, like ``numpy.arange``."""
    import numpy as np

    if stop is None:
        start, stop = 0, start
    values = np.arange(start, stop, step)
    target = _check_dtype(dtype) if dtype is not None else _infer_dtype(values.tolist(), values)
    return _from_array(values.astype(target.numpy), target, _resolve_carrier(carrier))


from conveyor import functional as _F  # noqa: E402  # operator sugar; functional imports Tensor
