"""Dtypes: singleton descriptors, lookup, NumPy mapping, categories and the promotion lattice."""

from __future__ import annotations

import copy
import itertools
import pickle
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import conveyor as cv
from conveyor.types.dtypes import CATEGORIES, CONCRETE_DTYPES

ALL_DTYPES = CONCRETE_DTYPES + CATEGORIES
_names = [d.name for d in ALL_DTYPES]


class TestSingletons:
    @pytest.mark.parametrize("d", ALL_DTYPES, ids=_names)
    def test_copy_and_deepcopy_return_the_same_object(self, d: cv.DType) -> None:
        """copy and deepcopy keep identity, so descriptors compare with `is`."""
        assert copy.copy(d) is d
        assert copy.deepcopy(d) is d
        assert copy.deepcopy({"d": [d]})["d"][0] is d

    @pytest.mark.parametrize("d", ALL_DTYPES, ids=_names)
    @pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
    def test_pickle_round_trip_keeps_identity(self, d: cv.DType, protocol: int) -> None:
        """Unpickling returns the registered singleton, for every protocol."""
        assert pickle.loads(pickle.dumps(d, protocol=protocol)) is d

    def test_creating_an_existing_dtype_raises(self) -> None:
        """A second descriptor with a registered name is refused and points to lookup."""
        with pytest.raises(
            ValueError, match=r"dtype 'float32' already exists; use conveyor\.dtype"
        ):
            cv.DType("float32", "floating", 4)

    def test_repr_is_the_public_name(self) -> None:
        """repr shows where the descriptor lives."""
        assert repr(cv.float32) == "conveyor.float32"
        assert repr(cv.bool) == "conveyor.bool"


class TestLookup:
    @pytest.mark.parametrize("d", ALL_DTYPES, ids=_names)
    def test_lookup_by_name(self, d: cv.DType) -> None:
        """cv.dtype(name) returns the descriptor of that name, categories included."""
        assert cv.dtype(d.name) is d

    @pytest.mark.parametrize("d", CONCRETE_DTYPES, ids=[d.name for d in CONCRETE_DTYPES])
    def test_lookup_by_numpy_dtype_and_type(self, d: cv.DType) -> None:
        """cv.dtype accepts the NumPy dtype and the NumPy scalar type of every concrete dtype."""
        assert cv.dtype(d.numpy) is d
        assert cv.dtype(d.numpy.type) is d

    @pytest.mark.parametrize("spec", [">f4", "<f4", ">i8", ">u2", ">c16"])
    def test_byte_order_does_not_change_the_dtype(self, spec: str) -> None:
        """A non-native byte order names the same dtype as the native one."""
        native = np.dtype(spec).newbyteorder("=")

        assert cv.dtype(np.dtype(spec)) is cv.dtype(native)

    def test_descriptor_looks_up_itself(self) -> None:
        """A descriptor passed to cv.dtype is returned as is."""
        assert cv.dtype(cv.int8) is cv.int8

    @pytest.mark.parametrize("spec", ["float128x", object, np.dtype("U3"), 3])
    def test_unknown_spec_raises(self, spec: Any) -> None:
        """Anything that names no Conveyor dtype is a TypeError naming it."""
        with pytest.raises(TypeError, match="no conveyor dtype for"):
            cv.dtype(spec)


class TestNumpyMapping:
    @pytest.mark.parametrize(
        "d", [d for d in CONCRETE_DTYPES if d is not cv.bfloat16], ids=lambda d: d.name
    )
    def test_numpy_dtype_has_same_name_and_size(self, d: cv.DType) -> None:
        """Each concrete dtype is stored as the NumPy dtype of the same name and size."""
        assert d.numpy == np.dtype(d.name)
        assert d.numpy.itemsize == d.itemsize

    def test_bfloat16_maps_to_ml_dtypes(self) -> None:
        """bfloat16 is stored as ml_dtypes.bfloat16."""
        assert cv.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
        assert cv.bfloat16.itemsize == 2
        assert cv.dtype(ml_dtypes.bfloat16) is cv.bfloat16

    @pytest.mark.parametrize("category", CATEGORIES, ids=[c.name for c in CATEGORIES])
    def test_category_has_no_numpy_dtype(self, category: cv.DType) -> None:
        """A category is abstract: asking for its storage dtype is a TypeError."""
        assert category.is_abstract

        with pytest.raises(TypeError, match=f"{category.name} is an abstract dtype category"):
            _ = category.numpy

    @pytest.mark.parametrize("d", CONCRETE_DTYPES, ids=[d.name for d in CONCRETE_DTYPES])
    def test_concrete_dtypes_are_not_abstract(self, d: cv.DType) -> None:
        """Concrete dtypes are storable."""
        assert not d.is_abstract


class TestDifferentiable:
    @pytest.mark.parametrize("d", CONCRETE_DTYPES, ids=[d.name for d in CONCRETE_DTYPES])
    def test_floating_and_complex_are_differentiable(self, d: cv.DType) -> None:
        """Exactly the floating and complex dtypes carry gradients."""
        assert d.is_differentiable == (d.kind in ("floating", "complex_floating"))


# Which category each concrete dtype belongs to (besides any_dtype, which holds all of them).
_FLOATS = {"float16", "bfloat16", "float32", "float64"}
_SIGNED = {"int8", "int16", "int32", "int64"}
_UNSIGNED = {"uint8", "uint16", "uint32", "uint64"}
_COMPLEX = {"complex64", "complex128"}
_MEMBERS = {
    "any_dtype": _FLOATS | _SIGNED | _UNSIGNED | _COMPLEX | {"bool"},
    "numeric": _FLOATS | _SIGNED | _UNSIGNED | _COMPLEX,
    "integer": _SIGNED | _UNSIGNED,
    "signed_integer": _SIGNED,
    "unsigned_integer": _UNSIGNED,
    "floating": _FLOATS,
    "complex_floating": _COMPLEX,
}
# Category inclusions, written out: (narrower, wider) pairs besides each category with itself.
_CATEGORY_INCLUSIONS = {
    ("numeric", "any_dtype"),
    ("integer", "any_dtype"),
    ("integer", "numeric"),
    ("signed_integer", "any_dtype"),
    ("signed_integer", "numeric"),
    ("signed_integer", "integer"),
    ("unsigned_integer", "any_dtype"),
    ("unsigned_integer", "numeric"),
    ("unsigned_integer", "integer"),
    ("floating", "any_dtype"),
    ("floating", "numeric"),
    ("complex_floating", "any_dtype"),
    ("complex_floating", "numeric"),
}


class TestIsSubtypeOf:
    @pytest.mark.parametrize(
        ("d", "category"),
        list(itertools.product(CONCRETE_DTYPES, CATEGORIES)),
        ids=lambda x: x.name,
    )
    def test_concrete_in_category_table(self, d: cv.DType, category: cv.DType) -> None:
        """A concrete dtype is a subtype of exactly the categories listed for it."""
        assert cv.is_subtype_of(d, category) == (d.name in _MEMBERS[category.name])

    @pytest.mark.parametrize(
        ("left", "right"), list(itertools.product(CONCRETE_DTYPES, repeat=2)), ids=lambda x: x.name
    )
    def test_concrete_is_subtype_only_of_itself(self, left: cv.DType, right: cv.DType) -> None:
        """Among concrete dtypes, subtyping is identity (float32 is not a float64)."""
        assert left.is_subtype_of(right) == (left is right)

    @pytest.mark.parametrize(
        ("left", "right"), list(itertools.product(CATEGORIES, repeat=2)), ids=lambda x: x.name
    )
    def test_category_inclusion_table(self, left: cv.DType, right: cv.DType) -> None:
        """Categories nest as written in the table."""
        expected = left is right or (left.name, right.name) in _CATEGORY_INCLUSIONS
        assert cv.is_subtype_of(left, right) == expected

    @pytest.mark.parametrize("category", CATEGORIES, ids=[c.name for c in CATEGORIES])
    def test_category_is_not_subtype_of_a_member(self, category: cv.DType) -> None:
        """A category is wider than each of its members."""
        assert not any(category.is_subtype_of(d) for d in CONCRETE_DTYPES)


def _table(rows: str) -> dict[tuple[str, str], str]:
    """Parse 'a b -> c' lines into {(a, b): c}."""
    out = {}
    for line in rows.strip().splitlines():
        pair, result = line.split("->")
        a, b = pair.split()
        out[(a, b)] = result.strip()
    return out


# The Array API standard's promotion table for same-kind pairs, written out in full (one
# direction; the test checks both). Mixed signed/unsigned integers are included; uint64 with a
# signed integer is undefined there and is tested separately.
ARRAY_API_SAME_KIND = _table(
    """
    int8 int8 -> int8
    int8 int16 -> int16
    int8 int32 -> int32
    int8 int64 -> int64
    int16 int16 -> int16
    int16 int32 -> int32
    int16 int64 -> int64
    int32 int32 -> int32
    int32 int64 -> int64
    int64 int64 -> int64
    uint8 uint8 -> uint8
    uint8 uint16 -> uint16
    uint8 uint32 -> uint32
    uint8 uint64 -> uint64
    uint16 uint16 -> uint16
    uint16 uint32 -> uint32
    uint16 uint64 -> uint64
    uint32 uint32 -> uint32
    uint32 uint64 -> uint64
    uint64 uint64 -> uint64
    uint8 int8 -> int16
    uint8 int16 -> int16
    uint8 int32 -> int32
    uint8 int64 -> int64
    uint16 int8 -> int32
    uint16 int16 -> int32
    uint16 int32 -> int32
    uint16 int64 -> int64
    uint32 int8 -> int64
    uint32 int16 -> int64
    uint32 int32 -> int64
    uint32 int64 -> int64
    float32 float32 -> float32
    float32 float64 -> float64
    float64 float64 -> float64
    complex64 complex64 -> complex64
    complex64 complex128 -> complex128
    complex128 complex128 -> complex128
    float32 complex64 -> complex64
    float32 complex128 -> complex128
    float64 complex64 -> complex128
    float64 complex128 -> complex128
    bool bool -> bool
    """
)

# Pairs the standard does not cover, decided by our design (docs/dtype-policy.md; PyTorch for
# float16/bfloat16).
DESIGN_EXTRAS = _table(
    """
    float16 float16 -> float16
    bfloat16 bfloat16 -> bfloat16
    float16 float32 -> float32
    float16 float64 -> float64
    bfloat16 float32 -> float32
    bfloat16 float64 -> float64
    float16 bfloat16 -> float32
    float16 complex64 -> complex64
    float16 complex128 -> complex128
    bfloat16 complex64 -> complex64
    int8 float16 -> float16
    int64 float16 -> float16
    uint64 float32 -> float32
    int32 bfloat16 -> bfloat16
    uint8 float64 -> float64
    int64 complex64 -> complex64
    bool int8 -> int8
    bool uint64 -> uint64
    bool float16 -> float16
    bool bfloat16 -> bfloat16
    bool complex128 -> complex128
    """
)


def _both_ways(table: dict[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    return sorted(
        {(a, b, c) for (a, b), c in table.items()} | {(b, a, c) for (a, b), c in table.items()}
    )


_UNDEFINED = {cv.uint64} | {cv.int8, cv.int16, cv.int32, cv.int64}
_PROMOTABLE = [
    (a, b)
    for a, b in itertools.product(CONCRETE_DTYPES, repeat=2)
    if not ({a, b} <= _UNDEFINED and cv.uint64 in {a, b} and a is not b)
]


class TestPromoteTypes:
    @pytest.mark.parametrize(("a", "b", "expected"), _both_ways(ARRAY_API_SAME_KIND))
    def test_matches_array_api_table(self, a: str, b: str, expected: str) -> None:
        """Same-kind pairs promote as the Array API standard's table says."""
        assert cv.promote_types(cv.dtype(a), cv.dtype(b)) is cv.dtype(expected)

    @pytest.mark.parametrize(("a", "b", "expected"), _both_ways(DESIGN_EXTRAS))
    def test_pairs_outside_the_standard_follow_design(self, a: str, b: str, expected: str) -> None:
        """int with float gives the float; bool gives the other; float16 with bfloat16 float32."""
        assert cv.promote_types(cv.dtype(a), cv.dtype(b)) is cv.dtype(expected)

    @pytest.mark.parametrize(
        ("a", "b"), list(itertools.product(CONCRETE_DTYPES, repeat=2)), ids=lambda x: x.name
    )
    def test_symmetric(self, a: cv.DType, b: cv.DType) -> None:
        """promote_types(a, b) is promote_types(b, a), or both refuse."""
        try:
            forward = cv.promote_types(a, b)
        except TypeError:
            with pytest.raises(TypeError):
                cv.promote_types(b, a)
        else:
            assert cv.promote_types(b, a) is forward

    @pytest.mark.parametrize(("a", "b"), _PROMOTABLE, ids=lambda x: x.name)
    def test_result_has_the_wider_kind(self, a: cv.DType, b: cv.DType) -> None:
        """The result's kind is the wider operand kind (bool < uint < int < float < complex)."""
        order = ["bool", "unsigned_integer", "signed_integer", "floating", "complex_floating"]

        result = cv.promote_types(a, b)

        assert result.kind == order[max(order.index(a.kind), order.index(b.kind))]

    @pytest.mark.parametrize("signed", ["int8", "int16", "int32", "int64"])
    def test_uint64_with_signed_integer_raises_naming_the_cast(self, signed: str) -> None:
        """uint64 with a signed integer has no common integer dtype; the error names a cast."""
        for a, b in ((cv.uint64, cv.dtype(signed)), (cv.dtype(signed), cv.uint64)):
            with pytest.raises(TypeError) as info:
                cv.promote_types(a, b)
            message = str(info.value)
            assert f"cannot promote uint64 with {signed}" in message or (
                f"cannot promote {signed} with uint64" in message
            )
            assert "cast one operand explicitly (e.g. to int64 or float64)" in message

    @pytest.mark.parametrize("category", CATEGORIES, ids=[c.name for c in CATEGORIES])
    def test_category_operand_raises(self, category: cv.DType) -> None:
        """Categories cannot be promoted."""
        with pytest.raises(TypeError, match=f"abstract dtype category {category.name}"):
            cv.promote_types(cv.float32, category)

    def test_non_dtype_operand_raises(self) -> None:
        """promote_types takes descriptors, not NumPy dtypes."""
        with pytest.raises(TypeError, match="expects conveyor dtypes, got dtype"):
            cv.promote_types(cv.float32, np.dtype("float64"))  # type: ignore[arg-type]
