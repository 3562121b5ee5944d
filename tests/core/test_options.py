"""OperationExecutionOptions: schemas, normalisation, refusals, equality, hashing and docs."""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import conveyor.types.dtypes as dt
import conveyor.types.options as options_module
from conveyor.types.options import (
    SCHEMA_NAMES,
    FieldSpec,
    OperationExecutionOptions,
    has_options,
    options_schema,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def _words(text: str) -> list[str]:
    return text.split()


NO_FIELD_NAMES = _words(
    "add sub mul elementwise_mul div pow neg abs sign recip sqrt rsqrt exp exp2 log log2 sin cos "
    "erf floor ceil round maximum minimum rem eq ne lt le logical_not relu sigmoid tanh silu "
    "softplus select clamp inv solve eigh tan sinh cosh asin acos atan asinh acosh atanh expm1 "
    "log1p"
)
FIELD_NAMES = _words(
    "reduce_sum reduce_prod reduce_max reduce_min argmax argmin cumsum matmul conv_general gather "
    "scatter scatter_add gelu elu leaky_relu sort topk cholesky qr svd"
)
VIEW_NAMES = _words("as_strided broadcast_to permute rearrange reshape squeeze unsqueeze view")

# Valid values for every required field, by name.
REQUIRED_EXAMPLES: dict[str, dict[str, Any]] = {
    "topk": {"k": 1},
    "gather": {"axis": 0},
    "scatter": {"axis": 0},
    "scatter_add": {"axis": 0},
    "as_strided": {"shape": (1,), "strides": (1,)},
    "broadcast_to": {"shape": (1,)},
    "permute": {"axes": (0,)},
    "rearrange": {"pattern": "a -> a"},
    "reshape": {"shape": (1,)},
    "unsqueeze": {"axes": 0},
    "view": {"key": (0,)},
}


class FakeTensor:
    """Has ``shape`` and ``dtype`` like any array, and even converts to an int."""

    shape = ()
    dtype = dt.int64

    def __index__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "FakeTensor()"


def opts(name: str, **fields: Any) -> OperationExecutionOptions:
    return OperationExecutionOptions(name, **fields)


class TestPublicNames:
    @pytest.mark.parametrize(
        "name",
        ["FieldSpec", "OperationExecutionOptions", "SCHEMA_NAMES", "has_options", "options_schema"],
    )
    def test_public_name_listed_in_all(self, name: str) -> None:
        """Every public name of conveyor.types.options is listed in its __all__."""
        assert name in options_module.__all__
        assert hasattr(options_module, name)

    def test_schema_names_cover_every_dispatch_name(self) -> None:
        """Every planned name, sort, topk and every view name has a schema, and nothing else."""
        assert set(NO_FIELD_NAMES + FIELD_NAMES + VIEW_NAMES) == SCHEMA_NAMES
        assert len(SCHEMA_NAMES) == 79


class TestNoFieldSchemas:
    @pytest.mark.parametrize("name", NO_FIELD_NAMES)
    def test_no_field_name_builds_empty_record(self, name: str) -> None:
        """A name without options builds a record with no fields."""
        record = opts(name)
        assert record.name == name
        assert dict(record.fields()) == {}
        assert repr(record) == f"OperationExecutionOptions({name!r})"
        assert not has_options(name)

    def test_no_field_name_refuses_any_field(self) -> None:
        """Any field given to a name without options is a TypeError saying so."""
        with pytest.raises(
            TypeError, match=r"^add: unknown option 'axis'; accepted options: none$"
        ):
            opts("add", axis=0)


class TestReductionSchemas:
    def test_defaults_filled_reads_every_field(self) -> None:
        """Fields the call did not give read back their defaults."""
        record = opts("reduce_sum")
        assert (record.axis, record.keepdims, record.accumulator_dtype) == (None, False, None)
        assert list(record.fields()) == ["axis", "keepdims", "accumulator_dtype"]

    def test_repr_lists_every_field_in_schema_order(self) -> None:
        """The repr shows the name and every field, defaults included, in schema order."""
        record = opts("reduce_sum", axis=(0,), accumulator_dtype=dt.float64)
        assert repr(record) == (
            "OperationExecutionOptions('reduce_sum', axis=(0,), keepdims=False, "
            "accumulator_dtype=conveyor.float64)"
        )

    def test_axis_list_normalised_to_tuple(self) -> None:
        """A list of axes reads back as a tuple."""
        assert opts("reduce_prod", axis=[0, -1]).axis == (0, -1)

    def test_single_int_axis_kept_as_int(self) -> None:
        """A single int axis stays an int: the schema accepts both forms."""
        assert opts("reduce_max", axis=1).axis == 1

    def test_numpy_integer_axes_normalised_to_int(self) -> None:
        """NumPy integers read back as Python ints, alone or in a tuple."""
        single = opts("reduce_min", axis=np.int64(2)).axis
        several = opts("reduce_min", axis=(np.int32(0), np.uint8(1))).axis
        assert type(single) is int and single == 2
        assert several == (0, 1) and all(type(a) is int for a in several)

    def test_accumulator_dtype_accepts_any_dtype(self) -> None:
        """Any DType is accepted here; the dtype policy decides which are legal for a plan."""
        assert opts("matmul", accumulator_dtype=dt.float32).accumulator_dtype is dt.float32
        assert opts("reduce_sum", accumulator_dtype=dt.int8).accumulator_dtype is dt.int8

    def test_index_axis_names_default_to_flattened(self) -> None:
        """argmax, argmin and cumsum default to axis None (the flattened input)."""
        assert opts("argmax").axis is None and opts("argmax").keepdims is False
        assert opts("argmin", axis=-1, keepdims=True).fields() == {"axis": -1, "keepdims": True}
        assert opts("cumsum").axis is None and opts("cumsum", axis=0).axis == 0

    @pytest.mark.parametrize("name", ["gather", "scatter", "scatter_add"])
    def test_indexed_axis_required_reads_back(self, name: str) -> None:
        """gather and the scatters take one required int axis."""
        assert opts(name, axis=1).axis == 1


class TestSelectionSchemas:
    def test_topk_defaults_filled(self) -> None:
        """topk needs only k; axis and largest default to -1 and True."""
        assert dict(opts("topk", k=3).fields()) == {"k": 3, "axis": -1, "largest": True}

    def test_topk_zero_k_accepted(self) -> None:
        """k may be zero (an empty selection)."""
        assert opts("topk", k=0).k == 0

    def test_sort_defaults_filled(self) -> None:
        """sort defaults to the last axis, ascending and stable."""
        assert dict(opts("sort").fields()) == {"axis": -1, "descending": False, "stable": True}


class TestConvGeneralSchema:
    def test_full_options_read_back_normalised(self) -> None:
        """Lists read back as tuples and every given field reads back its value."""
        record = opts(
            "conv_general",
            window_strides=[2, 1],
            padding=[[1, 1], (0, 2)],
            lhs_dilation=(1, 1),
            rhs_dilation=[2, 2],
            feature_group_count=np.int64(4),
            dimension_numbers=["NHWC", "HWIO", "NHWC"],
        )
        assert record.window_strides == (2, 1)
        assert record.padding == ((1, 1), (0, 2))
        assert record.rhs_dilation == (2, 2)
        assert type(record.feature_group_count) is int and record.feature_group_count == 4
        assert record.dimension_numbers == ("NHWC", "HWIO", "NHWC")

    def test_defaults_filled(self) -> None:
        """With no fields every per-spatial field is None and there is one feature group."""
        assert dict(opts("conv_general").fields()) == {
            "window_strides": None,
            "padding": None,
            "lhs_dilation": None,
            "rhs_dilation": None,
            "feature_group_count": 1,
            "dimension_numbers": None,
        }

    def test_output_layout_in_other_order_accepted(self) -> None:
        """The output layout may order its letters differently from the input layout."""
        layouts = ("NCHW", "OIHW", "NHWC")
        assert opts("conv_general", dimension_numbers=layouts).dimension_numbers == layouts


class TestActivationSchemas:
    def test_leaky_relu_int_slope_converted_to_float(self) -> None:
        """An int slope reads back as a float."""
        slope = opts("leaky_relu", negative_slope=1).negative_slope
        assert type(slope) is float and slope == 1.0

    def test_numpy_float_converted_to_float(self) -> None:
        """A NumPy float reads back as a Python float."""
        alpha = opts("elu", alpha=np.float32(0.5)).alpha
        assert type(alpha) is float and alpha == 0.5

    def test_activation_defaults_filled(self) -> None:
        """leaky_relu, elu and gelu default to 0.01, 1.0 and the exact form."""
        assert opts("leaky_relu").negative_slope == 0.01
        assert opts("elu").alpha == 1.0
        assert opts("gelu").approximate == "none"
        assert opts("gelu", approximate="tanh").approximate == "tanh"


class TestViewSchemas:
    def test_as_strided_reads_back_normalised(self) -> None:
        """Shape and strides read back as tuples; negative strides are allowed."""
        record = opts("as_strided", shape=[2, 3], strides=(3, -1), offset=2)
        assert dict(record.fields()) == {"shape": (2, 3), "strides": (3, -1), "offset": 2}
        assert opts("as_strided", shape=(4,), strides=(1,)).offset == 0

    @pytest.mark.parametrize("name", ["broadcast_to", "reshape"])
    def test_single_int_shape_wrapped_in_tuple(self, name: str) -> None:
        """A single int shape reads back as a 1-tuple."""
        assert opts(name, shape=6).shape == (6,)

    def test_reshape_one_inferred_extent_accepted(self) -> None:
        """reshape accepts one -1 extent."""
        assert opts("reshape", shape=(2, -1)).shape == (2, -1)

    def test_permute_axes_normalised_to_tuple(self) -> None:
        """permute's axes read back as a tuple, negative axes included."""
        assert opts("permute", axes=[1, 0, -1]).axes == (1, 0, -1)
        assert opts("permute", axes=0).axes == (0,)

    def test_rearrange_dict_sizes_sorted_pairs(self) -> None:
        """A dict of sizes and pairs in any order give the same sorted tuple of pairs."""
        from_dict = opts("rearrange", pattern="b (h w) -> b h w", sizes={"w": 2, "h": 3})
        from_pairs = opts("rearrange", pattern="b (h w) -> b h w", sizes=[("w", 2), ["h", 3]])
        assert from_dict.sizes == (("h", 3), ("w", 2))
        assert from_dict == from_pairs and hash(from_dict) == hash(from_pairs)
        assert opts("rearrange", pattern="a b -> b a").sizes == ()

    def test_squeeze_and_unsqueeze_axes_read_back(self) -> None:
        """squeeze defaults to None; both keep a single int and tuple-ise lists."""
        assert opts("squeeze").axes is None
        assert opts("squeeze", axes=[0, 2]).axes == (0, 2)
        assert opts("unsqueeze", axes=1).axes == 1
        assert opts("unsqueeze", axes=[0, -1]).axes == (0, -1)


class TestViewKey:
    def test_key_with_slices_hashable(self) -> None:
        """A key holding slices still gives a hashable record; equal keys hash equal."""
        first = opts("view", key=(slice(0, 2), 1, None, ...))
        second = opts("view", key=(slice(0, 2, None), np.int64(1), None, Ellipsis))
        assert first == second and hash(first) == hash(second)
        assert {first: "cached"}[second] == "cached"

    def test_key_reads_back_real_slices(self) -> None:
        """opts.key is a tuple with real slice objects, usable to index a NumPy array."""
        key = opts("view", key=(slice(1, None), ..., 0)).key
        assert key == (slice(1, None, None), Ellipsis, 0)
        assert isinstance(key[0], slice)
        assert np.arange(24).reshape(2, 3, 4)[key].tolist() == [[12, 16, 20]]

    def test_single_key_wrapped_in_tuple(self) -> None:
        """A key that is not a tuple reads back as a 1-tuple."""
        assert opts("view", key=slice(None, None, -1)).key == (slice(None, None, -1),)
        assert opts("view", key=None).key == (None,)
        assert opts("view", key=3).key == (3,)

    def test_numpy_slice_bounds_normalised_to_int(self) -> None:
        """NumPy integers inside a slice read back as Python ints."""
        (item,) = opts("view", key=slice(np.int64(1), np.int32(5), np.int8(2))).key
        assert (item.start, item.stop, item.step) == (1, 5, 2)
        assert all(type(v) is int for v in (item.start, item.stop, item.step))

    def test_different_slices_unequal(self) -> None:
        """Keys that differ only in a slice bound are different records."""
        assert opts("view", key=slice(0, 2)) != opts("view", key=slice(0, 3))


class TestUnknownNameRefusal:
    def test_unknown_name_raises_not_implemented(self) -> None:
        """A name that is not a dispatch name is a NotImplementedError naming it."""
        with pytest.raises(NotImplementedError) as info:
            opts("reduc_sum", axis=0)
        assert str(info.value) == (
            "'reduc_sum' is not a dispatch name, so it has no option schema; "
            "did you mean 'reduce_sum'?"
        )
        assert info.value.__cause__ is None and info.value.__suppress_context__

    def test_unrelated_name_raises_without_suggestion(self) -> None:
        """A name close to no dispatch name gets no suggestion."""
        with pytest.raises(
            NotImplementedError,
            match=r"^'frobnicate' is not a dispatch name, so it has no option schema$",
        ):
            opts("frobnicate")

    @pytest.mark.parametrize("name", [3, None, ["add"], b"add"])
    def test_non_string_name_raises_type_error(self, name: Any) -> None:
        """A dispatch name that is not a str is a TypeError showing it and its type."""
        with pytest.raises(TypeError) as info:
            OperationExecutionOptions(name)
        assert str(info.value) == (
            f"a dispatch name must be a str, got {name!r} ({type(name).__name__})"
        )

    @pytest.mark.parametrize("function", [options_schema, has_options])
    def test_schema_lookup_refuses_like_constructor(self, function: Any) -> None:
        """options_schema and has_options refuse unknown and non-string names the same way."""
        with pytest.raises(NotImplementedError, match="'nope_op' is not a dispatch name"):
            function("nope_op")
        with pytest.raises(TypeError, match=r"got 1 \(int\)"):
            function(1)


class TestUnknownFieldRefusal:
    def test_unknown_field_lists_accepted_fields(self) -> None:
        """An unknown field is a TypeError that lists the fields the name accepts."""
        with pytest.raises(TypeError) as info:
            opts("reduce_sum", axes=0)
        assert str(info.value) == (
            "reduce_sum: unknown option 'axes'; accepted options: axis, keepdims, accumulator_dtype"
        )

    def test_misspelt_required_field_reported_as_unknown(self) -> None:
        """A misspelt required field is reported as unknown, not as missing."""
        with pytest.raises(
            TypeError, match=r"^topk: unknown option 'kk'; accepted options: k, axis, largest$"
        ):
            opts("topk", kk=3)

    def test_field_of_other_schema_refused(self) -> None:
        """A field from another operation's schema is unknown here."""
        with pytest.raises(
            TypeError,
            match=r"^matmul: unknown option 'keepdims'; accepted options: accumulator_dtype$",
        ):
            opts("matmul", keepdims=True)


class TestMissingFieldRefusal:
    @pytest.mark.parametrize(
        ("name", "given", "missing"),
        [
            ("topk", {}, "k"),
            ("gather", {}, "axis"),
            ("as_strided", {}, "shape, strides"),
            ("as_strided", {"strides": (1,)}, "shape"),
            ("rearrange", {"sizes": {}}, "pattern"),
            ("view", {}, "key"),
            ("unsqueeze", {}, "axes"),
        ],
    )
    def test_missing_required_field_raises_type_error(
        self, name: str, given: dict[str, Any], missing: str
    ) -> None:
        """Leaving out a required field is a TypeError naming every missing field in order."""
        with pytest.raises(TypeError) as info:
            opts(name, **given)
        assert str(info.value) == f"{name}: missing required option(s) {missing}"


class TestWrongTypeRefusal:
    @pytest.mark.parametrize(
        ("name", "field", "value", "expected"),
        [
            ("reduce_sum", "axis", True, "an int, a tuple of ints or None"),
            ("reduce_sum", "axis", 1.5, "an int, a tuple of ints or None"),
            ("reduce_sum", "axis", (0, False), "an int, a tuple of ints or None"),
            ("reduce_sum", "keepdims", 1, "a bool"),
            ("argmax", "axis", (0,), "an int or None"),
            ("gather", "axis", None, "an int"),
            ("topk", "k", 2.0, "an int >= 0"),
            ("topk", "largest", None, "a bool"),
            ("sort", "stable", "yes", "a bool"),
            ("conv_general", "window_strides", 2, "a tuple of ints >= 1 or None"),
            ("conv_general", "padding", "SAME", "a tuple of (low, high) int pairs or None"),
            ("conv_general", "padding", (1, 1), "a tuple of (low, high) int pairs or None"),
            (
                "conv_general",
                "dimension_numbers",
                "NCHW",
                "a tuple of three layout strings or None",
            ),
            ("conv_general", "feature_group_count", True, "an int >= 1"),
            ("leaky_relu", "negative_slope", True, "a float"),
            ("elu", "alpha", "1.0", "a float"),
            ("gelu", "approximate", False, "'none' or 'tanh'"),
            ("as_strided", "shape", (2.0, 3), "a tuple of ints >= 0"),
            ("permute", "axes", "01", "a tuple of ints"),
            ("rearrange", "pattern", 3, "a str"),
            ("rearrange", "sizes", "h=2", "a dict or tuple of (str, int) pairs"),
            ("rearrange", "sizes", {1: 2}, "a dict or tuple of (str, int) pairs"),
            ("reshape", "shape", None, "a tuple of ints >= -1"),
            ("unsqueeze", "axes", None, "an int or a tuple of ints"),
        ],
    )
    def test_wrong_type_raises_type_error(
        self, name: str, field: str, value: Any, expected: str
    ) -> None:
        """A value of the wrong type is a TypeError naming field, expectation and value."""
        with pytest.raises(TypeError) as info:
            opts(name, **{**REQUIRED_EXAMPLES.get(name, {}), field: value})
        assert str(info.value) == (
            f"{name}: option {field} must be {expected}, got {value!r} ({type(value).__name__})"
        )

    @pytest.mark.parametrize("value", ["float64", np.float64, np.dtype("float64")])
    def test_dtype_name_accumulator_accepted_as_the_dtype(self, value: Any) -> None:
        """A dtype name or NumPy dtype is accepted wherever a dtype is, resolved to the DType."""
        assert opts("matmul", accumulator_dtype=value).accumulator_dtype is dt.float64

    @pytest.mark.parametrize("value", ["float65", 3, object()])
    def test_non_dtype_accumulator_points_to_lookup(self, value: Any) -> None:
        """A value naming no dtype is refused with a pointer to conveyor.dtype()."""
        with pytest.raises(TypeError) as info:
            opts("matmul", accumulator_dtype=value)
        assert str(info.value) == (
            f"matmul: option accumulator_dtype must be a conveyor DType or None, got {value!r} "
            f"({type(value).__name__}); look one up with conveyor.dtype(...)"
        )

    def test_numpy_bool_refused_with_conversion_hint(self) -> None:
        """A NumPy bool is not a bool here; the message says how to convert it."""
        with pytest.raises(TypeError) as info:
            opts("reduce_sum", keepdims=np.True_)
        assert str(info.value) == (
            f"reduce_sum: option keepdims must be a bool, got {np.True_!r} "
            f"({type(np.True_).__name__}); convert the NumPy scalar with int(), float() or bool()"
        )

    @pytest.mark.parametrize("key", [[0, 1], True, (0, [1]), 1.0, (slice(0, 1.5),), np.array([1])])
    def test_advanced_view_key_raises_type_error(self, key: Any) -> None:
        """Bool, list, float and array keys are refused and pointed at gather."""
        with pytest.raises(TypeError) as info:
            opts("view", key=key)
        message = str(info.value)
        assert message.startswith(
            "view: option key must be a basic index (an int, slice, None, Ellipsis or a tuple "
            f"of those), got {key!r} ({type(key).__name__}); "
        )
        assert message.endswith(
            "options are never tensors; pass a Python value"
            if isinstance(key, np.ndarray)
            else "advanced indexing (bool, list or tensor keys) goes through gather"
        )

    @pytest.mark.parametrize(
        ("name", "field"),
        [("reduce_sum", "axis"), ("topk", "k"), ("elu", "alpha"), ("reshape", "shape")],
    )
    def test_tensor_like_value_raises_type_error(self, name: str, field: str) -> None:
        """Anything with shape and dtype is refused as an option, even if it converts to int."""
        with pytest.raises(TypeError) as info:
            opts(name, **{field: FakeTensor()})
        assert str(info.value).endswith(
            "got FakeTensor() (FakeTensor); options are never tensors; pass a Python value"
        )

    def test_zero_dim_numpy_array_refused(self) -> None:
        """A 0-d NumPy array is a tensor, not an int, even though it supports __index__."""
        with pytest.raises(
            TypeError, match=r"got array\(2\) \(ndarray\); options are never tensors"
        ):
            opts("topk", k=np.array(2))

    def test_field_spec_check_raises_like_constructor(self) -> None:
        """FieldSpec.check validates one value with the constructor's messages."""
        spec = options_schema("topk")["k"]
        assert spec.check("topk", np.int16(4)) == 4
        with pytest.raises(
            TypeError, match=r"^topk: option k must be an int >= 0, got True \(bool\)$"
        ):
            spec.check("topk", True)
        with pytest.raises(ValueError, match=r"^topk: option k must be >= 0, got -2$"):
            spec.check("topk", -2)


class TestBadValueRefusal:
    @pytest.mark.parametrize(
        ("name", "fields", "message"),
        [
            ("topk", {"k": -1}, "topk: option k must be >= 0, got -1"),
            (
                "reduce_sum",
                {"axis": (0, 0)},
                "reduce_sum: option axis must not repeat an axis, got (0, 0)",
            ),
            (
                "permute",
                {"axes": [1, 1, 0]},
                "permute: option axes must not repeat an axis, got [1, 1, 0]",
            ),
            (
                "squeeze",
                {"axes": (2, 2)},
                "squeeze: option axes must not repeat an axis, got (2, 2)",
            ),
            (
                "gelu",
                {"approximate": "fast"},
                "gelu: option approximate must be one of 'none', 'tanh', got 'fast'",
            ),
            (
                "leaky_relu",
                {"negative_slope": float("nan")},
                "leaky_relu: option negative_slope must be finite, got nan",
            ),
            ("elu", {"alpha": float("inf")}, "elu: option alpha must be finite, got inf"),
            (
                "reshape",
                {"shape": (-1, 2, -1)},
                "reshape: option shape may contain -1 (an inferred extent) at most once, "
                "got (-1, 2, -1)",
            ),
            (
                "reshape",
                {"shape": (-2, 3)},
                "reshape: option shape entries must be >= -1, got (-2, 3)",
            ),
            (
                "broadcast_to",
                {"shape": (2, -1)},
                "broadcast_to: option shape entries must be >= 0, got (2, -1)",
            ),
            (
                "as_strided",
                {"shape": (2,), "strides": (1,), "offset": -1},
                "as_strided: option offset must be >= 0, got -1",
            ),
            (
                "conv_general",
                {"window_strides": (1, 0)},
                "conv_general: option window_strides entries must be >= 1, got (1, 0)",
            ),
            (
                "conv_general",
                {"lhs_dilation": (-1,)},
                "conv_general: option lhs_dilation entries must be >= 1, got (-1,)",
            ),
            (
                "conv_general",
                {"padding": ((1, 1), (1, 1, 1))},
                "conv_general: option padding must hold (low, high) pairs of length 2, "
                "got ((1, 1), (1, 1, 1))",
            ),
            (
                "conv_general",
                {"padding": ((1, -1),)},
                "conv_general: option padding entries must be >= 0, got ((1, -1),)",
            ),
            (
                "conv_general",
                {"feature_group_count": 0},
                "conv_general: option feature_group_count must be >= 1, got 0",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NCHW", "OIHW")},
                "conv_general: option dimension_numbers must hold three layouts (lhs, rhs, out), "
                "got ('NCHW', 'OIHW')",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NCHH", "OIHW", "NCHW")},
                "conv_general: option dimension_numbers layout 'NCHH' repeats a dimension letter, "
                "got ('NCHH', 'OIHW', 'NCHW')",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NXHW", "OIHW", "NCHW")},
                "conv_general: option dimension_numbers layout 'NXHW' must contain N and C, "
                "got ('NXHW', 'OIHW', 'NCHW')",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NCHW", "OXHW", "NCHW")},
                "conv_general: option dimension_numbers layout 'OXHW' must contain O and I, "
                "got ('NCHW', 'OXHW', 'NCHW')",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NCHW", "OIW", "NCHW")},
                "conv_general: option dimension_numbers layouts must all have the same length, "
                "got ('NCHW', 'OIW', 'NCHW')",
            ),
            (
                "conv_general",
                {"dimension_numbers": ("NCHW", "OIHX", "NCHW")},
                "conv_general: option dimension_numbers layouts must name the same spatial "
                "dimensions, got ('NCHW', 'OIHX', 'NCHW')",
            ),
            (
                "rearrange",
                {"pattern": "a b"},
                "rearrange: option pattern must contain exactly one '->', got 'a b'",
            ),
            (
                "rearrange",
                {"pattern": "a -> b", "sizes": {"a": 0}},
                "rearrange: option sizes size of 'a' must be >= 1, got {'a': 0}",
            ),
            (
                "rearrange",
                {"pattern": "a -> b", "sizes": (("a", 1), ("a", 2))},
                "rearrange: option sizes names axis 'a' twice, got (('a', 1), ('a', 2))",
            ),
            (
                "rearrange",
                {"pattern": "a -> b", "sizes": (("a", 1, 2),)},
                "rearrange: option sizes must hold (axis name, size) pairs of length 2, "
                "got (('a', 1, 2),)",
            ),
            (
                "rearrange",
                {"pattern": "a -> b", "sizes": {"2a": 1}},
                "rearrange: option sizes axis name '2a' is not an identifier, got {'2a': 1}",
            ),
            (
                "view",
                {"key": (..., 0, ...)},
                "view: option key may contain Ellipsis at most once, got (Ellipsis, 0, Ellipsis)",
            ),
            (
                "view",
                {"key": slice(0, 4, 0)},
                "view: option key slice step must not be zero, got slice(0, 4, 0)",
            ),
        ],
    )
    def test_bad_value_raises_value_error(
        self, name: str, fields: dict[str, Any], message: str
    ) -> None:
        """A value of the right type but out of range is a ValueError naming field and value."""
        with pytest.raises(ValueError) as info:
            opts(name, **fields)
        assert type(info.value) is ValueError
        assert str(info.value) == message


class TestCrossFieldRefusal:
    def test_conv_spatial_counts_disagree_raises_value_error(self) -> None:
        """Per-spatial fields with different lengths are a ValueError naming both."""
        with pytest.raises(ValueError) as info:
            opts("conv_general", window_strides=(1, 1), rhs_dilation=(1,))
        assert str(info.value) == (
            "conv_general: option rhs_dilation has 1 entries but window_strides implies "
            "2 spatial dimensions"
        )

    def test_conv_fields_disagree_with_layouts_raises_value_error(self) -> None:
        """A per-spatial field must match the number of spatial letters in the layouts."""
        with pytest.raises(ValueError) as info:
            opts("conv_general", padding=((0, 0),), dimension_numbers=("NCHW", "OIHW", "NCHW"))
        assert str(info.value) == (
            "conv_general: option padding has 1 entries but dimension_numbers implies "
            "2 spatial dimensions"
        )

    def test_as_strided_lengths_disagree_raises_value_error(self) -> None:
        """as_strided needs one stride per extent."""
        with pytest.raises(ValueError) as info:
            opts("as_strided", shape=(2, 3), strides=(1,))
        assert str(info.value) == (
            "as_strided: options shape and strides differ in length: (2, 3) and (1,)"
        )

    def test_rearrange_size_for_unknown_axis_raises_value_error(self) -> None:
        """A size for an axis the pattern does not name is a ValueError."""
        with pytest.raises(ValueError) as info:
            opts("rearrange", pattern="b (h w) -> b h w", sizes={"c": 2})
        assert str(info.value) == (
            "rearrange: option sizes names axis 'c', which pattern 'b (h w) -> b h w' lacks"
        )


class TestEqualityAndHash:
    def test_equal_fields_equal_and_hash_equal(self) -> None:
        """Records with the same name and normalised values are equal and hash equal."""
        first = opts("reduce_sum", axis=[0, 1], accumulator_dtype=dt.float32)
        second = opts("reduce_sum", axis=(0, 1), keepdims=False, accumulator_dtype=dt.float32)
        assert first == second and hash(first) == hash(second)
        assert len({first, second}) == 1

    def test_different_names_unequal(self) -> None:
        """Records of different operations with the same fields are not equal."""
        assert opts("reduce_max", axis=0) != opts("reduce_min", axis=0)
        assert opts("add") != opts("sub")

    def test_different_values_unequal(self) -> None:
        """A changed field makes a different record."""
        assert opts("sort") != opts("sort", descending=True)

    def test_other_types_unequal(self) -> None:
        """A record never equals a non-record, such as its name or its fields."""
        record = opts("topk", k=1)
        assert record != "topk"
        assert record != {"k": 1, "axis": -1, "largest": True}

    def test_hash_stable_across_calls(self) -> None:
        """Hashing twice gives the same value (the first hash is cached)."""
        record = opts("conv_general", padding=((1, 1),))
        assert hash(record) == hash(record)


class TestFrozen:
    def test_setting_field_raises_attribute_error(self) -> None:
        """Assigning to a field is refused and points to replace()."""
        record = opts("reduce_sum", axis=0)
        with pytest.raises(AttributeError) as info:
            record.axis = 1
        assert str(info.value) == (
            "OperationExecutionOptions is frozen: cannot set 'axis'; use replace()"
        )
        assert record.axis == 0

    def test_setting_name_or_new_attribute_raises_attribute_error(self) -> None:
        """Neither the name nor a new attribute can be set."""
        record = opts("add")
        with pytest.raises(AttributeError, match="frozen: cannot set 'name'"):
            record.name = "sub"
        with pytest.raises(AttributeError, match="frozen: cannot set 'extra'"):
            record.extra = 1
        assert record.name == "add"

    def test_deleting_field_raises_attribute_error(self) -> None:
        """Deleting an attribute is refused."""
        record = opts("topk", k=2)
        with pytest.raises(
            AttributeError, match=r"^OperationExecutionOptions is frozen: cannot delete 'k'$"
        ):
            del record.k

    def test_fields_mapping_read_only(self) -> None:
        """fields() is a read-only view."""
        record = opts("topk", k=2)
        with pytest.raises(TypeError):
            record.fields()["k"] = 3  # type: ignore[index]  # the refusal under test
        assert record.k == 2

    def test_missing_field_raises_attribute_error(self) -> None:
        """Reading a field the schema lacks is an AttributeError listing its fields."""
        with pytest.raises(AttributeError) as info:
            _ = opts("sort").k
        assert str(info.value) == "sort options have no field 'k'; fields: axis, descending, stable"

    def test_record_slotted_without_dict(self) -> None:
        """Records carry no __dict__, so nothing can be attached to them."""
        assert not hasattr(opts("add"), "__dict__")
        assert not hasattr(opts("reduce_sum", axis=0), "__dict__")

    def test_field_of_other_schema_unset(self) -> None:
        """A field another schema has does not read on this record."""
        assert not hasattr(opts("reduce_sum"), "k")
        assert not hasattr(opts("add"), "axis")


class TestReplaceAndCopy:
    def test_replace_returns_validated_copy(self) -> None:
        """replace() gives a new record with the change applied and the original intact."""
        record = opts("reduce_sum", axis=0)
        changed = record.replace(keepdims=True, axis=[1])
        assert changed == opts("reduce_sum", axis=(1,), keepdims=True)
        assert record.keepdims is False

    def test_replace_validates_changes(self) -> None:
        """replace() refuses bad values exactly as construction does."""
        with pytest.raises(ValueError, match=r"^topk: option k must be >= 0, got -1$"):
            opts("topk", k=1).replace(k=-1)

    @pytest.mark.parametrize(
        "record",
        [
            OperationExecutionOptions("reduce_sum", axis=(0,), accumulator_dtype=dt.float64),
            OperationExecutionOptions("view", key=(slice(0, 2), ..., None)),
            OperationExecutionOptions("add"),
        ],
    )
    def test_pickle_and_copy_round_trip(self, record: OperationExecutionOptions) -> None:
        """Pickling, copy and deepcopy give an equal record with the same hash."""
        for clone in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
            assert clone == record and hash(clone) == hash(record)
        restored = pickle.loads(pickle.dumps(record))
        if "accumulator_dtype" in record.fields():
            assert restored.accumulator_dtype is dt.float64


class TestSchemaIntrospection:
    def test_options_schema_lists_field_specs_in_order(self) -> None:
        """options_schema gives each field's spec, in schema order."""
        schema = options_schema("topk")
        assert list(schema) == ["k", "axis", "largest"]
        assert schema["k"] == FieldSpec("k", "an int >= 0", schema["k"].validator, None, True)
        assert (schema["axis"].default, schema["axis"].required) == (-1, False)

    def test_options_schema_read_only(self) -> None:
        """The returned mapping cannot be changed."""
        with pytest.raises(TypeError):
            options_schema("sort")["axis"] = None  # type: ignore[index]  # the refusal under test

    @pytest.mark.parametrize("name", FIELD_NAMES + VIEW_NAMES)
    def test_has_options_true_for_names_with_fields(self, name: str) -> None:
        """has_options is True exactly when the schema has fields."""
        assert has_options(name)
        assert len(options_schema(name)) > 0

    @pytest.mark.parametrize("name", sorted(SCHEMA_NAMES))
    def test_default_record_matches_schema_defaults(self, name: str) -> None:
        """Building with only the required fields fills every other field with its default."""
        schema = options_schema(name)
        required = REQUIRED_EXAMPLES.get(name, {})
        assert {k for k, spec in schema.items() if spec.required} == set(required)
        record = opts(name, **required)
        for field, spec in schema.items():
            if not spec.required:
                assert getattr(record, field) == spec.default


class TestDocs:
    def test_docs_tables_match_schemas(self) -> None:
        """docs/options.md has one table row per field, with the schema's type and default."""
        text = DOCS.read_text(encoding="utf-8")
        documented: dict[str, list[tuple[str, str, str]]] = {}
        for section in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
            heading, _, body = section.partition("\n")
            rows = re.findall(r"^\| `(\w+)` \| (.+?) \| (.+?) \| .+ \|$", body, flags=re.MULTILINE)
            for name in re.findall(r"`(\w+)`", heading):
                documented[name] = rows
        for name in SCHEMA_NAMES:
            expected = [
                (f, s.expected, "required" if s.required else f"`{s.default!r}`")
                for f, s in options_schema(name).items()
            ]
            if expected:
                assert documented.get(name) == expected, name
            else:
                assert f"`{name}`" in text.split("## Operations without options")[1], name


@st.composite
def _axes(draw: st.DrawFn, *, single: str, optional: bool) -> tuple[Any, Any]:
    """A raw axes value and what it reads back as; ``single``: "keep" or "wrap" a lone int."""
    choices = ["int", "list", "tuple", "numpy"] + (["none"] if optional else [])
    kind = draw(st.sampled_from(choices))
    if kind == "none":
        return None, None
    if kind in ("int", "numpy"):
        axis = draw(st.integers(-8, 7))
        raw = np.int64(axis) if kind == "numpy" else axis
        return raw, (axis if single == "keep" else (axis,))
    axes = draw(st.lists(st.integers(-8, 7), unique=True, max_size=4))
    return (axes if kind == "list" else tuple(axes)), tuple(axes)


def _same(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, Any]]:
    return strategy.map(lambda v: (v, v))


def _ints(minimum: int, size: int) -> st.SearchStrategy[tuple[Any, Any]]:
    items = st.lists(st.integers(minimum, 9), min_size=size, max_size=size)
    return items.flatmap(lambda v: st.sampled_from([(v, tuple(v)), (tuple(v), tuple(v))]))


@st.composite
def _conv(draw: st.DrawFn) -> dict[str, tuple[Any, Any]]:
    n = draw(st.integers(0, 3))
    fields: dict[str, tuple[Any, Any]] = {}
    if draw(st.booleans()):
        spatial = "DHW"[3 - n :]
        layouts = ("NC" + spatial, "OI" + spatial, "N" + spatial + "C")
        fields["dimension_numbers"] = (list(layouts), layouts)
    for name in ("window_strides", "lhs_dilation", "rhs_dilation"):
        if draw(st.booleans()):
            fields[name] = draw(_ints(1, n))
    if draw(st.booleans()):
        pairs = draw(
            st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=n, max_size=n)
        )
        fields["padding"] = ([list(p) for p in pairs], tuple(pairs))
    if draw(st.booleans()):
        fields["feature_group_count"] = draw(_same(st.integers(1, 8)))
    return fields


def _key_item() -> st.SearchStrategy[Any]:
    bound = st.none() | st.integers(-5, 5)
    step = st.none() | st.integers(-3, 3).filter(bool)
    return st.one_of(
        st.integers(-5, 5),
        st.none(),
        st.builds(slice, bound, bound, step),
    )


@st.composite
def _view_key(draw: st.DrawFn) -> tuple[Any, Any]:
    items = draw(st.lists(_key_item(), max_size=4))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    if len(items) == 1 and draw(st.booleans()):
        return items[0], tuple(items)
    return tuple(items), tuple(items)


@st.composite
def _valid_fields(draw: st.DrawFn) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """A dispatch name and, per field it gives, (raw value, normalised value)."""
    name = draw(st.sampled_from(sorted(SCHEMA_NAMES)))
    bools = _same(st.booleans())
    axis = st.integers(-8, 7)
    maybe_dtype = _same(st.none() | st.sampled_from(dt.CONCRETE_DTYPES))
    candidates: dict[str, dict[str, st.SearchStrategy[tuple[Any, Any]]]] = {
        "reduce_sum": {
            "axis": _axes(single="keep", optional=True),
            "keepdims": bools,
            "accumulator_dtype": maybe_dtype,
        },
        "reduce_max": {"axis": _axes(single="keep", optional=True), "keepdims": bools},
        "matmul": {"accumulator_dtype": maybe_dtype},
        "argmax": {"axis": _same(st.none() | axis), "keepdims": bools},
        "cumsum": {"axis": _same(st.none() | axis)},
        "gather": {"axis": _same(axis)},
        "topk": {"k": _same(st.integers(0, 9)), "axis": _same(axis), "largest": bools},
        "sort": {"axis": _same(axis), "descending": bools, "stable": bools},
        "leaky_relu": {
            "negative_slope": st.integers(-3, 3).map(lambda v: (v, float(v)))
            | _same(st.floats(-5, 5, allow_nan=False))
        },
        "elu": {"alpha": _same(st.floats(0, 5, allow_nan=False))},
        "gelu": {"approximate": _same(st.sampled_from(["none", "tanh"]))},
        "broadcast_to": {"shape": _ints(0, 2)},
        "reshape": {"shape": _ints(-1, 1) | _ints(0, 3)},
        "permute": {"axes": _axes(single="wrap", optional=False)},
        "squeeze": {"axes": _axes(single="keep", optional=True)},
        "unsqueeze": {"axes": _axes(single="keep", optional=False)},
        "view": {"key": _view_key()},
    }
    alias = {
        "reduce_prod": "reduce_sum",
        "reduce_min": "reduce_max",
        "argmin": "argmax",
        "scatter": "gather",
        "scatter_add": "gather",
    }
    if name == "conv_general":
        return name, draw(_conv())
    if name == "as_strided":
        n = draw(st.integers(0, 3))
        fields = {"shape": draw(_ints(0, n)), "strides": draw(_ints(-9, n))}
        if draw(st.booleans()):
            fields["offset"] = draw(_same(st.integers(0, 9)))
        return name, fields
    if name == "rearrange":
        names = draw(st.lists(st.sampled_from("abcdh"), unique=True, max_size=3))
        sizes = {n: draw(st.integers(1, 5)) for n in names}
        raw = sizes if draw(st.booleans()) else list(sizes.items())
        pattern = "a b c d h -> h d c b a"
        return name, {"pattern": (pattern, pattern), "sizes": (raw, tuple(sorted(sizes.items())))}
    schema = candidates.get(alias.get(name, name), {})
    fields = {}
    for field, strategy in schema.items():
        if options_schema(name)[field].required or draw(st.booleans()):
            fields[field] = draw(strategy)
    return name, fields


class TestRoundTripProperty:
    @given(_valid_fields())
    def test_valid_fields_round_trip(self, case: tuple[str, dict[str, tuple[Any, Any]]]) -> None:
        """Valid fields read back normalised; rebuilding, from raw or normalised, is equal."""
        name, fields = case
        raw = {field: pair[0] for field, pair in fields.items()}
        normalised = {field: pair[1] for field, pair in fields.items()}
        record = OperationExecutionOptions(name, **raw)
        for field, spec in options_schema(name).items():
            expected = normalised.get(field, spec.default)
            assert getattr(record, field) == expected
            assert type(getattr(record, field)) is type(expected)
        again = OperationExecutionOptions(name, **raw)
        from_normalised = OperationExecutionOptions(name, **normalised)
        assert record == again == from_normalised
        assert hash(record) == hash(again) == hash(from_normalised)
        assert record.replace() == record
        assert pickle.loads(pickle.dumps(record)) == record
        namespace = {
            "OperationExecutionOptions": OperationExecutionOptions,
            "conveyor": SimpleNamespace(**{d.name: d for d in dt.CONCRETE_DTYPES}),
        }
        assert eval(repr(record), namespace) == record  # the repr reads back as the record
