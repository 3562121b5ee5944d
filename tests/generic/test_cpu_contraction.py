"""CPU's conv_general lowerings (1x1 in place, chunked im2col) against Generic.

The hypothesis family of ``test_cpu_kernels.py`` draws at most two images of a few pixels, so
every call there fits one im2col chunk; these cases force several chunks (with a ragged last
one), the single-image 1x1 product, strided and grouped 1x1 kernels, and the convolutions the
central VJP runs for both gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor_generic import CPU, Generic
from conveyor_generic.kernels import cpu_contraction
from tests.generic.oracle import assert_matches, run
from tests.generic.test_cpu_kernels import compare


def values(shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "fields"),
    [
        ((1, 6, 5, 4), (3, 6, 1, 1), {}),  # one image, 1x1: the product in place
        ((1, 6, 5, 4), (4, 3, 1, 1), {"feature_group_count": 2}),
        ((1, 6, 5, 4), (3, 6, 1, 1), {"window_strides": (2, 3)}),
        ((5, 6, 5, 4), (3, 6, 1, 1), {}),  # several images, 1x1: one product through im2col
        ((5, 4, 9, 7), (3, 4, 3, 3), {"padding": ((1, 1), (1, 1))}),
        ((5, 3, 12, 12), (4, 3, 7, 7), {"window_strides": (2, 2), "padding": ((3, 3), (3, 3))}),
        ((5, 4, 6, 6), (4, 2, 3, 2), {"feature_group_count": 2, "rhs_dilation": (2, 1)}),
    ],
)
@pytest.mark.parametrize("column_bytes", [1, 700, 1 << 26])
def test_every_lowering_and_chunking_matches_generic(
    monkeypatch: pytest.MonkeyPatch,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    fields: dict[str, Any],
    column_bytes: int,
) -> None:
    """One image per product, a few per product (ragged last chunk), or all: same results."""
    monkeypatch.setattr(cpu_contraction, "_COLUMN_BYTES", column_bytes)
    compare("conv_general", [values(x_shape, 1), values(w_shape, 2)], fields)


def test_a_1x1_kernel_on_one_image_runs_one_product_per_group_and_no_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The single-image 1x1 case calls BLAS once per group, straight into the result."""
    products: list[tuple[int, ...]] = []
    original = np.matmul

    def spy(a: Any, b: Any, **kwargs: Any) -> Any:
        products.append(b.shape)
        return original(a, b, **kwargs)

    monkeypatch.setattr(cpu_contraction.np, "matmul", spy)
    monkeypatch.setattr(cpu_contraction, "_im2col", None)  # never reached
    x = cv.tensor(values((1, 6, 5, 4), 3), carrier=CPU)
    w = cv.tensor(values((4, 3, 1, 1), 4), carrier=CPU)
    got = cv.conv_general(x, w, feature_group_count=2).numpy()
    assert products == [(1, 3, 20), (1, 3, 20)]
    (want,) = run(Generic, "conv_general", [x.numpy(), w.numpy()], {"feature_group_count": 2})
    assert_matches(got, want, cv.float32, atol=1e-5)


def test_gradients_of_a_strided_padded_conv_match_generic() -> None:
    """Both VJP convolutions (input and weight gradients) agree with Generic's."""
    x0, w0 = values((3, 4, 9, 8), 5), values((5, 4, 3, 3), 6)
    fields = {"window_strides": (2, 1), "padding": ((1, 1), (2, 0))}
    grads = {}
    for carrier in (CPU, Generic):
        x = cv.tensor(x0, carrier=carrier, requires_grad=True)
        w = cv.tensor(w0, carrier=carrier, requires_grad=True)
        cv.conv_general(x, w, **fields).sum().backward()
        assert x.grad is not None and w.grad is not None
        grads[carrier] = (x.grad.numpy(), w.grad.numpy())
    for got, want in zip(grads[CPU], grads[Generic], strict=True):
        assert_matches(got, want, cv.float32, atol=1e-4)
