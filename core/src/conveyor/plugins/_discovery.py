"""Entry-point discovery: the plugins installed in the ``conveyor.plugins`` group, imported lazily.

Scanning reads distribution metadata only; nothing is imported here. The result is sorted by
distribution and entry-point name so that loading order, conflict resolution and every listing
are the same on every machine, whatever the order of ``sys.path``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from conveyor.plugins._config import canonical_name

if TYPE_CHECKING:
    # Imported in ``scan`` at run time: importlib.metadata pulls in the email package (about a
    # third of the cost of importing this package), and only a scan needs it.
    import importlib.metadata

__all__: list[str] = []


@final
@attrs.frozen
class _Candidate:
    """One entry point of one distribution, not yet imported."""

    name: str
    distribution: str | None
    version: str | None
    #: The entry point's target, ``module`` or ``module:attribute``.
    value: str
    #: What ``load()`` imports; excluded from comparisons, which use the fields above.
    entry_point: importlib.metadata.EntryPoint = attrs.field(eq=False, repr=False)

    @property
    def label(self) -> str:
        """How messages name the plugin: entry point, and distribution when known."""
        if self.distribution is None:
            return f"plugin {self.name!r} ({self.value})"
        return f"plugin {self.name!r} of distribution {self.distribution!r}"

    @property
    def registration_name(self) -> str:
        return registration_name(self.distribution, self.name)

    def sort_key(self) -> tuple[str, str]:
        return (canonical_name(self.distribution or ""), self.name)


@final
@attrs.frozen
class _Shadowed:
    """A second entry point of one distribution with the same name but another target.

    Identical duplicates are dropped silently; this one is reported, because the distribution
    is ambiguous and only the first target found on ``sys.path`` is used.
    """

    candidate: _Candidate
    used: _Candidate


def registration_name(distribution: str | None, name: str) -> str:
    """The unique name a plugin is registered under in the pluggy manager."""
    return f"{distribution or '?'}:{name}"


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return None, None
    # A damaged dist-info may lack METADATA or its Name field; the plugin is then listed by its
    # entry point alone instead of failing the whole scan.
    metadata = dist.metadata
    name = metadata["Name"] if metadata is not None and "Name" in metadata else None
    return (str(name) if name else None), dist.version


def scan(group: str) -> tuple[list[_Candidate], list[_Shadowed]]:
    """The group's entry points, de-duplicated and sorted, plus the ambiguous duplicates.

    The standard library already drops a distribution found twice on ``sys.path``; an editable
    install can still list one entry point twice (metadata in both the source tree and
    site-packages), so identical (distribution, name, target) triples are merged here.
    """
    import importlib.metadata

    seen: dict[tuple[str, str], _Candidate] = {}
    shadowed: list[_Shadowed] = []
    for entry_point in importlib.metadata.entry_points(group=group):
        distribution, version = _distribution_of(entry_point)
        candidate = _Candidate(
            name=entry_point.name,
            distribution=distribution,
            version=version,
            value=entry_point.value,
            entry_point=entry_point,
        )
        key = (canonical_name(distribution or ""), entry_point.name)
        first = seen.get(key)
        if first is None:
            seen[key] = candidate
        elif first.value != candidate.value:
            shadowed.append(_Shadowed(candidate, first))
    candidates = sorted(seen.values(), key=_Candidate.sort_key)
    return candidates, sorted(shadowed, key=lambda s: s.candidate.sort_key())
