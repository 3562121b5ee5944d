"""Bad input gets the right error: integers that do not fit, axes out of range, dtype names."""

from __future__ import annotations

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
