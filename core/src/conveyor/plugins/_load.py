"""Loading one plugin in isolation: import, API handshake, registration, hooks, validation.

``load`` never raises because of the plugin: every failure becomes the plugin's state, with a
message that names the distribution, the entry point and the hook, and the kept traceback. A
plugin contributes everything or nothing: if any hook fails, the plugin is unregistered and all
it returned is dropped, so the host never runs with half a plugin.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar, cast, final

import attrs
import pluggy

from conveyor.engine import journal as _journal
from conveyor.plugins import _namespace
from conveyor.plugins._config import _HostConfig
from conveyor.plugins._discovery import _Candidate, registration_name
from conveyor.plugins._hookspecs import HOOK_NAMES, PLUGIN_API_VERSION
from conveyor.plugins._importing import ImportTimeout, load_entry_point
from conveyor.plugins._process_state import ProcessState
from conveyor.plugins._state import (
    PluginNamespaceWarning,
    PluginRecord,
    PluginState,
    PluginUnavailable,
)

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__: list[str] = []

_CARRIERS_HOOK: Final = "conveyor_carriers"
_DEFINITIONS_HOOK: Final = "conveyor_operation_definitions"
_PACKS_HOOK: Final = "conveyor_kernel_packs"
_COMMANDS_HOOK: Final = "conveyor_commands"
_OBSERVERS_HOOK: Final = "conveyor_operation_observers"
# Patterns, not compiled ones: re compiles (and caches) each on first use, not at every import.
_CARRIER_NAME: Final = r"[a-z][a-z0-9_]*"
_API_DECLARATION: Final = r"(\d+)\.(\d+)"
_MISSING: Final = object()

_Observer: TypeAlias = Callable[[object], None]
_T = TypeVar("_T")


@final
@attrs.frozen
class _Outcome:
    """The result of loading one plugin: its record and, when loaded, what it contributes."""

    record: PluginRecord
    carriers: Mapping[str, type[Carrier]] = attrs.field(factory=dict)
    #: Hook name -> items, for the collection hooks other than carriers and observers.
    contributions: Mapping[str, tuple[object, ...]] = attrs.field(factory=dict)
    observers: tuple[_Observer, ...] = ()
    #: The exception behind a failure, so strict mode can chain it; not part of equality.
    cause: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    #: Undoes what the plugin registered directly (not through hooks) while it loaded, and the
    #: changes it made to the conveyor namespace.
    registrations: tuple[Callable[[], None], ...] = attrs.field(default=(), eq=False, repr=False)
    #: Messages the host emits as ``PluginNamespaceWarning`` once the scan is done.
    notices: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)


class _Failure(Exception):
    """Internal: one loading step failed; carries the state the plugin ends in."""

    def __init__(
        self,
        state: PluginState,
        message: str,
        *,
        hook: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.state = state
        self.message = message
        self.hook = hook
        self.cause = cause


def _contained(
    label: str, what: str, exc: BaseException, hint: str, *, one_line: bool = False
) -> _Failure:
    """The failure for any exception a plugin raised, ``BaseException`` kinds included.

    ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` from plugin code mark the
    plugin broken like any other error: a plugin must never stop the host. A
    ``KeyboardInterrupt`` additionally stops the scan (the host re-raises it once, see
    ``PluginHost``), because it may be the user's Ctrl-C during a slow import.
    """
    detail = "; ".join(str(exc).splitlines()) if one_line else str(exc)
    msg = f"{label}: {what} raised {type(exc).__name__}: {detail}; {hint}"
    return _Failure(PluginState.BROKEN, msg, cause=exc)


def compatible_versions() -> str:
    """The ``CONVEYOR_PLUGIN_API`` declarations this host loads, for messages."""
    major, minor = PLUGIN_API_VERSION
    if minor == 0:
        return f"{major}.0"
    return f"{major}.0 to {major}.{minor}"


def _block_hint(candidate: _Candidate) -> str:
    return f"fix the plugin or block it with CONVEYOR_DISABLE_PLUGINS={candidate.name}"


def _declared_api(candidate: _Candidate, plugin: object) -> object:
    declared = getattr(plugin, "CONVEYOR_PLUGIN_API", _MISSING)
    if declared is _MISSING:
        # ``module:attribute`` entry points name an object; the declaration lives in its module.
        module = sys.modules.get(candidate.entry_point.module)
        declared = getattr(module, "CONVEYOR_PLUGIN_API", _MISSING)
    return declared


def _check_api(candidate: _Candidate, declared: object) -> str:
    """The declared version; raises ``_Failure(INCOMPATIBLE)`` unless this host speaks it."""
    host = ".".join(map(str, PLUGIN_API_VERSION))
    wanted = compatible_versions()
    if declared is _MISSING:
        msg = (
            f"{candidate.label}: {candidate.entry_point.module} does not declare "
            f"CONVEYOR_PLUGIN_API; this conveyor-core speaks plugin API {host} and loads plugins "
            f'declaring {wanted}: add CONVEYOR_PLUGIN_API = "{host}" if the plugin was written '
            f"for it"
        )
        raise _Failure(PluginState.INCOMPATIBLE, msg)
    match = re.fullmatch(_API_DECLARATION, declared) if isinstance(declared, str) else None
    if match is None:
        msg = (
            f"{candidate.label}: CONVEYOR_PLUGIN_API = {declared!r} ({type(declared).__name__}) "
            f'is not a "MAJOR.MINOR" string; this conveyor-core loads plugins declaring {wanted}'
        )
        raise _Failure(PluginState.INCOMPATIBLE, msg)
    version = (int(match[1]), int(match[2]))
    if version[0] != PLUGIN_API_VERSION[0] or version[1] > PLUGIN_API_VERSION[1]:
        newer = version > PLUGIN_API_VERSION
        fix = (
            f"upgrade conveyor-core to one that speaks plugin API {declared}"
            if newer
            else f"install a release of {candidate.distribution or candidate.name} written "
            f"for plugin API {wanted}"
        )
        msg = (
            f"{candidate.label}: written for plugin API {declared}, but this conveyor-core speaks "
            f"plugin API {host} and loads plugins declaring {wanted}; {fix}, or block it with "
            f"CONVEYOR_DISABLE_PLUGINS={candidate.name}"
        )
        raise _Failure(PluginState.INCOMPATIBLE, msg)
    return match.string


def _import(candidate: _Candidate, config: _HostConfig) -> object:
    timeout = config.import_timeout
    abandon = (
        f"{candidate.label}: importing {candidate.value!r} did not finish within {timeout:g} s "
        f"(the limit set by {config.import_timeout_source}); it is broken and anything it "
        f"registers later is refused; block it with CONVEYOR_DISABLE_PLUGINS={candidate.name} "
        f"(`conveyor plugins --no-load` lists plugins without importing them), or raise "
        f"CONVEYOR_PLUGIN_IMPORT_TIMEOUT if it is only slow"
    )
    if config.probe_imports:
        _probe_import(candidate, config)
    try:
        return load_entry_point(candidate.entry_point, timeout, abandon)
    except ImportTimeout as exc:
        raise _Failure(PluginState.BROKEN, str(exc), cause=exc) from exc
    except PluginUnavailable as exc:
        raise _Failure(PluginState.UNAVAILABLE, f"{candidate.label}: {exc}", cause=exc) from exc
    # Every kind, SystemExit and KeyboardInterrupt included: a plugin must never stop the host.
    except BaseException as exc:
        what = f"importing {candidate.value!r}"
        raise _contained(candidate.label, what, exc, _block_hint(candidate)) from exc


def _probe_import(candidate: _Candidate, config: _HostConfig) -> None:
    """Refuse, before importing it here, a plugin whose probe import hung or ended its process."""
    from conveyor.plugins import _probe  # subprocess and tempfile: only when probing is on

    try:
        _probe.probe(candidate.entry_point, config.import_timeout)
    except _probe.ProbeFailed as exc:
        if exc.timed_out:
            fix = (
                f"raise CONVEYOR_PLUGIN_IMPORT_TIMEOUT (the limit set by "
                f"{config.import_timeout_source}) if it is only slow"
            )
        else:
            fix = "importing it here would end this process too"
        msg = (
            f"{candidate.label}: importing {candidate.value!r} was probed in a child process "
            f"first and {exc}; it was not imported here; {fix}; block "
            f"it with CONVEYOR_DISABLE_PLUGINS={candidate.name} (`conveyor plugins --no-load` "
            f"lists plugins without importing them)"
        )
        if exc.where:
            exc.add_note(f"the probe printed:\n{exc.where}")
        raise _Failure(PluginState.BROKEN, msg, cause=exc) from exc


def _check_implementations(
    manager: pluggy.PluginManager, candidate: _Candidate, plugin: object
) -> None:
    """Refuse unknown hooks, wrappers and arguments before pluggy registers anything.

    pluggy would catch most of these too, but its messages do not name the distribution, and
    Conveyor calls implementations directly, so a wrapper (a generator) would misbehave.
    """
    for attribute in dir(plugin):
        opts = manager.parse_hookimpl_opts(plugin, attribute)
        if opts is None:
            continue
        hook = opts.get("specname") or attribute
        what = f"{candidate.label}: hook {hook}"
        if hook not in HOOK_NAMES:
            msg = (
                f"{candidate.label}: {attribute} implements unknown hook {hook!r}; Conveyor "
                f"hooks are {', '.join(HOOK_NAMES)} (check the spelling, or the plugin needs a "
                f"newer conveyor-core)"
            )
            raise _Failure(PluginState.BROKEN, msg, hook=hook)
        if opts.get("wrapper") or opts.get("hookwrapper"):
            msg = f"{what} is declared as a wrapper; Conveyor hooks return data, use @hookimpl"
            raise _Failure(PluginState.BROKEN, msg, hook=hook)
        try:
            signature = inspect.signature(getattr(plugin, attribute))
        except (TypeError, ValueError):  # no introspectable signature: leave it to pluggy
            continue
        required = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if required:
            msg = f"{what} takes arguments {required}; Conveyor hooks take none"
            raise _Failure(PluginState.BROKEN, msg, hook=hook)


def _register(manager: pluggy.PluginManager, candidate: _Candidate, plugin: object) -> None:
    """Validate and register the plugin's hooks; any failure leaves the manager unchanged."""
    name = candidate.registration_name
    try:
        _check_implementations(manager, candidate, plugin)
        other = manager.get_name(plugin)
        if other is not None:
            msg = (
                f"{candidate.label}: {candidate.value!r} is already loaded as plugin {other!r}; "
                f"declare one entry point per plugin object"
            )
            raise _Failure(PluginState.BROKEN, msg)
        manager.register(plugin, name=name)
        manager.check_pending()
    except _Failure:
        raise
    # Anything else comes from the plugin object (pluggy's validation, or attribute access on
    # an odd plugin object); it must not escape to the host.
    except BaseException as exc:
        _unregister(manager, name)
        what = "registering its hooks"
        raise _contained(candidate.label, what, exc, _block_hint(candidate), one_line=True) from exc


def _unregister(manager: pluggy.PluginManager, name: str) -> None:
    if manager.get_plugin(name) is not None:
        manager.unregister(name=name)


def unregister(manager: pluggy.PluginManager, record: PluginRecord) -> None:
    """Remove a plugin found broken after loading (e.g. its observers could not be installed)."""
    _unregister(manager, registration_name(record.distribution, record.name))


def _carrier_base() -> type[Carrier]:
    # Imported on first use: conveyor.engine.carrier pulls in the policy tables, which
    # ``import conveyor.plugins`` must not pay for.
    from conveyor.engine.carrier import Carrier

    return Carrier


def _validate_carriers(
    candidate: _Candidate, base: type[Carrier], result: object
) -> dict[str, type[Carrier]]:
    what = f"{candidate.label}: hook {_CARRIERS_HOOK}"
    if not isinstance(result, Mapping):
        msg = (
            f"{what} returned {result!r} ({type(result).__name__}); return a mapping of "
            f"lower-case names to conveyor.Carrier subclasses, e.g. {{'cpu': CPU}}"
        )
        raise _Failure(PluginState.BROKEN, msg, hook=_CARRIERS_HOOK)
    found: dict[str, type[Carrier]] = {}
    for name, cls in result.items():
        if not isinstance(name, str) or re.fullmatch(_CARRIER_NAME, name) is None:
            msg = (
                f"{what}: carrier name {name!r} is not a lower-case identifier; register it as "
                f"e.g. {re.sub(r'[^a-z0-9_]', '_', str(name).strip().lower())!r}"
            )
            raise _Failure(PluginState.BROKEN, msg, hook=_CARRIERS_HOOK)
        if not (isinstance(cls, type) and issubclass(cls, base)):
            msg = (
                f"{what}: {name!r} maps to {cls!r} ({type(cls).__name__}), which is not a "
                f"conveyor.Carrier subclass"
            )
            raise _Failure(PluginState.BROKEN, msg, hook=_CARRIERS_HOOK)
        found[name] = cls
    return found


def _validate_items(
    candidate: _Candidate,
    hook: str,
    contributed: Mapping[str, tuple[object, ...]],
    result: object,
) -> tuple[object, ...]:
    what = f"{candidate.label}: hook {hook}"
    if (
        result is None
        or isinstance(result, str | bytes | Mapping)
        or not isinstance(result, Iterable)
    ):
        msg = (
            f"{what} returned {result!r} ({type(result).__name__}); return a list (empty when "
            f"there is nothing to contribute)"
        )
        raise _Failure(PluginState.BROKEN, msg, hook=hook)
    items = tuple(result)
    if hook == _DEFINITIONS_HOOK:
        from conveyor.engine.operation_definitions import check_contributed_definition

        for item in items:
            check_contributed_definition(item)  # raises inside the hook guard: plugin broken
    if hook == _PACKS_HOOK:
        from conveyor.engine.carrier_registry import check_contributed_pack_names
        from conveyor.engine.operation_definitions import operation_definition

        own = {getattr(d, "name", None) for d in contributed.get(_DEFINITIONS_HOOK, ())}

        def defined(name: str) -> bool:
            return name in own or operation_definition(name) is not None

        for item in items:
            check_contributed_pack_names(item, defined)  # raises inside the hook guard
    if hook == _COMMANDS_HOOK:
        from conveyor.plugins._commands import Command  # only a plugin adding commands needs it

        for item in items:
            if not isinstance(item, Command):
                msg = (
                    f"{what}: contributed {item!r} ({type(item).__name__}); contribute "
                    f"conveyor.plugins.Command records"
                )
                raise _Failure(PluginState.BROKEN, msg, hook=hook)
    if hook == _OBSERVERS_HOOK:
        for item in items:
            if not callable(item):
                msg = f"{what}: observer {item!r} ({type(item).__name__}) is not callable"
                raise _Failure(PluginState.BROKEN, msg, hook=hook)
    return items


def _run_hook(
    candidate: _Candidate,
    hook: str,
    function: Callable[[], object],
    validate: Callable[[object], _T],
) -> _T:
    """Call one hook implementation and validate its result, attributing any failure.

    Validation runs inside the same guard because it executes plugin code too (a generator's
    body, a mapping's ``items``).
    """
    try:
        return validate(function())
    except _Failure:
        raise
    except PluginUnavailable as exc:
        msg = f"{candidate.label}: hook {hook}: {exc}"
        raise _Failure(PluginState.UNAVAILABLE, msg, hook=hook, cause=exc) from exc
    except BaseException as exc:
        failure = _contained(candidate.label, f"hook {hook}", exc, _block_hint(candidate))
        failure.hook = hook
        raise failure from exc


def _collect(manager: pluggy.PluginManager, candidate: _Candidate, api: str) -> _Outcome:
    """Call every hook the plugin implements, in ``HOOK_NAMES`` order, and validate the results."""
    name = candidate.registration_name
    carriers: dict[str, type[Carrier]] = {}
    contributions: dict[str, tuple[object, ...]] = {}
    for hook in HOOK_NAMES:
        caller = getattr(manager.hook, hook)
        for impl in [i for i in caller.get_hookimpls() if i.plugin_name == name]:
            if hook != _CARRIERS_HOOK:
                validate_items = functools.partial(_validate_items, candidate, hook, contributions)
                items = _run_hook(candidate, hook, impl.function, validate_items)
                contributions[hook] = contributions.get(hook, ()) + items
                continue
            # Imported outside the guard on purpose: if the core cannot import its own
            # Carrier, that is a broken conveyor-core installation, not a broken plugin.
            validate_carriers = functools.partial(_validate_carriers, candidate, _carrier_base())
            for key, cls in _run_hook(candidate, hook, impl.function, validate_carriers).items():
                if carriers.setdefault(key, cls) is not cls:
                    msg = (
                        f"{candidate.label}: hook {hook}: {key!r} is returned twice, for "
                        f"{carriers[key]!r} and {cls!r}"
                    )
                    raise _Failure(PluginState.BROKEN, msg, hook=hook)
    # _validate_items checked that every observer is callable.
    observers = cast(tuple[_Observer, ...], contributions.pop(_OBSERVERS_HOOK, ()))
    record = _record(candidate, PluginState.LOADED, api=api, carriers=tuple(sorted(carriers)))
    return _Outcome(record, carriers, contributions, observers)


def _record(
    candidate: _Candidate,
    state: PluginState,
    *,
    api: str | None = None,
    carriers: tuple[str, ...] = (),
    error: str | None = None,
    cause: BaseException | None = None,
    hook: str | None = None,
) -> PluginRecord:
    text = None
    if cause is not None:
        import traceback  # only failures need it; keeps ``import conveyor`` lighter

        text = "".join(traceback.format_exception(cause))
    return PluginRecord(
        name=candidate.name,
        distribution=candidate.distribution,
        version=candidate.version,
        entry_point=candidate.value,
        state=state,
        carriers=carriers,
        api_version=api,
        error=error,
        traceback=text,
        hook=hook,
    )


def load(manager: pluggy.PluginManager, candidate: _Candidate, config: _HostConfig) -> _Outcome:
    """Load one plugin and return its outcome; failures of the plugin never propagate.

    Registrations the plugin makes directly while loading are journaled, and the public
    ``conveyor`` namespace is compared with a snapshot taken before (``_namespace``): both are
    undone at once if it does not load, kept in the outcome (``registrations``) otherwise.
    """
    if config.exclusion(candidate.name, candidate.distribution) is not None:
        return _load(manager, candidate, config)  # disabled: nothing is imported
    package = candidate.entry_point.module.partition(".")[0]
    before, process = _namespace.Snapshot(), ProcessState()
    with _journal.journal(_journal.Journal(package)) as journal:
        outcome = _load(manager, candidate, config)
    changes = before.changes()
    altered = process.restore()
    if altered:
        outcome = _process_changed(manager, candidate, outcome, altered)
    state = outcome.record.state
    if state is not PluginState.LOADED:
        _journal.undo(journal.entries)
        restored = _namespace.undo(changes)
        if not restored:
            return outcome
        notice = (
            f"{candidate.label} ended {state} after changing {', '.join(restored)} while it "
            f"loaded; the originals are restored; {_block_hint(candidate)}"
        )
        return attrs.evolve(outcome, notices=(notice,))
    replaced = tuple(change for change in changes if change.replaced)
    notices: tuple[str, ...] = ()
    if replaced:
        notices = (
            f"{candidate.label} replaced {_namespace.names(replaced)} while it loaded; the "
            f"replacements stay while it is loaded and are undone if it breaks; check the "
            f"plugin, or block it with CONVEYOR_DISABLE_PLUGINS={candidate.name}",
        )
    entries = journal.entries
    if changes:
        entries = (*entries, functools.partial(_undo_namespace, candidate, changes))
    return attrs.evolve(outcome, registrations=entries, notices=notices)


def _process_changed(
    manager: pluggy.PluginManager, candidate: _Candidate, outcome: _Outcome, altered: list[str]
) -> _Outcome:
    """The outcome of a plugin that changed process-wide state while it loaded: broken."""
    what = "; ".join(altered)
    record = outcome.record
    if record.state is not PluginState.LOADED:
        error = f"{record.error} (it also changed process-wide state: {what})"
        return attrs.evolve(outcome, record=attrs.evolve(record, error=error))
    _unregister(manager, candidate.registration_name)
    msg = (
        f"{candidate.label}: changed process-wide state while it loaded ({what}); a plugin "
        f"must leave the standard streams, timers and signal handlers as it found them, so "
        f"it is broken; do such things when the plugin is first used, or block it with "
        f"CONVEYOR_DISABLE_PLUGINS={candidate.name}"
    )
    return _Outcome(_record(candidate, PluginState.BROKEN, api=record.api_version, error=msg))


def _undo_namespace(candidate: _Candidate, changes: tuple[_namespace.Change, ...]) -> None:
    """Undo a plugin's namespace changes when it breaks after loading, and say so."""
    restored = _namespace.undo(changes)
    if restored:
        msg = (
            f"{candidate.label} broke after loading; its changes to {', '.join(restored)} are "
            f"undone"
        )
        warnings.warn(msg, PluginNamespaceWarning, stacklevel=2)


def _load(manager: pluggy.PluginManager, candidate: _Candidate, config: _HostConfig) -> _Outcome:
    reason = config.exclusion(candidate.name, candidate.distribution)
    if reason is not None:
        error = f"{candidate.label}: {reason}"
        return _Outcome(_record(candidate, PluginState.DISABLED, error=error))
    api: str | None = None
    try:
        plugin = _import(candidate, config)
        declared = _declared_api(candidate, plugin)
        # Recorded as written even when refused, so the listing shows what the plugin said.
        api = declared if isinstance(declared, str) else None
        api = _check_api(candidate, declared)
        _register(manager, candidate, plugin)
        try:
            return _collect(manager, candidate, api)
        except _Failure:
            _unregister(manager, candidate.registration_name)
            raise
    except _Failure as failure:
        record = _record(
            candidate,
            failure.state,
            api=api,
            error=failure.message,
            cause=failure.cause,
            hook=failure.hook,
        )
        return _Outcome(record, cause=failure.cause)


_journal.boundary(_load.__code__)


def broken_outcome(
    outcome: _Outcome, hook: str, message: str, *, cause: BaseException | None = None
) -> _Outcome:
    """``outcome`` turned broken after loading: it keeps its record's facts, contributes nothing.

    What the plugin registered directly while it loaded is withdrawn here, so a broken plugin
    leaves no route or kernel pack behind.
    """
    _journal.undo(outcome.registrations, f"{outcome.record.label} is broken ({hook})")
    text = None
    if cause is not None:
        import traceback

        text = "".join(traceback.format_exception(cause))
    record = attrs.evolve(
        outcome.record,
        state=PluginState.BROKEN,
        carriers=(),
        error=message,
        traceback=text,
        hook=hook,
        conflicts=(),
    )
    return _Outcome(record, cause=cause)


def shadowed_outcome(candidate: _Candidate, used: _Candidate) -> _Outcome:
    """The outcome of an entry point that repeats another one's name with another target."""
    msg = (
        f"{candidate.label}: the distribution declares entry point {candidate.name!r} twice, for "
        f"{used.value!r} and {candidate.value!r}; only the first is loaded, remove the other"
    )
    return _Outcome(_record(candidate, PluginState.BROKEN, error=msg))
