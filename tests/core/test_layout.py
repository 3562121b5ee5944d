"""Layout: view algebra checked against real NumPy views of the same buffer.

The buffer under test is ``np.arange(n)``, so the value of every element *is* its buffer slot:
a layout is right exactly when the slots it addresses equal the values of the NumPy view that
the same operation produces.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import conveyor as cv
from conveyor.types.layout import normalize_axes, normalize_axis

property_settings = settings(deadline=None)


def slots(layout: cv.Layout) -> np.ndarray:
    """The buffer slot of every element of ``layout``, shaped like it."""
    index = np.full(layout.shape, layout.offset, dtype=np.int64)
    for axis, stride in enumerate(layout.strides):
        index = index + np.indices(layout.shape, dtype=np.int64)[axis] * stride
    return index


def assert_same_view(layout: cv.Layout, view: np.ndarray) -> None:
    """``layout`` addresses exactly the slots whose values ``view`` shows, in the same shape."""
    assert layout.shape == view.shape
    if view.size:
        np.testing.assert_array_equal(slots(layout), view)


def _numpy_accepts(view: np.ndarray, key: tuple[Any, ...]) -> bool:
    try:
        view[key]
    except IndexError:
        return False
    return True


# -- strategies -------------------------------------------------------------------------------

shapes = st.lists(st.integers(0, 4), max_size=4).map(tuple)
nonempty_shapes = st.lists(st.integers(1, 4), max_size=4).map(tuple)


@st.composite
def axis_items(draw: st.DrawFn, extent: int) -> Any:
    """One basic index for an axis of ``extent``: an int (maybe negative) or a slice."""
    bound = extent + 2
    if extent and draw(st.booleans()):
        return draw(st.integers(-extent, extent - 1))
    start = draw(st.none() | st.integers(-bound, bound))
    stop = draw(st.none() | st.integers(-bound, bound))
    step = draw(st.none() | st.integers(-3, 3).filter(bool))
    return slice(start, stop, step)


@st.composite
def basic_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A NumPy basic index for ``shape``: ints, slices, None, and at most one Ellipsis."""
    items = [draw(axis_items(extent)) for extent in shape]
    items = items[: draw(st.integers(0, len(items)))]  # trailing axes implied
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()):
        start = draw(st.integers(0, len(items)))
        stop = draw(st.integers(start, len(items)))
        items[start:stop] = [Ellipsis]
    return tuple(items)


@st.composite
def strided_views(draw: st.DrawFn, base_shapes: Any = shapes) -> tuple[np.ndarray, cv.Layout]:
    """A (possibly non-contiguous, negative-stride, offset) NumPy view and its Layout."""
    shape = draw(base_shapes)
    view = np.arange(math.prod(shape)).reshape(shape)
    layout = cv.Layout(shape)
    if shape and draw(st.booleans()):  # an empty key on a 0-d array gives a NumPy scalar
        key = tuple(
            draw(axis_items(extent).filter(lambda k: isinstance(k, slice))) for extent in shape
        )
        view, layout = view[key], layout.index(key)
    if draw(st.booleans()):
        order = draw(st.permutations(range(view.ndim)))
        view, layout = view.transpose(order), layout.permute(order)
    return view, layout


@st.composite
def target_shapes(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A shape with ``size`` elements (size > 0), possibly with extents of 1."""
    dims: list[int] = []
    remaining = size
    for _ in range(draw(st.integers(0, 4))):
        divisors = [d for d in range(1, remaining + 1) if remaining % d == 0]
        dims.append(draw(st.sampled_from(divisors)))
        remaining //= dims[-1]
    dims.append(remaining)
    return tuple(draw(st.permutations(dims)))


# -- construction -----------------------------------------------------------------------------


class TestLayoutConstruction:
    @given(nonempty_shapes)
    def test_default_strides_are_numpy_row_major(self, shape: tuple[int, ...]) -> None:
        """Strides None means NumPy's C-contiguous strides, in elements."""
        layout = cv.Layout(shape)

        assert layout.strides == np.empty(shape, np.int8).strides
        assert layout.offset == 0
        assert layout.is_contiguous

    def test_int_shape_is_one_axis(self) -> None:
        """A lone int is a one-axis shape."""
        assert cv.Layout(5) == cv.Layout((5,), (1,), 0)

    def test_layout_is_a_hashable_value(self) -> None:
        """Equal layouts compare and hash equal, and a layout cannot be changed."""
        a, b = cv.Layout((2, 3)), cv.Layout([2, 3], [3, 1], 0)

        assert a == b
        assert hash(a) == hash(b)
        assert a != cv.Layout((2, 3), (1, 2))
        with pytest.raises(AttributeError, match="frozen"):
            a.offset = 1  # type: ignore[misc]  # the point of the test

    def test_negative_extent_raises(self) -> None:
        """A negative extent is a ValueError naming the shape."""
        with pytest.raises(ValueError, match=r"extents must be >= 0, got \(2, -1\)"):
            cv.Layout((2, -1))

    def test_strides_count_mismatch_raises(self) -> None:
        """One stride is needed per axis."""
        with pytest.raises(ValueError, match="1 strides for 2 axes"):
            cv.Layout((2, 3), (1,))

    def test_negative_offset_raises(self) -> None:
        """The offset is a buffer slot and cannot be negative."""
        with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
            cv.Layout((2,), None, -1)

    def test_bool_extent_raises(self) -> None:
        """A bool is not accepted as an extent."""
        with pytest.raises(TypeError, match="shape entries must be integers, got True"):
            cv.Layout((True, 2))

    @pytest.mark.parametrize(("shape", "strides"), [((2**63,), (0,)), ((2**32, 2**31), None)])
    def test_more_elements_than_int64_value_error(
        self, shape: tuple[int, ...], strides: tuple[int, ...] | None
    ) -> None:
        """A shape whose element count or extent int64 cannot index is refused (as_strided too)."""
        with pytest.raises(ValueError) as info:
            cv.Layout(shape, strides)

        size = math.prod(shape)
        assert str(info.value) == (
            f"Layout: shape {shape!r} has {size} elements, more than int64 can index "
            f"(9223372036854775807); use a smaller shape"
        )

    def test_extent_past_int64_of_an_empty_shape_value_error(self) -> None:
        """An empty shape may still not name an extent int64 cannot hold."""
        with pytest.raises(ValueError) as info:
            cv.Layout((2**63, 0), (0, 1))

        assert str(info.value) == (
            "Layout: shape (9223372036854775808, 0) has an extent of 9223372036854775808, more "
            "than int64 can index (9223372036854775807); use a smaller shape"
        )

    def test_slots_beyond_int64_value_error(self) -> None:
        """Strides whose reach int64 cannot index are refused, naming strides and the reach."""
        with pytest.raises(ValueError) as info:
            cv.Layout((3,), (2**62,))

        assert str(info.value) == (
            f"Layout: strides ({2**62},) with offset 0 (slots [0, {2**63 + 1})) go beyond what "
            f"int64 can index (9223372036854775807); use smaller strides"
        )

    def test_largest_int64_layout_is_accepted(self) -> None:
        """The bound is int64's: a zero-stride view of 2**63 - 1 elements is a valid layout."""
        assert cv.Layout((2**63 - 1,), (0,)).size == 2**63 - 1


class TestIsContiguous:
    @property_settings
    @given(strided_views())
    def test_matches_numpy_c_contiguous_flag(self, case: tuple[np.ndarray, cv.Layout]) -> None:
        """is_contiguous agrees with NumPy's C_CONTIGUOUS flag on the same view."""
        view, layout = case

        assert layout.is_contiguous == view.flags.c_contiguous


class TestSpan:
    @property_settings
    @given(strided_views())
    def test_span_is_smallest_range_of_touched_slots(
        self, case: tuple[np.ndarray, cv.Layout]
    ) -> None:
        """span() is [min slot, max slot + 1) over every element, empty at the offset if none."""
        view, layout = case

        if view.size:
            assert layout.span() == (int(view.min()), int(view.max()) + 1)
        else:
            assert layout.span() == (layout.offset, layout.offset)

    def test_negative_stride_span_reaches_below_offset(self) -> None:
        """A reversed axis touches slots below the offset (its first element's slot)."""
        assert cv.Layout((3,), (-2,), 4).span() == (0, 5)


# -- basic indexing ---------------------------------------------------------------------------


class TestIndex:
    @property_settings
    @given(st.data())
    def test_basic_index_matches_numpy(self, data: st.DataObject) -> None:
        """ints, negative ints, stepped slices, None and ... select what NumPy selects."""
        view, layout = data.draw(strided_views())
        key = data.draw(basic_keys(view.shape))

        try:
            expected = view[key]
        except IndexError:  # an int met an axis of smaller extent after Ellipsis shifted it
            with pytest.raises(IndexError, match="out of range"):
                layout.index(key)
        else:
            assert_same_view(layout.index(key), expected)

    @property_settings
    @given(st.data())
    def test_index_of_index_matches_numpy(self, data: st.DataObject) -> None:
        """Indexing a view again composes like NumPy (offsets and strides multiply through)."""
        view, layout = data.draw(strided_views())
        first = data.draw(basic_keys(view.shape))
        assume(_numpy_accepts(view, first))
        second = data.draw(basic_keys(view[first].shape))
        assume(_numpy_accepts(view[first], second))

        assert_same_view(layout.index(first).index(second), view[first][second])

    def test_single_item_key_is_not_a_tuple(self) -> None:
        """A bare int or slice indexes the first axis."""
        layout = cv.Layout((3, 4))

        assert layout.index(1) == layout.index((1,))
        assert layout.index(slice(None, None, -1)).strides == (-4, 1)

    def test_numpy_integer_is_accepted(self) -> None:
        """NumPy integers index like Python ints."""
        assert cv.Layout((3, 4)).index(np.int64(-1)) == cv.Layout((4,), (1,), 8)

    def test_out_of_range_index_raises(self) -> None:
        """An int beyond the extent is an IndexError naming the axis and extent."""
        with pytest.raises(IndexError, match="index 3 is out of range for axis 1 with extent 3"):
            cv.Layout((2, 3)).index((0, 3))

    def test_out_of_range_negative_index_raises(self) -> None:
        """A negative int below -extent is an IndexError."""
        with pytest.raises(IndexError, match="index -3 is out of range for axis 0 with extent 2"):
            cv.Layout((2, 3)).index(-3)

    def test_too_many_indices_raises(self) -> None:
        """More indexed axes than the layout has is an IndexError."""
        with pytest.raises(IndexError, match="too many indices: 3 for a tensor with 2 axes"):
            cv.Layout((2, 3)).index((0, 0, 0))

    def test_two_ellipses_raise(self) -> None:
        """At most one ellipsis."""
        with pytest.raises(IndexError, match="single ellipsis"):
            cv.Layout((2, 3)).index((..., 0, ...))

    def test_float_index_raises(self) -> None:
        """Only basic indices are layout algebra; a float is an IndexError."""
        with pytest.raises(IndexError, match=r"only integers, slices, None and \.\.\. .*1\.5"):
            cv.Layout((2, 3)).index(1.5)

    def test_bool_index_raises(self) -> None:
        """A bool is advanced (mask) indexing, not a basic index."""
        with pytest.raises(IndexError, match="got True"):
            cv.Layout((2, 3)).index(True)


# -- reshape ----------------------------------------------------------------------------------


class TestReshape:
    @property_settings
    @given(st.data())
    def test_view_exactly_when_numpy_reshapes_without_copy(self, data: st.DataObject) -> None:
        """reshape gives a layout exactly when NumPy's reshape shares memory, and then the same
        elements; it gives None exactly when NumPy must copy."""
        view, layout = data.draw(strided_views(nonempty_shapes))
        assume(view.size > 0)
        target = data.draw(target_shapes(view.size))

        expected = view.reshape(target)
        result = layout.reshape(target)

        if np.shares_memory(expected, view):
            assert result is not None
            assert_same_view(result, expected)
        else:
            assert result is None

    @property_settings
    @given(st.data())
    def test_minus_one_extent_is_inferred(self, data: st.DataObject) -> None:
        """One -1 extent takes the remaining element count, as in NumPy."""
        view, layout = data.draw(strided_views(nonempty_shapes))
        assume(view.size > 0)
        target = list(data.draw(target_shapes(view.size)))
        target[data.draw(st.integers(0, len(target) - 1))] = -1

        result = layout.reshape(target)

        expected = view.reshape(target)
        assert result is None or result.shape == expected.shape
        if np.shares_memory(expected, view):
            assert result is not None
            assert_same_view(result, expected)

    @given(shapes.filter(lambda s: 0 in s), st.lists(st.integers(0, 3), max_size=3))
    def test_empty_layout_reshapes_to_any_empty_shape(
        self, shape: tuple[int, ...], tail: list[int]
    ) -> None:
        """An empty layout always reshapes (nothing to copy) to a shape with zero elements."""
        target = (0, *tail)

        result = cv.Layout(shape, tuple(range(len(shape), 0, -1)), 3).reshape(target)

        assert result is not None
        assert result.shape == target

    def test_element_count_mismatch_raises(self) -> None:
        """A shape with another element count is a ValueError naming both shapes."""
        with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\) \(6 elements\) to \(4,\)"):
            cv.Layout((2, 3)).reshape((4,))

    def test_minus_one_that_does_not_divide_raises(self) -> None:
        """A -1 that cannot be filled with a whole extent is a ValueError."""
        with pytest.raises(ValueError, match=r"to \(4, -1\)"):
            cv.Layout((2, 3)).reshape((4, -1))

    def test_two_minus_one_extents_raise(self) -> None:
        """At most one extent can be inferred."""
        with pytest.raises(ValueError, match="at most one -1"):
            cv.Layout((2, 3)).reshape((-1, -1))

    def test_merged_run_splits_into_unequal_extents(self) -> None:
        """Two contiguous source axes (3, 2) merge into one run that splits as (2, 3)."""
        layout = cv.Layout((2, 3, 2, 1), (1, 4, 2, 4))

        assert layout.reshape((2, 2, 3)) == cv.Layout((2, 2, 3), (1, 6, 2))

    def test_transposed_layout_needs_a_copy(self) -> None:
        """Flattening a transposed matrix cannot be a view (as in NumPy)."""
        assert cv.Layout((2, 3)).permute((1, 0)).reshape((6,)) is None


# -- permute, broadcast_to, squeeze, unsqueeze ------------------------------------------------


class TestPermute:
    @property_settings
    @given(st.data())
    def test_permute_matches_numpy_transpose(self, data: st.DataObject) -> None:
        """permute(axes) is numpy.transpose(axes), negative axes included."""
        view, layout = data.draw(strided_views())
        order = data.draw(st.permutations(range(view.ndim)))
        given_axes = [a - view.ndim if data.draw(st.booleans()) else a for a in order]

        assert_same_view(layout.permute(given_axes), view.transpose(order))

    def test_missing_axis_raises(self) -> None:
        """permute needs every axis exactly once."""
        with pytest.raises(ValueError, match=r"permute needs all 3 axes, got \(0, 1\)"):
            cv.Layout((2, 3, 4)).permute((0, 1))

    def test_repeated_axis_raises(self) -> None:
        """A repeated axis is a ValueError."""
        with pytest.raises(ValueError, match=r"repeated axis in \(0, -2\)"):
            cv.Layout((2, 3)).permute((0, -2))

    def test_out_of_range_axis_raises(self) -> None:
        """An axis beyond ndim is an IndexError."""
        with pytest.raises(IndexError, match="axis 2 is out of range for 2 axes"):
            cv.Layout((2, 3)).permute((0, 2))


@st.composite
def broadcast_targets(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = draw(st.lists(st.integers(0, 3), max_size=2))
    widened = [draw(st.integers(0, 3)) if extent == 1 else extent for extent in shape]
    return (*lead, *widened)


class TestBroadcastTo:
    @property_settings
    @given(st.data())
    def test_broadcast_to_matches_numpy(self, data: st.DataObject) -> None:
        """broadcast_to adds leading axes and widens extent-1 axes with stride 0, like NumPy."""
        view, layout = data.draw(strided_views())
        target = data.draw(broadcast_targets(view.shape))

        result = layout.broadcast_to(target)

        assert_same_view(result, np.broadcast_to(view, target))
        assert result.offset == layout.offset

    def test_incompatible_extent_raises(self) -> None:
        """An extent other than 1 cannot widen; ValueError naming both shapes."""
        with pytest.raises(ValueError, match=r"cannot broadcast shape \(2, 3\) to \(2, 4\)"):
            cv.Layout((2, 3)).broadcast_to((2, 4))

    def test_fewer_axes_raises(self) -> None:
        """Broadcasting never removes axes."""
        with pytest.raises(ValueError, match="fewer axes"):
            cv.Layout((2, 3)).broadcast_to((3,))


class TestSqueeze:
    @property_settings
    @given(st.data())
    def test_squeeze_matches_numpy(self, data: st.DataObject) -> None:
        """squeeze(axes) and squeeze() drop extent-1 axes like numpy.squeeze."""
        view, layout = data.draw(strided_views())
        ones = [a for a, extent in enumerate(view.shape) if extent == 1]
        axes = data.draw(
            st.none() | st.lists(st.sampled_from(ones), unique=True) if ones else st.none()
        )

        expected = np.squeeze(view, axis=None if axes is None else tuple(axes))

        assert_same_view(layout.squeeze(axes), expected)

    def test_squeeze_axis_of_other_extent_raises(self) -> None:
        """Only extent-1 axes can be squeezed; ValueError naming axis, extent and shape."""
        with pytest.raises(
            ValueError, match=r"cannot squeeze axis 1 of extent 3 \(shape \(1, 3\)\)"
        ):
            cv.Layout((1, 3)).squeeze(1)

    def test_squeeze_out_of_range_axis_raises(self) -> None:
        """An axis beyond ndim is an IndexError."""
        with pytest.raises(IndexError, match="axis -3 is out of range for 2 axes"):
            cv.Layout((1, 1)).squeeze(-3)


class TestUnsqueeze:
    @property_settings
    @given(st.data())
    def test_unsqueeze_matches_numpy_expand_dims(self, data: st.DataObject) -> None:
        """unsqueeze(axes) inserts extent-1 axes at positions of the result, like expand_dims."""
        view, layout = data.draw(strided_views())
        count = data.draw(st.integers(1, 3))
        new_ndim = view.ndim + count
        axes = data.draw(
            st.lists(st.integers(-new_ndim, new_ndim - 1), min_size=count, max_size=count).filter(
                lambda a: len({x % new_ndim for x in a}) == count
            )
        )

        assert_same_view(layout.unsqueeze(axes), np.expand_dims(view, tuple(axes)))

    def test_unsqueeze_out_of_range_axis_raises(self) -> None:
        """A position beyond the result's ndim is an IndexError."""
        with pytest.raises(IndexError, match="axis 3 is out of range for 3 axes"):
            cv.Layout((2, 3)).unsqueeze(3)

    def test_unsqueeze_repeated_axis_raises(self) -> None:
        """The same position twice is a ValueError."""
        with pytest.raises(ValueError, match="repeated axis"):
            cv.Layout((2, 3)).unsqueeze((0, -4))


# -- broadcast_shapes and axis helpers --------------------------------------------------------


class TestBroadcastShapes:
    @property_settings
    @given(st.lists(st.lists(st.integers(0, 3), max_size=4).map(tuple), min_size=1, max_size=4))
    def test_matches_numpy_broadcast_shapes(self, given_shapes: list[tuple[int, ...]]) -> None:
        """broadcast_shapes returns what numpy.broadcast_shapes returns, or both refuse."""
        try:
            expected = np.broadcast_shapes(*given_shapes)
        except ValueError:
            with pytest.raises(ValueError, match="cannot be broadcast together"):
                cv.broadcast_shapes(*given_shapes)
        else:
            assert cv.broadcast_shapes(*given_shapes) == expected

    @property_settings
    @given(shapes, st.data())
    def test_compatible_shapes_give_the_full_shape(
        self, full: tuple[int, ...], data: st.DataObject
    ) -> None:
        """Shapes obtained by dropping leading axes and setting extents to 1 broadcast back."""
        parts = []
        for _ in range(data.draw(st.integers(1, 3))):
            drop = data.draw(st.integers(0, len(full)))
            parts.append(tuple(1 if data.draw(st.booleans()) else e for e in full[drop:]))
        parts.append(full)

        assert cv.broadcast_shapes(*parts) == np.broadcast_shapes(*parts) == full

    def test_incompatible_shapes_raise_naming_them(self) -> None:
        """Incompatible shapes are a ValueError naming every shape."""
        with pytest.raises(ValueError, match=r"shapes \(2, 3\), \(4,\) cannot be broadcast"):
            cv.broadcast_shapes((2, 3), (4,))

    def test_no_shapes_give_scalar_shape(self) -> None:
        """With no shapes the result is the 0-d shape, as numpy.broadcast_shapes()."""
        assert cv.broadcast_shapes() == np.broadcast_shapes() == ()

    def test_single_shape_is_returned_as_tuple(self) -> None:
        """A single shape comes back unchanged, as a tuple."""
        assert cv.broadcast_shapes([2, 3]) == (2, 3)  # type: ignore[arg-type]  # list accepted


class TestNormalizeAxis:
    @given(st.integers(1, 5), st.data())
    def test_negative_axes_count_from_the_end(self, ndim: int, data: st.DataObject) -> None:
        """Every axis in [-ndim, ndim) maps to axis % ndim."""
        axis = data.draw(st.integers(-ndim, ndim - 1))

        assert normalize_axis(axis, ndim) == axis % ndim

    def test_none_means_every_axis(self) -> None:
        """normalize_axes(None) is every axis in order."""
        assert normalize_axes(None, 3) == (0, 1, 2)

    def test_out_of_range_axis_raises(self) -> None:
        """An axis outside [-ndim, ndim) is an IndexError."""
        with pytest.raises(IndexError, match="axis -4 is out of range for 3 axes"):
            normalize_axis(-4, 3)
