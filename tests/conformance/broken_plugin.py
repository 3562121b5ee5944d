"""A throw-away plugin of deliberately broken carriers, for checking that the kit catches them.

``tests/conformance/test_kit.py`` copies this file into a temporary site folder with a dist-info
that declares it under the ``conveyor.plugins`` entry-point group, then runs the kit against each
carrier in a subprocess. Every carrier computes through Generic and then breaks one rule:

- ``broken_off_by_one``: float ``add`` results are one too large (``neg`` is right);
- ``broken_caching``: the dispatch hook returns one cached operation per name;
- ``broken_eager``: forward allocates the result before the capability gate refuses;
- ``broken_overclaim``: advertises a capability central planning never resolves, and a name
  the registry does not know;
- ``broken_dependent``: a DependentCarrier, which the kit skips with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np

import conveyor as cv
from conveyor.plugins import hookimpl
from conveyor.policy import enumerate_plans

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
        if operation_name not in self.operation_capabilities().names:
            return super()._dispatch_op(operation_name)
        return _ViaGeneric()


class _ViaGeneric(cv.Operation):
    """Runs the call on Generic and brings the results back to the dispatch carrier's class."""

    def _forward(self, *inputs: Any, options: cv.OperationExecutionOptions | None) -> Any:
        name = self._operation_name
        assert name is not None
        moved = [
            cv.tensor(x.numpy(), dtype=x.dtype, carrier="generic")
            if isinstance(x, cv.Tensor)
            else x
            for x in inputs
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


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    return {
        "broken_off_by_one": OffByOne,
        "broken_caching": Caching,
        "broken_eager": Eager,
        "broken_overclaim": Overclaim,
        "broken_dependent": Tiered,
    }
