"""Host configuration: allow/block lists, strict mode and carrier preferences (arguments or env).

A host reads its options once, when it is created: an explicit ``PluginHost`` argument wins over
the matching environment variable, and every option remembers where it came from so that a
message can name the option that disabled a plugin ("disabled by CONVEYOR_DISABLE_PLUGINS=...").
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

__all__ = ["ENVIRONMENT_VARIABLES", "canonical_name"]

#: Every environment variable the plugin host reads. The test suite refuses to start when one is
#: set, and ``conveyor doctor`` reports them; keep this the single list.
ENVIRONMENT_VARIABLES: Final = (
    "CONVEYOR_PLUGINS",
    "CONVEYOR_DISABLE_PLUGINS",
    "CONVEYOR_STRICT_PLUGINS",
    "CONVEYOR_PREFER",
    "CONVEYOR_PLUGIN_IMPORT_TIMEOUT",
    "CONVEYOR_PLUGIN_IMPORT_PROBE",
)

_ALLOW_VAR, _BLOCK_VAR, _STRICT_VAR, _PREFER_VAR, _TIMEOUT_VAR, _PROBE_VAR = ENVIRONMENT_VARIABLES
#: Seconds one plugin's import may take before it is abandoned and marked broken. Generous: an
#: import needing 2 s of CPU (conveyor-dask, with dask) took 14 s on a 2-core machine at load 18,
#: and cutting off a healthy plugin is worse than waiting on a hung one.
DEFAULT_IMPORT_TIMEOUT: Final = 60.0

#: What CONVEYOR_PREFER / prefer= may name: a registered carrier name, and a distribution name
#: as PEP 508 allows it (so ``cpu=a=b`` is refused rather than read as distribution ``a=b``).
# Patterns, not compiled ones: re compiles (and caches) each on first use, not at every import.
_CARRIER: Final = r"[a-z][a-z0-9_]*"
_DISTRIBUTION: Final = r"(?i)[a-z0-9]([a-z0-9._-]*[a-z0-9])?"

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def canonical_name(name: str) -> str:
    """Normalise a plugin or distribution name the way packaging does (PEP 503).

    ``Conveyor_Generic``, ``conveyor.generic`` and ``conveyor-generic`` all name the same
    distribution, so lists and preferences compare canonical forms.
    """
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


@attrs.frozen
class _Selection:
    """One allow- or block-list: canonical names, or ``None`` when the option is not set."""

    names: frozenset[str] | None
    #: How to name the option in messages, e.g. ``CONVEYOR_PLUGINS='a,b'``.
    source: str

    def matches(self, *names: str | None) -> str | None:
        """The first of ``names`` on the list (as given), or ``None``."""
        if self.names is None:
            return None
        for name in names:
            if name is not None and canonical_name(name) in self.names:
                return name
        return None


# The argument checks below take ``object``: they validate what a caller actually passed, which
# the annotations of ``PluginHost`` cannot guarantee at run time.


def _names_from_argument(option: str, value: object) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        msg = (
            f"PluginHost({option}=...): expected a collection of plugin names, got {value!r} "
            f"({type(value).__name__}); pass a list such as [{value!r}]"
        )
        raise TypeError(msg)
    names: list[str] = []
    for item in value:
        if not isinstance(item, str):
            msg = (
                f"PluginHost({option}=...): plugin names are strings, got {item!r} "
                f"({type(item).__name__})"
            )
            raise TypeError(msg)
        names.append(item)
    return frozenset(canonical_name(n) for n in names if n.strip())


def _selection(
    option: str, variable: str, value: Iterable[str] | None, environ: Mapping[str, str]
) -> _Selection:
    if value is not None:
        names = _names_from_argument(option, value)
        return _Selection(names, f"PluginHost({option}={sorted(names)!r})")
    raw = environ.get(variable)
    if raw is None:
        return _Selection(None, f"{variable} (unset)")
    # An empty string is a real value: for the allow-list it means "load no plugin".
    names = frozenset(canonical_name(n) for n in raw.split(",") if n.strip())
    return _Selection(names, f"{variable}={raw!r}")


def _switch(
    option: str, variable: str, meaning: str, value: object, environ: Mapping[str, str]
) -> bool:
    """An on/off option: the argument when given, else its variable (unset: off).

    ``meaning`` names the two settings in the message for a malformed variable.
    """
    if value is not None:
        if not isinstance(value, bool):
            msg = f"PluginHost({option}=...): expected True or False, got {value!r}"
            raise TypeError(msg)
        return value
    raw = environ.get(variable, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    msg = f"{variable}={raw!r} is not a switch; set it to {meaning}"
    raise ValueError(msg)


def _import_timeout(value: object, environ: Mapping[str, str]) -> tuple[float, str]:
    """The import time limit in seconds and how to name its source in messages."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = f"PluginHost(import_timeout=...): expected seconds, got {value!r}"
            raise TypeError(msg)
        if not 0 < value < float("inf"):
            msg = f"PluginHost(import_timeout=...): expected seconds > 0, got {value!r}"
            raise ValueError(msg)
        return float(value), f"PluginHost(import_timeout={value!r})"
    raw = environ.get(_TIMEOUT_VAR, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT, f"{_TIMEOUT_VAR} (unset, default {DEFAULT_IMPORT_TIMEOUT:g})"
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        msg = f"{_TIMEOUT_VAR}={raw!r} is not a number of seconds > 0; set it to e.g. 30"
        raise ValueError(msg)
    return seconds, f"{_TIMEOUT_VAR}={raw!r}"


def _prefer(value: object, environ: Mapping[str, str]) -> dict[str, str]:
    pairs: list[tuple[str, str]] = []
    source, example = "PluginHost(prefer=...)", "prefer={'cpu': 'conveyor-generic'}"
    if value is not None:
        if not isinstance(value, Mapping):
            msg = (
                f"PluginHost(prefer=...): expected a mapping of carrier name to distribution, "
                f"got {value!r} ({type(value).__name__}); e.g. prefer={{'cpu': 'conveyor-generic'}}"
            )
            raise TypeError(msg)
        for carrier, distribution in value.items():
            if not isinstance(carrier, str) or not isinstance(distribution, str):
                msg = (
                    f"PluginHost(prefer=...): names are strings, got {carrier!r}: {distribution!r}"
                )
                raise TypeError(msg)
            pairs.append((carrier, distribution))
    else:
        raw = environ.get(_PREFER_VAR, "")
        source, example = f"{_PREFER_VAR}={raw!r}", f"{_PREFER_VAR}=cpu=conveyor-generic"
        for item in raw.split(","):
            if not item.strip():
                continue
            carrier, sep, distribution = item.partition("=")
            if not sep or not carrier.strip() or not distribution.strip():
                msg = (
                    f"{_PREFER_VAR}={raw!r}: {item.strip()!r} is not carrier=distribution; "
                    f"write e.g. {_PREFER_VAR}=cpu=conveyor-generic"
                )
                raise ValueError(msg)
            pairs.append((carrier, distribution))
    for carrier, distribution in pairs:
        if re.fullmatch(_CARRIER, carrier.strip().lower()) is None:
            msg = (
                f"{source}: {carrier.strip()!r} is not a carrier name (a lower-case "
                f"identifier such as 'cpu'); write e.g. {example}"
            )
            raise ValueError(msg)
        if re.fullmatch(_DISTRIBUTION, distribution.strip()) is None:
            msg = (
                f"{source}: {distribution.strip()!r} is not a distribution name (letters, "
                f"digits and . _ -, as pip spells it); write e.g. {example}"
            )
            raise ValueError(msg)
    return {c.strip().lower(): canonical_name(d) for c, d in pairs}


@attrs.frozen
class _HostConfig:
    """The options one host was created with; immutable so a refresh cannot change them."""

    allow: _Selection
    block: _Selection
    strict: bool
    #: Canonical carrier name -> canonical distribution name chosen by the user.
    prefer: Mapping[str, str]
    prefer_source: str
    #: Seconds one plugin's import may take; and how to name where that came from.
    import_timeout: float
    import_timeout_source: str
    #: Whether each import is first probed in a child process killed at the time limit.
    probe_imports: bool = False

    @classmethod
    def create(
        cls,
        *,
        allow: Iterable[str] | None,
        block: Iterable[str] | None,
        strict: bool | None,
        prefer: Mapping[str, str] | None,
        import_timeout: float | None = None,
        probe_imports: bool | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> _HostConfig:
        """Combine arguments with the environment; raises on malformed values, naming them."""
        env = os.environ if environ is None else environ
        prefer_source = "PluginHost(prefer=...)" if prefer is not None else _PREFER_VAR
        timeout, timeout_source = _import_timeout(import_timeout, env)
        return cls(
            allow=_selection("allow", _ALLOW_VAR, allow, env),
            block=_selection("block", _BLOCK_VAR, block, env),
            strict=_switch("strict", _STRICT_VAR, "1 (strict) or 0 (lenient)", strict, env),
            prefer=_prefer(prefer, env),
            prefer_source=prefer_source,
            import_timeout=timeout,
            import_timeout_source=timeout_source,
            probe_imports=_switch(
                "probe_imports", _PROBE_VAR, "1 (probe) or 0 (import directly)", probe_imports, env
            ),
        )

    def exclusion(self, name: str, distribution: str | None) -> str | None:
        """Why the plugin must not be imported, naming the option; ``None`` if it may load.

        The block-list wins over the allow-list: blocking is how a user silences a broken
        plugin, and that must work whatever else is configured.
        """
        blocked = self.block.matches(name, distribution)
        if blocked is not None:
            return (
                f"disabled by {self.block.source}, which names {blocked!r}; remove it from "
                f"there to load the plugin"
            )
        if self.allow.names is not None and self.allow.matches(name, distribution) is None:
            if not self.allow.names:
                return f"disabled by {self.allow.source}: an empty allow-list loads no plugin"
            return (
                f"disabled by {self.allow.source}: the allow-list does not name it; add "
                f"{name!r} to load it"
            )
        return None

    def unmatched(self, names: Iterable[tuple[str, str | None]]) -> list[str]:
        """Messages for allow/block entries that name no discovered plugin (likely typos)."""
        known: set[str] = set()
        for name, distribution in names:
            known.add(canonical_name(name))
            if distribution is not None:
                known.add(canonical_name(distribution))
        messages = []
        for selection in (self.allow, self.block):
            for entry in sorted((selection.names or frozenset()) - known):
                messages.append(f"{selection.source} names {entry!r}, which no plugin is called")
        return messages
