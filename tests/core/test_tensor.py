"""Tensor: constructors, NumPy interop, views, in-place writes, operator sugar and repr."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from tests.core.carriers import ArrayCarrier
from tests.core.more_carriers import ReferenceCarrier


def arr(values: Any, dtype: cv.DType | None = None, **kwargs: Any) -> cv.Tensor:
    return cv.tensor(values, dtype=dtype, carrier=ArrayCarrier, **kwargs)


@pytest.fixture
def empty_host() -> cv.plugins.PluginHost:
    """A default plugin host that loads no plugin (the conftest restores the previous one)."""
    host = cv.plugins.PluginHost(allow=[])
    cv.plugins.set_default_host(host)
    return host


# -- constructors -----------------------------------------------------------------------------


class TestTensorConstructor:
    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            (1.5, cv.float32),
            ([1.0, 2.0], cv.float32),
            ([1, 2.5], cv.float32),
            (3, cv.int64),
            ([[1, 2], [3, 4]], cv.int64),
            ([True, False], cv.bool),
            ([1 + 2j], cv.complex64),
            ([], cv.float32),
        ],
        ids=["float", "floats", "mixed", "int", "ints", "bools", "complex", "empty"],
    )
    def test_python_data_infers_pytorch_default_dtype(self, data: Any, expected: cv.DType) -> None:
        """Python floats give float32, ints int64, bools bool, complex complex64 (PyTorch)."""
        t = arr(data)

        assert t.dtype is expected
        np.testing.assert_array_equal(t.numpy(), np.asarray(data))

    @pytest.mark.parametrize(
        "np_dtype", [np.float64, np.float16, np.int16, np.uint8, np.bool_, np.complex128]
    )
    def test_numpy_array_keeps_its_dtype(self, np_dtype: Any) -> None:
        """A NumPy array keeps its dtype, like torch.from_numpy."""
        data = np.array([[0, 1], [1, 0]], dtype=np_dtype)

        t = arr(data)

        assert t.dtype is cv.dtype(np_dtype)
        assert t.numpy().dtype == data.dtype
        np.testing.assert_array_equal(t.numpy(), data)

    def test_non_native_byte_order_array_is_accepted(self) -> None:
        """A big-endian NumPy array gives the same dtype and values, stored natively."""
        data = np.array([1.5, -2.0], dtype=">f8")

        t = arr(data)

        assert t.dtype is cv.float64
        np.testing.assert_array_equal(t.numpy(), data)

    def test_numpy_scalar_keeps_its_dtype(self) -> None:
        """A NumPy scalar keeps its dtype."""
        t = arr(np.float64(2.5))

        assert t.dtype is cv.float64
        assert t.numpy().reshape(-1).tolist() == [2.5]

    @pytest.mark.parametrize("data", [2.5, 3, np.float64(2.5)], ids=["float", "int", "numpy"])
    def test_scalar_gives_0d_tensor(self, data: Any) -> None:
        """A scalar gives a 0-d tensor, as torch.tensor(2.5) and np.asarray(2.5) do."""
        assert arr(data).shape == ()

    def test_explicit_dtype_converts_data(self) -> None:
        """An explicit dtype wins over inference (NumPy casting)."""
        t = arr([1.7, -2.2], cv.int32)

        assert t.dtype is cv.int32
        np.testing.assert_array_equal(t.numpy(), [1, -2])

    def test_dtype_by_name_is_accepted(self) -> None:
        """dtype may be given by name."""
        assert arr([1], "float64").dtype is cv.float64  # type: ignore[arg-type]  # name accepted

    def test_tensor_data_is_copied(self) -> None:
        """cv.tensor(other) copies: writing the copy leaves the source untouched."""
        source = arr([1.0, 2.0])

        copy = arr(source)
        copy[0] = 9.0

        assert copy.carrier is not source.carrier
        np.testing.assert_array_equal(source.numpy(), [1.0, 2.0])

    def test_carrier_class_is_used(self) -> None:
        """carrier= given as a class allocates a fresh instance of exactly that class."""
        t = cv.tensor([1.0], carrier=ReferenceCarrier)

        assert type(t.carrier) is ReferenceCarrier

    def test_abstract_dtype_raises(self) -> None:
        """A dtype category cannot be storage."""
        with pytest.raises(TypeError, match="floating is an abstract dtype category"):
            arr([1.0], cv.floating)

    def test_requires_grad_makes_leaf_that_requires_grad(self) -> None:
        """requires_grad=True gives a leaf that requires grad."""
        t = arr([1.0], requires_grad=True)

        assert t.requires_grad and t.is_leaf and t.grad is None


class TestCarrierArgument:
    def test_unknown_name_raises_plugin_host_error(self, empty_host: cv.plugins.PluginHost) -> None:
        """An unknown carrier name raises the plugin host's own ValueError."""
        with pytest.raises(ValueError, match="unknown carrier 'no-such-carrier'") as info:
            cv.tensor([1.0], carrier="no-such-carrier")

        with pytest.raises(ValueError) as direct:
            empty_host.carrier("no-such-carrier")
        assert str(info.value) == str(direct.value)

    @pytest.mark.parametrize(
        "constructor",
        [
            lambda c: cv.tensor([1.0], carrier=c),
            lambda c: cv.zeros(2, carrier=c),
            lambda c: cv.ones(2, carrier=c),
            lambda c: cv.full(2, 1.0, carrier=c),
            lambda c: cv.arange(2, carrier=c),
            lambda c: cv.empty(2, carrier=c),
        ],
        ids=["tensor", "zeros", "ones", "full", "arange", "empty"],
    )
    @pytest.mark.parametrize("value", [42, int, ArrayCarrier()], ids=["int", "class", "instance"])
    def test_non_carrier_value_raises_type_error(
        self, constructor: Callable[[Any], cv.Tensor], value: Any
    ) -> None:
        """A value that is neither a Carrier class nor a name is a TypeError naming it."""
        with pytest.raises(TypeError, match="carrier must be a Carrier class or a registered"):
            constructor(value)


class TestFillConstructors:
    def test_zeros_default_float32(self) -> None:
        """zeros(shape) is float32 zeros."""
        t = cv.zeros((2, 3), carrier=ArrayCarrier)

        assert (t.shape, t.dtype) == ((2, 3), cv.float32)
        np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3)))

    def test_ones_with_dtype(self) -> None:
        """ones(shape, dtype) fills with one in that dtype."""
        t = cv.ones(3, cv.int32, carrier=ArrayCarrier)

        assert (t.shape, t.dtype) == ((3,), cv.int32)
        np.testing.assert_array_equal(t.numpy(), [1, 1, 1])

    @pytest.mark.parametrize(
        ("fill", "expected"), [(7, cv.int64), (1.5, cv.float32), (True, cv.bool)]
    )
    def test_full_infers_dtype_from_fill_value(self, fill: Any, expected: cv.DType) -> None:
        """full() infers its dtype from the fill value like tensor() does."""
        t = cv.full((2, 2), fill, carrier=ArrayCarrier)

        assert t.dtype is expected
        np.testing.assert_array_equal(t.numpy(), np.full((2, 2), fill))

    def test_empty_has_shape_and_dtype(self) -> None:
        """empty() allocates the requested shape and dtype."""
        t = cv.empty((0, 4), cv.float64, carrier=ArrayCarrier)

        assert (t.shape, t.dtype, t.size) == ((0, 4), cv.float64, 0)

    @pytest.mark.parametrize(
        ("args", "expected"),
        [((5,), cv.int64), ((2, 8, 3), cv.int64), ((0, 1, 0.25), cv.float32), ((3.0,), cv.float32)],
    )
    def test_arange_matches_numpy(self, args: tuple[Any, ...], expected: cv.DType) -> None:
        """arange gives numpy.arange's values, with PyTorch's default dtypes."""
        t = cv.arange(*args, carrier=ArrayCarrier)

        assert t.dtype is expected
        np.testing.assert_array_equal(t.numpy(), np.arange(*args))

    def test_arange_with_dtype(self) -> None:
        """arange honours an explicit dtype."""
        assert cv.arange(4, dtype=cv.float64, carrier=ArrayCarrier).dtype is cv.float64


# -- structure and NumPy interop --------------------------------------------------------------


class TestStructure:
    def test_properties_describe_the_view(self) -> None:
        """shape, ndim, size, strides, dtype and the single subtensor describe the view."""
        t = arr(np.zeros((2, 3)))

        assert (t.shape, t.ndim, t.size, t.strides) == ((2, 3), 2, 6, (3, 1))
        (sub,) = t.subtensors
        assert sub.carrier is t.carrier and sub.layout == t.layout

    def test_tensor_over_existing_storage(self) -> None:
        """Tensor(carrier, layout) wraps existing storage without copying."""
        storage = ArrayCarrier.allocate(6, cv.float32)

        t = cv.Tensor(storage, cv.Layout((3,), (2,), 1))
        storage.write(3, 5.0)

        np.testing.assert_array_equal(t.numpy(), [0.0, 5.0, 0.0])

    def test_layout_outside_storage_raises(self) -> None:
        """A layout reaching past the buffer is an IndexError naming the slots."""
        storage = ArrayCarrier.allocate(4, cv.float32)

        with pytest.raises(IndexError, match=r"slots \[0, 5\) outside the 4 slots"):
            cv.Tensor(storage, cv.Layout((5,)))

    def test_non_carrier_storage_raises(self) -> None:
        """Tensor() needs a Carrier instance."""
        with pytest.raises(TypeError, match="carrier must be a Carrier instance"):
            cv.Tensor(np.zeros(3))  # type: ignore[arg-type]  # the point of the test


class TestNumpyInterop:
    def test_numpy_and_asarray_give_values(self) -> None:
        """numpy() and np.asarray() give the values with the NumPy dtype."""
        t = arr([[1, 2], [3, 4]], cv.int32)

        for out in (t.numpy(), np.asarray(t)):
            assert out.dtype == np.int32
            np.testing.assert_array_equal(out, [[1, 2], [3, 4]])

    def test_array_protocol_converts_dtype(self) -> None:
        """np.asarray(t, dtype) converts."""
        out = np.asarray(arr([1.5, 2.5]), dtype=np.float64)

        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, [1.5, 2.5])

    def test_item_tolist_and_scalar_conversions(self) -> None:
        """item, tolist, float, int and bool give Python values."""
        assert arr([[2.5]]).item() == 2.5
        assert arr([[1, 2]]).tolist() == [[1, 2]]
        assert float(arr([3.0])) == 3.0
        assert int(arr([7])) == 7
        assert bool(arr([0.0])) is False
        assert bool(arr([1])) is True

    def test_item_of_several_elements_raises(self) -> None:
        """item() needs exactly one element."""
        with pytest.raises(ValueError, match=r"single-element tensor.*shape \(2,\)"):
            arr([1.0, 2.0]).item()

    def test_bool_of_several_elements_raises(self) -> None:
        """Truth of a multi-element tensor is ambiguous, as in NumPy."""
        with pytest.raises(ValueError, match=r"is ambiguous; use cv\.any"):
            bool(arr([1.0, 2.0]))

    def test_len_is_first_extent(self) -> None:
        """len() is the first extent."""
        assert len(arr(np.zeros((4, 2)))) == 4

    def test_len_of_0d_raises(self) -> None:
        """A 0-d tensor has no len()."""
        with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
            len(cv.zeros((), carrier=ArrayCarrier))


# -- views and in-place writes ----------------------------------------------------------------


class TestGetItem:
    def test_view_shares_storage(self) -> None:
        """Indexing gives a view of the same carrier instance, with NumPy's values."""
        data = np.arange(12.0).reshape(3, 4)
        t = arr(data)

        v = t[1:, ::-2]

        assert v.carrier is t.carrier
        np.testing.assert_array_equal(v.numpy(), data[1:, ::-2])

    def test_write_through_setitem_is_seen_by_view(self) -> None:
        """A write into the base through __setitem__ is read back through an earlier view."""
        t = arr(np.arange(12.0).reshape(3, 4))
        v = t[1:, ::2]

        t[2, 2] = -1.0

        assert v.numpy()[1, 1] == -1.0

    def test_write_into_view_reaches_base(self) -> None:
        """Writing through a view writes the base tensor's storage."""
        t = arr(np.zeros((2, 3)))

        t[:, 1][...] = 5.0

        np.testing.assert_array_equal(t.numpy(), [[0, 5, 0], [0, 5, 0]])

    def test_int_index_drops_axis(self) -> None:
        """An int index drops its axis; None adds one; ... fills the rest."""
        t = arr(np.arange(24.0).reshape(2, 3, 4))

        assert t[1].shape == (3, 4)
        assert t[..., None, -1].shape == (2, 3, 1)

    def test_out_of_range_index_raises(self) -> None:
        """An out-of-range index is an IndexError."""
        with pytest.raises(IndexError, match="index 2 is out of range for axis 0 with extent 2"):
            arr([1.0, 2.0])[2]

    def test_advanced_keys_need_gather_and_scatter_on_the_carrier(self) -> None:
        """Advanced keys go through gather/scatter: a carrier without them refuses both ways."""
        t = arr([1.0, 2.0])

        with pytest.raises(NotImplementedError, match="gather on ArrayCarrier") as get_error:
            t[[0, 1]]
        with pytest.raises(NotImplementedError, match="on ArrayCarrier") as set_error:
            t[[0, 1]] = 1.0

        assert "scatter" in str(set_error.value) or "gather" in str(set_error.value)
        assert get_error.type is set_error.type

        np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])


class TestSetItem:
    def test_scalar_is_broadcast(self) -> None:
        """A scalar value fills every selected element."""
        t = arr(np.zeros((2, 2)))

        t[0] = 3.0

        np.testing.assert_array_equal(t.numpy(), [[3, 3], [0, 0]])

    def test_tensor_value_is_written(self) -> None:
        """A tensor value is written element by element, converted to the target dtype."""
        t = arr(np.zeros(3), cv.int64)

        t[1:] = arr([1.9, 2.1])

        np.testing.assert_array_equal(t.numpy(), [0, 1, 2])

    def test_write_bumps_version(self) -> None:
        """Every write bumps the version, so saved tensors can detect it."""
        t = arr([1.0])
        before = t.version

        t[0] = 2.0

        assert t.version == before + 1

    def test_leaf_requiring_grad_refuses_write(self) -> None:
        """Writing into a leaf that requires grad is a RuntimeError; the value is kept."""
        t = arr([1.0, 2.0], requires_grad=True)

        with pytest.raises(RuntimeError, match=r"requires grad \(or a view of one\); write into"):
            t[0] = 5.0

        np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])

    def test_view_of_leaf_requiring_grad_refuses_write(self) -> None:
        """Writing through a view of a leaf that requires grad is refused too."""
        t = arr([1.0, 2.0], requires_grad=True)

        with pytest.raises(RuntimeError, match=r"requires grad \(or a view of one\)"):
            t[0:1][0] = 5.0

        np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])


# -- conversions ------------------------------------------------------------------------------


class TestAstype:
    def test_converts_with_numpy_casting(self) -> None:
        """astype converts values with NumPy casting, on the same carrier class."""
        t = arr([1.7, -2.5])

        out = t.astype(cv.int32)

        assert out.dtype is cv.int32
        assert type(out.carrier) is ArrayCarrier
        assert out.carrier is not t.carrier
        np.testing.assert_array_equal(
            out.numpy(), np.array([1.7, -2.5], np.float32).astype(np.int32)
        )

    def test_same_dtype_still_copies(self) -> None:
        """astype documents a copy, so writing its result leaves the source untouched."""
        t = arr([1.0, 2.0])

        out = t.astype(cv.float32)
        out[0] = 9.0

        np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])


class TestClone:
    def test_clone_copies_into_fresh_contiguous_storage(self) -> None:
        """clone() of a strided view is a contiguous copy that writes do not share."""
        t = arr(np.arange(6.0).reshape(2, 3))
        view = t[:, ::2]

        copy = view.clone()
        copy[0, 0] = -1.0

        assert copy.carrier is not t.carrier
        assert copy.layout.is_contiguous
        np.testing.assert_array_equal(copy.numpy(), [[-1.0, 2.0], [3.0, 5.0]])
        assert t.numpy()[0, 0] == 0.0


class TestDetach:
    def test_detach_shares_storage_as_new_leaf(self) -> None:
        """detach() is a leaf without grad over the same storage."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 2.0

        d = y.detach()
        d[0] = 7.0

        assert d.is_leaf and not d.requires_grad
        assert d.carrier is y.carrier
        assert y.numpy()[0] == 7.0
        assert y.requires_grad


# -- operator sugar ---------------------------------------------------------------------------

_A = np.array([[1.5, 2.0], [3.0, 4.0]])
_B = np.array([[2.0, 0.5], [1.0, 3.0]])

_SUGAR: list[tuple[str, Callable[[Any, Any], Any], str]] = [
    ("a + b", lambda a, b: a + b, "add"),
    ("a + 2", lambda a, b: a + 2, "add"),
    ("2 + a", lambda a, b: 2 + a, "add"),
    ("a - b", lambda a, b: a - b, "sub"),
    ("3 - a", lambda a, b: 3 - a, "sub"),
    ("a * b", lambda a, b: a * b, "mul"),
    ("2 * a", lambda a, b: 2 * a, "mul"),
    ("a / b", lambda a, b: a / b, "div"),
    ("1 / a", lambda a, b: 1 / a, "div"),
    ("a ** b", lambda a, b: a**b, "pow"),
    ("2 ** a", lambda a, b: 2**a, "pow"),
    ("a % b", lambda a, b: a % b, "rem"),
    ("5 % a", lambda a, b: 5 % a, "rem"),
    ("a @ b", lambda a, b: a @ b, "matmul"),
    ("-a", lambda a, b: -a, "neg"),
    ("abs(-a)", lambda a, b: abs(a * -1), "abs"),
    ("a == b", lambda a, b: a == b, "eq"),
    ("a != b", lambda a, b: a != b, "ne"),
    ("a < b", lambda a, b: a < b, "lt"),
    ("a <= 2", lambda a, b: a <= 2, "le"),
    ("a > b", lambda a, b: a > b, "lt"),
    ("a >= 3", lambda a, b: a >= 3, "le"),
]


class TestOperatorSugar:
    @pytest.mark.parametrize(
        ("expression", "numpy_expression", "name"), _SUGAR, ids=[s[0] for s in _SUGAR]
    )
    def test_operator_matches_numpy_and_dispatches_its_function(
        self, expression: str, numpy_expression: Callable[[Any, Any], Any], name: str
    ) -> None:
        """Each operator gives NumPy's values by dispatching the function of the same meaning."""
        a = cv.tensor(_A, carrier=ReferenceCarrier)
        b = cv.tensor(_B, carrier=ReferenceCarrier)

        with cv.profile() as prof:
            result = numpy_expression(a, b)

        expected = numpy_expression(_A, _B)
        assert prof.records[-1].operation == name
        assert result.dtype is cv.dtype(expected.dtype)
        np.testing.assert_array_equal(result.numpy(), expected)

    def test_invert_is_logical_not(self) -> None:
        """~t is logical_not, as ~ on a NumPy bool array."""
        mask = np.array([True, False, True])
        t = cv.tensor(mask, carrier=ReferenceCarrier)

        with cv.profile() as prof:
            result = ~t

        assert [r.operation for r in prof.records] == ["logical_not"]
        np.testing.assert_array_equal(result.numpy(), ~mask)

    def test_tensor_is_hashable_by_identity(self) -> None:
        """== is elementwise, yet tensors stay usable as dict keys (by identity)."""
        a, b = arr([1.0]), arr([1.0])

        assert len({a: 1, b: 2}) == 2


class TestRepr:
    def test_repr_shows_values_dtype_and_carrier(self) -> None:
        """repr shows the values, the dtype name and the carrier class."""
        assert repr(arr([[1.0, 2.0]])) == (
            "Tensor([[1., 2.]], dtype=float32, carrier=ArrayCarrier)"
        )

    def test_repr_marks_requires_grad(self) -> None:
        """A tensor that requires grad says so."""
        assert repr(arr([1.0], requires_grad=True)).endswith(", requires_grad=True)")

    def test_repr_of_released_storage_does_not_raise(self) -> None:
        """repr of a tensor whose carrier was released still works."""
        t = arr([1.0])
        t.carrier.release()

        assert repr(t) == "Tensor(<unreadable>, dtype=float32, carrier=ArrayCarrier)"
