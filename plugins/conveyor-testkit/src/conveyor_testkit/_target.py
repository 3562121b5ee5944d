"""The carrier under test: resolved once per session from ``--conveyor-carrier=NAME``.

Resolution goes through the plugin host exactly as ``cv.tensor(..., carrier=NAME)`` does, then
probes what the kit can do with the class: allocate an instance (for the dispatch contract),
read its capability set, and build tensors with ``cv.tensor`` (for the oracle comparison). What
cannot be done becomes a skip reason, so a carrier the kit cannot drive is reported as skipped
with the reason instead of failing for the wrong cause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

import conveyor as cv
from conveyor import plugins
from conveyor.sdk import CONCRETE_DTYPES, CapabilitySet
from conveyor_testkit._surface import TILED, Surface, tier_classes, tiled_surface

__all__ = ["Target", "make_tensor", "resolve_target"]

_Builder = Callable[[Any, cv.DType], cv.Tensor]
# Carrier class -> how the kit builds its tensors, for classes cv.tensor cannot build alone (a
# composite needs its tiers chosen). Filled by resolve_target.
_BUILDERS: dict[type, _Builder] = {}
_COMPOSITE: Final = "evictable"


def make_tensor(cls: type[cv.Carrier], values: Any, dtype: cv.DType | None) -> cv.Tensor:
    """A ``cls`` tensor holding ``values``: ``cv.tensor``, or the composite's own builder."""
    builder = _BUILDERS.get(cls)
    if builder is not None:
        assert dtype is not None  # the kit always names the dtype
        return builder(values, dtype)
    return cv.tensor(values, dtype=dtype, carrier=cls)


# Dtypes tried, in order, to allocate a probe instance: common ones first.
_PROBE_DTYPES = (cv.float32, cv.float64, cv.int64, cv.int32, cv.bool, *CONCRETE_DTYPES)


@dataclass(frozen=True)
class Target:
    """What the kit knows about the carrier under test.

    ``skip`` is set when the kit cannot test the carrier at all (every check skips with it);
    ``oracle_skip`` when only the oracle comparison cannot run.
    """

    name: str
    cls: type[cv.Carrier]
    skip: str | None = None
    oracle_skip: str | None = None
    storage_dtype: cv.DType | None = None
    capabilities: CapabilitySet | None = None
    oracle: type[cv.Carrier] | None = None
    storable: frozenset[cv.DType] = frozenset()
    hierarchy: tuple[type[cv.Carrier], type[cv.Carrier]] | None = None
    surface: Surface | None = None
    view_skip: str | None = None  # why results of its view operations cannot be checked

    @property
    def title(self) -> str:
        text = f"{self.name!r} ({self.cls.__module__}.{self.cls.__qualname__})"
        if self.hierarchy is not None:
            primary, secondary = self.hierarchy
            text += f", hierarchy primary={primary.__name__} secondary={secondary.__name__}"
        return text

    def instance(self) -> cv.Carrier:
        """A fresh one-slot instance of the carrier under test."""
        assert self.storage_dtype is not None  # only called when skip is None
        return _allocate(self.cls, self.storage_dtype)

    def supported_names(self) -> list[str]:
        return sorted(self.capabilities.names) if self.capabilities is not None else []


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def resolve_target(name: str) -> Target:
    """Resolve ``name`` through the default plugin host and probe the class.

    Raises:
        ValueError: no carrier is registered under ``name`` (the host's message lists them).
    """
    hierarchy, surface = None, None
    kind = name.partition(":")[0].strip().lower()
    if kind == _COMPOSITE:
        cls, hierarchy = _composite(name)
    elif kind == TILED:
        cls, surface = tiled_surface(name)
        hierarchy = surface.tiers
        _BUILDERS[cls] = surface.build
    else:
        cls = plugins.host().carrier(name)
    if issubclass(cls, cv.DependentCarrier) and hierarchy is None:
        reason = (
            f"{cls.__name__} is a DependentCarrier: its capabilities and dispatch depend on the "
            f"carriers each instance composes, which the kit cannot choose; run the kit against "
            f"the carriers it composes"
        )
        return Target(name, cls, skip=reason)
    instance, failures = None, []
    storage_dtype = None
    for dtype in dict.fromkeys(_PROBE_DTYPES):
        try:
            instance = _allocate(cls, dtype)
        except Exception as exc:
            failures.append(f"{dtype.name}: {_describe(exc)}")
            continue
        storage_dtype = dtype
        break
    if instance is None:
        reason = (
            f"{cls.__name__}.allocate(1, dtype) fails for every dtype (first: {failures[0]}); "
            f"the kit needs instances it can allocate"
        )
        return Target(name, cls, skip=reason)
    capabilities = instance.operation_capabilities()
    view_skip = _view_problem(instance)
    instance.release()
    return Target(
        name,
        cls,
        oracle_skip=_oracle_problem(name, cls, storage_dtype),
        storage_dtype=storage_dtype,
        capabilities=capabilities,
        oracle=_oracle(),
        storable=frozenset(d for d in CONCRETE_DTYPES if _allocates(cls, d)),
        hierarchy=hierarchy,
        surface=surface,
        view_skip=view_skip,
    )


def _view_problem(instance: cv.Carrier) -> str | None:
    """Why the kit cannot take views through the carrier's own view operations, or ``None``
    (the dispatch contract lets a carrier refuse the view names)."""
    for name in ("view", "permute"):
        try:
            instance.dispatch_op(name)
        except NotImplementedError as exc:
            return (
                f"{type(instance).__name__} does not dispatch {name!r} ({_describe(exc)}); "
                f"results of its view operations cannot be built"
            )
    return None


def _composite(name: str) -> tuple[type[cv.Carrier], tuple[type[cv.Carrier], type[cv.Carrier]]]:
    """``evictable[:PRIMARY/SECONDARY]``: the Evictable class and the two tier classes.

    The kit builds every tensor as a hierarchy over a primary tensor (built like any tensor of
    the primary class) and a secondary of the storage class, so every check runs through it.

    Raises:
        ValueError: a tier names no registered carrier, or the spec is not ``PRIMARY/SECONDARY``.
    """
    cls = plugins.host().carrier(_COMPOSITE)
    primary, secondary = tier_classes(name, _COMPOSITE)

    def build(values: Any, dtype: cv.DType) -> cv.Tensor:
        inner = make_tensor(primary, values, dtype)
        tier = secondary.allocate(inner.carrier.size, dtype)
        composite: Any = cls  # Evictable(primary, secondary); the kit only knows it by name
        return cv.Tensor(composite(inner.carrier, tier), inner.layout)

    _BUILDERS[cls] = build
    return cls, (primary, secondary)


def _allocate(cls: type[cv.Carrier], dtype: cv.DType) -> cv.Carrier:
    """A fresh one-slot instance (through the composite's builder where there is one)."""
    if cls in _BUILDERS:
        return make_tensor(cls, np.zeros(1, dtype.numpy), dtype).carrier
    return cls.allocate(1, dtype)


def _allocates(cls: type[cv.Carrier], dtype: cv.DType) -> bool:
    try:
        _allocate(cls, dtype).release()
    except Exception:
        return False
    return True


def _oracle() -> type[cv.Carrier] | None:
    try:
        return plugins.host().carrier("generic")
    except ValueError:
        return None


def _oracle_problem(name: str, cls: type[cv.Carrier], dtype: cv.DType | None) -> str | None:
    if _oracle() is None:
        return "the Generic oracle is not available: install conveyor-generic next to the carrier"
    assert dtype is not None
    probe: Any = np.zeros(2, dtype.numpy)
    try:
        built = make_tensor(cls, probe, dtype)
        back = np.asarray(built.numpy())
    except Exception as exc:
        return (
            f"tensors cannot be built on {cls.__name__} with cv.tensor(..., carrier={name!r}) "
            f"({_describe(exc)}); the oracle comparison needs them"
        )
    if type(built.carrier) is not cls or back.shape != (2,):
        return (
            f"cv.tensor(..., carrier={name!r}) did not give a {cls.__name__} tensor of the "
            f"requested shape; the oracle comparison needs it"
        )
    return None
