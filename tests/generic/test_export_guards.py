"""Exports never let a write bypass the version counter that guards saved tensors.

A NumPy export cannot be made writeable again, and a DLPack export of a tensor that a live graph
saved for backward (or that requires grad) is a copy: PyTorch ignores DLPack's read-only flag,
so only a copy keeps ``torch.from_dlpack(t)[0] = 50`` from corrupting the gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_generic.cpu import to_dlpack

CARRIERS = [pytest.param(CPU, id="CPU"), pytest.param(Generic, id="Generic")]


def _graph(carrier: type[cv.Carrier]) -> tuple[cv.Tensor, cv.Tensor, cv.Tensor]:
    """x requires grad, w is saved for backward by x * w; returns (x, w, sum(x * w))."""
    x = cv.tensor([1.0, 2.0, 3.0], cv.float64, carrier=carrier, requires_grad=True)
    w = cv.tensor([4.0, 5.0, 6.0], cv.float64, carrier=carrier)
    return x, w, (x * w).sum()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_numpy_export_cannot_be_made_writeable(carrier: type[cv.Carrier]) -> None:
    """Setting WRITEABLE on an export fails, so the saved tensor and its gradient stay right."""
    x, w, y = _graph(carrier)
    exported = w.numpy()
    with pytest.raises(ValueError, match="cannot set WRITEABLE flag to True"):
        exported.flags.writeable = True
    view = np.asarray(w)[1:]
    with pytest.raises(ValueError, match="cannot set WRITEABLE flag to True"):
        view.flags.writeable = True
    y.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0, 6.0])


def test_dlpack_export_of_saved_tensor_is_a_copy_for_torch() -> None:
    """torch.from_dlpack of a tensor saved for backward gets a copy; writes never reach it."""
    torch: Any = pytest.importorskip("torch", reason="needs PyTorch as a DLPack consumer")
    x, w, y = _graph(CPU)
    shared = torch.from_dlpack(w)
    shared[0] = 50.0
    np.testing.assert_array_equal(w.numpy(), [4.0, 5.0, 6.0])
    y.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0, 6.0])


def test_dlpack_export_of_grad_leaf_is_a_copy_for_torch() -> None:
    """A leaf that requires grad is exported as a copy too (in-place writes are refused)."""
    torch: Any = pytest.importorskip("torch", reason="needs PyTorch as a DLPack consumer")
    x, _, _ = _graph(CPU)
    torch.from_dlpack(x)[0] = 50.0
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])


class _Capsule:
    """Hands NumPy a capsule made elsewhere (as torch.utils.dlpack.from_dlpack takes one)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def test_to_dlpack_legacy_capsule_of_saved_tensor_is_a_copy() -> None:
    """conveyor_generic.cpu.to_dlpack (a legacy capsule, which cannot say read-only) copies a
    tensor saved for backward, and a grad leaf, so nothing written through it reaches them."""
    x, w, y = _graph(CPU)

    exported = np.from_dlpack(_Capsule(to_dlpack(w)))
    leaf = np.from_dlpack(_Capsule(to_dlpack(x)))

    assert not np.shares_memory(exported, w.numpy())
    assert not np.shares_memory(leaf, x.numpy())
    y.backward()
    assert np.shares_memory(np.from_dlpack(_Capsule(to_dlpack(w))), w.numpy())  # released


def test_to_dlpack_write_through_torch_never_changes_the_gradient() -> None:
    """torch.utils.dlpack.from_dlpack(to_dlpack(w))[0] = 50 leaves w and x.grad right."""
    torch: Any = pytest.importorskip("torch", reason="needs PyTorch as a DLPack consumer")
    x, w, y = _graph(CPU)

    torch.utils.dlpack.from_dlpack(to_dlpack(w))[0] = 50.0

    np.testing.assert_array_equal(w.numpy(), [4.0, 5.0, 6.0])
    y.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0, 6.0])


def test_dlpack_export_shares_memory_once_graph_released() -> None:
    """After backward released the graph, the export is zero copy again (read-only view)."""
    _, w, y = _graph(CPU)
    assert not np.shares_memory(np.from_dlpack(w), w.numpy())
    y.backward()
    shared = np.from_dlpack(w)
    assert np.shares_memory(shared, w.numpy())
    assert not shared.flags.writeable


def test_dlpack_copy_false_for_graph_tensor_buffer_error() -> None:
    """A consumer insisting on no copy is refused for a tensor in a graph, with the fix."""
    _, w, _ = _graph(CPU)
    with pytest.raises(BufferError) as info:
        w.__dlpack__(max_version=(1, 0), copy=False)
    assert str(info.value) == (
        "__dlpack__ on CPU: copy=False, but the tensor is part of an autograd graph and is only "
        "exported as a copy; pass copy=None or detach a clone first"
    )
