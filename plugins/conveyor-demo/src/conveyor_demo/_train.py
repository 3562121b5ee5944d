"""Demo step: a digit classifier trained through Conveyor's public API, beside NumPy and PyTorch.

The data set is the 8x8 handwritten digits that ship inside scikit-learn, so nothing is
downloaded. Every framework trains the same network (64-128-10, ReLU, softmax cross-entropy,
plain minibatch SGD) from the same initial weights on the same batches, so the steps/s figures
compare frameworks and not recipes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import attrs
import numpy as np

import conveyor as cv

__all__ = ["Digits", "TrainResult", "accuracy", "load_digits", "train_conveyor", "train_numpy"]

_Array = np.ndarray[Any, Any]
HIDDEN = 128
BATCH = 32
LEARNING_RATE = 0.1


@attrs.frozen
class Digits:
    """The digits split into a training and a test set, features scaled to [0, 1]."""

    train_x: _Array
    train_y: _Array
    test_x: _Array
    test_y: _Array


@attrs.frozen
class TrainResult:
    """What one framework's training run produced: its curves, its speed, its final weights."""

    framework: str
    losses: tuple[float, ...]  # mean training loss per epoch
    accuracies: tuple[float, ...]  # test accuracy after each epoch
    steps_per_second: float
    weights: tuple[_Array, ...]

    @property
    def accuracy(self) -> float:
        return self.accuracies[-1]


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """Load scikit-learn's bundled digits (1,797 images) and split them reproducibly."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    x = (bunch.data / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], y[train], x[test], y[test])


def initial_weights(seed: int = 1) -> tuple[_Array, ...]:
    """He-initialised weights and zero biases for the 64-128-10 network."""
    rng = np.random.default_rng(seed)
    return (
        (rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64)).astype(np.float32),
        np.zeros(HIDDEN, np.float32),
        (rng.standard_normal((HIDDEN, 10)) * np.sqrt(2 / HIDDEN)).astype(np.float32),
        np.zeros(10, np.float32),
    )


def batches(n: int, epoch: int, seed: int = 2) -> Iterator[_Array]:
    """The index batches of one epoch: a fresh permutation per epoch, shared by all frameworks."""
    order = np.random.default_rng((seed, epoch)).permutation(n)
    for start in range(0, n, BATCH):
        yield order[start : start + BATCH]


def accuracy(logits: _Array, labels: _Array) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def _one_hot(labels: _Array) -> _Array:
    return np.eye(10, dtype=np.float32)[labels]


def _forward_numpy(weights: Sequence[_Array], x: _Array) -> _Array:
    w1, b1, w2, b2 = weights
    logits: _Array = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    return logits


def _run(
    framework: str,
    data: Digits,
    epochs: int,
    step: Callable[[_Array, _Array], float],
    logits: Callable[[_Array], _Array],
    weights: Callable[[], tuple[_Array, ...]],
    progress: Callable[[int], None],
) -> TrainResult:
    losses: list[float] = []
    accuracies: list[float] = []
    steps, seconds = 0, 0.0
    for epoch in range(epochs):
        epoch_losses = []
        start = time.perf_counter()
        for index in batches(len(data.train_y), epoch):
            epoch_losses.append(step(data.train_x[index], data.train_y[index]))
            steps += 1
        seconds += time.perf_counter() - start
        losses.append(float(np.mean(epoch_losses)))
        accuracies.append(accuracy(logits(data.test_x), data.test_y))
        progress(1)
    return TrainResult(framework, tuple(losses), tuple(accuracies), steps / seconds, weights())


def train_numpy(data: Digits, epochs: int, progress: Callable[[int], None]) -> TrainResult:
    """The same network in NumPy alone, with the backward pass written out by hand."""
    w1, b1, w2, b2 = (w.copy() for w in initial_weights())

    def step(x: _Array, labels: _Array) -> float:
        nonlocal w1, b1, w2, b2
        pre = x @ w1 + b1
        hidden = np.maximum(pre, 0)
        out = hidden @ w2 + b2
        shifted = out - out.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        n = len(labels)
        loss = -float(np.sum(_one_hot(labels) * logp)) / n
        d_out = (np.exp(logp) - _one_hot(labels)) / n
        d_hidden = (d_out @ w2.T) * (pre > 0)
        w2 -= LEARNING_RATE * (hidden.T @ d_out)
        b2 -= LEARNING_RATE * d_out.sum(axis=0)
        w1 -= LEARNING_RATE * (x.T @ d_hidden)
        b1 -= LEARNING_RATE * d_hidden.sum(axis=0)
        return loss

    return _run(
        "numpy",
        data,
        epochs,
        step,
        lambda x: _forward_numpy((w1, b1, w2, b2), x),
        lambda: (w1, b1, w2, b2),
        progress,
    )


def conveyor_logits(params: Sequence[cv.Tensor], x: cv.Tensor) -> cv.Tensor:
    """The network's forward pass through Conveyor's public functions."""
    w1, b1, w2, b2 = params
    return cv.add(cv.matmul(cv.relu(cv.add(cv.matmul(x, w1), b1)), w2), b2)


def _cross_entropy(logits: cv.Tensor, one_hot: cv.Tensor) -> cv.Tensor:
    """Mean softmax cross-entropy, shifted by the (constant) row maximum for stability."""
    shifted = cv.sub(logits, logits.max(axis=1, keepdims=True).detach())
    log_norm = cv.log(cv.exp(shifted).sum(axis=1, keepdims=True))
    picked = cv.mul(one_hot, cv.sub(shifted, log_norm)).sum()
    return cv.div(cv.neg(picked), float(logits.shape[0]))


def train_conveyor(
    data: Digits, epochs: int, progress: Callable[[int], None], carrier: str = "cpu"
) -> TrainResult:
    """Train through ``cv`` functions and autograd on ``carrier``."""
    params = [cv.tensor(w, carrier=carrier, requires_grad=True) for w in initial_weights()]

    def step(x: _Array, labels: _Array) -> float:
        nonlocal params
        loss = _cross_entropy(
            conveyor_logits(params, cv.tensor(x, carrier=carrier)),
            cv.tensor(_one_hot(labels), carrier=carrier),
        )
        loss.backward()
        with cv.no_grad():
            fresh = []
            for p in params:
                assert p.grad is not None  # every parameter is on the loss's graph
                updated = cv.sub(p, cv.mul(p.grad, LEARNING_RATE)).detach()
                updated.requires_grad = True
                fresh.append(updated)
        params = fresh
        return float(loss.item())

    def logits(x: _Array) -> _Array:
        with cv.no_grad():
            return conveyor_logits(params, cv.tensor(x, carrier=carrier)).numpy()

    return _run(
        "conveyor",
        data,
        epochs,
        step,
        logits,
        lambda: tuple(p.detach().numpy().copy() for p in params),
        progress,
    )


def train_torch(data: Digits, epochs: int, progress: Callable[[int], None]) -> TrainResult | None:
    """The same network in PyTorch eager mode, or ``None`` when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(max(1, torch.get_num_threads()))
    params = [torch.tensor(w, requires_grad=True) for w in initial_weights()]

    def step(x: _Array, labels: _Array) -> float:
        w1, b1, w2, b2 = params
        out = torch.relu(torch.from_numpy(x) @ w1 + b1) @ w2 + b2
        loss = torch.nn.functional.cross_entropy(out, torch.from_numpy(labels))
        cast(Any, loss).backward()  # Any: torch leaves backward unannotated
        with torch.no_grad():
            for p in params:
                assert p.grad is not None
                p -= LEARNING_RATE * p.grad
                p.grad = None
        return float(loss.item())

    def logits(x: _Array) -> _Array:
        with torch.no_grad():
            w1, b1, w2, b2 = params
            logits: _Array = (torch.relu(torch.from_numpy(x) @ w1 + b1) @ w2 + b2).numpy()
            return logits

    return _run(
        "torch",
        data,
        epochs,
        step,
        logits,
        lambda: tuple(p.detach().numpy().copy() for p in params),
        progress,
    )
