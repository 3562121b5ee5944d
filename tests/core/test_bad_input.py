"""Bad input gets the right error: integers that do not fit, axes out of range, dtype names,
non-tensor gradients, missing operands and non-DLPack sources."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.exceptions import AxisError

import conveyor as cv
from tests.core.carriers import ArrayCarrier


class TestIntegerDataInItsDtype:
    def test_tensor_uint64_keeps_values_above_float64_precision(self) -> None:
        """Python ints are built in the requested integer dtype, never rounded through float64."""
        t = cv.tensor([[2**64 - 1, 0, 0], [0, 0, 0]], cv.uint64, carrier=ArrayCarrier)

        assert t.numpy().dtype == np.uint64
        assert t.numpy()[0, 0] == 2**64 - 1
        assert t.tolist() == [[2**64 - 1, 0, 0], [0, 0, 0]]

    def test_tensor_int64_keeps_large_exact_values(self) -> None:
        """An int64 value beyond 2**53 survives exactly."""
        t = cv.tensor([2**62 + 1, -(2**63)], cv.int64, carrier=ArrayCarrier)
        assert t.tolist() == [2**62 + 1, -(2**63)]

    @pytest.mark.parametrize(
        ("data", "dtype", "bad", "bounds"),
        [
            ([1, 300], cv.uint8, "300", "[0, 255]"),
            ([[0, -1]], cv.uint16, "-1", "[0, 65535]"),
            (
                [2**63],
                cv.int64,
                "9223372036854775808",
                "[-9223372036854775808, 9223372036854775807]",
            ),
            ([0, 2**64], cv.uint64, "18446744073709551616", "[0, 18446744073709551615]"),
            ([1.0, 1e30], cv.int32, "1e+30", "[-2147483648, 2147483647]"),
        ],
    )
    def test_tensor_value_outside_integer_dtype_overflow_error(
        self, data: list[object], dtype: cv.DType, bad: str, bounds: str
    ) -> None:
        """A value that does not fit the requested integer dtype is refused, naming both."""
        before = ArrayCarrier.allocations
        with pytest.raises(OverflowError) as info:
            cv.tensor(data, dtype, carrier=ArrayCarrier)
        assert str(info.value) == (
            f"tensor: value {bad} does not fit in {dtype.name} (range {bounds}); pass a wider "
            f"dtype or change the value"
        )
        assert ArrayCarrier.allocations == before  # refused before any storage was allocated

    def test_tensor_from_numpy_array_keeps_numpy_casting(self) -> None:
        """NumPy input is converted with NumPy's casting rules, as astype does."""
        t = cv.tensor(np.array([1.9, 2.2]), cv.int32, carrier=ArrayCarrier)
        assert t.tolist() == [1, 2]


class TestIntegerFills:
    @pytest.mark.parametrize(
        ("fill", "dtype", "bad", "bounds"),
        [
            (1e20, cv.int32, "1e+20", "[-2147483648, 2147483647]"),
            (math.inf, cv.int64, "inf", "[-9223372036854775808, 9223372036854775807]"),
            (-1, cv.uint8, "-1", "[0, 255]"),
            (2**64, cv.uint64, "18446744073709551616", "[0, 18446744073709551615]"),
        ],
    )
    def test_full_value_outside_integer_dtype_overflow_error(
        self, fill: float, dtype: cv.DType, bad: str, bounds: str
    ) -> None:
        """full refuses a fill its integer dtype cannot hold, as cv.tensor does, never wrapping."""
        before = ArrayCarrier.allocations
        with pytest.raises(OverflowError) as info:
            cv.full((2,), fill, dtype, carrier=ArrayCarrier)
        assert str(info.value) == (
            f"full: value {bad} does not fit in {dtype.name} (range {bounds}); pass a wider "
            f"dtype or change the value"
        )
        assert ArrayCarrier.allocations == before

    @pytest.mark.parametrize("build", ["full", "tensor"])
    def test_nan_into_integer_dtype_value_error(self, build: str) -> None:
        """A NaN fill (or element) for an integer dtype is a ValueError naming the dtype."""
        before = ArrayCarrier.allocations
        with pytest.raises(ValueError) as info:
            if build == "full":
                cv.full((2,), math.nan, cv.int32, carrier=ArrayCarrier)
            else:
                cv.tensor([1.0, math.nan], cv.int32, carrier=ArrayCarrier)
        assert str(info.value) == (
            f"{build}: NaN cannot be stored in int32; pass a floating dtype or a number"
        )
        assert ArrayCarrier.allocations == before

    def test_full_fits_keep_their_values(self) -> None:
        """Fills that fit are stored exactly, the largest int64 and a float fill truncated."""
        assert cv.full((2,), 2**63 - 1, cv.int64, carrier=ArrayCarrier).tolist() == [2**63 - 1] * 2
        assert cv.full((1,), 2.7, cv.int32, carrier=ArrayCarrier).tolist() == [2]


class TestGradAssignment:
    @pytest.mark.parametrize("value", [5, 1.5, np.ones(2), [1.0, 2.0]])
    def test_non_tensor_grad_type_error_at_assignment(self, value: object) -> None:
        """t.grad = <not a Tensor> is refused where it happens, and .grad keeps its value."""
        t = cv.tensor([1.0, 2.0], carrier=ArrayCarrier, requires_grad=True)
        cv.reduce_sum(cv.mul(t, 3.0)).backward()
        kept = t.grad

        with pytest.raises(TypeError) as info:
            t.grad = value  # type: ignore[assignment]  # the point of the test

        assert str(info.value) == (
            f"grad: expected a Tensor or None, got {value!r} ({type(value).__name__}); assign "
            f"cv.tensor(...) of shape (2,), or None to clear it"
        )
        assert t.grad is kept

    def test_tensor_or_none_grad_is_accepted(self) -> None:
        """A Tensor or None may be assigned, and backward accumulates into the assigned one."""
        t = cv.tensor([1.0, 2.0], carrier=ArrayCarrier, requires_grad=True)
        t.grad = cv.tensor([10.0, 10.0], carrier=ArrayCarrier)

        cv.reduce_sum(cv.mul(t, 3.0)).backward()

        assert t.grad is not None and t.grad.tolist() == [13.0, 13.0]
        t.grad = None
        assert t.grad is None


class TestMissingOperand:
    def test_none_operand_type_error_names_the_operation_and_what_to_pass(self) -> None:
        """x + None says which operand is missing and what it may be, before any allocation."""
        x = cv.tensor([1.0, 2.0], carrier=ArrayCarrier)
        before = ArrayCarrier.allocations, ArrayCarrier.kernel_entries

        with pytest.raises(TypeError) as info:
            x + None  # type: ignore[operator]  # the point of the test

        assert str(info.value) == (
            "add on ArrayCarrier: operand 'other' is None, but it is required; pass a Tensor "
            "or a Python scalar"
        )
        assert (ArrayCarrier.allocations, ArrayCarrier.kernel_entries) == before

    def test_scalar_where_a_tensor_is_required_type_error(self) -> None:
        """A Python scalar for a tensor-only operand says to build a tensor of it."""
        x = cv.tensor([[1.0]], carrier=ArrayCarrier)
        before = ArrayCarrier.allocations, ArrayCarrier.kernel_entries

        with pytest.raises(TypeError) as info:
            cv.matmul(x, 2.0)

        assert str(info.value) == (
            "matmul on ArrayCarrier: operand 'other' is the Python scalar 2.0 (float), but it "
            "must be a Tensor; build one with cv.tensor(2.0, carrier=...)"
        )
        assert (ArrayCarrier.allocations, ArrayCarrier.kernel_entries) == before


class TestFromDlpack:
    @pytest.mark.parametrize("source", [[1, 2], 3.0, "ab"])
    def test_non_producer_type_error(self, source: object) -> None:
        """cv.from_dlpack refuses what has no __dlpack__ with TypeError, as documented."""
        before = ArrayCarrier.allocations
        with pytest.raises(TypeError) as info:
            cv.from_dlpack(source, carrier=ArrayCarrier)
        assert str(info.value) == (
            f"from_dlpack: {type(source).__name__} is not a DLPack producer (it has no "
            f"__dlpack__); pass a NumPy array, a PyTorch CPU tensor or another DLPack exporter, "
            f"or build the tensor from Python data with cv.tensor(...)"
        )
        assert ArrayCarrier.allocations == before


class TestAxisErrors:
    @pytest.mark.parametrize("axis", [5, -3, (0, 2)])
    def test_mean_axis_out_of_range_axis_error(self, axis: int | tuple[int, ...]) -> None:
        """mean refuses an out-of-range axis with NumPy's AxisError naming the axis and rank."""
        x = cv.tensor([[1.0, 2.0], [3.0, 4.0]], carrier=ArrayCarrier)
        wrong = axis if isinstance(axis, int) else axis[1]
        with pytest.raises(AxisError, match=rf"^axis {wrong} is out of range for 2 axes$"):
            x.mean(axis=axis)

    def test_axis_error_is_still_an_index_error(self) -> None:
        """AxisError keeps the IndexError (and ValueError) callers already catch."""
        x = cv.tensor([1.0, 2.0], carrier=ArrayCarrier)
        with pytest.raises(IndexError):
            x.mean(axis=1)
        with pytest.raises(ValueError, match="axis -2 is out of range for 1 axes"):
            x.mean(axis=-2)


class TestDtypeNames:
    def test_astype_accepts_dtype_name(self) -> None:
        """astype takes a dtype's name as well as the DType."""
        x = cv.tensor([1.5, 2.5], carrier=ArrayCarrier)
        y = x.astype("int32")
        assert y.dtype is cv.int32
        assert y.tolist() == [1, 2]

    def test_allocate_accepts_dtype_name(self) -> None:
        """Carrier.allocate takes a dtype's name as well as the DType."""
        carrier = ArrayCarrier.allocate(3, "float64")
        assert carrier.dtype is cv.float64

    def test_unknown_dtype_name_type_error(self) -> None:
        """A name that is no dtype is refused with TypeError naming it."""
        x = cv.tensor([1.5], carrier=ArrayCarrier)
        with pytest.raises(TypeError, match=r"no conveyor dtype for 'int33' \(of type str\)"):
            x.astype("int33")
        with pytest.raises(TypeError, match="allocate on ArrayCarrier: dtype must be a conveyor"):
            ArrayCarrier.allocate(3, "int33")
