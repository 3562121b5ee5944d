"""The carrier under test: resolved once per session from ``--conveyor-carrier=NAME``.

Resolution goes through the plugin host exactly as ``cv.tensor(..., carrier=NAME)`` does, then
probes what the kit can do with the class: allocate an instance (for the dispatch contract),
read its capability set, and build tensors with ``cv.tensor`` (for the oracle comparison). What
cannot be done becomes a skip reason, so a carrier the kit cannot drive is reported as skipped
with the reason instead of failing for the wrong cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import conveyor as cv
from conveyor import plugins
from conveyor.capabilities import CapabilitySet
from conveyor.dtypes import CONCRETE_DTYPES

__all__ = ["Target", "resolve_target"]

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

    @property
    def title(self) -> str:
        return f"{self.name!r} ({self.cls.__module__}.{self.cls.__qualname__})"

    def instance(self) -> cv.Carrier:
        """A fresh one-slot instance of the carrier under test."""
        assert self.storage_dtype is not None  # only called when skip is None
        return self.cls.allocate(1, self.storage_dtype)

    def supported_names(self) -> list[str]:
        return sorted(self.capabilities.names) if self.capabilities is not None else []


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def resolve_target(name: str) -> Target:
    """Resolve ``name`` through the default plugin host and probe the class.

    Raises:
        ValueError: no carrier is registered under ``name`` (the host's message lists them).
    """
    cls = plugins.host().carrier(name)
    if issubclass(cls, cv.DependentCarrier):
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
            instance = cls.allocate(1, dtype)
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
    instance.release()
    return Target(
        name,
        cls,
        oracle_skip=_oracle_problem(name, cls, storage_dtype),
        storage_dtype=storage_dtype,
        capabilities=capabilities,
        oracle=_oracle(),
        storable=frozenset(d for d in CONCRETE_DTYPES if _allocates(cls, d)),
    )


def _allocates(cls: type[cv.Carrier], dtype: cv.DType) -> bool:
    try:
        cls.allocate(1, dtype).release()
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
        built = cv.tensor(probe, dtype=dtype, carrier=name)
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
