"""Dtype descriptors: concrete storage dtypes, abstract categories and the promotion lattice.

Descriptors are singletons compared with ``is``: every lookup, copy and unpickle returns the
same object, so capability tables and plan caches can key on them cheaply. NumPy (and
``ml_dtypes`` for bfloat16) is imported only when a NumPy dtype is first asked for, which keeps
``import conveyor`` light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CATEGORIES",
    "CONCRETE_DTYPES",
    "DType",
    "any_dtype",
    "bfloat16",
    "bool_",
    "complex64",
    "complex128",
    "complex_floating",
    "default_float",
    "default_int",
    "dtype",
    "float16",
    "float32",
    "float64",
    "floating",
    "from_numpy",
    "int8",
    "int16",
    "int32",
    "int64",
    "integer",
    "is_subtype_of",
    "numeric",
    "promote_types",
    "signed_integer",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unsigned_integer",
]

# The kinds a concrete dtype can have, in promotion order (a later kind absorbs an earlier one).
_KIND_ORDER: Final = ("bool", "unsigned_integer", "signed_integer", "floating", "complex_floating")

_REGISTRY: dict[str, DType] = {}


@final
class DType:
    """One dtype: a concrete storage type or an abstract category.

    Categories (``numeric``, ``floating``, ...) describe sets of concrete dtypes. They exist so
    that operation tables and generic code can name a family, but they can never be storage and
    central planning refuses them with ``TypeError``.
    """

    __slots__ = (
        "_members",
        "_numpy",
        "is_abstract",
        "is_differentiable",
        "itemsize",
        "kind",
        "name",
    )

    name: str
    kind: str
    itemsize: int
    is_abstract: bool
    #: Floating and complex dtypes carry gradients; the rest never do. A plain attribute
    #: because autograd reads it for every output of every recorded operation.
    is_differentiable: bool
    _members: frozenset[str]
    _numpy: np.dtype[Any] | None

    def __init__(self, name: str, kind: str, itemsize: int, members: frozenset[str] = frozenset()):
        if name in _REGISTRY:
            msg = f"dtype {name!r} already exists; use conveyor.dtype({name!r})"
            raise ValueError(msg)
        self.name = name
        self.kind = kind
        self.itemsize = itemsize
        self.is_abstract = kind == "category"
        self.is_differentiable = kind in ("floating", "complex_floating")
        self._members = members if self.is_abstract else frozenset({name})
        self._numpy = None
        _REGISTRY[name] = self

    def __repr__(self) -> str:
        return f"conveyor.{self.name}"

    def __eq__(self, other: object) -> bool:
        """Identity among descriptors; a NumPy dtype, scalar type or name compares by what it
        stores (``t.dtype == np.float32``, as NumPy and PyTorch users write it)."""
        if other is self:
            return True
        if type(other) is DType or other is None or self.is_abstract:
            return False
        numpy_type = isinstance(other, type) and other.__module__ == "numpy"  # np.float32
        if not (isinstance(other, str) or numpy_type or "numpy" in type(other).__module__):
            return NotImplemented
        try:
            return dtype(other) is self
        except TypeError:
            return False

    # Descriptors are singletons and hash by identity, as before __eq__ learnt NumPy's names
    # (NumPy's own dtypes equal their names while hashing differently, too).
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Unpickling goes through the registry so that identity survives the round trip.
        return (dtype, (self.name,))

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: object) -> DType:
        return self

    @property
    def is_floating(self) -> bool:
        return self.kind == "floating"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex_floating"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("signed_integer", "unsigned_integer")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def numpy(self) -> np.dtype[Any]:
        """The NumPy dtype that stores this dtype (``TypeError`` for a category)."""
        if self._numpy is None:
            if self.is_abstract:
                msg = f"{self.name} is an abstract dtype category and has no storage dtype"
                raise TypeError(msg)
            self._numpy = _numpy_dtype(self.name)
        return self._numpy

    def is_subtype_of(self, other: DType) -> bool:
        """True when every dtype this one stands for is also covered by ``other``."""
        return self._members <= other._members

    @property
    def members(self) -> tuple[DType, ...]:
        """The concrete dtypes this descriptor stands for (itself, for a concrete dtype)."""
        return tuple(d for d in CONCRETE_DTYPES if d.name in self._members)


def _numpy_dtype(name: str) -> np.dtype[Any]:
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(name)


bool_: Final = DType("bool", "bool", 1)
int8: Final = DType("int8", "signed_integer", 1)
int16: Final = DType("int16", "signed_integer", 2)
int32: Final = DType("int32", "signed_integer", 4)
int64: Final = DType("int64", "signed_integer", 8)
uint8: Final = DType("uint8", "unsigned_integer", 1)
uint16: Final = DType("uint16", "unsigned_integer", 2)
uint32: Final = DType("uint32", "unsigned_integer", 4)
uint64: Final = DType("uint64", "unsigned_integer", 8)
float16: Final = DType("float16", "floating", 2)
bfloat16: Final = DType("bfloat16", "floating", 2)
float32: Final = DType("float32", "floating", 4)
float64: Final = DType("float64", "floating", 8)
complex64: Final = DType("complex64", "complex_floating", 8)
complex128: Final = DType("complex128", "complex_floating", 16)

CONCRETE_DTYPES: Final[tuple[DType, ...]] = (
    bool_,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    float16,
    bfloat16,
    float32,
    float64,
    complex64,
    complex128,
)


def _category(name: str, kinds: tuple[str, ...]) -> DType:
    members = frozenset(d.name for d in CONCRETE_DTYPES if d.kind in kinds)
    return DType(name, "category", 0, members)


any_dtype: Final = _category("any_dtype", _KIND_ORDER)
numeric: Final = _category("numeric", _KIND_ORDER[1:])
integer: Final = _category("integer", ("signed_integer", "unsigned_integer"))
signed_integer: Final = _category("signed_integer", ("signed_integer",))
unsigned_integer: Final = _category("unsigned_integer", ("unsigned_integer",))
floating: Final = _category("floating", ("floating",))
complex_floating: Final = _category("complex_floating", ("complex_floating",))

CATEGORIES: Final[tuple[DType, ...]] = (
    any_dtype,
    numeric,
    integer,
    signed_integer,
    unsigned_integer,
    floating,
    complex_floating,
)

default_float: Final = float32
default_int: Final = int64

_BY_NUMPY: dict[Any, DType] = {}


def dtype(spec: object) -> DType:
    """Look up a descriptor by name, NumPy dtype or NumPy scalar type.

    Raises:
        TypeError: ``spec`` names no dtype Conveyor knows.
    """
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = _REGISTRY.get(spec)
        if found is not None:
            return found
    if spec is not None:  # np.dtype(None) would silently mean float64
        try:
            return from_numpy(spec)
        except TypeError:
            pass
    msg = f"no conveyor dtype for {spec!r} (of type {type(spec).__name__})"
    raise TypeError(msg)


def from_numpy(np_dtype: object) -> DType:
    """The descriptor storing ``np_dtype`` (a NumPy dtype or anything ``np.dtype`` accepts)."""
    if not _BY_NUMPY:
        # Built complete, then published in one assignment, so other threads never see a
        # half-filled table. bfloat16 is found by name below: its NumPy dtype would import
        # ml_dtypes (~0.5 s), and a bfloat16 array exists only once something imported it.
        _BY_NUMPY.update({d.numpy: d for d in CONCRETE_DTYPES if d is not bfloat16})
    import numpy as np

    try:
        key = np.dtype(np_dtype)  # type: ignore[call-overload]  # any dtype-like is allowed here
    except TypeError:
        key = None
    if key is not None and key.byteorder not in "=|":
        # Byte order is a storage detail (files, network data): '>f4' holds float32 values.
        key = key.newbyteorder("=")
    found = _BY_NUMPY.get(key)
    if found is None and key is not None and key.name == "bfloat16" and key == bfloat16.numpy:
        found = bfloat16
    if found is None:
        msg = f"NumPy dtype {np_dtype!r} has no conveyor equivalent"
        raise TypeError(msg)
    return found


def is_subtype_of(left: DType, right: DType) -> bool:
    """``left.is_subtype_of(right)`` as a function, mirroring ``np.issubdtype``."""
    return left.is_subtype_of(right)


# Mixed signed/unsigned integer promotion, from the Array API standard's table. A missing pair
# (uint64 with any signed integer) has no integer type that holds both ranges.
_MIXED_INT: Final[dict[tuple[str, str], DType]] = {
    ("uint8", "int8"): int16,
    ("uint8", "int16"): int16,
    ("uint8", "int32"): int32,
    ("uint8", "int64"): int64,
    ("uint16", "int8"): int32,
    ("uint16", "int16"): int32,
    ("uint16", "int32"): int32,
    ("uint16", "int64"): int64,
    ("uint32", "int8"): int64,
    ("uint32", "int16"): int64,
    ("uint32", "int32"): int64,
    ("uint32", "int64"): int64,
}

_FLOAT_RANK: Final = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
_FLOAT_BY_RANK: Final = {2: float32, 3: float64}
_COMPLEX_FOR_RANK: Final = {1: complex64, 2: complex64, 3: complex128}


def _promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    ka, kb = _KIND_ORDER.index(a.kind), _KIND_ORDER.index(b.kind)
    if ka > kb:
        a, b, ka, kb = b, a, kb, ka
    # From here ``b`` has the wider (or equal) kind.
    if a.kind == "bool":
        return b
    if a.kind == b.kind:
        if b.is_integer:
            return a if a.itemsize > b.itemsize else b
        if b.is_floating:
            ra, rb = _FLOAT_RANK[a.name], _FLOAT_RANK[b.name]
            # float16 with bfloat16: neither holds the other, float32 holds both (as PyTorch).
            return _FLOAT_BY_RANK[max(ra, rb, 2)] if ra == rb else (a if ra > rb else b)
        return complex128  # the only distinct complex pair
    if a.kind == "unsigned_integer" and b.kind == "signed_integer":
        mixed = _MIXED_INT.get((a.name, b.name))
        if mixed is None:
            msg = (
                f"cannot promote {a.name} with {b.name}: no integer dtype holds both ranges; "
                f"cast one operand explicitly (e.g. to int64 or float64)"
            )
            raise TypeError(msg)
        return mixed
    if b.is_floating:  # integer with float: the float operand's dtype
        return b
    # b is complex
    if a.is_integer:
        return b
    rank = max(_FLOAT_RANK[a.name], 2 if b is complex64 else 3)
    return _COMPLEX_FOR_RANK[rank]


_PROMOTION: dict[tuple[DType, DType], DType] = {}


def _require_concrete(d: object) -> None:
    if not isinstance(d, DType):
        msg = f"promote_types expects conveyor dtypes, got {d!r} ({type(d).__name__})"
        raise TypeError(msg)
    if d.is_abstract:
        msg = f"cannot promote abstract dtype category {d.name}; use a concrete dtype"
        raise TypeError(msg)


def promote_types(a: DType, b: DType) -> DType:
    """The dtype both operands convert to for a binary operation.

    Raises:
        TypeError: either side is a category, or the pair has no common dtype (uint64 with a
            signed integer); the message names the explicit cast to use.
    """
    key = (a, b)
    found = _PROMOTION.get(key) if type(a) is DType and type(b) is DType else None
    if found is None:
        _require_concrete(a)
        _require_concrete(b)
        found = _promote(a, b)
        _PROMOTION[key] = found
    return found
