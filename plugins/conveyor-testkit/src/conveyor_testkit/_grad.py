"""Gradient checks: the central VJP run through the carrier's own kernels, against an oracle.

A carrier never writes gradient math, but its backward runs the VJP rules on its own kernels, so
a wrong kernel used only by a VJP (or a carrier overriding ``backward``) gives wrong gradients
while every forward check passes. Each check seeds the first output with a random cotangent on
smooth inputs (positive, away from kinks) and compares the input gradients with Generic's, or,
for Generic itself, with central differences in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import conveyor as cv
from conveyor.sdk import OperationPlan
from conveyor_testkit._compare import Tolerance, _eps, compare
from conveyor_testkit._inputs import Case, cases_for, options_for, plan_text
from conveyor_testkit._run import PlanFailure, describe_error
from conveyor_testkit._surface import Surface
from conveyor_testkit._target import make_tensor

__all__ = ["check_gradients", "gradient_plans"]

_STEP = 1e-6
_MAX_ELEMENTS = 64  # numeric differentiation costs two calls per element
# Names whose inputs must keep their structure (invertible, positive definite): their builder's
# values are finite and well conditioned already, so they are used as they are.
_STRUCTURED = frozenset({"inv", "cholesky", "solve", "qr", "eigh", "svd"})
# Names that read one triangle of a symmetric input, whose VJP is the symmetrised gradient: the
# element-wise differences are symmetrised to compare (perturbing A_ij moves only one triangle).
_SYMMETRIC = frozenset({"cholesky", "eigh"})


def gradient_plans(plans: list[OperationPlan]) -> list[OperationPlan]:
    """One plan per (compute dtype, scalar pattern) with float32 or float64 compute and output."""
    picked: dict[Any, OperationPlan] = {}
    for plan in plans:
        if plan.compute in (cv.float32, cv.float64) and plan.outputs[0] is plan.compute:
            key = (plan.compute, tuple(o.weak for o in plan.operands), plan.accumulator_dtype)
            picked.setdefault(key, plan)
    return list(picked.values())


def _smooth_case(plan: OperationPlan, seed: int, surface: Surface | None) -> Case | None:
    """The plan's first small, non-empty case (inside the direct ``surface``, when there is
    one) with its floating tensors made smooth."""
    rng = np.random.default_rng([seed, len(plan_text(plan))])
    for case in cases_for(plan, seed):
        if surface is not None and surface.refuses(plan, case) is not None:
            continue
        arrays = [v for v in case.operands if isinstance(v, np.ndarray)]
        if not arrays or any(a.size == 0 or a.size > _MAX_ELEMENTS for a in arrays):
            continue
        if plan.operation in _STRUCTURED:
            return case
        operands = tuple(
            np.asarray(rng.uniform(0.5, 1.5, v.shape), v.dtype)
            if isinstance(v, np.ndarray) and v.dtype.kind == "f"
            else v
            for v in case.operands
        )
        return Case(case.label, operands, case.fields)
    return None


def _loss_grads(
    cls: type[cv.Carrier],
    plan: OperationPlan,
    case: Case,
    weights: Any,
    results: type[cv.Carrier] | None = None,
) -> list[Any]:
    """d sum(weights * output 0) / d each floating tensor operand, on ``cls`` (whose outputs
    live on ``results``, when a composite's results live on its compute class)."""
    inputs = [
        make_tensor(cls, v, o.dtype) if isinstance(v, np.ndarray) else v
        for v, o in zip(case.operands, plan.operands, strict=True)
    ]
    wants = [x for x in inputs if isinstance(x, cv.Tensor) and x.dtype.is_floating]
    for x in wants:
        x.requires_grad = True
    first = next(x for x in inputs if isinstance(x, cv.Tensor))
    result = first.carrier.dispatch_op(plan.operation).forward(
        *inputs, options=options_for(plan, case)
    )
    out = result[0] if isinstance(result, tuple) else result
    weights = np.asarray(weights, out.dtype.numpy)
    out.backward(make_tensor(cls if results is None else results, weights, out.dtype))
    return [None if x.grad is None else np.array(x.grad.numpy()) for x in wants]


def _numeric(oracle: type[cv.Carrier], plan: OperationPlan, case: Case, weights: Any) -> list[Any]:
    """Central differences of sum(weights * output 0), in float64, on the oracle."""

    def loss(operands: tuple[Any, ...]) -> float:
        inputs = [
            make_tensor(oracle, v, o.dtype) if isinstance(v, np.ndarray) else v
            for v, o in zip(operands, plan.operands, strict=True)
        ]
        first = next(x for x in inputs if isinstance(x, cv.Tensor))
        with cv.no_grad():
            result = first.carrier.dispatch_op(plan.operation).forward(
                *inputs, options=options_for(plan, case)
            )
        out = result[0] if isinstance(result, tuple) else result
        return float(np.sum(np.asarray(weights) * out.numpy()))

    grads = []
    for i, v in enumerate(case.operands):
        if not (isinstance(v, np.ndarray) and v.dtype.kind == "f"):
            continue
        g = np.zeros(v.shape)
        for index in np.ndindex(*v.shape):
            plus, minus = v.copy(), v.copy()
            plus[index] += _STEP
            minus[index] -= _STEP
            ops_plus = (*case.operands[:i], plus, *case.operands[i + 1 :])
            ops_minus = (*case.operands[:i], minus, *case.operands[i + 1 :])
            g[index] = (loss(ops_plus) - loss(ops_minus)) / (2 * _STEP)
        if plan.operation in _SYMMETRIC and i == 0:
            g = (g + np.swapaxes(g, -1, -2)) / 2
        grads.append(g)
    return grads


def check_gradients(
    target: type[cv.Carrier],
    oracle: type[cv.Carrier],
    plan: OperationPlan,
    seed: int,
    surface: Surface | None = None,
) -> PlanFailure | None:
    """The first gradient problem of ``plan`` on ``target``, or ``None`` (also when no case fits).

    Generic (``target is oracle``) is checked against central differences on float64 plans only;
    a composite with a direct ``surface`` on a case inside it.
    """
    independent = target is oracle
    if independent and plan.compute is not cv.float64:
        return None
    case = _smooth_case(plan, seed, surface)
    if case is None:
        return None
    text, name = plan_text(plan), plan.operation
    with cv.no_grad():
        probe = _loss_shape(oracle, plan, case)
    weights = np.random.default_rng(seed).uniform(-1.0, 1.0, probe)
    try:
        want = (
            _numeric(oracle, plan, case, weights)
            if independent
            else _loss_grads(oracle, plan, case, weights)
        )
    except Exception:
        return None  # the oracle cannot differentiate this case: nothing to compare
    try:
        results = None if surface is None else surface.results
        got = _loss_grads(target, plan, case, weights, results)
    except Exception as exc:
        detail = f"backward raised {describe_error(exc)}; the oracle differentiates this case"
        return PlanFailure(name, text, case.label, "gradients: " + detail)
    eps = 1e-6 if independent else _eps(plan.compute)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g is None or w is None:
            if (g is None) != (w is None):
                detail = (
                    f"gradients: input {k} got {'none' if g is None else 'one'}, expected the other"
                )
                return PlanFailure(name, text, case.label, detail)
            continue
        scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1.0)
        tol = Tolerance(64 * eps, 64 * eps * scale * math.sqrt(max(w.size, 1)))
        mismatch = compare(g.astype(np.float64), np.asarray(w, np.float64), tol)
        if mismatch is not None:
            what = "central differences" if independent else "Generic's"
            detail = f"gradients of input {k} differ from {what}: {mismatch.text}"
            return PlanFailure(name, text, case.label, detail, mismatch.max_abs_error)
    return None


def _loss_shape(oracle: type[cv.Carrier], plan: OperationPlan, case: Case) -> tuple[int, ...]:
    inputs = [
        make_tensor(oracle, v, o.dtype) if isinstance(v, np.ndarray) else v
        for v, o in zip(case.operands, plan.operands, strict=True)
    ]
    first = next(x for x in inputs if isinstance(x, cv.Tensor))
    result = first.carrier.dispatch_op(plan.operation).forward(
        *inputs, options=options_for(plan, case)
    )
    out = result[0] if isinstance(result, tuple) else result
    return tuple(out.shape)
