"""DaskCarrier computes what CPU computes, plan for plan.

Every Dask task runs CPU's kernel of its name on its block (CPU itself is held to Generic, the
reference, by the CPU and conformance tests). For every plan DaskCarrier advertises, operands
are drawn for the plan's dtypes (and weak scalars), the public function runs on CPU and on
DaskCarrier, and the results must match: exactly for bool and integer outputs and for
elementwise names (the same kernel per block), within float rounding for sums, products and
contractions that dask accumulates in another order. A call CPU refuses must be refused on
Dask with the same exception type and message. The
quick test covers each name's homogeneous dtypes; the slow one spreads over every name's
mixed-dtype and scalar plans.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.types.dtypes import from_numpy
from conveyor.types.policy import enumerate_plans
from conveyor_dask import DaskCarrier
from conveyor_generic import CPU
from tests.generic.oracle import assert_matches

_ELEMENTWISE_BINARY = {
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "rem", "eq", "ne", "lt", "le",
    "elementwise_mul",
}  # fmt: skip
_AXIS1 = {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin"}
# Names whose dask form accumulates in another order than CPU's kernel.
_REORDERED = {"reduce_sum", "reduce_prod", "matmul", "conv_general"}
_SCALARS: dict[cv.DType, Any] = {cv.bool: True, cv.int64: 3, cv.float64: 1.5, cv.complex128: 1 - 2j}


def _advertised() -> list[cv.OperationPlan]:
    carrier = DaskCarrier.allocate(0, cv.float32)
    return [p for p in enumerate_plans() if carrier.supports_operation_plan(p)]


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: cv.DType) -> Any:
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.kind == "unsigned_integer":
        return rng.integers(0, 9, shape).astype(dtype.numpy)
    if dtype.is_integer:
        return rng.integers(-4, 5, shape).astype(dtype.numpy)
    if dtype.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype.numpy)
    return (rng.standard_normal(shape) * 2).astype(dtype.numpy)


def _shapes(name: str) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """Operand shapes (in role order) and options for one call of ``name``."""
    if name in _ELEMENTWISE_BINARY:
        return [(6, 7), (7,)], {}
    if name == "select":
        return [(6, 7), (6, 7), (7,)], {}
    if name == "clamp":
        return [(6, 7), (7,), (6, 7)], {}
    if name in _AXIS1:
        return [(6, 7)], {"axis": 1}
    if name == "cumsum":
        return [(6, 7)], {"axis": 0}
    if name == "sort":
        return [(6, 7)], {"axis": -1}
    if name == "topk":
        return [(6, 7)], {"k": 3, "axis": -1}
    if name == "matmul":
        return [(5, 3), (3, 4)], {}
    if name == "conv_general":
        return [(2, 3, 9), (4, 3, 3)], {}
    if name == "gather":
        return [(6, 7), (6, 3)], {"axis": 1}
    if name in ("scatter", "scatter_add"):
        return [(6, 7), (6, 3), (6, 3)], {"axis": 1}
    if name in ("inv", "cholesky", "eigh"):
        return [(4, 4)], {}
    if name == "solve":
        return [(4, 4), (4, 2)], {}
    return [(6, 7)], {}  # unary names, activations, svd and qr


def _positive_definite(a: Any) -> Any:
    """``a a^H + 4 I`` (invertible, positive definite); bool or integer: unit lower triangular."""
    if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":
        return np.tril(np.ones(a.shape)).astype(a.dtype)
    wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    return (wide @ np.conj(wide.T) + 4 * np.eye(a.shape[0])).astype(a.dtype)


def _operands(plan: cv.OperationPlan, seed: int) -> tuple[list[Any], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    shapes, fields = _shapes(plan.operation)
    operands: list[Any] = []
    for operand, shape in zip(plan.operands, shapes, strict=True):
        if operand.dtype is None:
            operands.append(None)
        elif operand.weak:
            operands.append(_SCALARS[operand.dtype])
        elif operand.role == "index":
            extent = shapes[0][fields["axis"]]
            operands.append(rng.integers(0, extent, shape).astype(operand.dtype.numpy))
        else:
            operands.append(_values(rng, shape, operand.dtype))
    if plan.operation in ("inv", "cholesky", "eigh", "solve"):
        operands[0] = _positive_definite(operands[0])
    if plan.accumulator_dtype is not None and "accumulator_dtype" in _accepts(plan.operation):
        default = cv.resolve_plan(plan.operation, *_keys(plan)).accumulator_dtype
        if plan.accumulator_dtype is not default:
            fields["accumulator_dtype"] = plan.accumulator_dtype
    return operands, fields


def _accepts(name: str) -> set[str]:
    return set(cv.OperationExecutionOptions(name).__class__.__slots__ or ()) | (
        {"accumulator_dtype"} if name in ("reduce_sum", "reduce_prod", "matmul") else set()
    )


def _keys(plan: cv.OperationPlan) -> list[Any]:
    return [
        None if o.dtype is None else (_SCALARS[o.dtype] if o.weak else o.dtype)
        for o in plan.operands
    ]


def _call(carrier: type, name: str, operands: list[Any], fields: dict[str, Any]) -> Any:
    tensors = [
        cv.tensor(v, dtype=from_numpy(v.dtype), carrier=carrier) if isinstance(v, np.ndarray) else v
        for v in operands
    ]
    try:
        result = getattr(F, name)(*tensors, **fields)
    except Exception as exc:
        return exc
    outputs = result if isinstance(result, tuple) else (result,)
    assert all(type(out.carrier) is carrier for out in outputs)
    return tuple(np.array(out.numpy()) for out in outputs)


def check_plan(plan: cv.OperationPlan, seed: int = 0) -> None:
    operands, fields = _operands(plan, seed)
    want = _call(CPU, plan.operation, operands, fields)
    got = _call(DaskCarrier, plan.operation, operands, fields)
    if isinstance(want, Exception):
        assert type(got) is type(want), (got, want)
        assert str(got).replace("DaskCarrier", "CPU") == str(want)
        return
    assert not isinstance(got, Exception), got
    for actual, expected, dtype in zip(got, want, plan.outputs, strict=True):
        if plan.operation in _REORDERED and (dtype.is_floating or dtype.is_complex):
            scale = float(np.max(np.abs(expected), initial=1.0))
            assert_matches(actual, expected, dtype, atol=scale * 64 * _eps(dtype))
        else:
            assert_matches(actual, expected, dtype, ulps=0)


def _eps(dtype: cv.DType) -> float:
    return float(np.finfo(dtype.numpy).eps)


# One dtype of each kind and width class keeps the quick sweep within its time budget.
_QUICK: tuple[cv.DType, ...] = (cv.bool, cv.uint8, cv.int32, cv.float16, cv.float64, cv.complex64)


def _homogeneous() -> list[Any]:
    """One plan per (name, quick dtype): the plans whose value operands share that dtype."""
    chosen: dict[tuple[str, Any], cv.OperationPlan] = {}
    for plan in _advertised():
        dtypes = {o.dtype for o in plan.operands if o.dtype is not None and o.role != "index"}
        values = {o.dtype for o in plan.operands if o.role in ("input", "other", "src")}
        if any(o.weak for o in plan.operands) or len(values) != 1 or values - set(_QUICK):
            continue
        key = (plan.operation, next(iter(values)))
        if plan.accumulator_dtype is None or len(dtypes) >= 1:
            chosen.setdefault(key, plan)
    return [pytest.param(p, id=f"{p.operation}-{k[1].name}") for k, p in chosen.items()]


def _weak_scalars() -> list[Any]:
    """One plan per name with a weak scalar operand."""
    chosen: dict[str, cv.OperationPlan] = {}
    for plan in _advertised():
        if any(o.weak for o in plan.operands):
            chosen.setdefault(plan.operation, plan)
    return [pytest.param(p, id=f"{p.operation}-scalar") for p in chosen.values()]


@pytest.mark.parametrize("plan", _homogeneous() + _weak_scalars())
def test_homogeneous_plan_matches_cpu(plan: cv.OperationPlan) -> None:
    """Each advertised name and operand dtype (and a scalar form) gives CPU's values."""
    check_plan(plan)


# Plans per name in the slow sweep: every plan of a name with at most this many, else an even
# spread of them (clamp alone has thousands of dtype combinations, all through one kernel).
_PER_NAME = 60


def _spread() -> list[cv.OperationPlan]:
    by_name: dict[str, list[cv.OperationPlan]] = {}
    for plan in _advertised():
        by_name.setdefault(plan.operation, []).append(plan)
    chosen = []
    for plans in by_name.values():
        step = max(1, -(-len(plans) // _PER_NAME))
        chosen.extend(plans[::step])
    return chosen


@pytest.mark.slow
def test_advertised_plans_across_dtype_combinations_match_cpu() -> None:
    """Up to 60 plans per name, spread over its dtype combinations, give CPU's values."""
    from concurrent.futures import ThreadPoolExecutor

    plans = _spread()
    assert plans
    # Each call waits mostly on the cluster's round trip, so a few threads keep it busy.
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(check_plan, plans, range(len(plans))))


def test_advertised_plans_have_central_definitions() -> None:
    """Only names that can dispatch are advertised; each advertised name executes."""
    from conveyor.engine.operation_definitions import operation_definition

    names = {p.operation for p in _advertised()}
    assert names
    assert all(operation_definition(n) is not None for n in names)
