"""PluginHost: discovers, loads and answers for the plugins of one process or application.

A host wraps one pluggy ``PluginManager``. Creating a host reads its options and nothing else;
the first query scans the entry points, loads every plugin in isolation and caches the result
(``refresh()`` scans again). The default host is created on first use, so ``import conveyor``
never touches installed distributions.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

import attrs
import pluggy

from conveyor.plugins import _hookspecs
from conveyor.plugins._config import _HostConfig, canonical_name
from conveyor.plugins._discovery import _Candidate, registration_name, scan
from conveyor.plugins._importing import in_plugin_import
from conveyor.plugins._load import (
    _Observer,
    _Outcome,
    broken_outcome,
    load,
    shadowed_outcome,
    unregister,
)
from conveyor.plugins._state import (
    PluginBrokenWarning,
    PluginConflictWarning,
    PluginError,
    PluginNamespaceWarning,
    PluginRecord,
    PluginState,
)

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier
    from conveyor.plugins._commands import Command

__all__ = ["PluginHost", "host", "set_default_host"]

_DEFAULT_GROUP: Final = "conveyor.plugins"
#: States that strict mode treats as failures. ``unavailable`` and ``disabled`` are expected.
_FAILED: Final = frozenset({PluginState.BROKEN, PluginState.INCOMPATIBLE})
#: The distributions Conveyor ships (canonical names). A carrier name one of them registers
#: stays with it unless the user prefers another distribution for that name.
SHIPPED_DISTRIBUTIONS: Final = frozenset(
    {"conveyor-generic", "conveyor-storage", "conveyor-shm", "conveyor-testkit"}
)
_ROUTES_HOOK: Final = "conveyor_move_routes"
_PACKS_HOOK: Final = "conveyor_kernel_packs"
_OBSERVERS_HOOK: Final = "conveyor_operation_observers"
_QUERY_WHILE_LOADING: Final = (
    "plugin host: a plugin queried the host (created a tensor or looked up a carrier) while "
    "being imported; plugins are still loading then, so do it when the plugin is first used "
    "instead"
)


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
    #: Entry-point name -> conflict message, for names several distributions declare.
    entry_point_conflicts: Mapping[str, str]
    #: Registration name -> the entry-point conflict messages of that plugin (kept on its
    #: record whatever state it ends in, so they survive every re-resolution).
    clashes: Mapping[str, tuple[str, ...]]
    #: Messages about the configuration itself (allow/block entries matching nothing).
    notes: tuple[str, ...]
    #: Observers this scan installed into ``conveyor.engine.profiling``.
    installed: tuple[_Observer, ...]
    #: Registration name -> removers of that plugin's installed observers (``add_observer``
    #: returns them); called on refresh, or when the plugin breaks after loading.
    removers: Mapping[str, tuple[Callable[[], None], ...]]
    #: The outcomes before conflict resolution, kept to resolve again when a plugin breaks late.
    unresolved: tuple[_Outcome, ...]
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


def _entry_point_clashes(
    candidates: Iterable[_Candidate],
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Entry-point names declared by more than one distribution, with their messages.

    Such plugins are still told apart (each is registered under its distribution), but an
    allow- or block-list entry naming the entry point selects every one of them, so blocking
    an impostor's ``generic`` would block conveyor-generic too. Returns name -> message, and
    registration name -> the messages of that plugin.
    """
    by_name: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        by_name.setdefault(candidate.name, []).append(candidate)
    messages: dict[str, str] = {}
    per_plugin: dict[str, tuple[str, ...]] = {}
    for name in sorted(by_name):
        claims = by_name[name]
        if len({canonical_name(c.distribution or "") for c in claims}) < 2:
            continue
        who = " and ".join(f"{c.distribution or '?'} ({c.value})" for c in claims)
        others = [
            c for c in claims if canonical_name(c.distribution or "") not in SHIPPED_DISTRIBUTIONS
        ]
        example = (others or claims)[-1].distribution or "<distribution>"
        message = (
            f"entry point name {name!r} is declared by {who}; an allow- or block-list entry "
            f"naming {name!r} (CONVEYOR_PLUGINS, CONVEYOR_DISABLE_PLUGINS, allow=, block=) "
            f"selects all of them; name the distribution instead, e.g. "
            f"CONVEYOR_DISABLE_PLUGINS={example}"
        )
        messages[name] = message
        for candidate in claims:
            key = candidate.registration_name
            per_plugin[key] = (*per_plugin.get(key, ()), message)
    return messages, per_plugin


def _shipped(outcome: _Outcome) -> bool:
    return canonical_name(outcome.record.distribution or "") in SHIPPED_DISTRIBUTIONS


def _break_claims(
    outcomes: list[_Outcome], claims: dict[str, list[_Outcome]], config: _HostConfig
) -> None:
    """Break every plugin that claims a name a shipped distribution registers.

    Without a preference for the name, a shipped name stays with its distribution: the other
    claimant is a plugin trying to take over ``"cpu"`` (say) and contributes nothing.
    """
    losers: dict[int, str] = {}
    for name in sorted(claims):
        owners = [o for o in claims[name] if _shipped(o)]
        if not owners or name in config.prefer:
            continue
        owner = owners[0].record
        for outcome in claims[name]:
            if _shipped(outcome) or outcome.carriers[name] is owners[0].carriers[name]:
                continue
            losers.setdefault(
                id(outcome),
                f"{outcome.record.label}: hook conveyor_carriers: carrier name {name!r} belongs "
                f"to {owner.distribution}, which ships with Conveyor, and "
                f"{outcome.record.distribution} may not take it over; rename the carrier, or "
                f"choose it with CONVEYOR_PREFER={name}={outcome.record.distribution}",
            )
    for index, outcome in enumerate(outcomes):
        message = losers.get(id(outcome))
        if message is not None:
            outcomes[index] = broken_outcome(outcome, "conveyor_carriers", message)


def _resolve(
    outcomes: list[_Outcome],
    config: _HostConfig,
    clashes: Mapping[str, tuple[str, ...]],
) -> tuple[dict[str, type[Carrier]], dict[str, PluginRecord], dict[str, str]]:
    """Pick one class per carrier name, deterministically, and record every conflict.

    A user's explicit preference wins; a name a shipped distribution registers stays with it
    (the other claimant is broken, see ``_break_claims``); otherwise the lexicographically first
    distribution (then entry point) name wins. Both claimants' records get the message, and the
    host emits a ``PluginConflictWarning`` for it: a conflict is never resolved silently.
    ``clashes`` (entry-point name conflicts, per registration name) join each record's
    conflicts after its carrier-name ones.
    """
    claims = _claims(outcomes)
    _break_claims(outcomes, claims, config)
    claims = _claims(outcomes)
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
        key = registration_name(outcome.record.distribution, outcome.record.name)
        found = (*messages.get(id(outcome), ()), *clashes.get(key, ()))
        if found != outcome.record.conflicts:
            record = attrs.evolve(outcome.record, conflicts=found)
            outcomes[index] = attrs.evolve(outcome, record=record)
            for name, provider in providers.items():
                if provider is outcome.record:
                    providers[name] = record
    return carriers, providers, conflicts


def _claims(outcomes: list[_Outcome]) -> dict[str, list[_Outcome]]:
    claims: dict[str, list[_Outcome]] = {}
    for outcome in outcomes:
        if outcome.record.state is PluginState.LOADED:
            for name in outcome.carriers:
                claims.setdefault(name, []).append(outcome)
    return claims


def _check_contributions(outcomes: list[_Outcome]) -> None:
    """Break each plugin whose move routes or kernel packs collide with earlier ones.

    Checked in load order, so the plugin that came second is the one broken, and its message
    names the plugin it collides with. Each item's own shape was checked by its hook already.
    """
    routes: dict[tuple[type, type], str] = {}
    packs: list[tuple[object, str]] = []
    for index, outcome in enumerate(outcomes):
        record = outcome.record
        mine_routes = outcome.contributions.get(_ROUTES_HOOK, ())
        mine_packs = outcome.contributions.get(_PACKS_HOOK, ())
        if record.state is not PluginState.LOADED or not (mine_routes or mine_packs):
            continue
        hook = _ROUTES_HOOK
        try:
            taken = dict(routes)
            if mine_routes:
                from conveyor.engine.move import check_contributed_route

                for route in mine_routes:
                    taken[check_contributed_route(route, taken)] = record.label
            hook = _PACKS_HOOK
            if mine_packs:
                from conveyor.engine.carrier_registry import check_contributed_pack

                for pack in mine_packs:
                    check_contributed_pack(pack, packs)  # type: ignore[arg-type]  # checked kind
        except (TypeError, ValueError) as exc:
            message = (
                f"{record.label}: hook {hook}: {exc}; fix the plugin or block it with "
                f"CONVEYOR_DISABLE_PLUGINS={record.name}"
            )
            outcomes[index] = broken_outcome(outcome, hook, message, cause=exc)
            continue
        routes = taken
        packs.extend((pack, record.label) for pack in mine_packs)


def _check_observer_api(outcomes: list[_Outcome]) -> None:
    """Break plugins with observers when this core cannot install them."""
    for index, outcome in enumerate(outcomes):
        if outcome.record.state is not PluginState.LOADED or not outcome.observers:
            continue
        # Imported only when some plugin has observers, so other processes never pay for it.
        try:
            from conveyor.engine.profiling import add_observer  # noqa: F401  # presence is the check
        except ImportError as exc:
            msg = (
                f"{outcome.record.label}: hook {_OBSERVERS_HOOK}: this conveyor-core "
                f"has no conveyor.engine.profiling.add_observer ({exc}), so observers cannot be "
                f"installed; upgrade conveyor-core or block the plugin with "
                f"CONVEYOR_DISABLE_PLUGINS={outcome.record.name}"
            )
            outcomes[index] = broken_outcome(outcome, _OBSERVERS_HOOK, msg, cause=exc)


@final
class _GuardedObserver:
    """A plugin's observer as installed: whatever it raises breaks its plugin, not the host.

    Every ``BaseException`` kind is contained, ``SystemExit`` and ``KeyboardInterrupt``
    included: the operation the observer was told about already finished, so the exception is
    the observer's, not an interrupt of the user's own work.
    """

    __slots__ = ("_failed", "observer")

    def __init__(
        self, observer: _Observer, failed: Callable[[_GuardedObserver, BaseException], None]
    ) -> None:
        self.observer = observer
        self._failed = failed

    def __repr__(self) -> str:
        return f"<plugin observer {self.observer!r}>"

    def __call__(self, record: object) -> None:
        try:
            self.observer(record)
        except BaseException as exc:
            self._failed(self, exc)


def _install_observers(
    outcomes: Iterable[_Outcome], failed: Callable[[str, _GuardedObserver, BaseException], None]
) -> tuple[tuple[_Observer, ...], dict[str, tuple[Callable[[], None], ...]]]:
    """Register loaded plugins' observers with ``conveyor.engine.profiling``, each behind a guard.

    Returns the installed observers and, per plugin, their removers.
    """
    installed: list[_Observer] = []
    removers: dict[str, tuple[Callable[[], None], ...]] = {}
    for outcome in outcomes:
        if outcome.record.state is not PluginState.LOADED or not outcome.observers:
            continue
        from conveyor.engine.profiling import add_observer

        key = registration_name(outcome.record.distribution, outcome.record.name)
        mine = []
        for observer in outcome.observers:
            guarded = _GuardedObserver(observer, functools.partial(failed, key))
            mine.append(add_observer(guarded))
            installed.append(observer)
        removers[key] = tuple(mine)
    return tuple(installed), removers


def _not_loaded(candidate: _Candidate, interrupted: PluginRecord) -> _Outcome:
    """The outcome of a plugin never imported because the scan was interrupted before it."""
    msg = (
        f"{candidate.label}: not loaded, because the scan stopped when importing "
        f"{interrupted.label} was interrupted (KeyboardInterrupt); call refresh() to load it"
    )
    return _Outcome(
        PluginRecord(
            name=candidate.name,
            distribution=candidate.distribution,
            version=candidate.version,
            entry_point=candidate.value,
            state=PluginState.BROKEN,
            error=msg,
        )
    )


def _unregister_failed(manager: pluggy.PluginManager, outcomes: Iterable[_Outcome]) -> None:
    """Unregister every plugin that loaded but was broken by a cross-plugin check."""
    for outcome in outcomes:
        if outcome.record.state is not PluginState.LOADED:
            unregister(manager, outcome.record)


@final
class PluginHost:
    """Discovers the ``conveyor.plugins`` entry points and holds what the plugins contribute.

    Options default to the environment (``CONVEYOR_PLUGINS``, ``CONVEYOR_DISABLE_PLUGINS``,
    ``CONVEYOR_STRICT_PLUGINS``, ``CONVEYOR_PREFER``, ``CONVEYOR_PLUGIN_IMPORT_TIMEOUT``,
    ``CONVEYOR_PLUGIN_IMPORT_PROBE``); an argument wins over its variable.
    ``allow``/``block`` name entry points or distributions and are applied before anything is
    imported; ``allow=[]`` loads no plugin. ``prefer`` maps a carrier name to the distribution
    that should provide it when several do. ``import_timeout`` is how many seconds one plugin's
    import may take: one that takes longer is abandoned on its helper thread and marked broken.
    ``probe_imports`` (``CONVEYOR_PLUGIN_IMPORT_PROBE``) first imports each plugin in a child
    process killed at that limit, which bounds imports the helper thread cannot (one holding
    the GIL, one ending the process); it costs a second import of every plugin.

    The host is mutable only through its cache: it scans on first query and again on
    ``refresh()``. It is safe to share between threads.

    Raises:
        TypeError, ValueError: a malformed option, naming the argument or variable.
    """

    __slots__ = ("_config", "_discovery", "_group", "_loading", "_lock")

    def __init__(
        self,
        *,
        allow: Iterable[str] | None = None,
        block: Iterable[str] | None = None,
        strict: bool | None = None,
        prefer: Mapping[str, str] | None = None,
        group: str = _DEFAULT_GROUP,
        import_timeout: float | None = None,
        probe_imports: bool | None = None,
    ) -> None:
        self._config = _HostConfig.create(
            allow=allow,
            block=block,
            strict=strict,
            prefer=prefer,
            import_timeout=import_timeout,
            probe_imports=probe_imports,
        )
        self._group = group
        self._lock = threading.RLock()
        self._discovery: _Discovery | None = None
        #: True while this host's scan runs (under ``_lock``): a query from inside it is refused.
        self._loading = False

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

        Raises:
            RuntimeError: called from inside this host's own scan (a plugin creating a tensor
                or looking up a carrier while it is imported); that plugin ends broken.
            KeyboardInterrupt: once, when a plugin import was interrupted; the scan stopped
                there, and its result is cached like any other.
        """
        found = self._discovery
        if found is not None:
            return found
        # A plugin imports on a helper thread while the scanning thread holds the lock.
        if self._loading and in_plugin_import():
            raise RuntimeError(_QUERY_WHILE_LOADING)
        with self._lock:
            found = self._discovery
            if found is not None:
                return found
            if self._loading:
                raise RuntimeError(_QUERY_WHILE_LOADING)
            self._loading = True
            try:
                found, interrupt = self._load_all()
            finally:
                self._loading = False
            self._discovery = found
        for message in (*found.conflicts.values(), *found.entry_point_conflicts.values()):
            warnings.warn(message, PluginConflictWarning, stacklevel=3 + depth)
        for outcome in found.outcomes:
            for message in outcome.notices:
                warnings.warn(message, PluginNamespaceWarning, stacklevel=3 + depth)
        if interrupt is not None:
            raise interrupt
        return found

    def _load_all(self) -> tuple[_Discovery, KeyboardInterrupt | None]:
        manager = pluggy.PluginManager("conveyor")
        manager.add_hookspecs(_hookspecs)
        candidates, shadowed = scan(self._group)
        outcomes: list[_Outcome] = []
        interrupt: KeyboardInterrupt | None = None
        interrupted: PluginRecord | None = None
        for candidate in candidates:
            if interrupted is not None:
                outcomes.append(_not_loaded(candidate, interrupted))
                continue
            start = time.perf_counter()
            outcome = load(manager, candidate, self._config)
            if outcome.record.state is not PluginState.DISABLED:  # disabled: never imported
                seconds = time.perf_counter() - start
                outcome = attrs.evolve(
                    outcome, record=attrs.evolve(outcome.record, load_seconds=seconds)
                )
            outcomes.append(outcome)
            if isinstance(outcome.cause, KeyboardInterrupt):
                interrupt, interrupted = outcome.cause, outcome.record
        outcomes.extend(shadowed_outcome(s.candidate, s.used) for s in shadowed)
        _check_contributions(outcomes)
        _check_observer_api(outcomes)
        unresolved = tuple(outcomes)
        entry_point_conflicts, clashes = _entry_point_clashes(candidates)
        carriers, providers, conflicts = _resolve(outcomes, self._config, clashes)
        _unregister_failed(manager, outcomes)
        installed, removers = _install_observers(outcomes, self._observer_failed)
        named = [(c.name, c.distribution) for c in (*candidates, *(s.candidate for s in shadowed))]
        discovery = _Discovery(
            outcomes=tuple(outcomes),
            carriers=MappingProxyType(carriers),
            providers=MappingProxyType(providers),
            conflicts=MappingProxyType(conflicts),
            entry_point_conflicts=MappingProxyType(entry_point_conflicts),
            clashes=MappingProxyType(clashes),
            notes=tuple(self._config.unmatched(named)),
            installed=installed,
            removers=MappingProxyType(removers),
            unresolved=unresolved,
            manager=manager,
        )
        return discovery, interrupt

    def _observer_failed(self, key: str, observer: _GuardedObserver, exc: BaseException) -> None:
        """Break the plugin whose observer raised: remove its observers and contributions."""
        with self._lock:
            found = self._discovery
            if found is None or key not in found.removers:
                return  # already broken by another of its observers, or refreshed meanwhile
            for remove in found.removers[key]:
                remove()
            index = next(
                i
                for i, o in enumerate(found.unresolved)
                if registration_name(o.record.distribution, o.record.name) == key
            )
            outcome = found.unresolved[index]
            detail = "; ".join(str(exc).splitlines())
            message = (
                f"{outcome.record.label}: hook {_OBSERVERS_HOOK}: observer {observer.observer!r} "
                f"raised {type(exc).__name__}: {detail}; the plugin is now broken and its "
                f"contributions are withdrawn; fix the plugin or block it with "
                f"CONVEYOR_DISABLE_PLUGINS={outcome.record.name}"
            )
            unresolved = list(found.unresolved)
            unresolved[index] = broken_outcome(outcome, _OBSERVERS_HOOK, message, cause=exc)
            outcomes = list(unresolved)
            carriers, providers, conflicts = _resolve(outcomes, self._config, found.clashes)
            unregister(found.manager, outcome.record)
            self._discovery = attrs.evolve(
                found,
                outcomes=tuple(outcomes),
                carriers=MappingProxyType(carriers),
                providers=MappingProxyType(providers),
                conflicts=MappingProxyType(conflicts),
                installed=tuple(o for o in found.installed if o not in outcome.observers),
                removers=MappingProxyType({k: v for k, v in found.removers.items() if k != key}),
                unresolved=tuple(unresolved),
            )
        warnings.warn(message, PluginBrokenWarning, stacklevel=4)

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

    def entry_point_conflicts(self) -> Mapping[str, str]:
        """Entry-point name -> message, for every name more than one distribution declares.

        Both plugins are still loaded (each under its distribution), but a plugin list naming
        the entry point selects all of them; the message names the distributions and says to
        name the distribution instead. Never raises.
        """
        return self._scan().entry_point_conflicts

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

    def commands(self) -> tuple[Command, ...]:
        """``conveyor`` subcommands contributed by loaded plugins, in plugin order."""
        from conveyor.plugins._commands import Command  # for the command line only

        found = self._require().contributions("conveyor_commands")
        return tuple(c for c in found if isinstance(c, Command))  # checked at plugin load

    def observers(self) -> tuple[_Observer, ...]:
        """Operation observers this host installed into ``conveyor.engine.profiling``."""
        return self._require().installed

    def refresh(self) -> None:
        """Forget the cached scan, remove installed observers and scan again now.

        Picks up distributions installed or removed since the last scan. Modules already
        imported are not re-imported. Like ``plugins()``, it does not raise in strict mode;
        the next query does.
        """
        with self._lock:
            previous, self._discovery = self._discovery, None
            for removers in () if previous is None else previous.removers.values():
                for remove in removers:
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
