"""Demo step: the trained network's forward pass on sibling carriers, compared with CPU.

* ``shm``: the weights and the test images go into shared-memory tensors; a second process
  attaches to them by name, runs the forward pass on the shared-memory carrier and writes the
  logits into a shared output tensor the first process reads, without a copy.
* ``dask``: the same forward pass on the Dask carrier's local cluster.

A carrier whose plugin is not installed is reported with the command that installs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

import conveyor as cv
from conveyor import plugins
from conveyor_demo._train import Digits, conveyor_logits

__all__ = ["on_dask", "on_shared_memory"]

_Array = np.ndarray[Any, Any]
_Handle = tuple[str, tuple[int, ...]]  # (segment name, shape) of a float32 shm tensor


def _installed(name: str) -> type[cv.Carrier] | None:
    try:
        return plugins.host().carrier(name)
    except (ValueError, plugins.PluginError):  # unknown name, or its plugin failed
        return None


def _missing(name: str, distribution: str) -> dict[str, Any]:
    return {
        "skipped": f"the {name!r} carrier is not installed",
        "fix": f"pip install {distribution} (or pip install 'conveyor[{name}]')",
    }


def _attach(shm_class: Any, handle: _Handle) -> cv.Tensor:
    name, shape = handle
    carrier = shm_class.attach(name, int(np.prod(shape)), cv.float32)
    return cv.Tensor(carrier, cv.Layout(shape))


def _child(params: Sequence[_Handle], x: _Handle, out: _Handle) -> None:
    """Runs in the second process: attach, compute on shm, write the logits into ``out``."""
    shm_class = plugins.host().carrier("shm")
    weights = [_attach(shm_class, h) for h in params]
    result = _attach(shm_class, out)
    with cv.no_grad():
        logits = conveyor_logits(weights, _attach(shm_class, x))
    result[...] = logits.numpy()


def on_shared_memory(weights: Sequence[_Array], data: Digits, reference: _Array) -> dict[str, Any]:
    """Run the forward pass in a second process attached to shared-memory tensors."""
    shm_class = _installed("shm")
    if shm_class is None:
        return _missing("shm", "conveyor-shm")
    tensors = [cv.tensor(w, carrier="shm") for w in weights]
    x = cv.tensor(data.test_x, carrier="shm")
    out = cv.zeros(reference.shape, carrier="shm")

    def handle(t: cv.Tensor) -> _Handle:
        return (t.carrier.segment_name, t.shape)  # type: ignore[attr-defined]  # shm carrier

    # A fresh interpreter, not a multiprocessing child: it must not share this process's
    # resource tracker, which owns (and unlinks) the segments this process created.
    request = json.dumps([[handle(t) for t in tensors], handle(x), handle(out)])
    child = subprocess.run(
        [sys.executable, "-m", "conveyor_demo._siblings", request], timeout=120, check=False
    )
    logits = out.numpy().copy()
    for t in (*tensors, x, out):
        t.carrier.release()
    return {"second_process_exit": child.returncode, **_compare(logits, reference)}


def _compare(values: _Array, reference: _Array) -> dict[str, Any]:
    """Bit-identical, or equal within float32 rounding (another summation order)."""
    return {
        "max_abs_difference": float(np.max(np.abs(values - reference))),
        "identical": bool(np.array_equal(values, reference)),
        "agrees": bool(np.allclose(values, reference, rtol=1e-5, atol=1e-5)),
    }


def on_dask(weights: Sequence[_Array], data: Digits, reference: _Array) -> dict[str, Any]:
    """Run the forward pass on the Dask carrier's (embedded) local cluster."""
    if _installed("dask") is None:
        return _missing("dask", "conveyor-dask")
    params = [cv.tensor(w, carrier="dask") for w in weights]
    with cv.no_grad():
        logits = cv.move(conveyor_logits(params, cv.tensor(data.test_x, carrier="dask")), "cpu")
    return _compare(logits.numpy(), reference)


if __name__ == "__main__":  # the second process of ``on_shared_memory``
    _params, _x, _out = json.loads(sys.argv[1])
    _child([(n, tuple(s)) for n, s in _params], (_x[0], tuple(_x[1])), (_out[0], tuple(_out[1])))
