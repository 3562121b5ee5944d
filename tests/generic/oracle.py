"""Shared helpers of the conveyor-generic carrier tests: strategies, the oracle, tolerances.

Every carrier of the distribution is checked with the same tools: ``run`` executes one public
function on a carrier class and returns NumPy results with the plan it ran; ``reference``
computes the expected results independently (NumPy in float64 / wide integers, or direct loops
for conv, topk and erf); ``assert_matches`` compares them with a tolerance sized by dtype. The
numeric gradient check lives in ``tests/generic/gradcheck.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.types.dtypes import CONCRETE_DTYPES, from_numpy
from conveyor.types.policy import enumerate_plans

# The references live in the conformance kit; the conversion helpers are re-exported here for
# the tests that size tolerances with them.
from conveyor_testkit._reference import (  # noqa: F401
    converted,
    elementwise,
    ref_convert,
    reference,
)

# Deterministic, modest and database-free: the suite must run the same way everywhere and fit
# its time budget. Override max_examples per test where a case is expensive.
HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# The widest families (hundreds of (name, dtype) cases) draw fewer examples per case.
HYPOTHESIS_WIDE = settings(HYPOTHESIS, max_examples=10)
HYPOTHESIS_SAMPLE = settings(HYPOTHESIS, max_examples=5)

FLOATING = (cv.float16, cv.bfloat16, cv.float32, cv.float64)
COMPLEX = (cv.complex64, cv.complex128)


# -- plans ------------------------------------------------------------------------------------

_VALUE_ROLES = frozenset({"input", "other", "src", "lo", "hi", "weight"})


def homogeneous_dtypes(name: str) -> list[cv.DType]:
    """Every dtype ``d`` such that ``name`` has a plan whose value operands are all ``d`` tensors.

    Index operands are int64 and the select condition bool; optional bounds are present.
    """
    found: dict[cv.DType, None] = {}
    for plan in enumerate_plans(name):
        if plan.accumulator_dtype is not None and plan.accumulator_dtype is not _default_acc(plan):
            continue
        values = [o for o in plan.operands if o.role in _VALUE_ROLES]
        if any(o.weak or o.dtype is None for o in values):
            continue
        first = values[0].dtype
        others = [o for o in plan.operands if o.role not in _VALUE_ROLES]
        if all(o.dtype is first for o in values) and all(
            o.dtype is (cv.int64 if o.role == "index" else cv.bool) for o in others
        ):
            assert first is not None
            found[first] = None
    return [d for d in CONCRETE_DTYPES if d in found]


def _default_acc(plan: cv.OperationPlan) -> cv.DType | None:
    """The accumulator a plan gets without an ``accumulator_dtype`` option."""
    keys = [o.dtype if not o.weak else _SAMPLE[o.dtype] for o in plan.operands]
    return cv.resolve_plan(plan.operation, *keys).accumulator_dtype


_SAMPLE: dict[Any, Any] = {cv.bool: True, cv.int64: 1, cv.float64: 1.0, cv.complex128: 1j}


def cases(*names: str) -> list[Any]:
    """(name, dtype) for every homogeneous dtype of every name: the family test parameters."""
    return [
        pytest.param(name, dtype, id=f"{name}-{dtype.name}")
        for name in names
        for dtype in homogeneous_dtypes(name)
    ]


def dtypes(name: str) -> list[Any]:
    """Every homogeneous dtype of one name, as parameters with readable ids."""
    return [pytest.param(dtype, id=dtype.name) for dtype in homogeneous_dtypes(name)]


# -- strategies -------------------------------------------------------------------------------


def _float_values(
    rng: np.random.Generator, count: int, np_dtype: Any, bound: float | None, finite: bool
) -> Any:
    """Log-uniform magnitudes over the dtype's range (or ``|x| <= bound``), mixed with edges."""
    info = ml_dtypes.finfo(np_dtype) if np_dtype == ml_dtypes.bfloat16 else np.finfo(np_dtype)
    top = float(info.max) if bound is None else bound
    low_exp = math.log10(float(info.smallest_subnormal))
    magnitudes = 10.0 ** rng.uniform(low_exp if bound is None else -3, math.log10(top), count)
    small = rng.standard_normal(count) * rng.choice([1.0, 10.0, 100.0], count)
    values = np.where(rng.random(count) < 0.5, small, magnitudes * rng.choice([-1, 1], count))
    values = np.clip(values, -top, top)
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, top, -top]
    if bound is None:
        edges += [float(info.smallest_normal), float(info.smallest_subnormal)]
    if not finite:
        edges += [math.nan, math.inf, -math.inf]
    pick = rng.random(count) < 0.25
    return np.where(pick, rng.choice(edges, count), values)


def _int_values(rng: np.random.Generator, count: int, np_dtype: Any, bound: float | None) -> Any:
    info = np.iinfo(np_dtype)
    low, high = (
        (info.min, info.max)
        if bound is None
        else (max(info.min, -int(bound)), min(info.max, int(bound)))
    )
    wide = rng.integers(low, high, count, dtype=np_dtype, endpoint=True)
    small = np.clip(rng.integers(-5, 6, count), low, high).astype(np_dtype)
    edges = np.array([low, high, 0, min(1, high), max(-1, low)], dtype=np_dtype)
    choice = rng.random(count)
    return np.where(choice < 0.4, small, np.where(choice < 0.6, rng.choice(edges, count), wide))


def arrays(
    dtype: cv.DType,
    shape: tuple[int, ...],
    *,
    bound: float | None = None,
    finite: bool = False,
) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    """Arrays of ``dtype``: full range by default (NaN, +-inf, +-0, subnormals, extremes mixed
    in), or finite values with ``|x| <= bound``.

    Values come from a NumPy generator seeded by hypothesis: drawing elements one by one costs
    far more than the operation under test, and the edges are mixed in at a fixed rate.
    """
    count = math.prod(shape)

    def build(seed: int) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng(seed)
        np_dtype = dtype.numpy
        if dtype.is_bool:
            values: Any = rng.random(count) < 0.5
        elif dtype.is_integer:
            values = _int_values(rng, count, np_dtype, bound)
        elif dtype.is_complex:
            part = np.float32 if dtype is cv.complex64 else np.float64
            values = np.empty(count, np.complex128)
            values.real = _float_values(rng, count, part, bound, finite)
            values.imag = _float_values(rng, count, part, bound, finite)
        else:
            values = _float_values(rng, count, np_dtype, bound, finite)
        with np.errstate(all="ignore"):
            return np.asarray(values).astype(np_dtype).reshape(shape)

    return st.integers(0, 2**32 - 1).map(build)


def scalars(kind: type) -> st.SearchStrategy[Any]:
    """Weak Python scalars of one kind, edges included."""
    if kind is bool:
        return st.booleans()
    if kind is int:
        return st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 300)
    if kind is float:
        return st.floats()
    return st.complex_numbers(max_magnitude=1e6)


def shapes(*, min_dims: int = 0, max_dims: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=4)


# -- running on a carrier ---------------------------------------------------------------------


def dtype_of(value: Any) -> cv.DType:
    return from_numpy(value.dtype)


def make_tensor(
    values: Any, dtype: cv.DType, carrier: type, *, requires_grad: bool = False
) -> cv.Tensor:
    """``cv.tensor`` that also keeps 0-d shapes.

    Works around a core bug: ``cv.tensor`` of 0-d data returns shape ``(1,)`` because
    ``np.ascontiguousarray`` promotes 0-d arrays to 1-d (see ``test_tensor_keeps_0d_shape``).
    """
    array = np.asarray(values)
    if array.ndim:
        return cv.tensor(array, dtype=dtype, carrier=carrier, requires_grad=requires_grad)
    flat = cv.tensor(array.reshape(1), dtype=dtype, carrier=carrier)
    with cv.no_grad():
        scalar = F.reshape(flat, shape=()).detach()
    scalar.requires_grad = requires_grad
    return scalar  # type: ignore[no-any-return]


def to_tensor(value: Any, carrier: type) -> Any:
    """NumPy arrays become tensors on ``carrier``; scalars and ``None`` pass through."""
    if isinstance(value, np.ndarray):
        return make_tensor(value, dtype_of(value), carrier)
    return value


def resolve(name: str, operands: Sequence[Any], fields: dict[str, Any]) -> cv.OperationPlan:
    keys = [dtype_of(v) if isinstance(v, np.ndarray) else v for v in operands]
    options = cv.OperationExecutionOptions(name, **fields) if fields else None
    return cv.resolve_plan(name, *keys, options=options)


def run(
    carrier: type, name: str, operands: Sequence[Any], fields: dict[str, Any]
) -> tuple[np.ndarray[Any, Any], ...]:
    """Call the public function ``name`` with ``operands`` on ``carrier``; NumPy copies out."""
    result = getattr(F, name)(*(to_tensor(v, carrier) for v in operands), **fields)
    outputs = result if isinstance(result, tuple) else (result,)
    for out in outputs:
        assert type(out.carrier) is carrier
    return tuple(np.array(out.numpy()) for out in outputs)


# -- tolerances -------------------------------------------------------------------------------


def _finfo(dtype: cv.DType) -> Any:
    return ml_dtypes.finfo(dtype.numpy) if dtype is cv.bfloat16 else np.finfo(dtype.numpy)


def assert_matches(
    actual: np.ndarray[Any, Any],
    expected: np.ndarray[Any, Any],
    dtype: cv.DType,
    *,
    atol: float | np.ndarray[Any, Any] = 0.0,
    ulps: float = 2.0,
) -> None:
    """Exact for bool and integers; floats within ``ulps`` of ``dtype`` plus ``atol``.

    NaN must meet NaN and infinities must match exactly.
    """
    assert actual.dtype == dtype.numpy, (actual.dtype, dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not (dtype.is_floating or dtype.is_complex):
        np.testing.assert_array_equal(actual, expected.astype(dtype.numpy))
        return
    info = _finfo(dtype)
    wide = np.complex128 if dtype.is_complex else np.float64
    got = actual.astype(wide)
    want = expected.astype(dtype.numpy).astype(wide)
    if dtype.is_complex:
        for part in (np.real, np.imag):
            _close(part(got), part(want), info, atol, ulps)
    else:
        _close(got, want, info, atol, ulps)


def _close(got: Any, want: Any, info: Any, atol: Any, ulps: float) -> None:
    tiny = float(info.smallest_normal)
    with np.errstate(all="ignore"):  # inf * 0 ulps is NaN, and is masked out below
        bound = np.abs(want) * float(info.eps) * ulps + tiny * 4 + atol
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    finite = ~(nan | inf)
    with np.errstate(all="ignore"):
        diff = np.abs(got - want)
    bad = finite & ~(diff <= bound)
    assert not bad.any(), (
        f"got {got[bad]}, want {want[bad]} (bound {np.broadcast_to(bound, bad.shape)[bad]})"
    )


def sum_atol(terms: np.ndarray[Any, Any], count: int, dtype: cv.DType | None) -> Any:
    """Absolute error bound of a running sum of ``count`` terms accumulated in ``dtype``."""
    if dtype is None or not (dtype.is_floating or dtype.is_complex):
        return 0.0
    eps = float(_finfo(dtype).eps)
    with np.errstate(all="ignore"):
        return 2 * max(count, 1) * eps * np.nan_to_num(np.abs(terms), posinf=0.0)


def check(
    carrier: type,
    name: str,
    operands: Sequence[Any],
    fields: dict[str, Any],
    *,
    atol: Any = 0.0,
) -> cv.OperationPlan:
    """Run ``name`` on ``carrier`` and compare every output with the reference; return the plan."""

    plan = resolve(name, operands, fields)
    actual = run(carrier, name, operands, fields)
    expected = reference(name, plan, fields, operands)
    assert len(actual) == len(expected) == len(plan.outputs)
    for got, want, dtype in zip(actual, expected, plan.outputs, strict=True):
        assert_matches(got, want, dtype, atol=atol)
    return plan


# The elementwise names, by arity: shared by the Generic and CPU elementwise tests.
UNARY = [
    "neg",
    "abs",
    "sign",
    "recip",
    "sqrt",
    "rsqrt",
    "exp",
    "exp2",
    "log",
    "log2",
    "sin",
    "cos",
    "erf",
    "floor",
    "ceil",
    "round",
    "logical_not",
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "softplus",
    "elu",
    "leaky_relu",
]
BINARY = [
    "add",
    "sub",
    "mul",
    "elementwise_mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "rem",
    "eq",
    "ne",
    "lt",
    "le",
]


def clamp_operands(data: st.DataObject, dtype: cv.DType) -> list[Any]:
    """``clamp`` operands: an input and two bounds, each a tensor, a scalar or absent."""
    trio = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=4))
    operands: list[Any] = [data.draw(arrays(dtype, trio.input_shapes[0]))]
    for shape in trio.input_shapes[1:]:
        form = data.draw(st.sampled_from(["tensor", "scalar", "none"]))
        if form == "tensor":
            operands.append(data.draw(arrays(dtype, shape)))
        elif form == "scalar":
            operands.append(data.draw(scalars(data.draw(st.sampled_from([int, float])))))
        else:
            operands.append(None)
    if operands[1] is None and operands[2] is None:
        operands[2] = 1  # clamp needs at least one bound
    return operands
