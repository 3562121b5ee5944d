"""In-place operators and methods on tensors, as PyTorch defines them.

A write goes into the tensor's own storage (so every view of that storage sees it and the
version counter moves), is refused on a leaf that requires grad (or a view of one) unless grad
mode is off, and on a recorded tensor it becomes part of the graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv

CARRIERS = ["cpu", "generic"]


@pytest.fixture(params=CARRIERS)
def carrier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


OPERATORS = [
    ("iadd", lambda t, o: t.__iadd__(o), np.add),
    ("isub", lambda t, o: t.__isub__(o), np.subtract),
    ("imul", lambda t, o: t.__imul__(o), np.multiply),
    ("itruediv", lambda t, o: t.__itruediv__(o), np.divide),
    ("add_", lambda t, o: t.add_(o), np.add),
    ("sub_", lambda t, o: t.sub_(o), np.subtract),
    ("mul_", lambda t, o: t.mul_(o), np.multiply),
    ("div_", lambda t, o: t.div_(o), np.divide),
    ("ipow", lambda t, o: t.__ipow__(o), np.power),
    ("imod", lambda t, o: t.__imod__(o), np.remainder),
    ("ifloordiv", lambda t, o: t.__ifloordiv__(o), np.floor_divide),
]


class TestInPlaceArithmetic:
    @pytest.mark.parametrize(
        ("name", "apply", "reference"), OPERATORS, ids=[o[0] for o in OPERATORS]
    )
    def test_writes_into_the_same_storage_and_bumps_the_version(
        self, carrier: str, name: str, apply: Any, reference: Any
    ) -> None:
        """The result lands in the tensor's own carrier; the object and storage are kept."""
        base = np.array([[1.5, -2.0, 3.0], [4.0, 5.5, -6.0]])
        t = cv.tensor(base, cv.float64, carrier)
        storage, version = t.carrier, t.version

        result = apply(t, 2.0)

        assert result is t
        assert t.carrier is storage
        assert t.version > version
        np.testing.assert_allclose(t.numpy(), reference(base, 2.0))

    def test_augmented_assignment_keeps_identity(self, carrier: str) -> None:
        """``x += 1`` updates x itself rather than rebinding the name to a new tensor."""
        x = cv.tensor([1.0, 2.0], carrier=carrier)
        alias = x

        x += 1

        assert alias is x
        np.testing.assert_array_equal(alias.numpy(), [2.0, 3.0])

    def test_broadcast_operand_and_ndarray_operand(self, carrier: str) -> None:
        """The other operand broadcasts; an ndarray is copied onto the target's carrier."""
        x = cv.zeros((2, 3), cv.float64, carrier)

        x += np.array([1.0, 2.0, 3.0])
        x *= cv.tensor([[2.0], [3.0]], cv.float64, carrier)

        np.testing.assert_array_equal(x.numpy(), [[2, 4, 6], [3, 6, 9]])

    def test_write_through_a_view_updates_the_base(self, carrier: str) -> None:
        """An in-place write into a view changes the base tensor and its other views."""
        base = cv.tensor(np.arange(6.0).reshape(2, 3), cv.float64, carrier)
        row, column = base[1], base[:, 0]

        row += 10

        np.testing.assert_array_equal(base.numpy(), [[0, 1, 2], [13, 14, 15]])
        np.testing.assert_array_equal(column.numpy(), [0, 13])

    def test_result_that_would_grow_the_tensor_is_refused(self, carrier: str) -> None:
        """A broadcast that enlarges the target raises ValueError and leaves it unchanged."""
        x = cv.tensor([1.0, 2.0], carrier=carrier)
        version = x.version

        with pytest.raises(
            ValueError, match=r"the result has shape \(3, 2\), which cannot be written"
        ):
            x += cv.ones((3, 2), carrier=carrier)

        assert x.version == version
        np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])

    def test_float_result_into_integer_tensor_is_refused(self, carrier: str) -> None:
        """An int tensor cannot hold a float result in place (TypeError, nothing written)."""
        x = cv.tensor([1, 2], carrier=carrier)

        with pytest.raises(
            TypeError, match="the result dtype float32 cannot be written into a int64"
        ):
            x /= 2

        np.testing.assert_array_equal(x.numpy(), [1, 2])

    def test_integer_operators_in_place(self, carrier: str) -> None:
        """Bitwise and shift augmented assignments write integer results in place."""
        x = cv.tensor([12, 10], cv.int32, carrier)

        x &= 6
        x |= 1
        x ^= 3
        x <<= 2
        x >>= 1

        expected = np.array([12, 10], np.int32)
        expected &= 6
        expected |= 1
        expected ^= 3
        expected <<= 2
        expected >>= 1
        np.testing.assert_array_equal(x.numpy(), expected)


class TestFillZeroCopy:
    def test_fill_and_zero(self, carrier: str) -> None:
        """fill_ converts the value to the tensor's dtype; zero_ fills zeros; both return self."""
        x = cv.tensor([1, 2, 3], cv.int8, carrier)

        assert x.fill_(7) is x
        np.testing.assert_array_equal(x.numpy(), [7, 7, 7])
        assert x.zero_() is x
        np.testing.assert_array_equal(x.numpy(), [0, 0, 0])

    def test_copy_broadcasts_converts_and_moves(self, carrier: str) -> None:
        """copy_ takes tensors of other dtypes and carriers, ndarrays and lists, broadcasting."""
        x = cv.zeros((2, 2), cv.float32, carrier)
        other = "generic" if carrier == "cpu" else "cpu"

        x.copy_(cv.tensor([1, 2], cv.int64, other))
        np.testing.assert_array_equal(x.numpy(), [[1, 2], [1, 2]])
        x.copy_(np.array([[5.0], [6.0]]))
        np.testing.assert_array_equal(x.numpy(), [[5, 5], [6, 6]])
        x.copy_([[1, 2], [3, 4]])
        np.testing.assert_array_equal(x.numpy(), [[1, 2], [3, 4]])

    def test_copy_from_an_overlapping_view(self, carrier: str) -> None:
        """Copying a reversed view of the same storage reads before it writes."""
        x = cv.tensor([1.0, 2.0, 3.0], carrier=carrier)

        x.copy_(x[::-1])

        np.testing.assert_array_equal(x.numpy(), [3.0, 2.0, 1.0])


class TestAutograd:
    @pytest.mark.parametrize(
        "write",
        [
            lambda t: t.__iadd__(1.0),
            lambda t: t.mul_(2.0),
            lambda t: t.fill_(0.0),
            lambda t: t.zero_(),
            lambda t: t.copy_(np.ones(2)),
        ],
        ids=["iadd", "mul_", "fill_", "zero_", "copy_"],
    )
    def test_leaf_that_requires_grad_is_refused(self, carrier: str, write: Any) -> None:
        """RuntimeError with PyTorch's advice; values and version are unchanged."""
        leaf = cv.tensor([1.0, 2.0], cv.float64, carrier, requires_grad=True)
        version = leaf.version

        with pytest.raises(
            RuntimeError,
            match=r"a leaf tensor that requires grad .* in-place operation; write under `with cv\.",
        ):
            write(leaf)

        assert leaf.version == version
        np.testing.assert_array_equal(leaf.numpy(), [1.0, 2.0])

    def test_view_of_such_a_leaf_is_refused(self, carrier: str) -> None:
        """A view of a leaf that requires grad is refused the same way."""
        leaf = cv.tensor([1.0, 2.0], cv.float64, carrier, requires_grad=True)

        with pytest.raises(RuntimeError, match="in-place operation"):
            leaf[0:1].add_(1.0)

    def test_leaf_update_under_no_grad_is_allowed(self, carrier: str) -> None:
        """Optimiser steps write into leaves under no_grad, as in PyTorch."""
        w = cv.tensor([1.0, 2.0], cv.float64, carrier, requires_grad=True)
        (w * w).sum().backward()
        assert w.grad is not None

        with cv.no_grad():
            w -= w.grad * 0.5

        np.testing.assert_array_equal(w.numpy(), [0.0, 0.0])
        assert w.is_leaf and w.requires_grad

    def test_in_place_on_a_non_leaf_is_recorded(self, carrier: str) -> None:
        """y = x * x; y *= x; y += 1: the gradient is d(x^3 + 1)/dx = 3x^2."""
        x = cv.tensor([1.0, 2.0, 3.0], cv.float64, carrier, requires_grad=True)
        y = x * x

        y *= x
        y += 1.0
        y.sum().backward()

        assert not y.is_leaf
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, 2.0, 3.0]) ** 2)
        np.testing.assert_allclose(y.numpy(), np.array([1.0, 2.0, 3.0]) ** 3 + 1)

    def test_plain_tensor_joins_the_graph(self, carrier: str) -> None:
        """A tensor that required no grad becomes a graph node when a grad operand is added in."""
        w = cv.tensor([2.0, 3.0], cv.float64, carrier, requires_grad=True)
        acc = cv.zeros(2, cv.float64, carrier)

        acc += w * 4.0
        acc.sum().backward()

        assert acc.requires_grad
        assert w.grad is not None
        np.testing.assert_array_equal(w.grad.numpy(), [4.0, 4.0])

    def test_zero_on_a_non_leaf_sends_zero_gradient(self, carrier: str) -> None:
        """zero_ on a recorded tensor keeps it in the graph with a zero gradient to the past."""
        x = cv.tensor([1.0, 2.0], cv.float64, carrier, requires_grad=True)
        y = x * 3.0

        y.zero_()
        (y + x).sum().backward()

        assert x.grad is not None
        np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])

    def test_tensor_saved_by_an_earlier_operation_is_detected(self, carrier: str) -> None:
        """Modifying a value an earlier operation saved makes its backward raise, not lie."""
        x = cv.tensor([1.0, 2.0], cv.float64, carrier, requires_grad=True)
        y = x * 1.0
        z = y * y  # saves y

        y += 1.0

        with pytest.raises(RuntimeError, match="modified in place"):
            z.sum().backward()


class TestOperators:
    def test_floor_divide_and_modulo_follow_python(self, carrier: str) -> None:
        """// and % agree with Python's floored division for ints and floats, signs included."""
        a = np.array([7, -7, 7, -7])
        b = np.array([2, 2, -2, -2])
        ta, tb = cv.tensor(a, carrier=carrier), cv.tensor(b, carrier=carrier)

        np.testing.assert_array_equal((ta // tb).numpy(), a // b)
        np.testing.assert_array_equal((ta % tb).numpy(), a % b)
        np.testing.assert_array_equal((17 // ta).numpy(), 17 // a)
        np.testing.assert_array_equal((ta.astype(cv.float64) // 2.0).numpy(), a / 1.0 // 2.0)

    def test_bitwise_operators_on_integers_and_bools(self, carrier: str) -> None:
        """&, |, ^, <<, >>, ~ on ints as in NumPy; on bools as logical operators."""
        a = np.array([5, -6, 127], np.int16)
        t = cv.tensor(a, carrier=carrier)
        m = cv.tensor([True, False, True], carrier=carrier)

        np.testing.assert_array_equal((t & 3).numpy(), a & 3)
        np.testing.assert_array_equal((t | 8).numpy(), a | 8)
        np.testing.assert_array_equal((t ^ t).numpy(), a ^ a)
        np.testing.assert_array_equal((t << 2).numpy(), a << 2)
        np.testing.assert_array_equal((t >> 1).numpy(), a >> 1)
        np.testing.assert_array_equal((~t).numpy(), ~a)
        np.testing.assert_array_equal((m & ~m).numpy(), [False] * 3)
        np.testing.assert_array_equal((m | False).numpy(), [True, False, True])

    def test_bitwise_on_floats_is_refused(self, carrier: str) -> None:
        """Bitwise operators on floats raise TypeError naming the operation and carrier."""
        x = cv.tensor([1.0], carrier=carrier)

        with pytest.raises(
            TypeError, match=r"bitwise_and on .*: needs integer or bool operands, got float32"
        ):
            x & 1

    def test_ndarray_on_either_side_gives_a_tensor(self, carrier: str) -> None:
        """t + ndarray and ndarray + t are both Tensors on t's carrier."""
        t = cv.tensor([1.0, 2.0], cv.float64, carrier)
        a = np.array([10.0, 20.0])

        for result in (t + a, a + t, a * t, t - a, a - t, a @ t, a < t):
            assert isinstance(result, cv.Tensor)
            assert type(result.carrier) is type(t.carrier)
        np.testing.assert_array_equal((a - t).numpy(), [9.0, 18.0])


class TestConversions:
    def test_format_round_index_bool_contains(self, carrier: str) -> None:
        """The Python protocols behave as on NumPy scalars and arrays."""
        loss = cv.tensor(0.123456, cv.float64, carrier)

        assert f"{loss:.4f}" == "0.1235"
        assert f"{loss}" == str(loss)
        np.testing.assert_array_equal(
            round(cv.tensor([1.25, 2.5], carrier=carrier), 1).numpy(),
            np.round([1.25, 2.5], 1).astype(np.float32),
        )
        np.testing.assert_array_equal(
            round(cv.tensor([0.5, 1.5], carrier=carrier)).numpy(), [0.0, 2.0]
        )
        assert [10, 20, 30][cv.tensor(2, carrier=carrier)] == 30
        assert bool(cv.tensor([3], carrier=carrier)) is True
        assert 2.0 in cv.tensor([1.0, 2.0], carrier=carrier)
        assert 5 not in cv.tensor([1, 2], carrier=carrier)
        assert complex(cv.tensor(2.0, carrier=carrier)) == 2 + 0j
        assert [v.item() for v in cv.tensor([4, 5], carrier=carrier)] == [4, 5]

    def test_conversion_refusals(self, carrier: str) -> None:
        """Format specs and __index__ need single (integer) elements; truth needs one element."""
        t = cv.tensor([1.0, 2.0], carrier=carrier)

        with pytest.raises(TypeError, match=r"format spec '.2f' needs a single-element tensor"):
            f"{t:.2f}"
        with pytest.raises(
            TypeError, match="only single-element integer tensors can be used as an index"
        ):
            [1, 2][cv.tensor(1.0, carrier=carrier)]
        with pytest.raises(
            ValueError, match=r"truth value of a tensor of shape \(2,\) is ambiguous"
        ):
            bool(t)
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            iter(cv.tensor(1.0, carrier=carrier)).__next__()

    def test_to_and_copy(self, carrier: str) -> None:
        """to() moves carriers or converts dtypes (itself when nothing changes); copy() copies."""
        t = cv.tensor([1.0, 2.0], carrier=carrier, requires_grad=True)
        other = "generic" if carrier == "cpu" else "cpu"

        assert t.to(carrier) is t and t.to(cv.float32) is t
        moved = t.to(other)
        assert type(moved.carrier).__name__.lower() == other
        assert t.to("float64").dtype is cv.float64
        copied = t.copy()
        assert copied.carrier is not t.carrier
        copied.sum().backward()
        assert t.grad is not None
        np.testing.assert_array_equal(t.grad.numpy(), [1.0, 1.0])

    def test_matrix_transpose_attribute(self, carrier: str) -> None:
        """mT swaps the last two axes; below two axes it raises ValueError."""
        t = cv.tensor(np.arange(6.0).reshape(1, 2, 3), carrier=carrier)

        assert t.mT.shape == (1, 3, 2)
        with pytest.raises(ValueError, match="mT needs at least 2 axes"):
            _ = cv.tensor([1.0]).mT


class TestDefaultCarrier:
    def test_set_default_carrier_and_context_manager(self) -> None:
        """Constructors use the default carrier; the context manager restores the previous one."""
        previous = cv.get_default_carrier()
        try:
            with cv.default_carrier("generic"):
                assert type(cv.zeros(2).carrier).__name__ == "Generic"
                assert type(cv.tensor([1]).carrier).__name__ == "Generic"
            assert type(cv.zeros(2).carrier).__name__ == "CPU"
            cv.set_default_carrier("generic")
            assert type(cv.ones(1).carrier).__name__ == "Generic"
        finally:
            cv.set_default_carrier(previous)

    def test_unknown_carrier_is_refused_without_change(self) -> None:
        """An unknown name raises before the default changes."""
        previous = cv.get_default_carrier()

        with pytest.raises(ValueError, match="unknown carrier 'no-such-carrier'"):
            cv.set_default_carrier("no-such-carrier")

        assert cv.get_default_carrier() == previous
