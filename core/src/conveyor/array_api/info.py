"""The Array API inspection namespace: installed carriers are the devices."""

from __future__ import annotations

from typing import Any, final

from conveyor import plugins
from conveyor.engine.carrier import Carrier
from conveyor.engine.tensor import _resolve_carrier, get_default_carrier
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

__all__ = ["Info", "__array_namespace_info__"]

_KIND_NAMES = {
    None: ("bool", "signed_integer", "unsigned_integer", "floating", "complex_floating"),
    "bool": ("bool",),
    "signed integer": ("signed_integer",),
    "unsigned integer": ("unsigned_integer",),
    "integral": ("signed_integer", "unsigned_integer"),
    "real floating": ("floating",),
    "complex floating": ("complex_floating",),
    "numeric": ("signed_integer", "unsigned_integer", "floating", "complex_floating"),
}

# The standard's dtypes; float16 and bfloat16 are Conveyor extras outside it.
_STANDARD = (
    dtypes.bool_,
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint16,
    dtypes.uint32,
    dtypes.uint64,
    dtypes.float32,
    dtypes.float64,
    dtypes.complex64,
    dtypes.complex128,
)


@final
class Info:
    """What ``conveyor.array_api`` supports, as ``__array_namespace_info__()`` reports it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "conveyor.array_api.__array_namespace_info__()"

    def capabilities(self) -> dict[str, Any]:
        # Boolean masks and nonzero read the mask to size their result, as unique_* do.
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> type[Carrier]:
        return _resolve_carrier(get_default_carrier())

    def devices(self) -> list[type[Carrier]]:
        """The carriers arrays can be created on with ``device=`` alone.

        A carrier whose storage comes from a resource (``BlockDeviceCarrier`` needs its
        ``BlockDevice``) refuses a plain allocation with ``TypeError``, so it is not a device
        here: ``empty(1, device=d)`` works for every ``d`` listed.
        """
        return [c for c in plugins.host().carriers().values() if _allocates_plainly(c)]

    def default_dtypes(self, *, device: Any = None) -> dict[str, DType]:
        return {
            "real floating": dtypes.default_float,
            "complex floating": dtypes.complex64,
            "integral": dtypes.default_int,
            "indexing": dtypes.int64,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, DType]:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted: set[str] = set()
        for k in kinds:
            if k not in _KIND_NAMES:
                msg = f"dtypes: unknown kind {k!r}; use one of {sorted(map(str, _KIND_NAMES))}"
                raise ValueError(msg)
            wanted.update(_KIND_NAMES[k])
        return {d.name.rstrip("_"): d for d in _STANDARD if d.kind in wanted}


_PLAIN: dict[type[Carrier], bool] = {}  # per carrier class: an allocation's answer never changes


def _allocates_plainly(cls: type[Carrier]) -> bool:
    """Whether ``cls.allocate(1, dtype)`` works without further arguments."""
    found = _PLAIN.get(cls)
    if found is None:
        try:
            cls.allocate(1, dtypes.default_float).release()
        except TypeError:
            found = False
        else:
            found = True
        _PLAIN[cls] = found
    return found


def __array_namespace_info__() -> Info:  # the standard's name
    """The inspection namespace (devices, default dtypes, capabilities)."""
    return Info()
