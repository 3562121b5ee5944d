"""PluginHost: discovers, loads and answers for the plugins of one process or application.

A host wraps one pluggy ``PluginManager``. Creating a host reads its options and nothing else;
the first query scans the entry points, loads every plugin in isolation and caches the result
(``refresh()`` scans again). The default host is created on first use, so ``import conveyor``
never touches installed distributions.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

import attrs
import pluggy

from conveyor.plugins import _hookspecs
from conveyor.plugins._config import _HostConfig, canonical_name
from conveyor.plugins._discovery import scan
from conveyor.plugins._load import _Observer, _Outcome, load, shadowed_outcome, unregister
from conveyor.plugins._state import (
    PluginConflictWarning,
    PluginError,
    PluginRecord,
    PluginState,
)

if TYPE_CHECKING:
    from conveyor.carrier import Carrier

__all__ = ["PluginHost", "host", "set_default_host"]

_DEFAULT_GROUP: Final = "conveyor.plugins"
#: States that strict mode treats as failures. ``unavailable`` and ``disabled`` are expected.
_FAILED: Final = frozenset({PluginState.BROKEN, PluginState.INCOMPATIBLE})


@attrs.frozen
class _Discovery:
    """Everything one scan found; replaced as a whole so readers never see half a refresh."""

    outcomes: tuple[_Outcome, ...]
    #: Registered name -> class, after conflict resolution, sorted by name.
    carriers: Mapping[str, type[Carrier]]
    #: The record of the plugin providing each carrier in ``carriers``.
    providers: Mapping[str, PluginRecord]
    #: Carrier name -> conflict message, for names several plugins claim.
    conflicts: Mapping[str, str]
    #: Messages about the configuration itself (allow/block entries matching nothing).
    notes: tuple[str, ...]
    #: Observers this scan installed into ``conveyor.profiling``.
    installed: tuple[_Observer, ...]
    #: One remover per installed observer (``add_observer`` returns it), called on refresh.
    removers: tuple[Callable[[], None], ...]
    manager: pluggy.PluginManager = attrs.field(eq=False, repr=False)

    @property
    def records(self) -> tuple[PluginRecord, ...]:
        return tuple(outcome.record for outcome in self.outcomes)

    def contributions(self, hook: str) -> tuple[object, ...]:
        return tuple(
            item
            for outcome in self.outcomes
            if outcome.record.state is PluginState.LOADED
            for item in outcome.contributions.get(hook, ())
        )

    def failure(self) -> PluginError | None:
        """The strict-mode error for the first broken or incompatible plugin, if any."""
        for outcome in self.outcomes:
            record = outcome.record
            if record.state in _FAILED:
                msg = f"{record.error} (strict plugin mode is on)"
                error = PluginError(
                    msg, distribution=record.distribution, entry_point=record.name, hook=record.hook
                )
                error.__cause__ = outcome.cause
                return error
        return None


def _conflict_message(name: str, claims: list[_Outcome], winner: _Outcome, reason: str) -> str:
    who = ", ".join(
        f"{o.record.distribution or '?'} (plugin {o.record.name!r}, "
        f"{o.carriers[name].__module__}.{o.carriers[name].__qualname__})"
        for o in claims
    )
    return (
        f"carrier name {name!r} is claimed by {who}; using {winner.record.distribution or '?'} "
        f"({reason}); choose with CONVEYOR_PREFER={name}=<distribution> or "
        f"PluginHost(prefer={{{name!r}: <distribution>}})"
    )


def _resolve(
    outcomes: list[_Outcome], config: _HostConfig
) -> tuple[dict[str, type[Carrier]], dict[str, PluginRecord], dict[str, str]]:
    """Pick one class per carrier name, deterministically, and record every conflict.

    A user's explicit preference wins; otherwise the lexicographically first distribution
    (then entry point) name. Both claimants' records get the message, and the host emits a
    ``PluginConflictWarning`` for it: a conflict is never resolved silently.
    """
    claims: dict[str, list[_Outcome]] = {}
    for outcome in outcomes:
        if outcome.record.state is PluginState.LOADED:
            for name in outcome.carriers:
                claims.setdefault(name, []).append(outcome)
    carriers: dict[str, type[Carrier]] = {}
    providers: dict[str, PluginRecord] = {}
    messages: dict[int, list[str]] = {}
    conflicts: dict[str, str] = {}
    for name in sorted(claims):
        candidates = sorted(
            claims[name],
            key=lambda o: (canonical_name(o.record.distribution or ""), o.record.name),
        )
        winner = candidates[0]
        if len({id(o.carriers[name]) for o in candidates}) > 1:
            preferred = config.prefer.get(name)
            chosen = [
                o
                for o in candidates
                if preferred is not None
                and canonical_name(o.record.distribution or "") == preferred
            ]
            if chosen:
                winner = chosen[0]
                reason = f"preferred by {config.prefer_source}"
            elif preferred is not None:
                reason = (
                    f"{config.prefer_source} prefers {preferred!r}, which does not provide it; "
                    f"fell back to the first distribution by name"
                )
            else:
                reason = "first distribution by name"
            message = _conflict_message(name, candidates, winner, reason)
            conflicts[name] = message
            for outcome in candidates:
                messages.setdefault(id(outcome), []).append(message)
        carriers[name] = winner.carriers[name]
        providers[name] = winner.record
    for index, outcome in enumerate(outcomes):
        if id(outcome) in messages:
            record = attrs.evolve(outcome.record, conflicts=tuple(messages[id(outcome)]))
            outcomes[index] = attrs.evolve(outcome, record=record)
            for name, provider in providers.items():
                if provider is outcome.record:
                    providers[name] = record
    return carriers, providers, conflicts


def _install_observers(
    manager: pluggy.PluginManager, outcomes: list[_Outcome]
) -> tuple[tuple[_Observer, ...], tuple[Callable[[], None], ...]]:
    """Register loaded plugins' observers with ``conveyor.profiling``; a missing API breaks them.

    Returns the installed observers and their removers.
    """
    installed: list[_Observer] = []
    removers: list[Callable[[], None]] = []
    for index, outcome in enumerate(outcomes):
        if outcome.record.state is not PluginState.LOADED or not outcome.observers:
            continue
        # Imported only when some plugin has observers, so other processes never pay for it.
        try:
            from conveyor.profiling import add_observer
        except ImportError as exc:
            msg = (
                f"{outcome.record.label}: hook conveyor_operation_observers: this conveyor-core "
                f"has no conveyor.profiling.add_observer ({exc}), so observers cannot be "
                f"installed; upgrade conveyor-core or block the plugin with "
                f"CONVEYOR_DISABLE_PLUGINS={outcome.record.name}"
            )
            record = attrs.evolve(
                outcome.record,
                state=PluginState.BROKEN,
                carriers=(),
                error=msg,
                hook="conveyor_operation_observers",
            )
            outcomes[index] = _Outcome(record, cause=exc)
            unregister(manager, outcome.record)
            continue
        for observer in outcome.observers:
            removers.append(add_observer(observer))
            installed.append(observer)
    return tuple(installed), tuple(removers)


@final
class PluginHost:
    """Discovers the ``conveyor.plugins`` entry points and holds what the plugins contribute.

    Options default to the environment (``CONVEYOR_PLUGINS``, ``CONVEYOR_DISABLE_PLUGINS``,
    ``CONVEYOR_STRICT_PLUGINS``, ``CONVEYOR_PREFER``); an argument wins over its variable.
    ``allow``/``block`` name entry points or distributions and are applied before anything is
    imported; ``allow=[]`` loads no plugin. ``prefer`` maps a carrier name to the distribution
    that should provide it when several do.

    The host is mutable only through its cache: it scans on first query and again on
    ``refresh()``. It is safe to share between threads.

    Raises:
        TypeError, ValueError: a malformed option, naming the argument or variable.
    """

    __slots__ = ("_config", "_discovery", "_group", "_lock")

    def __init__(
        self,
        *,
        allow: Iterable[str] | None = None,
        block: Iterable[str] | None = None,
        strict: bool | None = None,
        prefer: Mapping[str, str] | None = None,
        group: str = _DEFAULT_GROUP,
    ) -> None:
        self._config = _HostConfig.create(allow=allow, block=block, strict=strict, prefer=prefer)
        self._group = group
        self._lock = threading.RLock()
        self._discovery: _Discovery | None = None

    def __repr__(self) -> str:
        scanned = "not scanned" if self._discovery is None else f"{len(self.plugins())} plugins"
        return f"<PluginHost group={self._group!r} strict={self.strict}: {scanned}>"

    @property
    def strict(self) -> bool:
        """Whether a broken or incompatible plugin makes queries raise ``PluginError``."""
        return self._config.strict

    @property
    def group(self) -> str:
        """The entry-point group this host scans."""
        return self._group

    def _scan(self, depth: int = 0) -> _Discovery:
        """The cached discovery, scanning first if needed.

        ``depth`` counts the private frames between the public method and this one, so that
        conflict warnings point at the caller's line.
        """
        found = self._discovery
        if found is not None:
            return found
        with self._lock:
            found = self._discovery
            if found is not None:
                return found
            found = self._discovery = self._load_all()
        for message in found.conflicts.values():
            warnings.warn(message, PluginConflictWarning, stacklevel=3 + depth)
        return found

    def _load_all(self) -> _Discovery:
        manager = pluggy.PluginManager("conveyor")
        manager.add_hookspecs(_hookspecs)
        candidates, shadowed = scan(self._group)
        outcomes = [load(manager, candidate, self._config) for candidate in candidates]
        outcomes.extend(shadowed_outcome(s.candidate, s.used) for s in shadowed)
        installed, removers = _install_observers(manager, outcomes)
        carriers, providers, conflicts = _resolve(outcomes, self._config)
        named = [(c.name, c.distribution) for c in (*candidates, *(s.candidate for s in shadowed))]
        return _Discovery(
            outcomes=tuple(outcomes),
            carriers=MappingProxyType(carriers),
            providers=MappingProxyType(providers),
            conflicts=MappingProxyType(conflicts),
            notes=tuple(self._config.unmatched(named)),
            installed=installed,
            removers=removers,
            manager=manager,
        )

    def _require(self) -> _Discovery:
        """The discovery, raising ``PluginError`` in strict mode if a plugin failed."""
        found = self._scan(depth=1)
        if self._config.strict:
            error = found.failure()
            if error is not None:
                raise error
        return found

    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every discovered plugin's record, sorted by distribution and entry point.

        Never raises for a failed plugin, even in strict mode: this is the diagnostic view that
        ``conveyor plugins`` prints.
        """
        return self._scan().records

    def notes(self) -> tuple[str, ...]:
        """Configuration problems found by the last scan, e.g. a block entry matching nothing."""
        return self._scan().notes

    def conflicts(self) -> Mapping[str, str]:
        """Carrier name -> message, for every name more than one loaded plugin registers.

        The message names every claimant, the winner and why it won; never raises.
        """
        return self._scan().conflicts

    def carriers(self) -> Mapping[str, type[Carrier]]:
        """Registered carrier name -> class, for every loaded plugin, conflicts resolved."""
        return self._require().carriers

    def carrier(self, name: str) -> type[Carrier]:
        """The carrier class registered as ``name`` (case and surrounding space ignored).

        Raises:
            TypeError: ``name`` is not a string.
            ValueError: no loaded plugin registers the name; the message lists known names.
            PluginError: strict mode is on and a plugin failed.
        """
        given: object = name  # checked at run time too: callers pass user input through
        if not isinstance(given, str):
            msg = f"carrier names are strings such as 'cpu', got {name!r} ({type(name).__name__})"
            raise TypeError(msg)
        found = self._require()
        cls = found.carriers.get(name.strip().lower())
        if cls is not None:
            return cls
        known = ", ".join(repr(n) for n in found.carriers) or "none"
        missing = [r for r in found.records if r.state is not PluginState.LOADED]
        if missing:
            listed = ", ".join(f"{r.name} ({r.state})" for r in missing)
            hint = f"{len(missing)} plugin(s) did not load: {listed}; run `conveyor plugins`"
        else:
            hint = "install the distribution that provides it"
        msg = f"unknown carrier {name!r}; known carriers: {known}; {hint}"
        raise ValueError(msg)

    def provider(self, name: str) -> PluginRecord:
        """The record of the plugin whose class is registered as ``name`` (see ``carrier``)."""
        self.carrier(name)
        return self._scan().providers[name.strip().lower()]

    def operation_definitions(self) -> tuple[object, ...]:
        """Operation definitions contributed by loaded plugins, in plugin order."""
        return self._require().contributions("conveyor_operation_definitions")

    def kernel_packs(self) -> tuple[object, ...]:
        """Kernel packs contributed by loaded plugins, in plugin order."""
        return self._require().contributions("conveyor_kernel_packs")

    def move_routes(self) -> tuple[object, ...]:
        """Movement routes contributed by loaded plugins, in plugin order."""
        return self._require().contributions("conveyor_move_routes")

    def observers(self) -> tuple[_Observer, ...]:
        """Operation observers this host installed into ``conveyor.profiling``."""
        return self._require().installed

    def refresh(self) -> None:
        """Forget the cached scan, remove installed observers and scan again now.

        Picks up distributions installed or removed since the last scan. Modules already
        imported are not re-imported. Like ``plugins()``, it does not raise in strict mode;
        the next query does.
        """
        with self._lock:
            previous, self._discovery = self._discovery, None
            for remove in () if previous is None else previous.removers:
                remove()
            # importlib.metadata caches directory listings; a fresh pip install must be seen.
            importlib.invalidate_caches()
            self._scan()


_default: PluginHost | None = None
_default_lock = threading.Lock()


def host() -> PluginHost:
    """The process's default host, created on first call from the environment."""
    global _default
    found = _default
    if found is None:
        with _default_lock:
            if _default is None:
                _default = PluginHost()
            found = _default
    return found


def set_default_host(new: PluginHost | None) -> PluginHost | None:
    """Replace the default host (``None``: create a fresh one on next use); returns the old one.

    For host applications that configure plugins in code, and for tests that need isolation.
    """
    global _default
    given: object = new
    if given is not None and not isinstance(given, PluginHost):
        msg = f"set_default_host expects a PluginHost or None, got {new!r} ({type(new).__name__})"
        raise TypeError(msg)
    with _default_lock:
        previous, _default = _default, new
    return previous
