"""End to end: a 2-layer MLP learns a generated regression problem on Generic and on CPU.

Both carriers run the same program from the same initial weights; they must reach the loss
threshold and execute identical plans (read from the autograd graph of the first step).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_generic import CPU, Generic

STEPS = 150
LEARNING_RATE = 0.1
THRESHOLD = 0.05


def _carrier_class(name: str) -> type:
    return Generic if name == "generic" else CPU


@pytest.fixture(params=["generic", "cpu"])
def carrier(request: pytest.FixtureRequest) -> type:
    return _carrier_class(request.param)


def _problem() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """y = sin(x . a) + (x . b) / 2 on 8 features: smooth, non-linear, learnable."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 8)).astype(np.float32)
    a, b = rng.standard_normal(8) / 3, rng.standard_normal(8) / 3
    y = (np.sin(x @ a) + 0.5 * (x @ b)).astype(np.float32)[:, None]
    return x, y


def _initial_weights() -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(11)
    return [
        (rng.standard_normal((8, 32)) / np.sqrt(8)).astype(np.float32),
        np.zeros(32, np.float32),
        (rng.standard_normal((32, 1)) / np.sqrt(32)).astype(np.float32),
        np.zeros(1, np.float32),
    ]


def _loss(params: list[cv.Tensor], x: cv.Tensor, y: cv.Tensor) -> cv.Tensor:
    w1, b1, w2, b2 = params
    hidden = F.tanh(F.add(F.matmul(x, w1), b1))
    error = F.sub(F.add(F.matmul(hidden, w2), b2), y)
    return F.div(F.reduce_sum(F.mul(error, error)), float(y.shape[0]))  # type: ignore[no-any-return]


def _graph_plans(root: cv.Tensor) -> list[tuple[str | None, Any]]:
    """(name, plan) of every operation in the autograd graph of ``root``, in a fixed order."""
    plans, stack, seen = [], [root.grad_fn], set()
    while stack:
        op = stack.pop()
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        plans.append((op._operation_name, op.plan))
        stack.extend(t.grad_fn for t in op._grad_inputs)
    return plans


def train(carrier: type) -> tuple[list[float], list[tuple[str | None, Any]]]:
    x_values, y_values = _problem()
    x = cv.tensor(x_values, dtype=cv.float32, carrier=carrier)
    y = cv.tensor(y_values, dtype=cv.float32, carrier=carrier)
    params = [
        cv.tensor(w, dtype=cv.float32, carrier=carrier, requires_grad=True)
        for w in _initial_weights()
    ]
    losses: list[float] = []
    plans: list[tuple[str | None, Any]] = []
    for step in range(STEPS):
        loss = _loss(params, x, y)
        if step == 0:
            plans = _graph_plans(loss)
        loss.backward()
        losses.append(float(loss.item()))
        with cv.no_grad():
            updated = []
            for p in params:
                assert p.grad is not None
                fresh = F.sub(p, F.mul(p.grad, LEARNING_RATE)).detach()
                fresh.requires_grad = True
                updated.append(fresh)
        params = updated
    return losses, plans


def test_mlp_reaches_the_loss_threshold(carrier: type) -> None:
    """Full-batch gradient descent drives the mean squared error under the threshold."""
    losses, _ = train(carrier)
    assert losses[-1] < THRESHOLD < losses[0]
    assert all(np.isfinite(losses))


def test_carriers_run_identical_plans_and_agree() -> None:
    """Generic and CPU execute the same plans and reach the same losses (within float32 noise)."""
    generic_losses, generic_plans = train(_carrier_class("generic"))
    cpu_losses, cpu_plans = train(_carrier_class("cpu"))
    assert generic_plans == cpu_plans
    np.testing.assert_allclose(cpu_losses, generic_losses, rtol=1e-3)
