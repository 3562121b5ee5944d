"""A throw-away plugin of deliberately broken carriers, for checking that the kit catches them.

``tests/conformance/test_kit.py`` copies this file into a temporary site folder with a dist-info
that declares it under the ``conveyor.plugins`` entry-point group, then runs the kit against each
carrier in a subprocess. Every carrier computes through Generic and then breaks one rule:

- ``broken_off_by_one``: float ``add`` results are one too large (``neg`` is right);
- ``broken_caching``: the dispatch hook returns one cached operation per name;
- ``broken_eager``: forward allocates the result before the capability gate refuses;
- ``broken_overclaim``: advertises a capability central planning never resolves, and a name
  the registry does not know;
- ``broken_dependent``: a DependentCarrier, which the kit cannot drive (so the run fails:
  nothing was checked);
- ``broken_mutating``: ``neg`` writes into its input through the carrier (a version bump);
- ``broken_silent_mutation``: ``neg`` writes into its input's memory behind the version counter;
- ``broken_aliasing``: integer ``floor`` returns its input's own carrier (right values, aliased);
- ``broken_foreign_alloc``: ``add`` allocates a scratch Generic carrier before the gate refuses;
- ``broken_large``: ``add`` is wrong only past 64 elements (a broken vector tail);
- ``broken_gradient``: ``mul``'s backward doubles the gradient;
- ``broken_indexing``: span export ignores the layout's offset (``x[1]`` reads row 0);
- ``broken_moves``: its route to CPU flips the lowest bit of the last element;
- ``broken_ignores_layout``: ``add`` reads each operand's storage from slot 0 as if contiguous,
  ignoring the offset and strides (``a[1:] + 1.0`` is wrong);
- ``broken_past_largest``: ``add`` is wrong only past 4097 elements (the old largest case);
- ``broken_first_tile``: float ``matmul`` sums only the first 8 terms of the inner extent;
- ``broken_half_accumulator``: float32 ``reduce_sum`` of over 64 terms accumulates in float16;
- ``broken_stale``: ``neg`` returns results cached by operand identity, stale after a write;
- ``broken_grad_mode``: ``mul`` moves one ulp when an operand requires grad;
- ``broken_unsigned_zero``: ``neg(0.0)`` gives ``+0.0``.

Every carrier above also implements the view names, ``backward`` (the central VJP over its own
kernels) and span-copy routes to and from CPU, so what fails is its defect and its consequences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np

import conveyor as cv
from conveyor.engine.functional import VIEW_OPERATIONS
from conveyor.engine.gradients import vjp
from conveyor.engine.tensor import Tensor
from conveyor.plugins import hookimpl
from conveyor.types.layout import view_layout
from conveyor.types.policy import enumerate_plans

CONVEYOR_PLUGIN_API = "1.0"


class _Store(cv.Carrier):
    """Storage hooks over one flat NumPy array."""

    _array: np.ndarray[Any, Any]
    _dt: cv.DType

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Self:
        carrier = cls()
        carrier._array = np.zeros(size, dtype.numpy)
        carrier._dt = dtype
        return carrier

    def _storage_size(self) -> int:
        return int(self._array.size)

    def _storage_dtype(self) -> cv.DType:
        return self._dt

    def _read(self, index: int) -> Any:
        return self._array[index].item()

    def _write(self, index: int, value: Any) -> None:
        self._array[index] = value

    def _view(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        if layout.size == 0:
            return np.zeros(layout.shape, self._array.dtype)
        item = self._array.itemsize
        return np.ndarray(
            layout.shape,
            self._array.dtype,
            buffer=self._array,
            offset=layout.offset * item,
            strides=tuple(s * item for s in layout.strides),
        )

    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        return self._view(layout).copy()

    def _import(self, layout: cv.Layout, values: np.ndarray[Any, Any]) -> None:
        if layout.size:
            self._view(layout)[...] = values

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name in VIEW_OPERATIONS:
            return _View()
        if operation_name not in self.operation_capabilities().names:
            return super()._dispatch_op(operation_name)
        return _ViaGeneric()


class _View(cv.Operation):
    """The view names as layout algebra over the input's own carrier (copies when needed)."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        (x,) = inputs
        name = self._operation_name
        assert name is not None
        opts = options or cv.OperationExecutionOptions(name)
        self._input_shape = x.shape
        layout = view_layout(name, x.layout, opts, x.carrier.size)
        if layout is None:  # only reshape / rearrange copy
            values = np.ascontiguousarray(x.numpy()).reshape(opts.shape)
            return cv.tensor(values, dtype=x.dtype, carrier=type(x.carrier))
        return Tensor._wrap(x.carrier, layout, x.dtype)

    def backward(self, gradient: Any) -> Any:
        return (cv.reshape(gradient, shape=self._input_shape),)


class _ViaGeneric(cv.Operation):
    """Runs the call on Generic and brings the results back to the dispatch carrier's class;
    backward is the central VJP, run on the dispatch carrier's own kernels."""

    def backward(self, gradient: Any) -> Any:
        return vjp(self, gradient)

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        name = self._operation_name
        assert name is not None
        moved = [
            cv.tensor(v, dtype=x.dtype, carrier="generic") if isinstance(x, cv.Tensor) else x
            for v, x in zip(self._operands(inputs), inputs, strict=True)
        ]
        first = next(x for x in moved if isinstance(x, cv.Tensor))
        result = cv.execute_lowered(first.carrier.dispatch_op(name), *moved, options=options)
        outputs = result if isinstance(result, tuple) else (result,)
        cls = type(self._dispatch_carrier)
        back = tuple(
            cv.tensor(self._adjust(np.array(out.numpy())), dtype=out.dtype, carrier=cls)
            for out in outputs
        )
        return back if isinstance(result, tuple) else back[0]

    def _operands(self, inputs: tuple[Any, ...]) -> list[Any]:
        """The operand values the call computes with: each tensor's values (through its
        layout), the rest as they are."""
        return [self._operand(x) if isinstance(x, cv.Tensor) else x for x in inputs]

    def _operand(self, x: cv.Tensor) -> np.ndarray[Any, Any]:
        return np.asarray(x.numpy())

    def _adjust(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return values


def _capabilities(*names: str) -> list[cv.OperationCapability]:
    return [cv.OperationCapability.from_plan(p) for n in names for p in enumerate_plans(n)]


class OffByOne(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "add":
            return _AddOne()
        return super()._dispatch_op(operation_name)


class _AddOne(_ViaGeneric):
    def _adjust(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if values.dtype == np.bool_:
            return ~values
        with np.errstate(all="ignore"):
            return (values + np.ones((), values.dtype)).astype(values.dtype)


_CACHE: dict[str, cv.Operation] = {}


class Caching(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name not in _CACHE:
            _CACHE[operation_name] = super()._dispatch_op(operation_name)
        return _CACHE[operation_name]


class _PreallocatingOperation(_ViaGeneric):
    def forward(self, *inputs: Any, options: Any = None, **unexpected: Any) -> Any:
        first = next(x for x in inputs if isinstance(x, cv.Tensor))
        type(first.carrier).allocate(first.size, first.dtype)  # the bug: allocate before checks
        return super().forward(*inputs, options=options, **unexpected)


class Eager(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "add":
            return _PreallocatingOperation()
        return super()._dispatch_op(operation_name)


class Overclaim(_Store):
    pass


class Tiered(cv.DependentCarrier):
    pass


class _MutateInput(_ViaGeneric):
    """Correct results, but the input is overwritten afterwards (through the carrier: versioned)."""

    silent = False

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        result = super()._forward(*inputs, options=options)
        x = inputs[0]
        if x.size:
            if self.silent:  # straight into the memory: the version counter never hears of it
                x.carrier._array[x.layout.offset] += 1
            else:
                x.carrier.write(x.layout.offset, x.carrier.read(x.layout.offset) + 1)
        return result


class _MutateSilently(_MutateInput):
    silent = True


class Mutating(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _MutateInput() if operation_name == "neg" else super()._dispatch_op(operation_name)


class SilentMutation(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "neg":
            return _MutateSilently()
        return super()._dispatch_op(operation_name)


class _IdentityAlias(_ViaGeneric):
    """Integer floor is the identity, so it returns the input itself: right values, aliased."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        (x,) = inputs
        return Tensor._wrap(x.carrier, x.layout, x.dtype)


class Aliasing(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "floor":
            return _IdentityAlias()
        return super()._dispatch_op(operation_name)


class _ScratchFirst(_ViaGeneric):
    def forward(self, *inputs: Any, options: Any = None, **unexpected: Any) -> Any:
        from conveyor_generic import Generic

        Generic.allocate(4, cv.float32)  # the bug: work before the checks, on another class
        return super().forward(*inputs, options=options, **unexpected)


class ForeignAlloc(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "add":
            return _ScratchFirst()
        return super()._dispatch_op(operation_name)


class _WrongTail(_ViaGeneric):
    """Right for up to 64 elements; past that the "vector tail" adds one."""

    def _adjust(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if values.size > 64:
            flat = values.reshape(-1).copy()
            with np.errstate(all="ignore"):
                flat[64:] = flat[64:] + np.ones((), values.dtype)
            return flat.reshape(values.shape)
        return values


class LargeOnly(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _WrongTail() if operation_name == "add" else super()._dispatch_op(operation_name)


class _DoubleGradient(_ViaGeneric):
    def backward(self, gradient: Any) -> Any:
        return tuple(None if g is None else g * 2.0 for g in vjp(self, gradient))


class WrongGradient(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return (
            _DoubleGradient() if operation_name == "mul" else super()._dispatch_op(operation_name)
        )


class BrokenIndexing(_Store):
    def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
        return self._view(cv.Layout(layout.shape, layout.strides, 0)).copy()  # offset dropped


class BrokenMoves(_Store):
    pass


class _IgnoresLayout(_ViaGeneric):
    """Reads each operand's storage handle from slot 0 as if it were contiguous."""

    def _operand(self, x: cv.Tensor) -> np.ndarray[Any, Any]:
        store: Any = x.carrier
        return np.asarray(store._array[: x.size]).reshape(x.shape)


class IgnoresLayout(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _IgnoresLayout() if operation_name == "add" else super()._dispatch_op(operation_name)


class _WrongPastLargest(_ViaGeneric):
    """Right for up to 4097 elements (the old kit's largest case); past that adds one."""

    def _adjust(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if values.size > 4097:
            flat = values.reshape(-1).copy()
            with np.errstate(all="ignore"):
                flat[4097:] = flat[4097:] + np.ones((), values.dtype)
            return flat.reshape(values.shape)
        return values


class WrongPastLargest(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "add":
            return _WrongPastLargest()
        return super()._dispatch_op(operation_name)


class _FirstTileOnly(_ViaGeneric):
    """matmul that sums only the first 8 terms of the inner extent (one "tile")."""

    def _operands(self, inputs: tuple[Any, ...]) -> list[Any]:
        a, b = super()._operands(inputs)
        if a.shape[-1] > 8:
            a = a[..., :8]
            b = b[:8] if b.ndim == 1 else b[..., :8, :]
        return [a, b]


class FirstTileOnly(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "matmul":
            return _FirstTileOnly()
        return super()._dispatch_op(operation_name)


def _half_pairwise(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Pairwise sums of each row, every partial sum rounded to float16."""
    values = rows.astype(np.float16)
    while values.shape[-1] > 1:
        if values.shape[-1] % 2:
            values = np.concatenate([values, np.zeros((*values.shape[:-1], 1), np.float16)], -1)
        values = (values[..., 0::2] + values[..., 1::2]).astype(np.float16)
    return values[..., 0]


class _HalfAccumulator(_ViaGeneric):
    """float32 reduce_sum whose long sums (over 64 terms, a "blocked fast path") accumulate
    pairwise in float16 instead of the plan's float32."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        (x,) = inputs
        values = np.asarray(x.numpy())
        axis = getattr(options, "axis", None)
        axes = tuple(range(values.ndim)) if axis is None else np.atleast_1d(axis).tolist()
        axes = tuple(a % values.ndim for a in axes) if values.ndim else ()
        terms = int(np.prod([values.shape[a] for a in axes])) if axes else 1
        if terms <= 64 or values.size == 0:
            return super()._forward(*inputs, options=options)
        kept = [a for a in range(values.ndim) if a not in axes]
        rows = np.transpose(values, kept + list(axes)).reshape(-1, terms)
        sums = _half_pairwise(rows).astype(values.dtype)
        shape = [values.shape[a] for a in kept]
        if getattr(options, "keepdims", False):
            shape = [1 if a in axes else values.shape[a] for a in range(values.ndim)]
        cls = type(self._dispatch_carrier)
        return cv.tensor(sums.reshape(shape), dtype=x.dtype, carrier=cls)


class HalfAccumulator(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        if operation_name == "reduce_sum":
            return _HalfAccumulator()
        return super()._dispatch_op(operation_name)


# (operation name, operand carriers and layouts) -> (the carriers, kept so that their ids are
# never reused, and the results): a cache that never looks at the operands' versions.
_RESULTS: dict[Any, Any] = {}


class _Stale(_ViaGeneric):
    """Remembers each call's results by its operands' identity and returns them again."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        tensors = [x for x in inputs if isinstance(x, cv.Tensor)]
        key = (self._operation_name, tuple((id(x.carrier), x.layout) for x in tensors))
        if key not in _RESULTS:
            result = super()._forward(*inputs, options=options)
            _RESULTS[key] = ([x.carrier for x in tensors], np.array(result.numpy()))
        values = _RESULTS[key][1]
        return cv.tensor(values, dtype=tensors[0].dtype, carrier=type(self._dispatch_carrier))


class Stale(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _Stale() if operation_name == "neg" else super()._dispatch_op(operation_name)


class _GradModeDrift(_ViaGeneric):
    """mul whose result moves one ulp up when an operand requires grad (a separate "saving"
    kernel that rounds differently)."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        result = super()._forward(*inputs, options=options)
        if not any(isinstance(x, cv.Tensor) and x.requires_grad for x in inputs):
            return result
        values = np.array(result.numpy())
        with np.errstate(all="ignore"):
            values = np.nextafter(values, np.inf).astype(values.dtype)
        return cv.tensor(values, dtype=result.dtype, carrier=type(self._dispatch_carrier))


class GradModeDrift(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _GradModeDrift() if operation_name == "mul" else super()._dispatch_op(operation_name)


class _ZeroMinus(_ViaGeneric):
    """neg as ``0 - x``: right everywhere except that ``neg(0.0)`` is ``+0.0``."""

    def _adjust(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.where(values == 0, np.zeros((), values.dtype), values).astype(values.dtype)


class UnsignedZero(_Store):
    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _ZeroMinus() if operation_name == "neg" else super()._dispatch_op(operation_name)


def _flip_last(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    values = np.ascontiguousarray(source.numpy()).copy()
    if values.size:
        raw = values.reshape(-1).view(np.uint8)
        raw[-values.itemsize] ^= 1  # the lowest bit of the last element
    return cv.tensor(values, dtype=source.dtype, carrier=destination)


_FLOATS = (cv.float32, cv.float64)
cv.register_operation_capabilities(
    OffByOne,
    [
        *_capabilities("neg"),
        *(
            cv.OperationCapability.from_plan(cv.resolve_plan("add", a, b))
            for a in _FLOATS
            for b in _FLOATS
        ),
    ],
)
cv.register_operation_capabilities(Caching, _capabilities("neg"))
_FLOAT_ADD = cv.resolve_plan("add", cv.float32, cv.float32)
cv.register_operation_capabilities(Eager, [cv.OperationCapability.from_plan(_FLOAT_ADD)])
_FORGED = cv.OperationCapability(
    "add",
    tuple(cv.OperandCapability(o.role, cv.float32, cv.float16) for o in _FLOAT_ADD.operands),
    cv.float16,
    "none",
    None,
    (cv.float16,),
)
_UNKNOWN = cv.OperationCapability("frobnicate", (), cv.float32, "none", None, (cv.float32,))
cv.register_operation_capabilities(Overclaim, [*_capabilities("relu"), _FORGED, _UNKNOWN])
_FLOAT_NEG = [cv.OperationCapability.from_plan(cv.resolve_plan("neg", d)) for d in _FLOATS]
cv.register_operation_capabilities(Mutating, _FLOAT_NEG)
cv.register_operation_capabilities(SilentMutation, _FLOAT_NEG)
cv.register_operation_capabilities(
    Aliasing, [cv.OperationCapability.from_plan(cv.resolve_plan("floor", cv.int32))]
)
cv.register_operation_capabilities(ForeignAlloc, [cv.OperationCapability.from_plan(_FLOAT_ADD)])
_FLOAT_PAIRS = [(a, b) for a in _FLOATS for b in _FLOATS]
cv.register_operation_capabilities(
    LargeOnly,
    [cv.OperationCapability.from_plan(cv.resolve_plan("add", a, b)) for a, b in _FLOAT_PAIRS],
)
cv.register_operation_capabilities(
    WrongGradient,
    [
        cv.OperationCapability.from_plan(p)
        for p in enumerate_plans("mul")
        if p.compute in _FLOATS and all(o.dtype in _FLOATS for o in p.operands if not o.weak)
    ],
)
cv.register_operation_capabilities(BrokenIndexing, _FLOAT_NEG)
_FLOAT_ADDS = [
    cv.OperationCapability.from_plan(cv.resolve_plan("add", a, b)) for a, b in _FLOAT_PAIRS
]
cv.register_operation_capabilities(IgnoresLayout, _FLOAT_ADDS)
cv.register_operation_capabilities(WrongPastLargest, _FLOAT_ADDS)
cv.register_operation_capabilities(
    FirstTileOnly,
    [cv.OperationCapability.from_plan(cv.resolve_plan("matmul", a, b)) for a, b in _FLOAT_PAIRS],
)
cv.register_operation_capabilities(
    HalfAccumulator, [cv.OperationCapability.from_plan(cv.resolve_plan("reduce_sum", cv.float32))]
)
cv.register_operation_capabilities(Stale, _FLOAT_NEG)
cv.register_operation_capabilities(
    GradModeDrift,
    [
        cv.OperationCapability.from_plan(p)
        for p in enumerate_plans("mul")
        if p.compute in _FLOATS and all(o.dtype in _FLOATS for o in p.operands if not o.weak)
    ],
)
cv.register_operation_capabilities(UnsignedZero, _FLOAT_NEG)
cv.register_operation_capabilities(BrokenMoves, _FLOAT_NEG)


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    return {
        "broken_off_by_one": OffByOne,
        "broken_caching": Caching,
        "broken_eager": Eager,
        "broken_overclaim": Overclaim,
        "broken_dependent": Tiered,
        "broken_mutating": Mutating,
        "broken_silent_mutation": SilentMutation,
        "broken_aliasing": Aliasing,
        "broken_foreign_alloc": ForeignAlloc,
        "broken_large": LargeOnly,
        "broken_gradient": WrongGradient,
        "broken_indexing": BrokenIndexing,
        "broken_moves": BrokenMoves,
        "broken_ignores_layout": IgnoresLayout,
        "broken_past_largest": WrongPastLargest,
        "broken_first_tile": FirstTileOnly,
        "broken_half_accumulator": HalfAccumulator,
        "broken_stale": Stale,
        "broken_grad_mode": GradModeDrift,
        "broken_unsigned_zero": UnsignedZero,
    }


@hookimpl
def conveyor_move_routes() -> list[cv.MoveRoute]:
    """Span-copy routes to and from CPU for every carrier here; BrokenMoves' routes corrupt."""
    from conveyor.engine.move import span_copy
    from conveyor_generic import CPU

    routes = []
    for cls in _Store.__subclasses__():
        copy = _flip_last if cls is BrokenMoves else span_copy
        routes.append(cv.MoveRoute(source=cls, destination=CPU, copy=copy))
        routes.append(cv.MoveRoute(source=CPU, destination=cls, copy=copy))
    return routes
