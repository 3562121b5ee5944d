"""Execution options: one validated, frozen record of an operation call's non-tensor parameters.

Every dispatch name has a schema (field names, accepted types, defaults) in one table below.
``OperationExecutionOptions`` checks a call's options against it once, at construction, so
carriers read already-normalised values and never re-validate. Construction sits on the hot
path of every call that has options, so it costs one membership test, one type test and one
slot store per field; fields read back as plain slots, and the hash is computed only when
something asks for it.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple, NoReturn, final

import attrs

from conveyor.types import dtypes
from conveyor.types.dtypes import DType

__all__ = [
    "FieldSpec",
    "OperationExecutionOptions",
    "SCHEMA_NAMES",
    "has_options",
    "options_schema",
]

_Validator = Callable[[object], object]


class _Bad(Exception):
    """A validator's refusal: ``kind`` is TypeError or ValueError, ``text`` a hint or detail.

    Validators raise this instead of the builtin so that one function formats every message.
    """

    def __init__(self, kind: type[Exception] = TypeError, text: str = "") -> None:
        super().__init__(text)
        self.kind, self.text = kind, text


_REQUIRED: Final = object()  # default of a required field; keeps it at its schema position


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _refusal(operation: str, spec: FieldSpec, value: object, bad: _Bad) -> Exception:
    if bad.kind is ValueError:
        return ValueError(f"{operation}: option {spec.name} {bad.text}, got {_show(value)}")
    msg = (
        f"{operation}: option {spec.name} must be {spec.expected}, "
        f"got {_show(value)} ({type(value).__name__})"
    )
    hint = bad.text
    numpy = sys.modules.get("numpy")  # loaded whenever value could be a NumPy object
    if numpy is not None and isinstance(value, numpy.generic):
        hint = hint or "convert the NumPy scalar with int(), float() or bool()"
    elif hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type):
        hint = "options are never tensors; pass a Python value"
    return TypeError(f"{msg}; {hint}" if hint else msg)


@final
@attrs.frozen
class FieldSpec:
    """One option field of one schema: what it accepts, its default and how it is normalised.

    ``validator`` returns the normalised value (lists become tuples, NumPy integers ``int``);
    ``hashable`` maps a normalised value to a hashable stand-in, for fields whose values Python
    3.11 cannot hash (view keys hold ``slice`` objects).
    """

    name: str
    expected: str  # "a tuple of ints": used in TypeError messages and the docs
    validator: _Validator = attrs.field(repr=False)
    default: object = None
    required: bool = False
    hashable: Callable[[Any], Hashable] | None = attrs.field(default=None, repr=False)

    def check(self, operation: str, value: object) -> object:
        """Validate and normalise ``value`` exactly as ``OperationExecutionOptions`` does.

        Raises:
            TypeError: ``value`` has the wrong type.
            ValueError: ``value`` has the right type but is out of range.
        """
        try:
            return self.validator(value)
        except _Bad as bad:
            raise _refusal(operation, self, value, bad) from None


# --- value kinds -------------------------------------------------------------------------------
# Each helper checks one kind of value and returns it normalised, raising _Bad to refuse it.


def _as_int(value: object) -> int:
    if type(value) is int:
        return value
    # bool is an int subclass, but axis=True is a bug, not an axis.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _Bad
    return int(value)


def _as_ints(value: object, minimum: int | None) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise _Bad
    items = tuple(value)
    for v in items:
        if type(v) is not int:  # rare: convert all (NumPy ints) or refuse
            items = tuple(map(_as_int, items))
            break
    if minimum is not None and items and min(items) < minimum:
        raise _Bad(ValueError, f"entries must be >= {minimum}")
    return items


def _int(minimum: int | None = None, optional: bool = False) -> _Validator:
    def validate(value: object) -> object:
        if value is None and optional:
            return None
        number = value if type(value) is int else _as_int(value)
        if minimum is not None and number < minimum:
            raise _Bad(ValueError, f"must be >= {minimum}")
        return number

    return validate


def _bool(value: object) -> object:
    if type(value) is not bool:
        raise _Bad
    return value


def _float(value: object) -> object:
    if type(value) is float:
        number = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _Bad
    else:
        number = float(value)  # ints and NumPy floats read as Python floats
    if not math.isfinite(number):
        raise _Bad(ValueError, "must be finite")
    return number


def _choice(*choices: str) -> _Validator:
    listed = ", ".join(repr(c) for c in choices)

    def validate(value: object) -> object:
        if not isinstance(value, str):
            raise _Bad
        if value not in choices:
            raise _Bad(ValueError, f"must be one of {listed}")
        return value

    return validate


def _dtype(value: object) -> object:
    # Which dtypes are legal depends on the plan; conveyor.types.policy decides that. Anything
    # conveyor.dtype() resolves (a name such as "float64", a NumPy dtype) is accepted.
    if value is None or isinstance(value, DType):
        return value
    try:
        return dtypes.dtype(value)
    except TypeError:
        raise _Bad(TypeError, "look one up with conveyor.dtype(...)") from None


def _axes(wrap: bool = False, optional: bool = False) -> _Validator:
    """Axes (negative ones count from the end); ``wrap`` turns a lone int into a 1-tuple."""

    def validate(value: object) -> object:
        if type(value) is int:  # the common case, first
            return (value,) if wrap else value
        if value is None and optional:
            return None
        if not isinstance(value, (tuple, list)):
            number = _as_int(value)
            return (number,) if wrap else number
        axes = _as_ints(value, None)
        if len(set(axes)) != len(axes):
            raise _Bad(ValueError, "must not repeat an axis")
        return axes

    return validate


def _ints(minimum: int | None, wrap: bool = False, optional: bool = False) -> _Validator:
    """A tuple of ints (shapes, strides, dilations); ``wrap`` turns a lone int into a 1-tuple."""

    def validate(value: object) -> object:
        if value is None and optional:
            return None
        if wrap and not isinstance(value, (tuple, list)):
            value = (_as_int(value),)
        return _as_ints(value, minimum)

    return validate


def _reshape_shape(value: object) -> object:
    shape = _ints(-1, wrap=True)(value)
    assert isinstance(shape, tuple)  # invariant: _ints returns a tuple when not optional
    if shape.count(-1) > 1:
        raise _Bad(ValueError, "may contain -1 (an inferred extent) at most once")
    return shape


def _padding(value: object) -> object:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)):
        raise _Bad
    pairs = []
    for pair in value:
        if not isinstance(pair, (tuple, list)):
            raise _Bad
        if len(pair) != 2:
            raise _Bad(ValueError, "must hold (low, high) pairs of length 2")
        pairs.append(_as_ints(pair, 0))
    return tuple(pairs)


def _dimension_numbers(value: object) -> object:
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or not all(isinstance(s, str) for s in value):
        raise _Bad
    if len(value) != 3:
        raise _Bad(ValueError, "must hold three layouts (lhs, rhs, out)")
    lhs, rhs, out = value
    for layout, needs in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
        if len(set(layout)) != len(layout):
            raise _Bad(ValueError, f"layout {layout!r} repeats a dimension letter")
        if not set(needs) <= set(layout):
            raise _Bad(ValueError, f"layout {layout!r} must contain {needs[0]} and {needs[1]}")
    if not len(lhs) == len(rhs) == len(out):
        raise _Bad(ValueError, "layouts must all have the same length")
    if not set(lhs) - {"N", "C"} == set(rhs) - {"O", "I"} == set(out) - {"N", "C"}:
        raise _Bad(ValueError, "layouts must name the same spatial dimensions")
    return (lhs, rhs, out)


def _pattern(value: object) -> object:
    if not isinstance(value, str):
        raise _Bad
    if value.count("->") != 1:
        raise _Bad(ValueError, "must contain exactly one '->'")
    return value


def _sizes(value: object) -> object:
    items = tuple(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(items, (tuple, list)):
        raise _Bad
    pairs: dict[str, int] = {}
    for pair in items:
        if not isinstance(pair, (tuple, list)):
            raise _Bad
        if len(pair) != 2:
            raise _Bad(ValueError, "must hold (axis name, size) pairs of length 2")
        axis, size = pair[0], _as_int(pair[1])
        if not isinstance(axis, str):
            raise _Bad
        if not axis.isidentifier():
            raise _Bad(ValueError, f"axis name {axis!r} is not an identifier")
        if size < 1:
            raise _Bad(ValueError, f"size of {axis!r} must be >= 1")
        if axis in pairs:
            raise _Bad(ValueError, f"names axis {axis!r} twice")
        pairs[axis] = size
    # Sorted so that {"h": 2, "w": 3} and (("w", 3), ("h", 2)) give equal records.
    return tuple(sorted(pairs.items()))


def _key_item(item: object) -> object:
    if type(item) is int or item is None or item is Ellipsis:
        return item
    if type(item) is slice:
        parts: tuple[object, ...] = (item.start, item.stop, item.step)
        if not all(v is None or type(v) is int for v in parts):
            parts = tuple(None if v is None else _slice_bound(v) for v in parts)
            item = slice(*parts)
        if parts[2] == 0:
            raise _Bad(ValueError, "slice step must not be zero")
        return item
    return _as_int(item)


def _slice_bound(value: object) -> int:
    """A slice's start, stop or step: an int, or anything Python's own slicing takes
    (``__index__``: NumPy integers, a single-element integer tensor), never a bool."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise _Bad
    try:
        return operator.index(value)  # type: ignore[arg-type]  # checked: it has __index__
    except TypeError:
        raise _Bad from None


def _key(value: object) -> object:
    items = value if type(value) is tuple else (value,)
    try:
        key = tuple(map(_key_item, items))
    except _Bad as bad:
        if bad.kind is TypeError:
            bad.text = "advanced indexing (bool, list or tensor keys) goes through gather"
        raise
    if key.count(Ellipsis) > 1:
        raise _Bad(ValueError, "may contain Ellipsis at most once")
    return key


def _hashable_key(key: tuple[object, ...]) -> Hashable:
    return tuple((k.start, k.stop, k.step) if isinstance(k, slice) else k for k in key)


# --- field kinds -------------------------------------------------------------------------------

_INT = "an int"
_AXES = "an int, a tuple of ints or None"


def _field(
    name: str,
    expected: str,
    validator: _Validator,
    default: object = _REQUIRED,
    hashable: Callable[[Any], Hashable] | None = None,
) -> FieldSpec:
    """A FieldSpec; leaving out ``default`` makes the field required."""
    required = default is _REQUIRED
    return FieldSpec(name, expected, validator, None if required else default, required, hashable)


_REDUCE_AXIS: Final = _field("axis", _AXES, _axes(optional=True), None)
_KEEPDIMS: Final = _field("keepdims", "a bool", _bool, False)
_ACCUMULATOR: Final = _field("accumulator_dtype", "a conveyor DType or None", _dtype, None)
_INDEX_AXIS: Final = _field("axis", "an int or None", _int(optional=True), None)
_SORT_AXIS: Final = _field("axis", _INT, _int(), -1)
_INDEXED_AXIS: Final = _field("axis", _INT, _int())
_SHAPE: Final = _field("shape", "a tuple of ints >= 0", _ints(0, wrap=True))
_STEPS = "a tuple of ints >= 1 or None"
_KEY = "a basic index (an int, slice, None, Ellipsis or a tuple of those)"

# One word list reads better than one name a line.
_NO_FIELDS = (  # noqa: SIM905
    "add sub mul elementwise_mul div pow neg abs sign recip sqrt rsqrt exp exp2 log log2 sin cos "
    "erf floor ceil round maximum minimum rem eq ne lt le logical_not relu sigmoid tanh silu "
    "softplus select clamp inv solve eigh tan sinh cosh asin acos atan asinh acosh atanh expm1 "
    "log1p"
).split()

# The schema table: dispatch name -> its fields, in the order repr and fields() list them.
_FIELDS: Final[dict[str, tuple[FieldSpec, ...]]] = {
    **{name: () for name in _NO_FIELDS},
    "reduce_sum": (_REDUCE_AXIS, _KEEPDIMS, _ACCUMULATOR),
    "reduce_prod": (_REDUCE_AXIS, _KEEPDIMS, _ACCUMULATOR),
    "reduce_max": (_REDUCE_AXIS, _KEEPDIMS),
    "reduce_min": (_REDUCE_AXIS, _KEEPDIMS),
    "matmul": (_ACCUMULATOR,),
    "argmax": (_INDEX_AXIS, _KEEPDIMS),
    "argmin": (_INDEX_AXIS, _KEEPDIMS),
    "cumsum": (_INDEX_AXIS,),
    "gather": (_INDEXED_AXIS,),
    "scatter": (_INDEXED_AXIS,),
    "scatter_add": (_INDEXED_AXIS,),
    "topk": (
        _field("k", "an int >= 0", _int(minimum=0)),
        _SORT_AXIS,
        _field("largest", "a bool", _bool, True),
    ),
    "sort": (
        _SORT_AXIS,
        _field("descending", "a bool", _bool, False),
        _field("stable", "a bool", _bool, True),
    ),
    "conv_general": (
        _field("window_strides", _STEPS, _ints(1, optional=True), None),
        _field("padding", "a tuple of (low, high) int pairs or None", _padding, None),
        _field("lhs_dilation", _STEPS, _ints(1, optional=True), None),
        _field("rhs_dilation", _STEPS, _ints(1, optional=True), None),
        _field("feature_group_count", "an int >= 1", _int(minimum=1), 1),
        _field(
            "dimension_numbers", "a tuple of three layout strings or None", _dimension_numbers, None
        ),
    ),
    "cholesky": (_field("upper", "a bool", _bool, False),),
    "qr": (_field("mode", "'reduced' or 'complete'", _choice("reduced", "complete"), "reduced"),),
    "svd": (_field("full_matrices", "a bool", _bool, True),),
    "leaky_relu": (_field("negative_slope", "a float", _float, 0.01),),
    "elu": (_field("alpha", "a float", _float, 1.0),),
    "gelu": (_field("approximate", "'none' or 'tanh'", _choice("none", "tanh"), "none"),),
    "as_strided": (
        _SHAPE,
        _field("strides", "a tuple of ints", _ints(None, wrap=True)),
        _field("offset", "an int >= 0", _int(minimum=0), 0),
    ),
    "broadcast_to": (_SHAPE,),
    "permute": (_field("axes", "a tuple of ints", _axes(wrap=True)),),
    "rearrange": (
        _field("pattern", "a str", _pattern),
        _field("sizes", "a dict or tuple of (str, int) pairs", _sizes, ()),
    ),
    "reshape": (_field("shape", "a tuple of ints >= -1", _reshape_shape),),
    "squeeze": (_field("axes", _AXES, _axes(optional=True), None),),
    "unsqueeze": (_field("axes", "an int or a tuple of ints", _axes()),),
    "view": (_field("key", _KEY, _key, hashable=_hashable_key),),
}


# --- cross-field checks ------------------------------------------------------------------------
# Each receives the record with every field already set and raises ValueError for a disagreement.


def _check_conv(operation: str, record: Any) -> None:
    # Every per-spatial-dimension field must agree on how many spatial dimensions there are.
    reference: tuple[str, int] | None = None
    if record.dimension_numbers is not None:
        reference = ("dimension_numbers", len(record.dimension_numbers[0]) - 2)
    for name in ("window_strides", "padding", "lhs_dilation", "rhs_dilation"):
        entries = getattr(record, name)
        if entries is None:
            continue
        if reference is None:
            reference = (name, len(entries))
        elif len(entries) != reference[1]:
            msg = (
                f"{operation}: option {name} has {len(entries)} entries but {reference[0]} "
                f"implies {reference[1]} spatial dimensions"
            )
            raise ValueError(msg)


def _check_as_strided(operation: str, record: Any) -> None:
    shape, strides = record.shape, record.strides
    if len(shape) != len(strides):
        msg = f"{operation}: options shape and strides differ in length: {shape!r} and {strides!r}"
        raise ValueError(msg)


def _check_rearrange(operation: str, record: Any) -> None:
    pattern = record.pattern
    named = set(pattern.replace("(", " ").replace(")", " ").replace("->", " ").split())
    for axis, _ in record.sizes:
        if axis not in named:
            msg = f"{operation}: option sizes names axis {axis!r}, which pattern {pattern!r} lacks"
            raise ValueError(msg)


_CHECKS: Final[dict[str, Callable[[str, Any], None]]] = {
    "conv_general": _check_conv,
    "as_strided": _check_as_strided,
    "rearrange": _check_rearrange,
}

# Every field name of every schema. The record has one slot per name, so that reading a field
# is a plain slot read; a schema's fields are set, the others stay unset and read as missing.
_ALL_FIELDS: Final = tuple(sorted({spec.name for specs in _FIELDS.values() for spec in specs}))


class _Schema(NamedTuple):
    # A tuple so that the constructor unpacks what it needs in one step.
    rows: tuple[tuple[str, _Validator, object, Callable[[object, object], None]], ...]
    check: Callable[[str, Any], None] | None
    specs: Mapping[str, FieldSpec]
    values: Callable[[Any], tuple[Any, ...]]  # a record's field values, in schema order
    hashable: tuple[tuple[int, Callable[[Any], Hashable]], ...]  # by position in rows


@final
class OperationExecutionOptions:
    """The validated non-tensor parameters of one call, bound to its dispatch name.

    ``OperationExecutionOptions("reduce_sum", axis=(0,), accumulator_dtype=cv.float64)`` reads
    back ``opts.name`` and every schema field as an attribute, defaults filled in. Records are
    frozen and compare and hash by name and values, so plans and caches can key on them.

    Raises:
        TypeError: ``name`` is not a str, a field is unknown or missing, or a value has the wrong
            type (a bool where an int is expected, an array where a scalar is expected, ...).
        NotImplementedError: ``name`` is not a dispatch name.
        ValueError: a value has the right type but is out of range (``k=-1``, repeated axes,
            two ``-1`` extents in a reshape, ...).
    """

    __slots__ = ("_hash", "name", *_ALL_FIELDS)

    name: str
    _hash: int

    def __init__(self, name: str, /, **fields: object) -> None:
        try:
            rows, check, _, _, _ = _SCHEMAS[name]
        except (KeyError, TypeError):
            raise _name_refusal(name) from None
        _set_name(self, name)
        given = 0
        for key, validator, default, set_slot in rows:
            if key in fields:
                value = fields[key]
                try:
                    set_slot(self, validator(value))
                except _Bad as bad:
                    raise _refusal(name, _SCHEMAS[name].specs[key], value, bad) from None
                given += 1
            elif default is _REQUIRED:
                _refuse_fields(name, fields)
            else:
                set_slot(self, default)
        if given != len(fields):
            _refuse_fields(name, fields)
        if check is not None:
            check(name, self)

    def __getattr__(self, attr: str) -> Any:
        # Reached only when a slot is unset: a field of another schema, or a misspelling.
        if attr.startswith("_") or attr == "name":
            raise AttributeError(attr)
        fields = ", ".join(_SCHEMAS[self.name].specs) or "none"
        msg = f"{self.name} options have no field {attr!r}; fields: {fields}"
        raise AttributeError(msg)

    def __setattr__(self, attr: str, value: object) -> NoReturn:
        msg = f"OperationExecutionOptions is frozen: cannot set {attr!r}; use replace()"
        raise AttributeError(msg)

    def __delattr__(self, attr: str) -> NoReturn:
        msg = f"OperationExecutionOptions is frozen: cannot delete {attr!r}"
        raise AttributeError(msg)

    def fields(self) -> Mapping[str, Any]:
        """Every field and its value (defaults included), in schema order, read-only."""
        schema = _SCHEMAS[self.name]
        return MappingProxyType(dict(zip(schema.specs, schema.values(self), strict=True)))

    def replace(self, **changes: object) -> OperationExecutionOptions:
        """A validated copy with ``changes`` applied, as ``attrs.evolve`` does for records."""
        return OperationExecutionOptions(self.name, **{**self.fields(), **changes})

    def __eq__(self, other: object) -> bool:
        if type(other) is not OperationExecutionOptions:
            return NotImplemented
        if self.name != other.name:
            return False
        values = _SCHEMAS[self.name].values  # same name, same schema
        return bool(values(self) == values(other))

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            schema = _SCHEMAS[self.name]
            values = schema.values(self)
            if schema.hashable:
                changed = list(values)
                for index, to_hashable in schema.hashable:
                    changed[index] = to_hashable(changed[index])
                values = tuple(changed)
            found = hash((self.name, values))
            _set_hash(self, found)
            return found

    def __repr__(self) -> str:
        parts = [repr(self.name), *(f"{k}={v!r}" for k, v in self.fields().items())]
        return f"OperationExecutionOptions({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild through the constructor: slot-state unpickling can't set a frozen record.
        return (_rebuild, (self.name, dict(self.fields())))


# The slots' own setters: the record's __setattr__ refuses, and these are faster than
# object.__setattr__ on the hot path.
_set_name = OperationExecutionOptions.__dict__["name"].__set__
_set_hash = OperationExecutionOptions.__dict__["_hash"].__set__


def _refuse_fields(name: str, fields: dict[str, object]) -> NoReturn:
    # An unknown field is reported first: it is often a misspelt required one.
    specs = _SCHEMAS[name].specs
    for key in fields:
        if key not in specs:
            msg = f"{name}: unknown option {key!r}; accepted options: {', '.join(specs) or 'none'}"
            raise TypeError(msg)
    missing = ", ".join(k for k, spec in specs.items() if spec.required and k not in fields)
    msg = f"{name}: missing required option(s) {missing}"
    raise TypeError(msg)


def _rebuild(name: str, fields: dict[str, object]) -> OperationExecutionOptions:
    return OperationExecutionOptions(name, **fields)


def _values_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    # attrgetter reads every slot in C; it returns a bare value for one name, so wrap that case.
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda record: (one(record),)
    return lambda record: ()


def _build_schema(name: str, specs: tuple[FieldSpec, ...]) -> _Schema:
    slots = OperationExecutionOptions.__dict__
    return _Schema(
        rows=tuple(
            (s.name, s.validator, _REQUIRED if s.required else s.default, slots[s.name].__set__)
            for s in specs
        ),
        check=_CHECKS.get(name),
        specs=MappingProxyType({s.name: s for s in specs}),
        values=_values_getter(tuple(s.name for s in specs)),
        hashable=tuple((i, s.hashable) for i, s in enumerate(specs) if s.hashable is not None),
    )


_SCHEMAS: Final[dict[str, _Schema]] = {name: _build_schema(name, f) for name, f in _FIELDS.items()}

SCHEMA_NAMES: Final[frozenset[str]] = frozenset(_SCHEMAS)
"""Every dispatch name that has an option schema (all planned names and the view names)."""


def _name_refusal(name: object) -> Exception:
    if not isinstance(name, str):
        msg = f"a dispatch name must be a str, got {_show(name)} ({type(name).__name__})"
        return TypeError(msg)
    import difflib  # only on this error path

    close = difflib.get_close_matches(name, _SCHEMAS, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    # NotImplementedError, as dispatch raises for a name no carrier implements.
    msg = f"{name!r} is not a dispatch name, so it has no option schema{hint}"
    return NotImplementedError(msg)


def _schema_for(name: object) -> _Schema:
    schema = _SCHEMAS.get(name) if isinstance(name, str) else None
    if schema is None:
        raise _name_refusal(name)
    return schema


def options_schema(name: str) -> Mapping[str, FieldSpec]:
    """The fields ``name`` accepts, in order (empty for names that take no options).

    Raises:
        TypeError: ``name`` is not a str.
        NotImplementedError: ``name`` is not a dispatch name.
    """
    return _schema_for(name).specs


def has_options(name: str) -> bool:
    """Whether ``name`` takes any options, so callers can skip building an empty record.

    Raises:
        TypeError: ``name`` is not a str.
        NotImplementedError: ``name`` is not a dispatch name.
    """
    return bool(_schema_for(name).specs)
