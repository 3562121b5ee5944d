"""``conveyor.engine.views``: the views every carrier shares, with the carrier's copy hook.

A carrier supplies only ``copy(x, order)``; views that a layout can express never call it,
``reshape`` / ``rearrange`` of layouts no strides can express call it once (with the
permutation a rearrange needs) and return the right values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.tensor import Tensor
from conveyor.engine.views import view_operations
from conveyor_generic import Generic
from conveyor_generic._views import _copy as generic_copy


def _recording() -> tuple[dict[str, type[cv.Operation]], list[tuple[int, ...]]]:
    orders: list[tuple[int, ...]] = []

    def copy(x: Tensor, order: tuple[int, ...]) -> Tensor:
        orders.append(order)
        return generic_copy(x, order)

    return view_operations(copy), orders


def _run(ops: dict[str, type[cv.Operation]], name: str, x: Tensor, **fields: Any) -> Tensor:
    op = ops[name]()
    op._operation_name = name
    result = op._forward(x, options=cv.OperationExecutionOptions(name, **fields))
    assert isinstance(result, Tensor)
    return result


class TestCopyHook:
    """The carrier's copy runs only where no layout can express the result."""

    def test_expressible_views_share_storage_and_never_copy(self) -> None:
        ops, orders = _recording()
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier=Generic)
        permuted = _run(ops, "permute", x, axes=(1, 0))
        flat = _run(ops, "reshape", x, shape=(6,))
        assert orders == []
        assert permuted.carrier is x.carrier and flat.carrier is x.carrier
        np.testing.assert_array_equal(permuted.numpy(), x.numpy().T)

    def test_reshape_of_a_transposed_view_copies_once_in_identity_order(self) -> None:
        ops, orders = _recording()
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier=Generic)
        transposed = _run(ops, "permute", x, axes=(1, 0))
        flat = _run(ops, "reshape", transposed, shape=(6,))
        assert orders == [(0, 1)]
        np.testing.assert_array_equal(flat.numpy(), np.arange(6.0).reshape(2, 3).T.reshape(6))

    def test_rearrange_that_needs_a_copy_passes_its_permutation(self) -> None:
        ops, orders = _recording()
        x = cv.tensor(np.arange(6.0).reshape(2, 3), carrier=Generic)
        merged = _run(ops, "rearrange", x, pattern="a b -> (b a)", sizes={})
        assert orders == [(1, 0)]
        np.testing.assert_array_equal(merged.numpy(), np.arange(6.0).reshape(2, 3).T.reshape(6))

    def test_reshape_copy_resolves_a_minus_one_extent(self) -> None:
        ops, orders = _recording()
        x = cv.tensor(np.arange(24.0).reshape(2, 3, 4), carrier=Generic)
        permuted = _run(ops, "permute", x, axes=(2, 0, 1))
        flat = _run(ops, "reshape", permuted, shape=(2, -1))
        assert orders == [(0, 1, 2)]
        assert flat.shape == (2, 12)
        expected = np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1).reshape(2, -1)
        np.testing.assert_array_equal(flat.numpy(), expected)


class TestAsStridedBounds:
    """``as_strided`` refuses views whose extents int64 cannot index, before any view exists."""

    def test_shape_past_int64_value_error(self) -> None:
        x = cv.tensor([1.0, 2.0, 3.0], carrier=Generic)
        version = x.version

        with pytest.raises(ValueError) as info:
            cv.as_strided(x, shape=(2**63,), strides=(0,))

        assert str(info.value) == (
            "Layout: shape (9223372036854775808,) has 9223372036854775808 elements, more than "
            "int64 can index (9223372036854775807); use a smaller shape"
        )
        assert x.version == version and x.numpy().tolist() == [1.0, 2.0, 3.0]

    def test_views_the_algebra_derives_are_bounded_too(self) -> None:
        """broadcast_to and reshape, which build layouts without re-validating, refuse too."""
        x = cv.tensor([1.0], carrier=Generic)
        empty = cv.zeros((0,), carrier=Generic)

        for build in (
            lambda: cv.broadcast_to(x, shape=(2**32, 2**32)),
            lambda: cv.reshape(empty, shape=(2**63, 0)),
        ):
            with pytest.raises(ValueError, match="more than int64 can index"):
                build()
        assert x.numpy().tolist() == [1.0]
