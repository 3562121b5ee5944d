"""Tests for conveyor.types.policy: the dtype-policy registry, plan resolution, plan enumeration."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conveyor.types.dtypes as dt
import conveyor.types.policy as policy

CONCRETE = dt.CONCRETE_DTYPES
INTEGERS = tuple(d for d in CONCRETE if d.is_integer)
FLOATS = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
REAL = tuple(d for d in CONCRETE if not d.is_complex)
SCALARS = (True, 1, 1.0, 1j)


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


PLANNED = words(
    "add sub mul elementwise_mul div pow neg abs sign recip sqrt rsqrt exp exp2 log log2 sin "
    "cos erf floor ceil round maximum minimum rem eq ne lt le logical_not relu sigmoid tanh "
    "gelu silu softplus elu leaky_relu reduce_sum reduce_prod reduce_max reduce_min argmax "
    "argmin cumsum matmul conv_general gather scatter scatter_add select clamp sort topk "
    "tan sinh cosh asin acos atan asinh acosh atanh expm1 log1p "
    "inv cholesky solve qr eigh svd"
)
BINARY_WITH_SCALARS = words("add sub mul div pow maximum minimum rem eq ne lt le")
FLOAT_VALUED = words(
    "recip sqrt rsqrt exp exp2 log log2 sin cos erf sigmoid tanh gelu silu softplus elu leaky_relu"
)
NOT_DIFFERENTIABLE = words("eq ne lt le logical_not sign floor ceil round argmax argmin")


@attrs.frozen
class Options:
    """A stand-in for OperationExecutionOptions: only ``name`` and ``accumulator_dtype``."""

    name: str
    accumulator_dtype: object = None


def plan_of(name: str, *operands: Any, acc: dt.DType | None = None) -> policy.OperationPlan:
    options = None if acc is None else Options(name, acc)
    return policy.resolve_plan(name, *operands, options=options)


def operand(
    role: str, dtype: dt.DType | None, convert: dt.DType | None, weak: bool = False
) -> policy.OperandPlan:
    return policy.OperandPlan(role, dtype, convert, weak)


def refusal(exc_type: type[Exception], message: str) -> Any:
    """``pytest.raises`` that checks the whole message, not just a fragment."""
    return pytest.raises(exc_type, match=f"^{re.escape(message)}$")


class TestPublicNames:
    @pytest.mark.parametrize(
        "name",
        [
            "OperandPlan",
            "OperationPlan",
            "OperationSpec",
            "enumerate_plans",
            "is_planned",
            "operation_spec",
            "registered_operations",
            "resolve_plan",
        ],
    )
    def test_public_name_is_listed_in_all(self, name: str) -> None:
        """Every public name of the module is in ``__all__`` and importable."""
        assert name in policy.__all__
        assert hasattr(policy, name)

    def test_all_is_sorted(self) -> None:
        """``__all__`` is kept sorted."""
        assert list(policy.__all__) == sorted(policy.__all__)


class TestRecords:
    def test_operation_plan_is_frozen_and_hashable(self) -> None:
        """Plans are immutable values usable as dict keys."""
        plan = plan_of("add", dt.int8, dt.int8)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            plan.compute = dt.int16  # type: ignore[misc]  # the point of the test
        assert {plan: 1}[plan_of("add", dt.int8, dt.int8)] == 1

    def test_operand_plan_defaults_to_strong(self) -> None:
        """``weak`` defaults to False, so tensor operands need three fields."""
        assert policy.OperandPlan("input", dt.int8, dt.int8).weak is False

    def test_equal_plans_built_separately_are_equal(self) -> None:
        """Plans compare by value, so a hand-built plan equals the resolved one."""
        built = policy.OperationPlan(
            "add",
            (operand("input", dt.int8, dt.int8), operand("other", dt.int8, dt.int8)),
            dt.int8,
            "wrap",
            None,
            (dt.int8,),
        )
        assert plan_of("add", dt.int8, dt.int8) == built


class TestRegisteredOperations:
    def test_registry_has_exactly_the_planned_names(self) -> None:
        """The registry holds the spec's 52 names, sort, topk, 11 complex and 6 linalg names."""
        names = policy.registered_operations()
        assert len(names) == 71
        assert names == tuple(sorted(PLANNED))

    @pytest.mark.parametrize(
        "name",
        ["as_strided", "broadcast_to", "permute", "rearrange", "reshape", "squeeze", "view"],
    )
    def test_view_name_is_not_planned(self, name: str) -> None:
        """The representation-preserving names stay outside the registry."""
        assert not policy.is_planned(name)

    @pytest.mark.parametrize("name", PLANNED)
    def test_planned_name_is_planned(self, name: str) -> None:
        """Every registered name reports itself as planned."""
        assert policy.is_planned(name)

    @pytest.mark.parametrize("name", ["nope", "ADD", "", 3, None, ("add",)])
    def test_unknown_or_non_string_is_not_planned(self, name: object) -> None:
        """Unknown names and non-strings are not planned, and asking does not raise."""
        assert not policy.is_planned(name)


class TestOperationSpec:
    @pytest.mark.parametrize(
        ("names", "roles"),
        [
            ("neg abs exp relu reduce_sum argmax cumsum sort topk logical_not", ("input",)),
            (" ".join(BINARY_WITH_SCALARS) + " elementwise_mul matmul", ("input", "other")),
            ("conv_general", ("input", "weight")),
            ("gather", ("input", "index")),
            ("scatter scatter_add", ("input", "index", "src")),
            ("select", ("condition", "input", "other")),
            ("clamp", ("input", "lo", "hi")),
        ],
    )
    def test_roles_follow_the_architecture_table(self, names: str, roles: tuple[str]) -> None:
        """Operand roles are in the positional order docs/architecture.md fixes."""
        for name in names.split():
            assert policy.operation_spec(name).roles == roles

    def test_only_clamp_has_optional_roles(self) -> None:
        """Only clamp's bounds may be absent."""
        optional = {n: policy.operation_spec(n).optional_roles for n in PLANNED}
        assert optional.pop("clamp") == {"lo", "hi"}
        assert all(not roles for roles in optional.values())

    def test_scalar_roles_match_the_brief(self) -> None:
        """Scalars are allowed on both sides of binary ops, for select values and clamp bounds."""
        scalar = {n: policy.operation_spec(n).scalar_roles for n in PLANNED}
        for name in BINARY_WITH_SCALARS:
            assert scalar.pop(name) == {"input", "other"}
        assert scalar.pop("select") == {"input", "other"}
        assert scalar.pop("clamp") == {"lo", "hi"}
        assert all(not roles for roles in scalar.values())  # elementwise_mul included

    @pytest.mark.parametrize("name", PLANNED)
    def test_differentiable_flag_matches_the_brief(self, name: str) -> None:
        """Comparisons, logical_not, sign, rounding and arg-reductions attach no autograd node."""
        assert policy.operation_spec(name).differentiable is (name not in NOT_DIFFERENTIABLE)

    @pytest.mark.parametrize("name", PLANNED)
    def test_multi_output_names_declare_their_output_count(self, name: str) -> None:
        """sort, topk, qr, eigh return two tensors, svd three; every other name returns one."""
        expected = {"sort": 2, "topk": 2, "qr": 2, "eigh": 2, "svd": 3}.get(name, 1)
        assert policy.operation_spec(name).n_outputs == expected

    @pytest.mark.parametrize("name", PLANNED)
    def test_accumulator_is_accepted_by_sums_and_matmul(self, name: str) -> None:
        """reduce_sum, reduce_prod and matmul take accumulator_dtype; no other name does."""
        expected = name in ("reduce_sum", "reduce_prod", "matmul")
        assert policy.operation_spec(name).accepts_accumulator is expected

    def test_spec_is_frozen(self) -> None:
        """Registry rows cannot be edited in place."""
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            policy.operation_spec("add").name = "sub"  # type: ignore[misc]  # the test

    @pytest.mark.parametrize("name", ["reshape", "nope", 7])
    def test_unknown_name_raises_not_implemented(self, name: object) -> None:
        """An unregistered name raises NotImplementedError saying it is not in the registry."""
        message = (
            f"{name!r}: not in the dtype-policy registry; planned operations are listed by "
            "conveyor.registered_operations() (view names such as 'reshape' are not "
            "planned)."
        )
        with refusal(NotImplementedError, message):
            policy.operation_spec(name)


class TestResolvePlanRefusals:
    def test_unknown_name_raises_not_implemented(self) -> None:
        """An unregistered name is refused before anything else is looked at."""
        message = (
            "'frobnicate': not in the dtype-policy registry; planned operations are listed by "
            "conveyor.registered_operations() (view names such as 'reshape' are not "
            "planned)."
        )
        with refusal(NotImplementedError, message):
            policy.resolve_plan("frobnicate", dt.float32)

    @pytest.mark.parametrize("category", dt.CATEGORIES)
    def test_category_raises_type_error(self, category: dt.DType) -> None:
        """An abstract dtype category is refused and a concrete member is suggested."""
        message = (
            f"add: other has dtype {category!r}, an abstract dtype category; pass a concrete "
            f"dtype such as {category.members[0]!r}."
        )
        with refusal(TypeError, message):
            policy.resolve_plan("add", dt.float32, category)

    @pytest.mark.parametrize(
        ("name", "operands", "message"),
        [
            (
                "add",
                (dt.float32,),
                "add: expected 2 operands (input, other), got 1; pass one operand per role, "
                "None for an absent optional one.",
            ),
            (
                "clamp",
                (dt.float32, 0.0),
                "clamp: expected 3 operands (input, lo, hi), got 2; pass one operand per role, "
                "None for an absent optional one.",
            ),
            (
                "add",
                (dt.float32, None),
                "add: other is None but is required; pass a DType for it.",
            ),
            (
                "elementwise_mul",
                (dt.float32, 2),
                "elementwise_mul: other is the Python scalar 2 (of type int) but must be a "
                "tensor; pass a DType for it.",
            ),
            (
                "select",
                (True, dt.float32, dt.float32),
                "select: condition is the Python scalar True (of type bool) but must be a "
                "tensor; pass a DType for it.",
            ),
            (
                "add",
                (1, 2.5),
                "add: every operand is a Python scalar (1, 2.5); at least one operand must be "
                "a tensor dtype.",
            ),
            (
                "add",
                (dt.float32, "float32"),
                "add: other is 'float32' (of type str); pass a conveyor DType, a Python "
                "bool/int/float/complex scalar, or None.",
            ),
            (
                "add",
                (dt.float32, [1]),
                "add: other is [1] (of type list); pass a conveyor DType, a Python "
                "bool/int/float/complex scalar, or None.",
            ),
            (
                "add",
                (np.float32, dt.float32),
                "add: input is <class 'numpy.float32'> (of type type); pass a conveyor DType, "
                "a Python bool/int/float/complex scalar, or None.",
            ),
            (
                "clamp",
                (dt.float32, None, None),
                "clamp: lo and hi are None; pass at least one of them.",
            ),
        ],
    )
    def test_malformed_operands_raise_type_error(
        self, name: str, operands: tuple[Any, ...], message: str
    ) -> None:
        """Wrong counts, missing required operands and misplaced scalars are TypeErrors."""
        with refusal(TypeError, message):
            policy.resolve_plan(name, *operands)

    @pytest.mark.parametrize(
        ("name", "operands", "message"),
        [
            (
                "sqrt",
                (dt.bool_,),
                "sqrt: input has dtype conveyor.bool, which is not supported (sqrt accepts "
                "integer, floating or complex dtypes); cast to one of those first.",
            ),
            (
                "sub",
                (dt.bool_, dt.bool_),
                "sub: the operands promote to conveyor.bool, which is not supported (sub "
                "accepts integer, floating or complex dtypes); cast to one of those first.",
            ),
            (
                "sub",
                (dt.bool_, True),
                "sub: the operands promote to conveyor.bool, which is not supported (sub "
                "accepts integer, floating or complex dtypes); cast to one of those first.",
            ),
            (
                "maximum",
                (dt.complex64, dt.float32),
                "maximum: the operands promote to conveyor.complex64, which is not supported "
                "(maximum accepts bool, integer or floating dtypes); cast to one of those first.",
            ),
            (
                "lt",
                (dt.float32, 1j),
                "lt: the operands promote to conveyor.complex64, which is not supported (lt "
                "accepts bool, integer or floating dtypes); cast to one of those first.",
            ),
            (
                "argmax",
                (dt.complex128,),
                "argmax: input has dtype conveyor.complex128, which is not supported (argmax "
                "accepts bool, integer or floating dtypes); cast to one of those first.",
            ),
            (
                "sort",
                (dt.complex64,),
                "sort: input has dtype conveyor.complex64, which is not supported (sort accepts "
                "bool, integer or floating dtypes); cast to one of those first.",
            ),
            (
                "relu",
                (dt.complex64,),
                "relu: input has dtype conveyor.complex64, which is not supported (relu accepts "
                "integer or floating dtypes); cast to one of those first.",
            ),
            (
                "abs",
                (dt.bool_,),
                "abs: input has dtype conveyor.bool, which is not supported (abs accepts "
                "integer, floating or complex dtypes); cast to one of those first.",
            ),
            (
                "floor",
                (dt.bool_,),
                "floor: input has dtype conveyor.bool, which is not supported (floor accepts "
                "integer or floating dtypes); cast to one of those first.",
            ),
            (
                "rem",
                (dt.complex64, dt.complex64),
                "rem: the operands promote to conveyor.complex64, which is not supported (rem "
                "accepts integer or floating dtypes); cast to one of those first.",
            ),
            (
                "matmul",
                (dt.bool_, dt.bool_),
                "matmul: the operands promote to conveyor.bool, which is not supported (matmul "
                "accepts integer, floating or complex dtypes); cast to one of those first.",
            ),
            (
                "conv_general",
                (dt.int32, dt.int32),
                "conv_general: the operands promote to conveyor.int32, which is not supported "
                "(conv_general accepts floating or complex dtypes); cast to one of those first.",
            ),
            (
                "scatter_add",
                (dt.bool_, dt.int64, dt.bool_),
                "scatter_add: input has dtype conveyor.bool, which is not supported "
                "(scatter_add accepts integer, floating or complex dtypes); cast to one of "
                "those first.",
            ),
            (
                "erf",
                (dt.complex64,),
                "erf: input has dtype conveyor.complex64, which is not supported (erf accepts "
                "integer or floating dtypes); cast to one of those first.",
            ),
            (
                "clamp",
                (dt.complex64, None, 1.0),
                "clamp: the operands promote to conveyor.complex64, which is not supported "
                "(clamp accepts integer or floating dtypes); cast to one of those first.",
            ),
        ],
    )
    def test_refused_dtype_raises_type_error(
        self, name: str, operands: tuple[Any, ...], message: str
    ) -> None:
        """A dtype outside the row's accepted kinds is a TypeError naming the accepted kinds."""
        with refusal(TypeError, message):
            policy.resolve_plan(name, *operands)

    @pytest.mark.parametrize("signed", [dt.int8, dt.int16, dt.int32, dt.int64])
    def test_uint64_with_signed_raises_type_error(self, signed: dt.DType) -> None:
        """uint64 with a signed integer has no common dtype; the message names the cast."""
        message = (
            f"add: cannot promote uint64 with {signed.name}: no integer dtype holds both "
            "ranges; cast one operand explicitly (e.g. to int64 or float64)."
        )
        with refusal(TypeError, message):
            policy.resolve_plan("add", signed, dt.uint64)

    @pytest.mark.parametrize(
        ("name", "operands", "message"),
        [
            (
                "gather",
                (dt.float32, dt.float32),
                "gather: index has dtype conveyor.float32, not an integer; cast the index to "
                "int64.",
            ),
            (
                "scatter",
                (dt.float32, dt.bool_, dt.float32),
                "scatter: index has dtype conveyor.bool, not an integer; cast the index to int64.",
            ),
            (
                "scatter",
                (dt.float32, dt.int64, dt.float64),
                "scatter: src has dtype conveyor.float64 but input has conveyor.float32, and "
                "scatter does not promote; cast src to conveyor.float32 first.",
            ),
            (
                "select",
                (dt.int8, dt.float32, dt.float32),
                "select: condition has dtype conveyor.int8, not bool; compare first "
                "(e.g. ne(condition, 0)) to get a bool condition.",
            ),
        ],
    )
    def test_index_src_and_condition_refusals(
        self, name: str, operands: tuple[Any, ...], message: str
    ) -> None:
        """Indices must be integers, scatter src must match input, conditions must be bool."""
        with refusal(TypeError, message):
            policy.resolve_plan(name, *operands)

    @pytest.mark.parametrize("dtype", (*INTEGERS, dt.bool_))
    def test_accumulator_for_integer_plan_raises_type_error(self, dtype: dt.DType) -> None:
        """accumulator_dtype is refused for integer (wrapping) plans."""
        output = dt.uint64 if dtype.kind == "unsigned_integer" else dt.int64
        message = (
            "reduce_sum: accumulator_dtype=conveyor.float64 applies to floating plans only, "
            f"and this plan is integer ({output.name}, wrapping); drop accumulator_dtype or "
            "cast the operands to a floating dtype."
        )
        with refusal(TypeError, message):
            plan_of("reduce_sum", dtype, acc=dt.float64)

    def test_accumulator_for_integer_matmul_raises_type_error(self) -> None:
        """matmul of integers wraps in its own dtype and takes no accumulator either."""
        message = (
            "matmul: accumulator_dtype=conveyor.float32 applies to floating plans only, and "
            "this plan is integer (int16, wrapping); drop accumulator_dtype or cast the "
            "operands to a floating dtype."
        )
        with refusal(TypeError, message):
            plan_of("matmul", dt.int8, dt.int16, acc=dt.float32)

    def test_accumulator_for_complex_plan_raises_type_error(self) -> None:
        """Complex sums accumulate in their own dtype; an override is refused."""
        message = (
            "reduce_sum: accumulator_dtype=conveyor.float64 applies to floating plans only, "
            "and this plan is complex (complex64); drop accumulator_dtype."
        )
        with refusal(TypeError, message):
            plan_of("reduce_sum", dt.complex64, acc=dt.float64)

    @pytest.mark.parametrize(
        "acc", [dt.float16, dt.bfloat16, dt.int64, dt.complex128, dt.floating, dt.bool_]
    )
    def test_accumulator_other_than_f32_f64_raises_type_error(self, acc: dt.DType) -> None:
        """A floating plan accepts only float32 or float64 as accumulator."""
        message = (
            f"matmul: accumulator_dtype={acc!r} is not float32 or float64; pass "
            "conveyor.float32 or conveyor.float64, or None for the default."
        )
        with refusal(TypeError, message):
            plan_of("matmul", dt.float16, dt.float16, acc=acc)

    def test_accumulator_that_is_not_a_dtype_raises_type_error(self) -> None:
        """An accumulator given as a string is refused with its type."""
        message = (
            "reduce_sum: accumulator_dtype='float64' (of type str) is not a conveyor DType; "
            "pass conveyor.float32 or conveyor.float64."
        )
        with refusal(TypeError, message):
            policy.resolve_plan("reduce_sum", dt.float32, options=Options("reduce_sum", "float64"))

    def test_accumulator_for_operation_without_one_raises_type_error(self) -> None:
        """Operations outside reduce_sum, reduce_prod and matmul refuse accumulator_dtype."""
        message = (
            "cumsum: accumulator_dtype=conveyor.float64 is not accepted; only matmul, "
            "reduce_prod, reduce_sum take an accumulator, drop it here."
        )
        with refusal(TypeError, message):
            plan_of("cumsum", dt.float16, acc=dt.float64)

    def test_options_bound_to_another_operation_raise_value_error(self) -> None:
        """Options validated for reduce_sum cannot plan a matmul."""
        message = (
            "matmul: options are bound to 'reduce_sum'; build "
            "OperationExecutionOptions('matmul', ...) for this operation."
        )
        with refusal(ValueError, message):
            policy.resolve_plan("matmul", dt.float32, dt.float32, options=Options("reduce_sum"))

    @pytest.mark.parametrize("kind", [bool, int, float, complex])
    def test_python_type_is_not_a_scalar_even_when_cached(self, kind: type) -> None:
        """Passing the type ``int`` instead of a value is refused, also after ``1`` was cached."""
        policy.resolve_plan("add", dt.int8, kind(1))
        message = (
            f"add: other is {kind!r} (of type type); pass a conveyor DType, a Python "
            "bool/int/float/complex scalar, or None."
        )
        bogus: Any = kind  # statically wrong on purpose
        with refusal(TypeError, message):
            policy.resolve_plan("add", dt.int8, bogus)

    def test_refusal_is_not_cached(self) -> None:
        """A refused signature raises again on the second call."""
        for _ in range(2):
            with pytest.raises(TypeError):
                policy.resolve_plan("sqrt", dt.bool_)


class TestResolvePlanCaching:
    @pytest.mark.parametrize(
        "operands",
        [(dt.int8, dt.float32), (dt.int8, 3), (3.5, dt.float16), (dt.bool_, 1j)],
    )
    def test_second_call_returns_the_same_object(self, operands: tuple[Any, ...]) -> None:
        """Resolution is a cache hit: the same signature gives the identical plan object."""
        assert policy.resolve_plan("add", *operands) is policy.resolve_plan("add", *operands)

    def test_scalar_values_of_one_kind_share_a_plan(self) -> None:
        """The plan depends on a scalar's kind, never its value."""
        plan = policy.resolve_plan("mul", dt.int16, 7)
        assert policy.resolve_plan("mul", dt.int16, -(2**70)) is plan

    def test_equal_scalars_of_different_kinds_do_not_collide(self) -> None:
        """True, 1 and 1.0 hash alike but are different kinds and give different plans."""
        plans = [policy.resolve_plan("add", dt.bool_, s) for s in (True, 1, 1.0, 1 + 0j)]
        assert [p.outputs[0] for p in plans] == [dt.bool_, dt.int64, dt.float32, dt.complex64]

    def test_options_without_accumulator_equal_no_options(self) -> None:
        """Options whose accumulator is None plan exactly like options=None."""
        plain = policy.resolve_plan("reduce_sum", dt.float16)
        assert plan_of("reduce_sum", dt.float16, acc=None) is plain
        with_options = policy.resolve_plan("reduce_sum", dt.float16, options=Options("reduce_sum"))
        assert with_options is plain

    def test_options_without_accumulator_field_are_read_safely(self) -> None:
        """An options object whose schema has no accumulator_dtype field plans by name only."""

        @attrs.frozen
        class Bare:
            name: str

        assert policy.resolve_plan("relu", dt.float32, options=Bare("relu")) is plan_of(
            "relu", dt.float32
        )

    def test_scalar_subclass_plans_as_its_python_kind(self) -> None:
        """Subclasses of Python scalars (IntEnum, np.float64) are weak scalars of that kind."""

        class Level(enum.IntEnum):
            HIGH = 3

        assert policy.resolve_plan("add", dt.int8, Level.HIGH) is plan_of("add", dt.int8, 1)
        assert policy.resolve_plan("add", dt.float16, np.float64(2.0)) is plan_of(
            "add", dt.float16, 1.0
        )

    def test_cached_call_is_fast(self) -> None:
        """A cached call is a dict hit: far below the cost of a fresh resolution."""
        import timeit

        policy.resolve_plan("add", dt.int8, dt.float32)
        runs = 20000
        seconds = min(
            timeit.repeat(
                lambda: policy.resolve_plan("add", dt.int8, dt.float32), number=runs, repeat=3
            )
        )
        assert seconds / runs < 20e-6  # generous bound for slow CI machines; typically < 1 µs


class TestWeakScalars:
    @pytest.mark.parametrize(
        ("tensor", "scalar", "expected"),
        [
            (dt.int8, 1, dt.int8),
            (dt.uint8, 1, dt.uint8),
            (dt.uint64, 1, dt.uint64),
            (dt.int8, True, dt.int8),
            (dt.float16, 1.0, dt.float16),
            (dt.bfloat16, 1.0, dt.bfloat16),
            (dt.float16, 1, dt.float16),
            (dt.float16, True, dt.float16),
            (dt.int8, 1.0, dt.float32),
            (dt.int64, 1.0, dt.float32),
            (dt.bool_, 1.0, dt.float32),
            (dt.bool_, 1, dt.int64),
            (dt.bool_, True, dt.bool_),
            (dt.int32, 1j, dt.complex64),
            (dt.bool_, 1j, dt.complex64),
            (dt.float16, 1j, dt.complex64),
            (dt.bfloat16, 1j, dt.complex64),
            (dt.float32, 1j, dt.complex64),
            (dt.float64, 1j, dt.complex128),
            (dt.complex64, 1.0, dt.complex64),
            (dt.complex64, 1j, dt.complex64),
        ],
    )
    def test_weak_scalar_takes_tensor_dtype_unless_higher_kind(
        self, tensor: dt.DType, scalar: Any, expected: dt.DType
    ) -> None:
        """A same-or-lower kind scalar keeps the tensor dtype; a higher kind gives its default."""
        for operands in ((tensor, scalar), (scalar, tensor)):
            plan = policy.resolve_plan("add", *operands)
            assert plan.compute is expected
            assert plan.outputs == (expected,)

    def test_weak_operand_records_its_kind_dtype(self) -> None:
        """A weak operand's plan entry holds its Python kind's dtype and weak=True."""
        plan = policy.resolve_plan("sub", 2.5, dt.int16)
        assert plan.operands == (
            operand("input", dt.float64, dt.float32, weak=True),
            operand("other", dt.int16, dt.float32),
        )
        assert plan.accumulation == "none"

    @pytest.mark.parametrize(
        ("scalar", "kind_dtype"),
        [(True, dt.bool_), (1, dt.int64), (1.0, dt.float64), (1j, dt.complex128)],
    )
    def test_scalar_kinds_map_to_their_dtypes(self, scalar: Any, kind_dtype: dt.DType) -> None:
        """bool, int, float and complex scalars record bool, int64, float64 and complex128."""
        plan = policy.resolve_plan("eq", dt.complex128, scalar)
        assert plan.operands[1] == operand("other", kind_dtype, dt.complex128, weak=True)

    def test_weak_scalars_fold_in_after_tensor_promotion(self) -> None:
        """Tensors promote first; a scalar only matters when its kind is higher than theirs."""
        plan = policy.resolve_plan("clamp", dt.int8, 0.5, dt.float64)
        assert plan.compute is dt.float64
        plan = policy.resolve_plan("clamp", dt.uint8, 0, 300)
        assert plan.compute is dt.uint8

    def test_integer_scalar_with_integer_pow_wraps(self) -> None:
        """Integer pow with an integer scalar stays in the tensor dtype and wraps."""
        plan = policy.resolve_plan("pow", dt.int8, 3)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dt.int8, "wrap", (dt.int8,))


class TestElementwisePlans:
    @pytest.mark.parametrize("name", ["add", "sub", "mul", "elementwise_mul", "pow", "neg"])
    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_integer_arithmetic_wraps(self, name: str, dtype: dt.DType) -> None:
        """Integer arithmetic records two's-complement wrapping."""
        operands = (dtype,) * len(policy.operation_spec(name).roles)
        plan = policy.resolve_plan(name, *operands)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dtype, "wrap", (dtype,))

    @pytest.mark.parametrize("name", ["add", "mul", "elementwise_mul"])
    def test_bool_add_and_mul_stay_bool(self, name: str) -> None:
        """bool + bool and bool * bool are logical or / and, as in NumPy and PyTorch."""
        plan = policy.resolve_plan(name, dt.bool_, dt.bool_)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dt.bool_, "none", (dt.bool_,))

    @pytest.mark.parametrize("name", [*FLOAT_VALUED, "div"])
    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_float_valued_of_integer_computes_in_float32(self, name: str, dtype: dt.DType) -> None:
        """Integer input to a float-valued function converts to the default float first."""
        operands = (dtype,) * len(policy.operation_spec(name).roles)
        plan = policy.resolve_plan(name, *operands)
        assert (plan.compute, plan.outputs) == (dt.default_float, (dt.default_float,))
        assert all(o.convert_to is dt.float32 for o in plan.operands)

    @pytest.mark.parametrize("name", [*FLOAT_VALUED, "div"])
    @pytest.mark.parametrize("dtype", FLOATS)
    def test_float_valued_of_float_keeps_dtype(self, name: str, dtype: dt.DType) -> None:
        """Floating input computes and returns in its own dtype, half precision included."""
        operands = (dtype,) * len(policy.operation_spec(name).roles)
        assert policy.resolve_plan(name, *operands).outputs == (dtype,)

    def test_integer_division_by_scalar_is_float32(self) -> None:
        """Integer true division computes in float32 even with an int scalar divisor."""
        plan = policy.resolve_plan("div", dt.int64, 2)
        assert plan.operands[1] == operand("other", dt.int64, dt.float32, weak=True)
        assert plan.outputs == (dt.float32,)

    @pytest.mark.parametrize(
        ("dtype", "real"), [(dt.complex64, dt.float32), (dt.complex128, dt.float64)]
    )
    def test_abs_of_complex_is_real(self, dtype: dt.DType, real: dt.DType) -> None:
        """abs computes in the complex dtype and returns the matching real dtype."""
        plan = policy.resolve_plan("abs", dtype)
        assert (plan.compute, plan.outputs) == (dtype, (real,))

    @pytest.mark.parametrize("name", ["floor", "ceil", "round"])
    @pytest.mark.parametrize("dtype", INTEGERS)
    def test_rounding_an_integer_is_identity(self, name: str, dtype: dt.DType) -> None:
        """floor, ceil and round of an integer keep the integer dtype."""
        plan = policy.resolve_plan(name, dtype)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dtype, "none", (dtype,))

    @pytest.mark.parametrize("dtype", [dt.uint8, dt.uint64])
    def test_neg_of_unsigned_wraps(self, dtype: dt.DType) -> None:
        """neg of an unsigned integer is allowed and wraps, as in NumPy."""
        assert policy.resolve_plan("neg", dtype).accumulation == "wrap"

    @pytest.mark.parametrize("name", ["eq", "ne", "lt", "le"])
    def test_comparison_computes_promoted_and_outputs_bool(self, name: str) -> None:
        """Comparisons convert both sides to the promoted dtype and return bool."""
        plan = policy.resolve_plan(name, dt.int8, dt.float16)
        assert (plan.compute, plan.outputs) == (dt.float16, (dt.bool_,))
        assert all(o.convert_to is dt.float16 for o in plan.operands)

    @pytest.mark.parametrize("dtype", CONCRETE)
    def test_logical_not_accepts_every_dtype(self, dtype: dt.DType) -> None:
        """logical_not tests truthiness of any dtype and returns bool."""
        plan = policy.resolve_plan("logical_not", dtype)
        assert (plan.compute, plan.outputs) == (dtype, (dt.bool_,))

    @pytest.mark.parametrize("dtype", CONCRETE)
    def test_eq_accepts_every_dtype(self, dtype: dt.DType) -> None:
        """Equality is defined for bool and complex too."""
        assert policy.resolve_plan("eq", dtype, dtype).outputs == (dt.bool_,)


class TestReductionPlans:
    @pytest.mark.parametrize("name", ["reduce_sum", "reduce_prod", "cumsum"])
    @pytest.mark.parametrize(
        ("dtype", "wide"),
        [
            (dt.bool_, dt.int64),
            (dt.int8, dt.int64),
            (dt.int32, dt.int64),
            (dt.int64, dt.int64),
            (dt.uint8, dt.uint64),
            (dt.uint32, dt.uint64),
            (dt.uint64, dt.uint64),
        ],
    )
    def test_integer_sum_widens_to_64_bits(
        self, name: str, dtype: dt.DType, wide: dt.DType
    ) -> None:
        """Integer and bool sums, products and scans return int64 (uint64 if unsigned) and wrap."""
        plan = policy.resolve_plan(name, dtype)
        assert plan == policy.OperationPlan(
            name, (operand("input", dtype, wide),), wide, "wrap", wide, (wide,)
        )

    @pytest.mark.parametrize("name", ["reduce_sum", "reduce_prod", "cumsum"])
    @pytest.mark.parametrize(
        ("dtype", "accumulator"),
        [
            (dt.float16, dt.float32),
            (dt.bfloat16, dt.float32),
            (dt.float32, dt.float32),
            (dt.float64, dt.float64),
            (dt.complex64, dt.complex64),
            (dt.complex128, dt.complex128),
        ],
    )
    def test_float_sum_accumulates_and_rounds_once(
        self, name: str, dtype: dt.DType, accumulator: dt.DType
    ) -> None:
        """Half precision accumulates in float32; wider floats and complex in themselves."""
        plan = policy.resolve_plan(name, dtype)
        assert plan == policy.OperationPlan(
            name,
            (operand("input", dtype, accumulator),),
            accumulator,
            "float",
            accumulator,
            (dtype,),
        )

    @pytest.mark.parametrize("name", ["reduce_sum", "reduce_prod"])
    @pytest.mark.parametrize("dtype", FLOATS)
    @pytest.mark.parametrize("acc", [dt.float32, dt.float64])
    def test_accumulator_option_overrides_for_floats(
        self, name: str, dtype: dt.DType, acc: dt.DType
    ) -> None:
        """accumulator_dtype chooses the running-sum dtype; the output keeps the input dtype."""
        plan = plan_of(name, dtype, acc=acc)
        assert (plan.compute, plan.accumulator_dtype, plan.outputs) == (acc, acc, (dtype,))
        assert plan.accumulation == "float"

    def test_matmul_half_accumulates_in_float32_or_override(self) -> None:
        """float16 matmul accumulates in float32 by default and in float64 when asked."""
        default = policy.resolve_plan("matmul", dt.float16, dt.float16)
        assert (default.accumulator_dtype, default.outputs) == (dt.float32, (dt.float16,))
        wide = plan_of("matmul", dt.float16, dt.bfloat16, acc=dt.float64)
        assert (wide.accumulator_dtype, wide.outputs) == (dt.float64, (dt.float32,))

    def test_integer_matmul_wraps_in_promoted_dtype(self) -> None:
        """Integer matmul does not widen: it wraps in the promoted dtype, like NumPy."""
        plan = policy.resolve_plan("matmul", dt.int8, dt.uint8)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dt.int16, "wrap", (dt.int16,))

    def test_conv_general_of_half_accumulates_in_float32(self) -> None:
        """conv_general is a sum of products: half precision accumulates in float32."""
        plan = policy.resolve_plan("conv_general", dt.bfloat16, dt.bfloat16)
        assert (plan.accumulation, plan.accumulator_dtype) == ("float", dt.float32)
        assert plan.outputs == (dt.bfloat16,)

    @pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
    @pytest.mark.parametrize("dtype", REAL)
    def test_max_and_min_keep_dtype(self, name: str, dtype: dt.DType) -> None:
        """Extremum reductions select a value: no conversion, no accumulation."""
        plan = policy.resolve_plan(name, dtype)
        assert (plan.compute, plan.accumulation, plan.outputs) == (dtype, "none", (dtype,))

    @pytest.mark.parametrize("name", ["argmax", "argmin"])
    @pytest.mark.parametrize("dtype", REAL)
    def test_arg_reductions_return_int64(self, name: str, dtype: dt.DType) -> None:
        """argmax and argmin return int64 indices."""
        assert policy.resolve_plan(name, dtype).outputs == (dt.int64,)

    @pytest.mark.parametrize("name", ["sort", "topk"])
    @pytest.mark.parametrize("dtype", REAL)
    def test_sort_and_topk_return_values_and_indices(self, name: str, dtype: dt.DType) -> None:
        """sort and topk return the input dtype and int64 indices."""
        assert policy.resolve_plan(name, dtype).outputs == (dtype, dt.int64)


class TestIndexingPlans:
    @pytest.mark.parametrize("index", INTEGERS)
    def test_gather_index_converts_to_int64(self, index: dt.DType) -> None:
        """Any integer index dtype converts to int64; values keep the input dtype."""
        plan = policy.resolve_plan("gather", dt.bfloat16, index)
        assert plan == policy.OperationPlan(
            "gather",
            (operand("input", dt.bfloat16, dt.bfloat16), operand("index", index, dt.int64)),
            dt.bfloat16,
            "none",
            None,
            (dt.bfloat16,),
        )

    @pytest.mark.parametrize("dtype", CONCRETE)
    def test_scatter_accepts_every_matching_dtype(self, dtype: dt.DType) -> None:
        """scatter writes src into input of the same dtype, bool and complex included."""
        assert policy.resolve_plan("scatter", dtype, dt.int32, dtype).outputs == (dtype,)

    def test_scatter_add_of_integers_wraps(self) -> None:
        """scatter_add of integers accumulates with wrapping."""
        plan = policy.resolve_plan("scatter_add", dt.uint8, dt.int64, dt.uint8)
        assert (plan.accumulation, plan.outputs) == ("wrap", (dt.uint8,))


class TestSelectAndClampPlans:
    def test_select_promotes_values_and_keeps_bool_condition(self) -> None:
        """select converts input and other to their promoted dtype; the condition stays bool."""
        plan = policy.resolve_plan("select", dt.bool_, dt.int8, dt.float16)
        assert plan.operands == (
            operand("condition", dt.bool_, dt.bool_),
            operand("input", dt.int8, dt.float16),
            operand("other", dt.float16, dt.float16),
        )
        assert plan.outputs == (dt.float16,)

    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            ((1, 2), dt.int64),
            ((1, 2.0), dt.float32),
            ((True, False), dt.bool_),
            ((1j, 0), dt.complex64),
            ((dt.uint8, 300), dt.uint8),
            ((dt.int8, 0.5), dt.float32),
        ],
    )
    def test_select_values_follow_weak_rules(
        self, values: tuple[Any, Any], expected: dt.DType
    ) -> None:
        """Two scalars give their kind's default dtype; a scalar with a tensor is weak."""
        assert policy.resolve_plan("select", dt.bool_, *values).outputs == (expected,)

    def test_clamp_absent_bound_is_an_empty_operand(self) -> None:
        """An absent bound is OperandPlan(role, None, None)."""
        plan = policy.resolve_plan("clamp", dt.int16, None, 100)
        assert plan.operands == (
            operand("input", dt.int16, dt.int16),
            operand("lo", None, None),
            operand("hi", dt.int64, dt.int16, weak=True),
        )
        assert plan.outputs == (dt.int16,)

    def test_clamp_promotes_with_tensor_bounds(self) -> None:
        """Tensor bounds take part in promotion like any other operand."""
        plan = policy.resolve_plan("clamp", dt.int8, dt.int32, None)
        assert plan.outputs == (dt.int32,)


def _reresolve(plan: policy.OperationPlan) -> policy.OperationPlan:
    """Resolve the signature a plan records, with or without its accumulator override."""
    samples = {dt.bool_: True, dt.int64: 1, dt.float64: 1.0, dt.complex128: 1j}
    operands = [
        o.dtype if o.dtype is None or not o.weak else samples[o.dtype] for o in plan.operands
    ]
    again = policy.resolve_plan(plan.operation, *operands)
    if again != plan and plan.accumulator_dtype in (dt.float32, dt.float64):
        again = plan_of(plan.operation, *operands, acc=plan.accumulator_dtype)
    return again


_OPERAND_CHOICES = st.sampled_from((*CONCRETE, *SCALARS, None))
_ACC_CHOICES = st.sampled_from((None, dt.float32, dt.float64, dt.float16, dt.int64))


class TestEnumeratePlans:
    def test_every_enumerated_plan_reresolves_to_itself(self) -> None:
        """Each enumerated plan is exactly what resolve_plan returns for its signature."""
        for plan in policy.enumerate_plans():
            assert _reresolve(plan) == plan

    def test_enumeration_has_no_duplicates(self) -> None:
        """Each plan appears once, per name and overall."""
        plans = policy.enumerate_plans()
        assert len(set(plans)) == len(plans)

    def test_enumeration_of_all_names_concatenates_per_name(self) -> None:
        """enumerate_plans() is every name's enumeration in registry order."""
        expected = tuple(
            p for n in policy.registered_operations() for p in policy.enumerate_plans(n)
        )
        assert policy.enumerate_plans() == expected

    def test_enumeration_is_cached(self) -> None:
        """A second enumeration returns the same tuple."""
        assert policy.enumerate_plans("add") is policy.enumerate_plans("add")
        assert policy.enumerate_plans() is policy.enumerate_plans()

    @pytest.mark.parametrize("name", PLANNED)
    def test_every_name_has_plans_for_its_operation_only(self, name: str) -> None:
        """Each planned name has at least one plan, and all of them carry its name."""
        plans = policy.enumerate_plans(name)
        assert plans
        assert {p.operation for p in plans} == {name}

    @pytest.mark.parametrize(
        "plan",
        [
            policy.OperationPlan(
                "add",
                (
                    operand("input", dt.int8, dt.float32),
                    operand("other", dt.float64, dt.float32, True),
                ),
                dt.float32,
                "none",
                None,
                (dt.float32,),
            ),
            policy.OperationPlan(
                "reduce_sum",
                (operand("input", dt.bfloat16, dt.float64),),
                dt.float64,
                "float",
                dt.float64,
                (dt.bfloat16,),
            ),
            policy.OperationPlan(
                "clamp",
                (
                    operand("input", dt.uint8, dt.uint8),
                    operand("lo", dt.int64, dt.uint8, True),
                    operand("hi", None, None),
                ),
                dt.uint8,
                "none",
                None,
                (dt.uint8,),
            ),
            policy.OperationPlan(
                "topk",
                (operand("input", dt.float16, dt.float16),),
                dt.float16,
                "none",
                None,
                (dt.float16, dt.int64),
            ),
            policy.OperationPlan(
                "scatter_add",
                (
                    operand("input", dt.int32, dt.int32),
                    operand("index", dt.uint16, dt.int64),
                    operand("src", dt.int32, dt.int32),
                ),
                dt.int32,
                "wrap",
                None,
                (dt.int32,),
            ),
            policy.OperationPlan(
                "select",
                (
                    operand("condition", dt.bool_, dt.bool_),
                    operand("input", dt.int64, dt.float32, True),
                    operand("other", dt.float64, dt.float32, True),
                ),
                dt.float32,
                "none",
                None,
                (dt.float32,),
            ),
        ],
    )
    def test_hand_computed_plan_is_enumerated(self, plan: policy.OperationPlan) -> None:
        """Plans worked out by hand from the policy appear in the enumeration."""
        assert plan in policy.enumerate_plans(plan.operation)

    def test_unknown_name_raises_not_implemented(self) -> None:
        """Enumerating an unregistered name is refused like resolving it."""
        with pytest.raises(NotImplementedError, match="not in the dtype-policy registry"):
            policy.enumerate_plans("reshape")

    @settings(max_examples=400, deadline=None)
    @given(
        name=st.sampled_from(PLANNED),
        pool=st.lists(_OPERAND_CHOICES, min_size=3, max_size=3),
        acc=_ACC_CHOICES,
    )
    def test_every_resolvable_plan_is_enumerated(
        self, name: str, pool: list[Any], acc: dt.DType | None
    ) -> None:
        """Whatever signature resolves, its plan is in the enumeration (completeness)."""
        operands = pool[: len(policy.operation_spec(name).roles)]
        try:
            plan = plan_of(name, *operands, acc=acc)
        except TypeError:
            return
        assert plan in set(policy.enumerate_plans(name))

    @settings(max_examples=200, deadline=None)
    @given(
        dtype=st.sampled_from(CONCRETE),
        value=st.one_of(
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=True),
            st.complex_numbers(allow_nan=True),
        ),
    )
    def test_scalar_value_never_changes_the_plan(self, dtype: dt.DType, value: Any) -> None:
        """A scalar plans exactly like the sample of its kind used by the enumeration."""
        sample = next(s for s in SCALARS if type(s) is type(value))
        assert policy.resolve_plan("add", dtype, value) is policy.resolve_plan("add", dtype, sample)


# --- Agreement with NumPy ---------------------------------------------------------------------


def _numpy_result(*operands: Any) -> dt.DType | type[TypeError]:
    """NumPy's result dtype as a conveyor dtype, or TypeError when NumPy has none."""
    try:
        found = np.result_type(*(o.numpy if isinstance(o, dt.DType) else o for o in operands))
    except TypeError:  # DTypePromotionError subclasses TypeError
        return TypeError
    return dt.from_numpy(found)


def _ours(*operands: Any) -> dt.DType | type[TypeError]:
    try:
        return policy.resolve_plan("add", *operands).outputs[0]
    except TypeError:
        return TypeError


@attrs.frozen
class Difference:
    """A documented place where Conveyor's ``add`` differs from NumPy, and why."""

    applies: Callable[[Any, Any], bool]
    ours: Callable[[Any, Any], dt.DType | type[TypeError]]
    reason: str
    #: False where the installed NumPy / ml_dtypes already agree, so the difference cannot occur.
    occurs_here: bool = True


def _pick(kind_test: Callable[[Any], bool]) -> Callable[[Any, Any], Any]:
    return lambda a, b: a if kind_test(a) else b


# ml_dtypes 0.7 gave bfloat16 a common type with float16 (float32) and NEP 50 weak promotion
# (bfloat16 + 1.0 -> bfloat16); before it, NumPy had no answer for either.
ML_DTYPES_PROMOTES_BFLOAT16 = np.result_type(dt.bfloat16.numpy, 1.0) == dt.bfloat16.numpy


def _is_int(d: Any) -> bool:
    return isinstance(d, dt.DType) and d.is_integer


def _is(kind: str) -> Callable[[Any], bool]:
    return lambda d: isinstance(d, dt.DType) and d.kind == kind


# Tensor-tensor promotion (docs/dtype-policy.md). The test fails on any difference not listed here.
ADD_DIFFERENCES = (
    Difference(
        applies=lambda a, b: (
            {a.kind, b.kind} == {"signed_integer", "floating"}
            or {a.kind, b.kind} == {"unsigned_integer", "floating"}
        ),
        ours=_pick(_is("floating")),
        reason="integer with float gives the float operand's dtype (our design, as PyTorch); "
        "NumPy widens to a float holding the integer range (int32 + float16 -> float64), and "
        "ml_dtypes gives bfloat16 no common type with int16 or wider",
    ),
    Difference(
        applies=lambda a, b: (_is_int(a) and b.is_complex) or (_is_int(b) and a.is_complex),
        ours=_pick(_is("complex_floating")),
        reason="integer with complex gives the complex operand's dtype, extending the same "
        "rule; NumPy widens int32 + complex64 to complex128",
    ),
    Difference(
        applies=lambda a, b: {a, b} == {dt.float16, dt.bfloat16},
        ours=lambda a, b: dt.float32,
        reason="float16 with bfloat16: neither holds the other, float32 holds both (PyTorch); "
        "ml_dtypes before 0.7 defines no common type",
        occurs_here=not ML_DTYPES_PROMOTES_BFLOAT16,
    ),
    Difference(
        applies=lambda a, b: (
            dt.uint64 in (a, b) and (a.kind == "signed_integer" or b.kind == "signed_integer")
        ),
        ours=lambda a, b: TypeError,
        reason="uint64 with a signed integer is undefined in the Array API standard and refused "
        "with TypeError naming the cast; NumPy gives float64",
    ),
)

# Weak Python scalars against NumPy 2's NEP 50 rules. The test fails on any other difference.
WEAK_DIFFERENCES = (
    Difference(
        applies=lambda t, s: (t.is_integer or t.is_bool) and type(s) is float,
        ours=lambda t, s: dt.float32,
        reason="an integer or bool tensor with a float scalar gives the default float dtype, "
        "float32 (our design, as PyTorch); NumPy's default float is float64",
    ),
    Difference(
        applies=lambda t, s: (t.is_integer or t.is_bool) and type(s) is complex,
        ours=lambda t, s: dt.complex64,
        reason="an integer or bool tensor with a complex scalar gives complex64, the complex "
        "of the default float (PyTorch); NumPy gives complex128",
    ),
    Difference(
        applies=lambda t, s: t is dt.bfloat16 and type(s) is float,
        ours=lambda t, s: dt.bfloat16,
        reason="ml_dtypes' bfloat16 takes no part in NEP 50 weak promotion before 0.7, so NumPy "
        "gives float64 for bfloat16 + 1.0; Conveyor treats bfloat16 like float16",
        occurs_here=not ML_DTYPES_PROMOTES_BFLOAT16,
    ),
)


def _check_against_numpy(
    left: Any, right: Any, differences: tuple[Difference, ...], tensor: Any, scalar: Any
) -> Difference | None:
    """Assert ``add(left, right)`` equals NumPy or a documented difference; return that one."""
    ours, theirs = _ours(left, right), _numpy_result(left, right)
    documented = [d for d in differences if d.applies(tensor, scalar)]
    for difference in documented:
        assert ours == difference.ours(tensor, scalar), difference.reason
    if ours != theirs:
        assert documented, f"undocumented difference for {left!r} + {right!r}: {ours} vs {theirs}"
        return documented[0]
    return None


class TestNumpyAgreement:
    @settings(max_examples=300, deadline=None)
    @given(a=st.sampled_from(CONCRETE), b=st.sampled_from(CONCRETE))
    def test_add_matches_numpy_result_type_except_documented(
        self, a: dt.DType, b: dt.DType
    ) -> None:
        """Tensor promotion equals np.result_type except in the listed, reasoned places."""
        _check_against_numpy(a, b, ADD_DIFFERENCES, a, b)

    def test_every_documented_add_difference_occurs(self) -> None:
        """Each listed difference is real for some pair, so the table holds no stale entry."""
        seen = {
            id(found)
            for a in CONCRETE
            for b in CONCRETE
            if (found := _check_against_numpy(a, b, ADD_DIFFERENCES, a, b)) is not None
        }
        assert seen == {id(d) for d in ADD_DIFFERENCES if d.occurs_here}

    @pytest.mark.skipif(
        np.lib.NumpyVersion(np.__version__) < "2.0.0", reason="NEP 50 promotion needs NumPy 2"
    )
    @settings(max_examples=200, deadline=None)
    @given(t=st.sampled_from(CONCRETE), s=st.sampled_from(SCALARS), scalar_first=st.booleans())
    def test_weak_scalar_matches_nep50_except_documented(
        self, t: dt.DType, s: Any, scalar_first: bool
    ) -> None:
        """Weak scalars follow NumPy 2's NEP 50 except in the listed, reasoned places."""
        left, right = (s, t) if scalar_first else (t, s)
        _check_against_numpy(left, right, WEAK_DIFFERENCES, t, s)

    @pytest.mark.skipif(
        np.lib.NumpyVersion(np.__version__) < "2.0.0", reason="NEP 50 promotion needs NumPy 2"
    )
    def test_every_documented_weak_difference_occurs(self) -> None:
        """Each listed weak-scalar difference is real for some tensor dtype and scalar kind."""
        seen = {
            id(found)
            for t in CONCRETE
            for s in SCALARS
            if (found := _check_against_numpy(t, s, WEAK_DIFFERENCES, t, s)) is not None
        }
        assert seen == {id(d) for d in WEAK_DIFFERENCES if d.occurs_here}

    @settings(max_examples=200, deadline=None)
    @given(a=st.sampled_from(CONCRETE), b=st.sampled_from(CONCRETE))
    def test_add_is_symmetric(self, a: dt.DType, b: dt.DType) -> None:
        """Swapping operands never changes the compute or output dtype."""
        assert _ours(a, b) == _ours(b, a)
