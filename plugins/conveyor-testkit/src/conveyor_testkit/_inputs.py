"""Operand builders: small, deterministic inputs for every plan of every planned name.

The kit runs each advertised plan on a handful of cases. A case fixes the operand values (NumPy
arrays for tensor roles, Python scalars for weak roles, ``None`` for absent optional roles) and
the option fields. Shapes are tiny but cover the interesting ground: a 4x5 block with special
float values mixed in, a 0-sized tensor, NumPy broadcasting and 0-d tensors where the name takes
them. Names whose options need specific values (index tensors, ``k``, convolution shapes) have
their own builder; every planned name has one, so a name added to the registry without a builder
is reported as a kit gap instead of passing silently.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import OperationPlan, operation_spec

__all__ = ["BUILDERS", "SIZES", "Case", "cases_for", "options_for", "plan_keys", "plan_text"]

_Array = np.ndarray[Any, Any]
_Shape = tuple[int, ...]

# Special float values mixed into general inputs: IEEE edges and round-half-even ties.
_SPECIALS: Final = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5)
_SPECIAL_RATE: Final = 0.3
_EDGE_RATE: Final = 0.2


@dataclass(frozen=True)
class Case:
    """One generated call: a label for reports, the operands and the option fields.

    ``accumulation`` marks a case built to measure how a sum was accumulated: its values nearly
    cancel, and its tolerance comes from the plan's accumulator dtype (``_compare``).
    """

    label: str
    operands: tuple[Any, ...]
    fields: Mapping[str, Any] = field(default_factory=dict)
    accumulation: bool = False


@dataclass
class _Gen:
    """Value generator for one plan: a seeded NumPy generator plus the plan it builds for."""

    plan: OperationPlan
    rng: np.random.Generator

    def values(self, dtype: cv.DType, shape: _Shape, profile: str = "general") -> _Array:
        """Values of ``dtype``: ``general`` (IEEE specials, integer extremes), ``finite`` (no
        specials, integer extremes kept), ``small`` (small finite values only)."""
        rng, n = self.rng, math.prod(shape)
        if dtype.is_bool:
            return (rng.random(n) < 0.5).reshape(shape)
        if dtype.is_integer:
            return self._integers(dtype, n, profile).reshape(shape)
        with np.errstate(all="ignore"):
            if dtype.is_complex:
                parts = rng.standard_normal((2, n)) * rng.choice([0.5, 1.0, 3.0], (2, n))
                complex_values: _Array = parts[0] + 1j * parts[1]
                return complex_values.astype(dtype.numpy).reshape(shape)
            scale = 1.0 if profile == "small" else rng.choice([0.5, 1.0, 4.0], n)
            values = rng.standard_normal(n) * scale
            if profile == "general" and n:
                # Every special value at a random place (as many as fit), more mixed in at random.
                pick = rng.random(n) < _SPECIAL_RATE
                values = np.where(pick, rng.choice(np.array(_SPECIALS), n), values)
                places = rng.permutation(n)[: len(_SPECIALS)]
                values[places] = np.array(_SPECIALS)[rng.permutation(len(_SPECIALS))][: places.size]
            return values.astype(dtype.numpy).reshape(shape)

    def _integers(self, dtype: cv.DType, n: int, profile: str) -> _Array:
        info = np.iinfo(dtype.numpy)
        signed = dtype.kind == "signed_integer"
        low, high = ((-4, 4) if signed else (0, 6)) if profile != "small" else (-2, 5)
        low = max(low, int(info.min))
        small = self.rng.integers(low, high + 1, n).astype(dtype.numpy)
        if profile == "small":
            return small
        edges = np.array([info.min, info.max], dtype=dtype.numpy)
        pick = self.rng.random(n) < _EDGE_RATE
        return np.where(pick, edges[self.rng.integers(0, 2, n)], small)

    def indices(self, dtype: cv.DType, shape: _Shape, extent: int) -> _Array:
        """Valid index entries in ``[0, extent)`` of the plan's index dtype."""
        return (
            self.rng.integers(0, max(extent, 1), math.prod(shape))
            .astype(dtype.numpy)
            .reshape(shape)
        )


# Weak scalars per Python kind, by role (clamp bounds bracket the generated values).
_SCALARS: Final[dict[str, dict[str, Any]]] = {
    "default": {"bool": True, "int64": 3, "float64": -1.5, "complex128": 0.5 - 1.5j},
    "lo": {"bool": False, "int64": 1, "float64": -0.5, "complex128": 0j},
    "hi": {"bool": True, "int64": 4, "float64": 0.75, "complex128": 1 + 0j},
}


def _operand(gen: _Gen, index: int, shape: _Shape, profile: str = "general") -> Any:
    """The value of operand ``index`` of the plan: an array, a weak scalar or ``None``."""
    operand = gen.plan.operands[index]
    if operand.dtype is None:
        return None
    if operand.weak:
        table = _SCALARS.get(operand.role, _SCALARS["default"])
        return table[operand.dtype.name]
    return gen.values(operand.dtype, shape, profile)


# Long operands repeat a generated block of this many elements: generating 65537 fresh values
# per operand for every one of thousands of plans would dominate the kit's time, and a kernel
# wrong past some element count is wrong on repeated values too. Not a power of two, so the
# repeats do not line up with chunk or vector boundaries.
_BLOCK: Final = 4099


def _sized(gen: _Gen, index: int, size: int, profile: str = "general") -> Any:
    """Operand ``index`` as a flat operand of ``size`` elements (long ones repeat a block)."""
    if size <= _BLOCK:
        return _operand(gen, index, (size,), profile)
    block = _operand(gen, index, (_BLOCK,), profile)
    return np.resize(block, size) if isinstance(block, np.ndarray) else block


def _profile(name: str, role: str) -> str:
    if name == "pow" and role == "other":
        return "small"  # exponents: integer powers of extremes are still exercised via input
    return "general"


LARGE: Final = 65537
"""The largest flat size: past 2**16 elements and, for 4-byte dtypes, past the 256 KiB where
allocators switch to pooled or mapped buffers."""

SIZES: Final = (1, 7, 64, 65, 1000, 4097, LARGE)
"""Flat operand sizes every elementwise plan and every reduction runs at."""


def _elementwise(gen: _Gen) -> list[Case]:
    """Same shapes with specials, NumPy broadcasting, a 0-sized broadcast, 0-d operands and the
    flat ``SIZES``."""
    name, roles = gen.plan.operation, [o.role for o in gen.plan.operands]
    n = len(roles)
    layouts: list[tuple[str, list[_Shape]]] = [
        ("4x5", [(4, 5)] * n),
        ("broadcast", [(4, 1), (5,), (1, 5)][:n]) if n > 1 else ("3x1", [(3, 1)]),
        ("0-sized", [(0, 3), (3,), (1, 3)][:n] if n > 1 else [(0, 3)]),
        ("0-d", [()] * n),
    ]
    # Flat sizes around typical SIMD widths and chunk boundaries: a kernel that is wrong only
    # past 64 elements (or only in a vector tail) fails here.
    extra = _UNARY_OPTIONS.get(name, {})
    cases = []
    for label, shapes in layouts:
        operands = tuple(_operand(gen, i, shapes[i], _profile(name, roles[i])) for i in range(n))
        cases.append(Case(label, operands))
    for size in SIZES:
        operands = tuple(_sized(gen, i, size, _profile(name, roles[i])) for i in range(n))
        cases.append(Case(f"n={size}", operands))
    if extra:
        operands = tuple(_operand(gen, i, (4, 5)) for i in range(n))
        cases.append(Case(f"4x5 {_show(extra)}", operands, extra))
    return cases


_UNARY_OPTIONS: Final[dict[str, dict[str, Any]]] = {
    "gelu": {"approximate": "tanh"},
    "elu": {"alpha": 0.5},
    "leaky_relu": {"negative_slope": 0.2},
}


def _reduction(gen: _Gen) -> list[Case]:
    """All axes, one axis kept, a 0-sized input and a 0-d input."""
    name = gen.plan.operation
    empty_axis = 0 if name in ("reduce_sum", "reduce_prod") else 1  # max/min have no identity
    layouts: list[tuple[str, _Shape, dict[str, Any]]] = [
        ("4x5 all axes", (4, 5), {}),
        ("4x5 axis=1 keepdims", (4, 5), {"axis": 1, "keepdims": True}),
        (f"0x3 axis={empty_axis}", (0, 3), {"axis": empty_axis}),
        ("0-d", (), {}),
    ]
    if name == "cumsum":
        layouts = [
            ("4x5 axis=1", (4, 5), {"axis": 1}),
            ("4x5 flattened", (4, 5), {}),
            ("0x3 axis=0", (0, 3), {"axis": 0}),
        ]
    # Long products overflow in an order-dependent way (inf or nan), so they stop at 65.
    sizes = [n for n in SIZES if n <= 65] if name == "reduce_prod" else SIZES
    cases = [Case(label, (_operand(gen, 0, shape),), fields) for label, shape, fields in layouts]
    cases += [Case(f"n={size}", (_sized(gen, 0, size),)) for size in sizes]
    if name in ("reduce_sum", "cumsum"):
        cases += _accumulation(gen)
    return cases


# Terms summed per result by an accumulation case: enough that a narrow accumulator's rounding
# shows clearly above a correct one's (their gap shrinks like the square root of the count).
_ACCUMULATED: Final = 4097
# Results per accumulation case: half of them plain sums, half cancelling ones. Several of each,
# so that no single lucky rounding can hide a narrow accumulator.
_ROWS: Final = 16


def _float_dtype(dtype: cv.DType | None) -> cv.DType | None:
    return dtype if dtype is not None and (dtype.is_floating or dtype.is_complex) else None


def _halves(
    gen: _Gen, dtype: cv.DType, rows: int, terms: int, sign: int, order: _Array | None = None
) -> _Array:
    """``rows`` x ``terms`` small values whose second half is ``sign`` times the first half
    shuffled by ``order`` (a random one by default; a zero in the middle when ``terms`` is odd):
    with ``sign=-1`` each row sums to exactly zero, after its partial sums grew to the size of
    a half's sum."""
    half = terms // 2
    first = gen.values(dtype, (rows, half), "small")
    order = gen.rng.permutation(half) if order is None else order
    middle = np.zeros((rows, terms - 2 * half), first.dtype)
    second = first[:, order] if sign > 0 else -first[:, order]
    return np.concatenate([first, middle, second], axis=1)


def _accumulation(gen: _Gen) -> list[Case]:
    """Long sums along the last axis, compared within a bound from the accumulator dtype: half
    of the rows random (a result rounded from a narrower dtype is off), half cancelling exactly
    (a float16 output cannot hide a float16 accumulator's rounding behind its own)."""
    dtype = _float_dtype(gen.plan.operands[0].dtype)
    if dtype is None:
        return []  # integer and bool sums are compared exactly anyway
    plain = gen.values(dtype, (_ROWS // 2, _ACCUMULATED), "small")
    cancelling = _halves(gen, dtype, _ROWS - _ROWS // 2, _ACCUMULATED, -1)
    values = np.concatenate([plain, cancelling])
    label = f"accumulation {_ROWS}x{_ACCUMULATED} axis=1 (half the rows cancelling)"
    return [Case(label, (values,), {"axis": 1}, accumulation=True)]


def _sort(gen: _Gen) -> list[Case]:
    layouts: list[tuple[str, _Shape, dict[str, Any]]] = [
        ("4x5 axis=-1", (4, 5), {}),
        ("4x5 axis=0 descending", (4, 5), {"axis": 0, "descending": True}),
        ("0x3", (0, 3), {}),
    ]
    return [Case(label, (_operand(gen, 0, shape),), fields) for label, shape, fields in layouts]


def _topk(gen: _Gen) -> list[Case]:
    layouts: list[tuple[str, _Shape, dict[str, Any]]] = [
        ("4x5 k=2", (4, 5), {"k": 2}),
        ("4x5 k=3 axis=0 smallest", (4, 5), {"k": 3, "axis": 0, "largest": False}),
        ("4x5 k=0", (4, 5), {"k": 0}),
        ("0x3 k=2", (0, 3), {"k": 2}),
    ]
    return [Case(label, (_operand(gen, 0, shape),), fields) for label, shape, fields in layouts]


def _matmul(gen: _Gen) -> list[Case]:
    layouts: list[tuple[str, _Shape, _Shape]] = [
        ("3x4 @ 4x2", (3, 4), (4, 2)),
        ("batched 2x3x4 @ 4x2", (2, 3, 4), (4, 2)),
        ("vector 4 @ 4x2", (4,), (4, 2)),
        ("0-sized 0x4 @ 4x2", (0, 4), (4, 2)),
        ("empty inner 3x0 @ 0x2", (3, 0), (0, 2)),
        # Inner extents around and past the tile and vector widths kernels block by (a kernel
        # that drops the terms past its first tile fails at 64), outer extents past them too.
        ("inner 1: 5x1 @ 1x3", (5, 1), (1, 3)),
        ("inner 7: 4x7 @ 7x3", (4, 7), (7, 3)),
        ("inner 64: 3x64 @ 64x5", (3, 64), (64, 5)),
        ("inner 300: 70x300 @ 300x40", (70, 300), (300, 40)),
    ]
    cases = [
        Case(label, (_operand(gen, 0, a, "finite"), _operand(gen, 1, b, "finite")))
        for label, a, b in layouts
    ]
    return cases + _matmul_accumulation(gen)


def _matmul_accumulation(gen: _Gen) -> list[Case]:
    """``8x300 @ 300x8`` within a bound from the accumulator dtype: the inner halves of both
    operands repeat shuffled, negated in the last four columns of the right one, whose results
    cancel exactly; the other four are plain dot products."""
    left_type, right_type = (_float_dtype(o.dtype) for o in gen.plan.operands)
    if left_type is None or right_type is None:
        return []
    # The same shuffle on both sides, so the second half's products are the first half's.
    order = gen.rng.permutation(150)
    left = _halves(gen, left_type, 8, 300, 1, order)
    plain = gen.values(right_type, (4, 300), "small")
    cancelling = _halves(gen, right_type, 4, 300, -1, order)
    right = np.concatenate([plain, cancelling]).T.copy()
    label = "accumulation 8x300 @ 300x8 (half the results cancelling)"
    return [Case(label, (left, right), accumulation=True)]


def _conv(gen: _Gen) -> list[Case]:
    grouped = {
        "window_strides": (2, 1),
        "padding": ((1, 0), (0, 1)),
        "rhs_dilation": (1, 2),
        "feature_group_count": 2,
    }
    dilated = {"lhs_dilation": (2,), "dimension_numbers": ("NWC", "WIO", "NWC")}
    layouts: list[tuple[str, _Shape, _Shape, dict[str, Any]]] = [
        ("1-d", (1, 2, 6), (3, 2, 3), {}),
        ("2-d strided padded grouped", (2, 2, 5, 4), (4, 1, 2, 3), grouped),
        ("1-d lhs-dilated NWC", (1, 5, 2), (2, 2, 3), dilated),
        ("0-sized batch", (0, 2, 6), (3, 2, 3), {}),
    ]
    return [
        Case(label, (_operand(gen, 0, x, "finite"), _operand(gen, 1, w, "finite")), fields)
        for label, x, w, fields in layouts
    ]


def _index_dtype(gen: _Gen) -> cv.DType:
    dtype = gen.plan.operands[1].dtype
    assert dtype is not None  # the index role is never optional
    return dtype


def _gather(gen: _Gen) -> list[Case]:
    kind = _index_dtype(gen)
    layouts: list[tuple[str, _Shape, int, int]] = [
        ("4x5 axis=0", (3, 5), 0, 4),
        ("4x5 axis=-1 smaller index", (2, 3), -1, 5),
        ("0-sized index", (0, 5), 0, 4),
    ]
    return [
        Case(label, (_operand(gen, 0, (4, 5)), gen.indices(kind, shape, extent)), {"axis": axis})
        for label, shape, axis, extent in layouts
    ]


def _scatter(gen: _Gen) -> list[Case]:
    kind = _index_dtype(gen)
    # Distinct rows per column, so the first case has no duplicate targets.
    distinct = np.stack([gen.rng.permutation(4)[:2] for _ in range(5)], axis=1).astype(kind.numpy)
    cases = [
        Case(
            "axis=0 distinct targets, larger src",
            (_operand(gen, 0, (4, 5)), distinct, _operand(gen, 2, (3, 5))),
            {"axis": 0},
        ),
        Case(
            "axis=1 duplicate targets",
            (_operand(gen, 0, (3, 4)), gen.indices(kind, (3, 3), 4), _operand(gen, 2, (3, 3))),
            {"axis": 1},
        ),
        Case(
            "0-sized index",
            (_operand(gen, 0, (4, 5)), gen.indices(kind, (0, 5), 4), _operand(gen, 2, (1, 5))),
            {"axis": 0},
        ),
    ]
    return cases


def _matrices(gen: _Gen, shape: _Shape, hermitian: bool) -> _Array:
    """Finite, well-conditioned matrices: ``4 I`` added to square ones, made Hermitian (and so
    positive definite) where the name reads one triangle (``cholesky``, ``eigh``)."""
    dtype = gen.plan.operands[0].dtype
    assert dtype is not None  # the input role is never optional
    if not (dtype.is_floating or dtype.is_complex):
        # A bool or integer matrix promoted by solve's other operand: unit lower triangular
        # ones, invertible in every such dtype.
        return np.broadcast_to(np.tril(np.ones(shape[-2:])), shape).astype(dtype.numpy)
    values = gen.values(dtype, shape, "small").astype(np.complex128 if dtype.is_complex else float)
    if shape[-1] == shape[-2]:
        if hermitian:
            values = (values + np.conj(np.swapaxes(values, -1, -2))) / 2
        values = values + 4 * np.eye(shape[-1])
    return values.astype(dtype.numpy)


def _linalg(gen: _Gen) -> list[Case]:
    """Stacks of matrices: square, tall, wide, batched, empty; every option value."""
    name = gen.plan.operation
    hermitian = name in ("cholesky", "eigh")
    if name == "solve":
        layouts: list[tuple[str, _Shape, _Shape]] = [
            ("3x3 @ x = 3x2", (3, 3), (3, 2)),
            ("3x3 @ x = vector 3", (3, 3), (3,)),
            ("batched 2x3x3 @ x = 3x1", (2, 3, 3), (3, 1)),
            ("0-sized batch", (0, 2, 2), (2, 1)),
        ]
        return [
            Case(label, (_matrices(gen, a, False), _operand(gen, 1, b, "small")))
            for label, a, b in layouts
        ]
    square = name in ("inv", "cholesky", "eigh")
    shapes: list[_Shape] = [(3, 3), (2, 4, 4), (0, 0), (0, 2, 2)]
    if not square:
        shapes += [(4, 3), (3, 4), (0, 3)]
    option = {"cholesky": "upper", "qr": "mode", "svd": "full_matrices"}.get(name)
    values: list[Any] = ["reduced", "complete"] if option == "mode" else [False, True]
    cases = []
    for shape in shapes:
        for value in values if option else [None]:
            fields = {} if option is None else {option: value}
            label = "x".join(map(str, shape)) + (f" {option}={value!r}" if option else "")
            cases.append(Case(label, (_matrices(gen, shape, hermitian),), fields))
    return cases


_Builder = Callable[[_Gen], list[Case]]

_ELEMENTWISE: Final = (  # noqa: SIM905  # one word list reads better than one name a line
    "add sub mul elementwise_mul div pow neg abs sign recip sqrt rsqrt exp exp2 log log2 sin cos "
    "erf floor ceil round maximum minimum rem eq ne lt le logical_not relu sigmoid tanh gelu silu "
    "softplus elu leaky_relu clamp select tan sinh cosh asin acos atan asinh acosh atanh expm1 "
    "log1p"
).split()

BUILDERS: Final[dict[str, _Builder]] = {
    **dict.fromkeys(_ELEMENTWISE, _elementwise),
    **dict.fromkeys(
        ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin", "cumsum"],
        _reduction,
    ),
    "sort": _sort,
    "topk": _topk,
    "matmul": _matmul,
    "conv_general": _conv,
    "gather": _gather,
    "scatter": _scatter,
    "scatter_add": _scatter,
    **dict.fromkeys(["inv", "cholesky", "solve", "qr", "eigh", "svd"], _linalg),
}
"""Planned name -> builder of its cases."""


def plan_keys(plan: OperationPlan) -> tuple[Any, ...]:
    """The ``resolve_plan`` operands that give ``plan``: dtypes, scalar samples, ``None``."""
    keys: list[Any] = []
    for operand in plan.operands:
        if operand.dtype is None:
            keys.append(None)
        elif operand.weak:
            keys.append(_SCALARS["default"][operand.dtype.name])
        else:
            keys.append(operand.dtype)
    return tuple(keys)


def _accumulator_field(plan: OperationPlan) -> dict[str, Any]:
    """``{"accumulator_dtype": ...}`` when the plan's accumulator is not the default one."""
    if not operation_spec(plan.operation).accepts_accumulator:
        return {}
    default = cv.resolve_plan(plan.operation, *plan_keys(plan))
    return {} if default == plan else {"accumulator_dtype": plan.accumulator_dtype}


def cases_for(plan: OperationPlan, seed: int = 0) -> list[Case]:
    """The cases the kit runs for ``plan``; deterministic for a given plan and seed.

    Raises:
        KeyError: the kit has no builder for the plan's name.
    """
    builder = BUILDERS[plan.operation]
    digest = zlib.crc32(plan_text(plan).encode())
    gen = _Gen(plan, np.random.default_rng([seed, digest]))
    accumulator = _accumulator_field(plan)
    cases = builder(gen)
    if accumulator:
        cases = [replace(c, fields={**c.fields, **accumulator}) for c in cases]
    return cases


def options_for(plan: OperationPlan, case: Case) -> cv.OperationExecutionOptions | None:
    """The options record of ``case`` (``None`` when it sets no field)."""
    if not case.fields:
        return None
    return cv.OperationExecutionOptions(plan.operation, **case.fields)


def plan_text(plan: OperationPlan) -> str:
    """A one-line description: ``add(input: float32, other: int scalar) -> float32``."""
    parts = []
    for operand in plan.operands:
        if operand.dtype is None:
            parts.append(f"{operand.role}: absent")
        elif operand.weak:
            kind = {"bool": "bool", "int64": "int", "float64": "float"}.get(
                operand.dtype.name, "complex"
            )
            parts.append(f"{operand.role}: {kind} scalar")
        else:
            parts.append(f"{operand.role}: {operand.dtype.name}")
    outputs = ", ".join(d.name for d in plan.outputs)
    acc = f" [accumulator {plan.accumulator_dtype.name}]" if plan.accumulator_dtype else ""
    return f"{plan.operation}({', '.join(parts)}) -> {outputs}{acc}"


def _show(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v!r}" for k, v in fields.items())


def operand_arrays(case: Case) -> Sequence[_Array]:
    """The tensor operands of ``case`` (its arrays), in order."""
    return [v for v in case.operands if isinstance(v, np.ndarray)]
