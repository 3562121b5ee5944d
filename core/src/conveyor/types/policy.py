"""Dtype-policy registry: the dtypes each planned operation accepts, computes in and returns.

Every carrier executes a planned operation from the one ``OperationPlan`` resolved here, so the
dtype semantics of ``add`` or ``reduce_sum`` are decided once for all carriers, and a carrier's
capabilities are the plans it can execute (see ``enumerate_plans``). Resolution reads only
dtypes and the *kinds* of Python scalars, never values, so plans are cached per signature.

The registry is a table: one ``OperationSpec`` row per dispatch name plus four rule functions
(elementwise, accumulating, indexed, select). ``docs/dtype-policy.md`` records every decision.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from conveyor.types.dtypes import (
    CONCRETE_DTYPES,
    DType,
    bool_,
    complex64,
    complex128,
    default_float,
    default_int,
    float32,
    float64,
    int64,
    promote_types,
    uint64,
)

__all__ = [
    "OperandPlan",
    "OperationPlan",
    "OperationSpec",
    "VIEW_OPERATIONS",
    "enumerate_plans",
    "is_planned",
    "operation_spec",
    "registered_operations",
    "resolve_plan",
]

#: The eight representation-preserving names: not dtype-planned (a view keeps its input's
#: dtype), one tensor operand, options only. Every carrier dispatches them.
VIEW_OPERATIONS: Final = (
    "as_strided",
    "broadcast_to",
    "permute",
    "rearrange",
    "reshape",
    "squeeze",
    "unsqueeze",
    "view",
)

_Accumulation: TypeAlias = Literal["none", "wrap", "float"]
_Operand: TypeAlias = DType | bool | int | float | complex | None
# A validated operand: (role, dtype or None when absent, weak). A weak scalar's dtype is the
# dtype of its Python kind (bool, int64, float64, complex128).
_Arg: TypeAlias = tuple[str, DType | None, bool]


@final
@attrs.frozen(cache_hash=True)
class OperandPlan:
    """How one operand enters a plan: its dtype and the dtype it is converted to first."""

    role: str
    dtype: DType | None
    convert_to: DType | None
    weak: bool = False


@final
@attrs.frozen(cache_hash=True)
class OperationPlan:
    """The complete dtype decision for one call: carriers execute it, never a local policy.

    ``accumulation`` is ``"none"``, ``"wrap"`` (integer arithmetic modulo ``2**bits``) or
    ``"float"`` (a running sum in ``accumulator_dtype``, rounded once to the output dtype).
    """

    operation: str
    operands: tuple[OperandPlan, ...]
    compute: DType
    accumulation: _Accumulation
    accumulator_dtype: DType | None
    outputs: tuple[DType, ...]


# Kind sets a row accepts for the dtype that decides its compute dtype (the promoted operands,
# or ``input`` for indexed operations). Kinds are ``DType.kind`` strings.
_INT: Final = frozenset({"signed_integer", "unsigned_integer"})
_ALL: Final = frozenset({"bool", "floating", "complex_floating"}) | _INT
_NUMERIC: Final = _ALL - {"bool"}
_REAL: Final = _ALL - {"complex_floating"}
_REAL_NUMERIC: Final = _REAL - {"bool"}
_INEXACT: Final = frozenset({"floating", "complex_floating"})
_COMPLEX: Final = frozenset({"complex_floating"})

_Rule: TypeAlias = Literal["elementwise", "accumulate", "indexed", "select"]
_Outputs: TypeAlias = Literal[
    "same", "bool", "int64", "real", "values_indices", "pair", "eigh", "svd"
]
# The results of the multi-output linear-algebra kinds: "same" is the compute dtype, "real" its
# real dtype (float32 for complex64), in result order.
_MULTI: Final[dict[str, tuple[str, ...]]] = {
    "pair": ("same", "same"),  # qr: (Q, R)
    "eigh": ("real", "same"),  # eigh: (eigenvalues, eigenvectors)
    "svd": ("same", "real", "same"),  # svd: (U, S, Vh)
}


@final
@attrs.frozen(kw_only=True)
class OperationSpec:
    """One registry row: the operand roles of a dispatch name and the rule that plans it.

    ``kinds`` are the dtype kinds accepted for the dtype that decides the plan: the promoted
    operands (elementwise, accumulating, select) or ``input`` (gather and scatter). Integer
    kinds of a ``to_float`` row compute in the default float dtype.
    """

    name: str
    roles: tuple[str, ...]
    rule: _Rule
    kinds: frozenset[str]
    outputs: _Outputs = "same"
    scalar_roles: frozenset[str] = frozenset()
    optional_roles: frozenset[str] = frozenset()
    differentiable: bool = True
    accepts_accumulator: bool = False
    wraps: bool = False  # integer compute overflows modulo 2**bits
    to_float: bool = False  # integer compute moves to the default float dtype
    widens: bool = False  # integer accumulation widens to 64 bits (int64 / uint64)

    @property
    def n_outputs(self) -> int:
        if self.outputs in _MULTI:
            return len(_MULTI[self.outputs])
        return 2 if self.outputs == "values_indices" else 1


_BOTH: Final = frozenset({"input", "other"})


def _table() -> dict[str, OperationSpec]:
    """The registry: one row per planned dispatch name, grouped by family."""
    rows: list[OperationSpec] = []

    def add(names: str, rule: _Rule = "elementwise", **fields: Any) -> None:
        fields.setdefault("roles", ("input",))
        rows.extend(OperationSpec(name=n, rule=rule, **fields) for n in names.split())

    # Shared column values, so that each row fits on one line.
    pair = ("input", "other")
    binary: dict[str, Any] = {"roles": pair, "scalar_roles": _BOTH}
    test: dict[str, Any] = {"outputs": "bool", "differentiable": False, **binary}
    sums: dict[str, Any] = {"kinds": _ALL, "wraps": True, "widens": True}
    bounds = frozenset({"lo", "hi"})
    clamp: dict[str, Any] = {"scalar_roles": bounds, "optional_roles": bounds}

    # Binary elementwise; Python scalars allowed on either side (elementwise_mul: tensors only).
    add("add mul", kinds=_ALL, wraps=True, **binary)
    add("sub pow", kinds=_NUMERIC, wraps=True, **binary)
    add("elementwise_mul", roles=pair, kinds=_ALL, wraps=True)
    add("div", kinds=_NUMERIC, to_float=True, **binary)
    add("maximum minimum", kinds=_REAL, **binary)
    add("rem", kinds=_REAL_NUMERIC, **binary)
    add("eq ne", kinds=_ALL, **test)
    add("lt le", kinds=_REAL, **test)
    # Unary elementwise and activations.
    add("neg", kinds=_NUMERIC, wraps=True)
    add("abs", kinds=_NUMERIC, wraps=True, outputs="real")
    add("sign floor ceil round", kinds=_REAL_NUMERIC, differentiable=False)
    add("relu", kinds=_REAL_NUMERIC)
    add("recip sqrt rsqrt exp exp2 log log2 sin cos sigmoid tanh", kinds=_NUMERIC, to_float=True)
    add("erf gelu silu softplus elu leaky_relu", kinds=_REAL_NUMERIC, to_float=True)
    # Complex plans of the standard's functions that are composed for real input (in
    # conveyor.lib.composed); a composition cannot give C99's complex special values.
    add("tan sinh cosh asin acos atan asinh acosh atanh expm1 log1p", kinds=_COMPLEX)
    add("logical_not", kinds=_ALL, outputs="bool", differentiable=False)
    add("clamp", roles=("input", "lo", "hi"), kinds=_REAL_NUMERIC, **clamp)
    # Reductions and scans.
    add("reduce_sum reduce_prod", "accumulate", accepts_accumulator=True, **sums)
    add("cumsum", "accumulate", **sums)
    add("reduce_max reduce_min", kinds=_REAL)
    add("argmax argmin", kinds=_REAL, outputs="int64", differentiable=False)
    add("sort topk", kinds=_REAL, outputs="values_indices")
    # Contractions.
    add("matmul", "accumulate", roles=pair, kinds=_NUMERIC, wraps=True, accepts_accumulator=True)
    add("conv_general", "accumulate", roles=("input", "weight"), kinds=_INEXACT)
    # Indexing and selection.
    add("gather", "indexed", roles=("input", "index"), kinds=_ALL)
    add("scatter", "indexed", roles=("input", "index", "src"), kinds=_ALL)
    add("scatter_add", "indexed", roles=("input", "index", "src"), kinds=_NUMERIC, wraps=True)
    add("select", "select", roles=("condition", "input", "other"), kinds=_ALL, scalar_roles=_BOTH)
    # Linear algebra over the last two axes (LAPACK on Generic and CPU), floating and complex.
    add("inv cholesky", kinds=_INEXACT)
    add("solve", roles=pair, kinds=_INEXACT)
    add("qr", kinds=_INEXACT, outputs="pair")
    add("eigh", kinds=_INEXACT, outputs="eigh")
    add("svd", kinds=_INEXACT, outputs="svd")
    return {row.name: row for row in rows}


_SPECS: Final[dict[str, OperationSpec]] = _table()
_NAMES: Final = tuple(sorted(_SPECS))

# Python scalar kinds, bool first because bool is a subclass of int.
_SCALAR_DTYPES: Final[tuple[tuple[type, DType], ...]] = (
    (bool, bool_),
    (int, int64),
    (float, float64),
    (complex, complex128),
)
# Weak promotion compares kinds only: a scalar changes the dtype only when its kind is higher.
_KIND_RANK: Final = {
    "bool": 0,
    "unsigned_integer": 1,
    "signed_integer": 1,
    "floating": 2,
    "complex_floating": 3,
}
_REAL_OF: Final = {complex64: float32, complex128: float64}
_ACCUMULATORS: Final = (float32, float64)


def _weak(strong: DType, scalar: DType) -> DType:
    """Combine a weak Python scalar's kind dtype with the (promoted) tensor dtype."""
    if _KIND_RANK[scalar.kind] <= _KIND_RANK[strong.kind]:
        return strong
    if scalar is int64:
        return default_int
    if scalar is float64:
        return default_float
    # A complex scalar keeps the precision of a float64 tensor; everything else gets complex64.
    return complex128 if strong is float64 else complex64


def _promote(name: str, args: tuple[_Arg, ...]) -> DType:
    """Promote tensor dtypes with ``promote_types``, then fold in weak scalars."""
    result: DType | None = None
    for _, dtype, weak in args:
        if dtype is not None and not weak:
            try:
                result = dtype if result is None else promote_types(result, dtype)
            except TypeError as exc:
                msg = f"{name}: {exc}."
                raise TypeError(msg) from exc
    # Only ``select`` can get here with no tensor: two scalars give their kind's default dtype.
    result = bool_ if result is None else result
    for _, dtype, weak in args:
        if weak:
            assert dtype is not None  # invariant: a weak operand always has its kind dtype
            result = _weak(result, dtype)
    return result


def _kinds_text(kinds: frozenset[str]) -> str:
    words = ["bool"] if "bool" in kinds else []
    words += ["integer"] if kinds >= _INT else []
    words += ["floating"] if "floating" in kinds else []
    words += ["complex"] if "complex_floating" in kinds else []
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1]


def _check_kind(spec: OperationSpec, dtype: DType, subject: str) -> None:
    if dtype.kind not in spec.kinds:
        msg = (
            f"{spec.name}: {subject} {dtype!r}, which is not supported ({spec.name} accepts "
            f"{_kinds_text(spec.kinds)} dtypes); cast to one of those first."
        )
        raise TypeError(msg)


def _subject(args: tuple[_Arg, ...]) -> str:
    present = [a for a in args if a[1] is not None]
    return "input has dtype" if len(present) == 1 else "the operands promote to"


def _outputs(spec: OperationSpec, compute: DType) -> tuple[DType, ...]:
    if spec.outputs == "bool":
        return (bool_,)
    if spec.outputs == "int64":
        return (int64,)
    if spec.outputs == "real":
        return (_REAL_OF.get(compute, compute),)
    if spec.outputs == "values_indices":
        return (compute, int64)
    if spec.outputs in _MULTI:
        real = _REAL_OF.get(compute, compute)
        return tuple(real if kind == "real" else compute for kind in _MULTI[spec.outputs])
    return (compute,)


def _operands(args: tuple[_Arg, ...], convert: Callable[[str], DType]) -> tuple[OperandPlan, ...]:
    return tuple(
        OperandPlan(role, None, None) if d is None else OperandPlan(role, d, convert(role), weak)
        for role, d, weak in args
    )


def _elementwise(spec: OperationSpec, args: tuple[_Arg, ...], acc: DType | None) -> OperationPlan:
    """Promote every operand; compute and (mostly) output in the promoted dtype."""
    compute = _promote(spec.name, args)
    _check_kind(spec, compute, _subject(args))
    if spec.to_float and compute.is_integer:
        compute = default_float
    accumulation: _Accumulation = "wrap" if spec.wraps and compute.is_integer else "none"
    operands = _operands(args, lambda _: compute)
    return OperationPlan(spec.name, operands, compute, accumulation, None, _outputs(spec, compute))


def _accumulate(spec: OperationSpec, args: tuple[_Arg, ...], acc: DType | None) -> OperationPlan:
    """Sums, products and contractions: choose the running-sum dtype; compute runs in it."""
    promoted = _promote(spec.name, args)
    _check_kind(spec, promoted, _subject(args))
    output = promoted
    accumulation: _Accumulation = "float"
    if promoted.is_integer or promoted.is_bool:
        if spec.widens:
            output = uint64 if promoted.kind == "unsigned_integer" else int64
        if acc is not None:
            msg = (
                f"{spec.name}: accumulator_dtype={acc!r} applies to floating plans only, and "
                f"this plan is integer ({output.name}, wrapping); drop accumulator_dtype or "
                f"cast the operands to a floating dtype."
            )
            raise TypeError(msg)
        accumulation, accumulator = "wrap", output
    elif promoted.is_complex:
        if acc is not None:
            msg = (
                f"{spec.name}: accumulator_dtype={acc!r} applies to floating plans only, and "
                f"this plan is complex ({promoted.name}); drop accumulator_dtype."
            )
            raise TypeError(msg)
        accumulator = promoted
    elif acc is None:
        # Half-precision sums accumulate in float32 and round once; wider floats in themselves.
        accumulator = float32 if promoted.itemsize < float32.itemsize else promoted
    elif acc in _ACCUMULATORS:
        accumulator = acc
    else:
        msg = (
            f"{spec.name}: accumulator_dtype={acc!r} is not float32 or float64; pass "
            f"conveyor.float32 or conveyor.float64, or None for the default."
        )
        raise TypeError(msg)
    operands = _operands(args, lambda _: accumulator)
    return OperationPlan(spec.name, operands, accumulator, accumulation, accumulator, (output,))


def _indexed(spec: OperationSpec, args: tuple[_Arg, ...], acc: DType | None) -> OperationPlan:
    """gather / scatter: values keep ``input``'s dtype, indices become int64, no promotion."""
    source = args[0][1]
    index = args[1][1]
    assert source is not None and index is not None  # invariant: neither role is optional
    _check_kind(spec, source, "input has dtype")
    if not index.is_integer:
        msg = f"{spec.name}: index has dtype {index!r}, not an integer; cast the index to int64."
        raise TypeError(msg)
    if len(args) == 3 and args[2][1] is not source:
        msg = (
            f"{spec.name}: src has dtype {args[2][1]!r} but input has {source!r}, and "
            f"{spec.name} does not promote; cast src to {source!r} first."
        )
        raise TypeError(msg)
    operands = _operands(args, lambda role: int64 if role == "index" else source)
    accumulation: _Accumulation = "wrap" if spec.wraps and source.is_integer else "none"
    return OperationPlan(spec.name, operands, source, accumulation, None, (source,))


def _select(spec: OperationSpec, args: tuple[_Arg, ...], acc: DType | None) -> OperationPlan:
    """select(condition, input, other): a bool condition picks from the promoted values."""
    condition = args[0][1]
    if condition is not bool_:
        msg = (
            f"select: condition has dtype {condition!r}, not bool; compare first "
            f"(e.g. ne(condition, 0)) to get a bool condition."
        )
        raise TypeError(msg)
    compute = _promote(spec.name, args[1:])
    operands = _operands(args, lambda role: bool_ if role == "condition" else compute)
    return OperationPlan(spec.name, operands, compute, "none", None, (compute,))


_RULES: Final[
    dict[str, Callable[[OperationSpec, tuple[_Arg, ...], DType | None], OperationPlan]]
] = {
    "elementwise": _elementwise,
    "accumulate": _accumulate,
    "indexed": _indexed,
    "select": _select,
}


def _validate(spec: OperationSpec, operands: tuple[object, ...]) -> tuple[_Arg, ...]:
    """Check operand count and form; return (role, dtype, weak) per role."""
    name, roles = spec.name, spec.roles
    if len(operands) != len(roles):
        msg = (
            f"{name}: expected {len(roles)} operands ({', '.join(roles)}), got {len(operands)}; "
            f"pass one operand per role, None for an absent optional one."
        )
        raise TypeError(msg)
    args: list[_Arg] = []
    for role, value in zip(roles, operands, strict=True):
        if isinstance(value, DType):
            if value.is_abstract:
                msg = (
                    f"{name}: {role} has dtype {value!r}, an abstract dtype category; pass a "
                    f"concrete dtype such as {value.members[0]!r}."
                )
                raise TypeError(msg)
            args.append((role, value, False))
            continue
        if value is None:
            if role not in spec.optional_roles:
                msg = f"{name}: {role} is None but is required; pass a DType for it."
                raise TypeError(msg)
            args.append((role, None, False))
            continue
        kind = next((d for py, d in _SCALAR_DTYPES if isinstance(value, py)), None)
        if kind is None:
            msg = (
                f"{name}: {role} is {value!r} (of type {type(value).__name__}); pass a "
                f"conveyor DType, a Python bool/int/float/complex scalar, or None."
            )
            raise TypeError(msg)
        if role not in spec.scalar_roles:
            msg = (
                f"{name}: {role} is the Python scalar {value!r} (of type "
                f"{type(value).__name__}) but must be a tensor; pass a DType for it."
            )
            raise TypeError(msg)
        args.append((role, kind, True))
    if not any(d is not None and not weak for _, d, weak in args):
        msg = (
            f"{name}: every operand is a Python scalar {operands!r}; at least one operand "
            f"must be a tensor dtype."
        )
        raise TypeError(msg)
    if spec.optional_roles and all(d is None for r, d, _ in args if r in spec.optional_roles):
        optional = " and ".join(r for r in roles if r in spec.optional_roles)
        msg = f"{name}: {optional} are None; pass at least one of them."
        raise TypeError(msg)
    return tuple(args)


def _resolve(name: object, operands: tuple[object, ...], acc: object) -> OperationPlan:
    """The uncached path: validate everything, then apply the row's rule."""
    spec = operation_spec(name)
    if acc is not None:
        if not isinstance(acc, DType):
            msg = (
                f"{spec.name}: accumulator_dtype={acc!r} (of type {type(acc).__name__}) is not "
                f"a conveyor DType; pass conveyor.float32 or conveyor.float64."
            )
            raise TypeError(msg)
        if not spec.accepts_accumulator:
            msg = (
                f"{spec.name}: accumulator_dtype={acc!r} is not accepted; only "
                f"{', '.join(n for n in _NAMES if _SPECS[n].accepts_accumulator)} take an "
                f"accumulator, drop it here."
            )
            raise TypeError(msg)
    args = _validate(spec, operands)
    return _RULES[spec.rule](spec, args, acc)


# The plan cache. A key is (name, accumulator, operand keys); an operand key is the DType
# itself, None, or a private marker for the scalar's kind, so the cache is bounded by
# signatures, never by values. Tensor-only calls hit it with the raw operand tuple (no
# per-operand work); a call with scalars misses that probe (a DType or marker never equals a
# caller's value) and retries with the markers. Refusals are not cached. Concurrent misses may
# both resolve; the plans are equal.
_PLANS: Final[dict[tuple[object, object, tuple[object, ...]], OperationPlan]] = {}


@final
class _Kind:
    """Cache-key marker for a scalar kind; private, so no operand can ever equal it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name} scalar>"


# Operand key per exact scalar type; any other operand (a DType, None) is its own key.
_KINDS: Final = {py: _Kind(py.__name__) for py, _ in _SCALAR_DTYPES}
_SCALAR_KEY: Final = _KINDS.get


def _scalar_keys(operands: tuple[object, ...]) -> tuple[object, ...]:
    """Replace exact Python scalars by their kind marker (unrolled: it is the hot path)."""
    n = len(operands)
    if n == 2:
        a, b = operands
        return (_SCALAR_KEY(a.__class__, a), _SCALAR_KEY(b.__class__, b))
    if n == 3:
        a, b, c = operands
        return (
            _SCALAR_KEY(a.__class__, a),
            _SCALAR_KEY(b.__class__, b),
            _SCALAR_KEY(c.__class__, c),
        )
    return tuple(_SCALAR_KEY(o.__class__, o) for o in operands)


def _canonical_key(value: object) -> object:
    """The cache key of one operand, mapping scalar subclasses to their Python kind."""
    if value is None or isinstance(value, DType):
        return value
    return next((_KINDS[py] for py, _ in _SCALAR_DTYPES if isinstance(value, py)), value)


def _lookup(name: object, operands: tuple[object, ...], acc: object) -> OperationPlan:
    """Probe the cache with the raw operands, then with kind markers; resolve on a miss."""
    try:
        plan = _PLANS.get((name, acc, operands))
        if plan is None:
            plan = _PLANS.get((name, acc, _scalar_keys(operands)))
        if plan is not None:
            return plan
        # A new signature, or a scalar of a subclass of a Python kind (np.float64).
        key = (name, acc, tuple(map(_canonical_key, operands)))
        plan = _PLANS.get(key)
    except TypeError:  # an unhashable operand, name or accumulator: validation says which
        return _resolve(name, operands, acc)
    if plan is None:
        plan = _resolve(name, operands, acc)
        _PLANS[key] = plan
    return plan


def resolve_plan(name: str, *operands: _Operand, options: object = None) -> OperationPlan:
    """The cached ``OperationPlan`` for ``name`` applied to ``operands``.

    Each operand is a ``DType`` (a tensor), a Python bool/int/float/complex (a weak scalar) or
    ``None`` (an absent optional operand), in the order of ``operation_spec(name).roles``.
    ``options`` is ``None`` or an ``OperationExecutionOptions`` for ``name``; only its
    ``accumulator_dtype`` (where the schema has one) affects the plan.

    Raises:
        NotImplementedError: ``name`` is not in the registry.
        TypeError: a dtype category, a wrong operand count or form, a dtype the operation
            refuses, an unpromotable pair, or an accumulator the plan cannot use.
        ValueError: ``options`` are bound to another operation.
    """
    if options is None:
        acc = None
    else:
        bound = getattr(options, "name", name)
        if bound != name:
            msg = (
                f"{name}: options are bound to {bound!r}; build "
                f"OperationExecutionOptions({name!r}, ...) for this operation."
            )
            raise ValueError(msg)
        acc = getattr(options, "accumulator_dtype", None)
    # The hot path, inlined from _lookup: the raw operands, then scalars replaced by their type.
    try:
        plan = _PLANS.get((name, acc, operands))
        if plan is None:
            plan = _PLANS.get((name, acc, _scalar_keys(operands)))
    except TypeError:
        plan = None
    return _lookup(name, operands, acc) if plan is None else plan


def registered_operations() -> tuple[str, ...]:
    """Every planned dispatch name, sorted."""
    return _NAMES


def operation_spec(name: object) -> OperationSpec:
    """The registry row of ``name``.

    Raises:
        NotImplementedError: ``name`` is not a planned dispatch name.
    """
    spec = _SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        msg = (
            f"{name!r}: not in the dtype-policy registry; planned operations are listed by "
            f"conveyor.registered_operations() (view names such as 'reshape' are "
            f"not planned)."
        )
        raise NotImplementedError(msg)
    return spec


def is_planned(name: object) -> bool:
    """Whether ``name`` has a registry row (and so must pass the capability gate)."""
    return isinstance(name, str) and name in _SPECS


# One sample value per weak scalar kind: plans depend on the kind only.
_SCALAR_SAMPLES: Final = (True, 1, 1.0, 1j)
_ENUMERATED: Final[dict[str | None, tuple[OperationPlan, ...]]] = {}


def enumerate_plans(name: str | None = None) -> tuple[OperationPlan, ...]:
    """Every plan ``resolve_plan`` can return for ``name`` (for all names when ``None``).

    Carriers declare capabilities from this set, so it is exact: every concrete dtype per tensor
    role, every scalar kind per scalar role, ``None`` per optional role and every accepted
    accumulator choice. Computed once per name.
    """
    spec = None if name is None else operation_spec(name)
    found = _ENUMERATED.get(name)
    if found is not None:
        return found
    if spec is None:
        found = tuple(plan for n in _NAMES for plan in enumerate_plans(n))
    else:
        choices = [
            CONCRETE_DTYPES
            + (_SCALAR_SAMPLES if role in spec.scalar_roles else ())
            + ((None,) if role in spec.optional_roles else ())
            for role in spec.roles
        ]
        accumulators = (None, *_ACCUMULATORS) if spec.accepts_accumulator else (None,)
        plans: dict[OperationPlan, None] = {}
        for operands in itertools.product(*choices):
            for acc in accumulators:
                try:
                    plans[_lookup(spec.name, operands, acc)] = None
                except TypeError:
                    continue
        found = tuple(plans)
    _ENUMERATED[name] = found
    return found
