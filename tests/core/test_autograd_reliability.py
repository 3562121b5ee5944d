"""Autograd under hostile use: concurrent passes into a shared leaf, refused passes, retries."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import conveyor as cv
from tests.core.carriers import ArrayCarrier

THREADS = 4
PASSES = 100
JOIN_TIMEOUT_S = 60.0


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so a read-add-write race shows."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def leaf(values: list[float]) -> cv.Tensor:
    return cv.tensor(values, dtype=cv.float64, carrier=ArrayCarrier, requires_grad=True)


@pytest.mark.usefixtures("frequent_switches")
class TestConcurrentBackward:
    def test_concurrent_backward_into_shared_leaf_gives_exact_sum(self) -> None:
        """Four threads each running backward passes into one leaf leave exactly the sum."""
        x = leaf([0.0] * 16)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(PASSES):
                    (x * 1.0).sum().backward()
            except BaseException as exc:  # handed back to the test thread
                errors.append(exc)

        workers = [threading.Thread(target=work, daemon=True) for _ in range(THREADS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
        assert not any(worker.is_alive() for worker in workers), "a backward thread hung"
        assert errors == []
        assert x.grad is not None
        np.testing.assert_array_equal(x.grad.numpy(), np.full(16, float(THREADS * PASSES)))


class TestRefusedBackwardIsAtomic:
    def test_refused_backward_writes_no_grad_and_keeps_the_graph(self) -> None:
        """A pass refused while publishing writes no leaf's .grad and releases nothing."""
        a = leaf([1.0, 2.0])
        b = leaf([3.0, 4.0])
        y = (a * b).sum()
        wrong = cv.tensor([1.0, 2.0, 3.0], dtype=cv.float64, carrier=ArrayCarrier)
        b.grad = wrong

        with pytest.raises(
            RuntimeError,
            match=(
                r"^backward: \.grad of a tensor of shape \(2,\) was set to a tensor of shape "
                r"\(3,\); set \.grad = None"
            ),
        ):
            y.backward()

        assert a.grad is None
        assert b.grad is wrong
        np.testing.assert_array_equal(wrong.numpy(), [1.0, 2.0, 3.0])

    def test_refused_backward_can_be_retried(self) -> None:
        """After the cause of a refusal is fixed, the same backward (no retain_graph) succeeds."""
        a = leaf([1.0, 2.0])
        b = leaf([3.0, 4.0])
        y = (a * b).sum()
        a.grad = cv.tensor([1.0, 2.0, 3.0], dtype=cv.float64, carrier=ArrayCarrier)
        with pytest.raises(RuntimeError, match="was set to a tensor of shape"):
            y.backward()

        a.grad = None
        y.backward()

        assert a.grad is not None and b.grad is not None
        np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0])
        np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0])
