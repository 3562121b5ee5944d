"""End to end on Dask: the 2-layer MLP of the Generic training test, gradients from central VJPs.

The program, data and initial weights are the Generic test's; on DaskCarrier every forward and
backward operation runs on the cluster, with the same plans as on Generic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor_dask import DaskCarrier, _cluster
from conveyor_generic import Generic
from tests.generic import test_training as mlp


def _train(carrier: type, steps: int) -> tuple[list[float], list[tuple[str | None, Any]]]:
    x_values, y_values = mlp._problem()
    x = cv.tensor(x_values, dtype=cv.float32, carrier=carrier)
    y = cv.tensor(y_values, dtype=cv.float32, carrier=carrier)
    params = [
        cv.tensor(w, dtype=cv.float32, carrier=carrier, requires_grad=True)
        for w in mlp._initial_weights()
    ]
    losses: list[float] = []
    plans: list[tuple[str | None, Any]] = []
    for step in range(steps):
        loss = mlp._loss(params, x, y)
        if step == 0:
            plans = mlp._graph_plans(loss)
        loss.backward()
        losses.append(float(loss.item()))
        with cv.no_grad():
            updated = []
            for p in params:
                assert p.grad is not None and type(p.grad.carrier) is carrier
                fresh = F.sub(p, F.mul(p.grad, mlp.LEARNING_RATE)).detach()
                fresh.requires_grad = True
                updated.append(fresh)
        params = updated
    return losses, plans


def test_first_steps_run_generic_plans_and_agree() -> None:
    """Five steps on Dask: the same plans as Generic and the same losses (float32 noise)."""
    dask_losses, dask_plans = _train(DaskCarrier, 5)
    generic_losses, generic_plans = _train(Generic, 5)
    assert dask_plans == generic_plans
    np.testing.assert_allclose(dask_losses, generic_losses, rtol=1e-4)
    assert dask_losses[-1] < dask_losses[0]


@pytest.mark.slow
def test_mlp_reaches_the_loss_threshold_on_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full training run of the Generic test converges on Dask too.

    On dask's threaded scheduler: the same graphs, without the 150 x ~1 s of round trips to
    the workers (the five steps above run on the cluster; ``reconnect`` restores it after).
    """
    monkeypatch.setenv(_cluster.SCHEDULER_VARIABLE, "threads")
    _cluster.close()
    losses, _ = _train(DaskCarrier, mlp.STEPS)
    assert _cluster.active_session().address == "threads"  # type: ignore[union-attr]
    _cluster.close()
    assert losses[-1] < mlp.THRESHOLD < losses[0]
