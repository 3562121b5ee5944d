"""Tensor: a view (carrier + flat strided layout) with autograd state, and its constructors.

A tensor owns no data: it names a carrier instance and a ``Layout`` into that carrier's buffer.
Every computation goes through a dispatched operation of the tensor's carrier (operator sugar
calls the public functions), so the tensor itself never computes and never picks a carrier.
"""

from __future__ import annotations

import builtins  # Tensor's float() and int() methods shadow the names in its class body
import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, final

from conveyor.engine import library as _library
from conveyor.engine.grad_mode import is_grad_enabled as _grad_enabled
from conveyor.engine.grad_mode import saved_for_backward
from conveyor.engine.plugin_access import default_host
from conveyor.types import dtypes
from conveyor.types.dtypes import DType
from conveyor.types.layout import Layout, normalize_axes, normalize_axis
from conveyor.types.options import OperationExecutionOptions

if TYPE_CHECKING:
    import numpy as np

    from conveyor.engine.operation import Operation

__all__ = [
    "Subtensor",
    "Tensor",
    "arange",
    "default_carrier",
    "empty",
    "full",
    "get_default_carrier",
    "ones",
    "ones_like",
    "set_default_carrier",
    "tensor",
    "zeros",
    "zeros_like",
]

DEFAULT_CARRIER = "cpu"

# -- the default carrier and the composed-function table ---------------------------------------

_default_carrier: Any = DEFAULT_CARRIER

# Kinds in promotion order: an in-place write may not move a result down this order.
_KIND_RANK = {
    "bool": 0,
    "unsigned_integer": 1,
    "signed_integer": 1,
    "floating": 2,
    "complex_floating": 3,
}
_DTYPE_NAMES = frozenset(d.name for d in dtypes.CONCRETE_DTYPES)
_PLAIN_SCALARS = frozenset({bool, int, float, complex, type(None)})


def get_default_carrier() -> Any:
    """The carrier (name or class) constructors use when none is given."""
    return _default_carrier


def set_default_carrier(carrier: Any) -> None:
    """Make ``carrier`` (a registered name or a Carrier class) the constructors' default.

    Raises:
        TypeError, ValueError: ``carrier`` is not a carrier class or names no installed carrier
            (nothing is changed).
    """
    global _default_carrier
    _resolve_carrier(carrier)
    _default_carrier = carrier


@contextlib.contextmanager
def default_carrier(carrier: Any) -> Iterator[Any]:
    """Use ``carrier`` as the default inside the ``with`` block, then restore the previous one."""
    global _default_carrier
    previous = _default_carrier
    set_default_carrier(carrier)
    try:
        yield carrier
    finally:
        _default_carrier = previous


@final
class Subtensor:
    """One (carrier, layout) piece of a tensor. Shipped constructors make exactly one."""

    __slots__ = ("carrier", "layout")

    def __init__(self, carrier: Carrier, layout: Layout) -> None:
        self.carrier = carrier
        self.layout = layout

    def __repr__(self) -> str:
        return f"Subtensor({self.carrier!r}, {self.layout!r})"


# ``Tensor.T``'s axes for the usual ranks, built once (it runs in every matmul backward).
_REVERSED_AXES = tuple(tuple(range(n - 1, -1, -1)) for n in range(8))


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
        "_grad",
        "_grad_fn",
        "_layout",
        "_output_index",
        "_requires_grad",
    )

    _carrier: Carrier
    _layout: Layout
    _dtype: DType
    _grad_fn: Operation | None
    _output_index: int
    _requires_grad: bool
    _grad: Tensor | None

    def __init__(
        self, carrier: Carrier, layout: Layout | None = None, *, requires_grad: bool = False
    ) -> None:
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
        self._grad = None
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, carrier: Carrier, layout: Layout, dtype: DType) -> Tensor:
        """Fast constructor for carriers that built a valid layout over their own buffer.

        Nothing is checked: ``layout`` lies within ``carrier``'s slots and ``dtype`` is its
        dtype. Carrier distributions call it as ``conveyor.sdk.wrap``.
        """
        self = object.__new__(cls)
        self._carrier = carrier
        self._layout = layout
        self._dtype = dtype
        self._grad_fn = None
        self._output_index = 0
        self._requires_grad = False
        self._grad = None
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
        """NumPy-style text: summarised values, shape when empty, dtype, carrier, grad state."""
        carrier = type(self._carrier).__name__
        extras = [f"dtype={self._dtype.name}", f"carrier={carrier}"]
        if self.size == 0:
            extras.insert(0, f"shape={self.shape}")
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn._operation_name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        try:
            values = _library.methods.format_values(self.numpy(), self._dtype, "Tensor(")
        except Exception:  # repr must not fail for released or exotic carriers
            values = "<unreadable>"
        return f"Tensor({values}, {', '.join(extras)})"

    def __str__(self) -> str:
        return repr(self)

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

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place and return the tensor (PyTorch's form)."""
        self.requires_grad = requires_grad
        return self

    @property
    def autograd_ctx(self) -> Operation | None:
        """The operation that produced this tensor (``None`` for leaves)."""
        return self._grad_fn

    grad_fn = autograd_ctx

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def grad(self) -> Tensor | None:
        """The gradient backward accumulated into this tensor (``None`` until then)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        # Checked here rather than at the next backward, which would fail far from the cause.
        if value is not None and value.__class__ is not Tensor:
            msg = (
                f"grad: expected a Tensor or None, got {value!r} ({type(value).__name__}); "
                f"assign cv.tensor(...) of shape {self.shape}, or None to clear it"
            )
            raise TypeError(msg)
        self._grad = value

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after backward (leaves always keep it)."""
        op = self._grad_fn
        if op is not None:
            op._retained = {**op._retained, self._output_index: self}

    def backward(self, gradient: Tensor | None = None, *, retain_graph: bool = False) -> None:
        _backward(self, gradient, retain_graph=retain_graph)

    def detach(self) -> Tensor:
        """The same storage as a new leaf that does not require grad."""
        return Tensor._wrap(self._carrier, self._layout, self._dtype)

    # -- data access --------------------------------------------------------------------------

    def numpy(self, *, copy: bool = False) -> np.ndarray[Any, Any]:
        """The values as a NumPy array: read-only when it shares the carrier's memory.

        Unlike PyTorch's writable, shared ``.numpy()``, a write through the array would bypass
        the tensor's version counter, so autograd could not see it; NumPy then refuses the
        write ("assignment destination is read-only"). Write through ``t[...] = values`` (or
        ``t.copy_()``), or ask for a writable copy with ``copy=True``.

        .. versionchanged:: 0.1 ``copy=True`` returns a writable copy.
        """
        values = self._carrier.export_span(self._layout)
        return values.copy() if copy else values

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        import numpy as np

        array = self.numpy()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        if copy:
            return array.copy()
        return array

    def __dlpack__(
        self,
        /,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
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
        carrier = type(self._carrier).__name__
        hook = getattr(self._carrier, "_dlpack", None)
        if hook is None:
            msg = (
                f"__dlpack__ on {carrier}: the carrier cannot share its "
                f"memory; use tensor.numpy() or cv.move the tensor to 'cpu'"
            )
            raise BufferError(msg)
        kwargs = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
        if self._requires_grad or saved_for_backward(self._carrier):
            if copy is False:
                msg = (
                    f"__dlpack__ on {carrier}: copy=False, but the tensor is part of an "
                    f"autograd graph and is only exported as a copy; pass copy=None or detach "
                    f"a clone first"
                )
                raise BufferError(msg)
            copy = True
        return hook(self._layout, copy=copy, **kwargs)

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
        if self.size != 1:
            msg = (
                f"the truth value of a tensor of shape {self.shape} is ambiguous; use "
                f"cv.any(t) or cv.all(t)"
            )
            raise ValueError(msg)
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
        if _library.methods.is_advanced(key):
            return _library.methods.getitem(self, key)
        return _F.view(self, key=key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (broadcast) into the elements ``self[key]`` selects, in place.

        Refused for a leaf that requires grad and for views of one, as PyTorch does: the write
        would silently change what autograd differentiates.
        """
        import numpy as np

        if _library.methods.is_advanced(key):
            _library.methods.setitem(self, key, value)
            return
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
        views = _F.VIEW_OPERATIONS
        t: Tensor | None = self
        while t is not None:
            op = t._grad_fn
            if op is None:
                return t._requires_grad
            if op._operation_name not in views or not op._grad_inputs:
                return False
            t = op._grad_inputs[0]
        return False

    __hash__ = object.__hash__

    # -- operator sugar: each calls the public function of the same meaning -------------------
    # A Tensor operand is passed on as is without calling _operand (one Python call less on
    # the hot path); anything else goes through _operand's coercion.

    def __add__(self, other: Any) -> Tensor:
        return _F.add(self, other if other.__class__ is Tensor else self._operand(other))

    def __radd__(self, other: Any) -> Tensor:
        return _F.add(other if other.__class__ is Tensor else self._operand(other), self)

    def __sub__(self, other: Any) -> Tensor:
        return _F.sub(self, other if other.__class__ is Tensor else self._operand(other))

    def __rsub__(self, other: Any) -> Tensor:
        return _F.sub(other if other.__class__ is Tensor else self._operand(other), self)

    def __mul__(self, other: Any) -> Tensor:
        return _F.mul(self, other if other.__class__ is Tensor else self._operand(other))

    def __rmul__(self, other: Any) -> Tensor:
        return _F.mul(other if other.__class__ is Tensor else self._operand(other), self)

    def __truediv__(self, other: Any) -> Tensor:
        return _F.div(self, other if other.__class__ is Tensor else self._operand(other))

    def __rtruediv__(self, other: Any) -> Tensor:
        return _F.div(other if other.__class__ is Tensor else self._operand(other), self)

    def __pow__(self, other: Any) -> Tensor:
        return _F.pow(self, other if other.__class__ is Tensor else self._operand(other))

    def __rpow__(self, other: Any) -> Tensor:
        return _F.pow(other if other.__class__ is Tensor else self._operand(other), self)

    def __mod__(self, other: Any) -> Tensor:
        return _F.rem(self, other if other.__class__ is Tensor else self._operand(other))

    def __rmod__(self, other: Any) -> Tensor:
        return _F.rem(other if other.__class__ is Tensor else self._operand(other), self)

    def __matmul__(self, other: Any) -> Tensor:
        return _F.matmul(self, other if other.__class__ is Tensor else self._operand(other))

    def __rmatmul__(self, other: Any) -> Tensor:
        return _F.matmul(other if other.__class__ is Tensor else self._operand(other), self)

    def __neg__(self) -> Tensor:
        return _F.neg(self)

    def __abs__(self) -> Tensor:
        return _F.abs(self)

    def __invert__(self) -> Tensor:
        """Logical not for bool, bitwise not for integers (as NumPy's ``~``)."""
        if self._dtype.is_bool:
            return _F.logical_not(self)
        return _library.methods.bitwise_invert(self)

    def __pos__(self) -> Tensor:
        return self

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]  # elementwise, as NumPy
        return _F.eq(self, other if other.__class__ is Tensor else self._operand(other))

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]  # elementwise, as NumPy
        return _F.ne(self, other if other.__class__ is Tensor else self._operand(other))

    def __lt__(self, other: Any) -> Tensor:
        return _F.lt(self, other if other.__class__ is Tensor else self._operand(other))

    def __le__(self, other: Any) -> Tensor:
        return _F.le(self, other if other.__class__ is Tensor else self._operand(other))

    def __gt__(self, other: Any) -> Tensor:
        return _F.lt(other if other.__class__ is Tensor else self._operand(other), self)

    def __ge__(self, other: Any) -> Tensor:
        return _F.le(other if other.__class__ is Tensor else self._operand(other), self)

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
        n = len(self._layout.shape)
        return _F.permute(self, axes=_REVERSED_AXES[n] if n < 8 else tuple(range(n - 1, -1, -1)))

    def transpose(self, *axes: Any) -> Tensor:
        """The axes reversed (``t.T``), or in the order given (NumPy's ``a.transpose``)."""
        if not axes or axes == (None,):
            return self.T
        return self.permute(*axes)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        """A view with ``axis1`` and ``axis2`` exchanged."""
        order = list(range(self.ndim))
        a, b = normalize_axis(axis1, self.ndim), normalize_axis(axis2, self.ndim)
        order[a], order[b] = order[b], order[a]
        return _F.permute(self, axes=tuple(order))

    def ravel(self) -> Tensor:
        """The elements as a 1-D tensor: a view where the layout allows, else a copy."""
        return _F.reshape(self, shape=(-1,))

    def flatten(self) -> Tensor:
        """The elements as a fresh 1-D tensor (NumPy's ``flatten`` always copies)."""
        return _F.reshape(self, shape=(-1,)).copy()

    def view(self, *shape: Any) -> Tensor:
        """PyTorch's ``view``: the same storage under a new shape, never a copy.

        Raises:
            RuntimeError: no layout over this tensor's storage has that shape (a transposed
                tensor flattened, say); use ``reshape``, which copies then.
        """
        result = self.reshape(*shape)
        if result._carrier is not self._carrier:
            msg = (
                f"view on {type(self._carrier).__name__}: shape {result.shape} cannot be a view "
                f"of this layout (shape {self.shape}, strides {self.strides}); use reshape(), "
                f"which copies"
            )
            raise RuntimeError(msg)
        return result

    def numel(self) -> int:
        """The number of elements (PyTorch's name for ``size``)."""
        return self.size

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements this tensor shows (not of its whole storage)."""
        return self.size * self._dtype.itemsize

    def float(self) -> Tensor:
        """A float32 copy (PyTorch's ``.float()``)."""
        return self.astype(dtypes.float32)

    def double(self) -> Tensor:
        """A float64 copy."""
        return self.astype(dtypes.float64)

    def int(self) -> Tensor:
        """An int32 copy (PyTorch's ``.int()``)."""
        return self.astype(dtypes.int32)

    def abs(self) -> Tensor:
        return _F.abs(self)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        """Values limited to ``[min, max]`` (NumPy's ``clip``, PyTorch's ``clamp``)."""
        return _library.methods.clip(self, min, max)

    clamp = clip

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:
        """``clamp`` in place."""
        self._check_inplace("clamp_")
        self._assign("clamp_", _library.methods.clip(self, min, max))
        return self

    def std(
        self, axis: Any = None, keepdims: bool = False, correction: builtins.float = 0.0
    ) -> Tensor:
        """The standard deviation (``correction=1`` for the sample estimate)."""
        return _library.methods.std(self, axis=axis, keepdims=keepdims, correction=correction)

    def var(
        self, axis: Any = None, keepdims: bool = False, correction: builtins.float = 0.0
    ) -> Tensor:
        """The variance (``correction=1`` for the sample estimate)."""
        return _library.methods.var(self, axis=axis, keepdims=keepdims, correction=correction)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Whether any element along ``axis`` is true (non-zero)."""
        return _library.methods.any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Whether every element along ``axis`` is true (non-zero)."""
        return _library.methods.all(self, axis=axis, keepdims=keepdims)

    def broadcast_to(self, shape: Sequence[builtins.int]) -> Tensor:
        return _F.broadcast_to(self, shape=tuple(shape))

    def squeeze(self, axes: builtins.int | Sequence[builtins.int] | None = None) -> Tensor:
        return _F.squeeze(self, axes=axes)

    def unsqueeze(self, axes: builtins.int | Sequence[builtins.int]) -> Tensor:
        return _F.unsqueeze(self, axes=axes)

    # -- NumPy-user additions: operators, in-place forms, protocols and conversions ------------
    # Operators and methods whose meaning is composed from several dispatch names belong to the
    # user library above the engine; they are called through ``conveyor.engine.library``.

    def _operand(self, other: Any) -> Any:
        """An ndarray or NumPy scalar operand copied onto this tensor's carrier class.

        Tensors and Python scalars (the hot path of operator sugar) pass through untouched.
        """
        if type(other) is Tensor or type(other) in _PLAIN_SCALARS:
            return other
        import numpy as np

        if isinstance(other, np.ndarray | np.generic) and not isinstance(other, float | int):
            return _from_array(
                np.asarray(other), dtypes.from_numpy(other.dtype), type(self._carrier)
            )
        return other

    def __floordiv__(self, other: Any) -> Tensor:
        return _library.methods.floor_divide(self, self._operand(other))

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _library.methods.floor_divide(self._operand(other), self)

    def __and__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_and(self, self._operand(other))

    def __rand__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_and(self._operand(other), self)

    def __or__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_or(self, self._operand(other))

    def __ror__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_or(self._operand(other), self)

    def __xor__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_xor(self, self._operand(other))

    def __rxor__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_xor(self._operand(other), self)

    def __lshift__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_left_shift(self, self._operand(other))

    def __rlshift__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_left_shift(self._operand(other), self)

    def __rshift__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_right_shift(self, self._operand(other))

    def __rrshift__(self, other: Any) -> Tensor:
        return _library.methods.bitwise_right_shift(self._operand(other), self)

    # In-place forms: the out-of-place result is written into this tensor's own storage.
    def __iadd__(self, other: Any) -> Tensor:
        return self._inplace("add_", _F.add, other)

    def __isub__(self, other: Any) -> Tensor:
        return self._inplace("sub_", _F.sub, other)

    def __imul__(self, other: Any) -> Tensor:
        return self._inplace("mul_", _F.mul, other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self._inplace("div_", _F.div, other)

    def __ipow__(self, other: Any) -> Tensor:
        return self._inplace("pow_", _F.pow, other)

    def __imod__(self, other: Any) -> Tensor:
        return self._inplace("rem_", _F.rem, other)

    def __ifloordiv__(self, other: Any) -> Tensor:
        return self._inplace("floor_divide_", _library.methods.floor_divide, other)

    def __iand__(self, other: Any) -> Tensor:
        return self._inplace("bitwise_and_", _library.methods.bitwise_and, other)

    def __ior__(self, other: Any) -> Tensor:
        return self._inplace("bitwise_or_", _library.methods.bitwise_or, other)

    def __ixor__(self, other: Any) -> Tensor:
        return self._inplace("bitwise_xor_", _library.methods.bitwise_xor, other)

    def __ilshift__(self, other: Any) -> Tensor:
        return self._inplace("bitwise_left_shift_", _library.methods.bitwise_left_shift, other)

    def __irshift__(self, other: Any) -> Tensor:
        return self._inplace("bitwise_right_shift_", _library.methods.bitwise_right_shift, other)

    def __imatmul__(self, other: Any) -> Tensor:
        return self._inplace("matmul_", _F.matmul, other)

    def add_(self, other: Any) -> Tensor:
        """``self += other`` in place (PyTorch's name)."""
        return self._inplace("add_", _F.add, other)

    def sub_(self, other: Any) -> Tensor:
        return self._inplace("sub_", _F.sub, other)

    def mul_(self, other: Any) -> Tensor:
        return self._inplace("mul_", _F.mul, other)

    def div_(self, other: Any) -> Tensor:
        return self._inplace("div_", _F.div, other)

    def zero_(self) -> Tensor:
        """Fill with zeros in place; on a recorded tensor the gradient to its past is zero."""
        return self.fill_(0)

    def fill_(self, value: Any) -> Tensor:
        """Fill with ``value`` in place (converted to this tensor's dtype)."""
        self._check_inplace("fill_")
        filled = full(self.shape, value, self._dtype, type(self._carrier))
        if self._grad_fn is not None and _grad_enabled():
            # Recorded as ``old * 0 + value`` (on a snapshot of the old values, which the write
            # leaves intact) so earlier operations receive a zero gradient.
            self._assign("fill_", _F.add(_F.mul(self._snapshot(), 0), filled), values=filled)
        else:
            self._assign("fill_", filled)
        return self

    def copy_(self, source: Any) -> Tensor:
        """Write ``source`` (broadcast, converted to this dtype) into this tensor in place."""
        self._check_inplace("copy_")
        if not isinstance(source, Tensor):
            import numpy as np

            source = _from_array(
                np.asarray(source, dtype=self._dtype.numpy), self._dtype, type(self._carrier)
            )
        elif type(source._carrier) is not type(self._carrier):
            source = _move(source, type(self._carrier))
        if source.dtype is not self._dtype:
            source = source.astype(self._dtype)
        self._assign("copy_", _F.broadcast_to(source, shape=self.shape))
        return self

    def _inplace(self, what: str, function: Any, other: Any) -> Tensor:
        self._check_inplace(what)
        self._assign(what, function(self, self._operand(other)))
        return self

    def _check_inplace(self, what: str) -> None:
        """Refuse, before anything is computed, a write autograd could not account for."""
        if _grad_enabled() and self._writes_into_grad_leaf():
            msg = (
                f"{what} on {type(self._carrier).__name__}: a leaf tensor that requires grad (or "
                f"a view of one) is used in an in-place operation; write under `with "
                f"cv.no_grad():`, into leaf.detach(), or use the out-of-place form"
            )
            raise RuntimeError(msg)

    def _assign(self, what: str, result: Tensor, *, values: Tensor | None = None) -> None:
        """Publish ``values`` (default ``result``) into this storage; take over its graph node.

        The operation that produced ``result`` saved this tensor; it is handed a snapshot of the
        old values carrying the old autograd state, so its backward (and the graph behind it)
        still sees what forward saw, as PyTorch's "original self" does.
        """
        values = result if values is None else values
        if values.shape != self.shape:
            msg = (
                f"{what} on {type(self._carrier).__name__}: the result has shape {values.shape}, "
                f"which cannot be written into a tensor of shape {self.shape}; broadcast the "
                f"target first or use the out-of-place form"
            )
            raise ValueError(msg)
        if values.dtype is not self._dtype:
            if _KIND_RANK[values.dtype.kind] > _KIND_RANK[self._dtype.kind] or (
                result._grad_fn is not None
            ):
                msg = (
                    f"{what} on {type(self._carrier).__name__}: the result dtype "
                    f"{values.dtype.name} cannot be written into a {self._dtype.name} tensor in "
                    f"place; cast with .astype() and use the out-of-place form"
                )
                raise TypeError(msg)
            values = values.astype(self._dtype)
        op = result._grad_fn if _grad_enabled() else None
        if op is not None and any(t is self for t in op._grad_inputs):
            snapshot = self._snapshot()
            op._grad_inputs = tuple(snapshot if t is self else t for t in op._grad_inputs)
            if op._saved is not None:
                op._saved = tuple(snapshot if t is self else t for t in op._saved)
            op._saved_versions = tuple(
                (snapshot, snapshot._carrier._version) if t is self else (t, v)
                for t, v in op._saved_versions
            )
        data = values.numpy()
        if values._carrier is self._carrier:
            data = data.copy()  # the source may overlap the destination
        if self.size:
            self._carrier.import_span(self._layout, data)
        if op is not None:
            self._grad_fn, self._output_index = op, result._output_index
            self._requires_grad = True

    def _snapshot(self) -> Tensor:
        """A copy of the current values that carries this tensor's autograd state."""
        snapshot = self.clone()
        snapshot._grad_fn, snapshot._output_index = self._grad_fn, self._output_index
        snapshot._requires_grad = self._requires_grad
        return snapshot

    # Protocols: NumPy (NEP 13/18), the Array API and Python's numeric conversions.
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy ufuncs with a Conveyor equivalent run on this carrier; others refuse.

        Returning ``NotImplemented`` makes NumPy raise ``TypeError``: a ufunc never silently
        turns a tensor into an ndarray.
        """
        return _library.methods.array_ufunc(self, ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """NumPy functions with a Conveyor equivalent run on this carrier; others refuse."""
        return _library.methods.array_function(self, func, types, args, kwargs)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        """The Array API namespace, ``conveyor.array_api``."""
        return _library.methods.array_namespace(api_version)

    @property
    def device(self) -> type[Carrier]:
        """The carrier class, which is the Array API device of a tensor."""
        return type(self._carrier)

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """The tensor on ``device`` (a carrier class or name); itself when already there."""
        if stream is not None:
            msg = f"to_device: streams are not supported, got stream={stream!r}"
            raise ValueError(msg)
        return self.to(device)

    def to(self, target: Any) -> Tensor:
        """A copy on another carrier (class or name) or in another dtype; ``self`` if no change."""
        if isinstance(target, DType) or (isinstance(target, str) and target in _DTYPE_NAMES):
            dtype = _check_dtype(target)
            return self if dtype is self._dtype else self.astype(dtype)
        cls = _resolve_carrier(target)
        if cls is type(self._carrier):
            return self
        return _move(self, cls)

    def copy(self) -> Tensor:
        """A contiguous copy in fresh storage; differentiable (NumPy's name for ``clone``)."""
        if self._requires_grad and _grad_enabled():
            return _F.mul(self, 1)
        return self.clone()

    @property
    def mT(self) -> Tensor:
        """The last two axes swapped (the Array API's matrix transpose)."""
        if self.ndim < 2:
            msg = f"mT needs at least 2 axes, this tensor has shape {self.shape}"
            raise ValueError(msg)
        axes = (*range(self.ndim - 2), self.ndim - 1, self.ndim - 2)
        return _F.permute(self, axes=axes)

    def __format__(self, spec: str) -> str:
        """``format(t, ".4f")`` for single-element tensors, as for their Python value."""
        if not spec:
            return str(self)
        if self.size != 1:
            msg = (
                f"format spec {spec!r} needs a single-element tensor, this one has shape "
                f"{self.shape}; format t.item() or t.tolist()"
            )
            raise TypeError(msg)
        return format(self.item(), spec)

    def __round__(self, ndigits: builtins.int | None = None) -> Tensor:
        """Round half to even, to ``ndigits`` decimals (a tensor, as NumPy and PyTorch give)."""
        if not ndigits:
            return _F.round(self)
        scale = 10.0**ndigits
        return _F.div(_F.round(_F.mul(self, scale)), scale)

    def __index__(self) -> builtins.int:
        """A single-element integer tensor used as an index (``range(t)``, ``lst[t]``)."""
        if not (self._dtype.is_integer or self._dtype.is_bool) or self.size != 1:
            msg = (
                f"only single-element integer tensors can be used as an index, this one is "
                f"{self._dtype.name} of shape {self.shape}"
            )
            raise TypeError(msg)
        return int(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __contains__(self, value: Any) -> bool:
        """``value in t``: whether any element equals ``value``."""
        return bool(_F.reduce_sum(_F.eq(self, self._operand(value))).item())

    def __iter__(self) -> Iterator[Tensor]:
        if not self._layout.shape:
            msg = "iteration over a 0-d tensor"
            raise TypeError(msg)
        for i in range(self._layout.shape[0]):
            yield self[i]


# -- publishing results (the carrier author's fast constructors, in ``conveyor.sdk``) -------

_new = object.__new__


def publish(
    carrier_class: type[Carrier], attributes: dict[str, Any], layout: Layout, dtype: DType
) -> Tensor:
    """A result tensor over a new ``carrier_class`` instance whose attributes are ``attributes``.

    The fast way for a definition-free carrier's kernels to publish a fresh result: the
    carrier's ``__init__`` is not run (``attributes`` becomes its instance dictionary, so pass
    every attribute it needs; class defaults cover the rest), and ``layout`` is trusted to lie
    within its slots. It costs one Python call, as the slot writes it replaces did. A carrier
    over existing storage uses ``Tensor`` (checked) or ``conveyor.sdk.wrap`` (trusted) instead.
    """
    carrier = _new(carrier_class)
    carrier.__dict__ = attributes
    tensor = _new(Tensor)
    tensor._carrier = carrier
    tensor._layout = layout
    tensor._dtype = dtype
    tensor._grad_fn = None
    tensor._output_index = 0
    tensor._requires_grad = False
    tensor._grad = None
    return tensor


# -- constructors ---------------------------------------------------------------------------


def _resolve_carrier(carrier: Any) -> type[Carrier]:
    if carrier is None:
        carrier = _default_carrier
    if isinstance(carrier, str):
        return default_host().carrier(carrier)
    if isinstance(carrier, type) and issubclass(carrier, Carrier):
        return carrier
    msg = (
        f"carrier must be a Carrier class or a registered carrier name (see `conveyor "
        f"carriers`), got {carrier!r} ({type(carrier).__name__})"
    )
    raise TypeError(msg)


def _from_array(values: np.ndarray[Any, Any], dtype: DType, cls: type[Carrier]) -> Tensor:
    size = values.size
    carrier = cls.allocate(size, dtype)
    if size:
        layout = Layout.contiguous((size,))
        if type(carrier).import_span is Carrier.import_span:
            # A fresh allocation of ``size`` slots is alive and covers this layout, and the
            # shapes match by construction: of import_span's checks only writability is left
            # to ask (every constructor and backward's seed pass here).
            carrier._check_writable("import_span")
            carrier._import(layout, values.reshape(-1))
            carrier._version += 1
        else:
            carrier.import_span(layout, values.reshape(-1))
    return Tensor._wrap(carrier, Layout.contiguous(values.shape), dtype)


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
        array = _integer_array("tensor", data, target)
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


def _integer_array(what: str, data: Any, target: DType) -> np.ndarray[Any, Any]:
    """Python data as an array of the integer dtype ``target``; a value that does not fit is
    refused (``OverflowError`` naming it and the dtype, ``ValueError`` for NaN) instead of
    wrapping or rounding. ``what`` names the constructor in the message."""
    import numpy as np

    try:
        return np.asarray(data, dtype=target.numpy)
    except OverflowError as exc:
        info = np.iinfo(target.numpy)
        values = np.asarray(data, dtype=object).reshape(-1)
        bad = next((v for v in values if not info.min <= v <= info.max), None)
        msg = (
            f"{what}: value {bad!r} does not fit in {target.name} (range [{info.min}, "
            f"{info.max}]); pass a wider dtype or change the value"
        )
        raise OverflowError(msg) from exc
    except ValueError as exc:
        try:  # NumPy's "cannot convert float NaN to integer", or another reason (ragged data)
            has_nan = bool(np.isnan(np.asarray(data, dtype=np.float64)).any())
        except (TypeError, ValueError):
            has_nan = False
        if not has_nan:
            raise
        msg = f"{what}: NaN cannot be stored in {target.name}; pass a floating dtype or a number"
        raise ValueError(msg) from exc


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
    """A tensor of ``shape`` filled with ``fill_value`` (dtype inferred from it when ``None``).

    Raises:
        OverflowError: a Python ``fill_value`` (infinity included) does not fit the integer
            ``dtype``, as in ``cv.tensor``.
        ValueError: a NaN ``fill_value`` for an integer ``dtype``.
    """
    import numpy as np

    dims = _shape(shape)
    target = (
        _check_dtype(dtype)
        if dtype is not None
        else _infer_dtype(fill_value, np.asarray(fill_value))
    )
    if target.is_integer and not _is_numpy(fill_value):
        fill_value = _integer_array("full", fill_value, target)  # refused, never wrapped
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
    import numpy as np

    # The shape and dtype of a tensor are valid already (backward's seed gradient is this).
    layout = t._layout
    if layout.size == 1:  # backward's implied seed: no np.ones, a Python-level NumPy function
        values = np.array(1, t._dtype.numpy).reshape(layout.shape)
    else:
        values = np.ones(layout.shape, t._dtype.numpy)
    return _from_array(values, t._dtype, type(t._carrier))


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


# -- the engine's other halves ---------------------------------------------------------------
# Operator sugar (the public functions), backward, moves and the Carrier type are engine modules
# that import Tensor themselves, so they are imported last, once everything above is defined.
from conveyor.engine import functional as _F  # noqa: E402
from conveyor.engine.autograd import backward as _backward  # noqa: E402
from conveyor.engine.carrier import Carrier  # noqa: E402
from conveyor.engine.move import move as _move  # noqa: E402
