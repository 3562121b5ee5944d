"""The ``conveyor`` command: list plugins and carriers, diagnose an installation, run plugins'.

Every subcommand prints tables that fit the terminal for people (``--wide`` keeps every
character) and, with ``--json``, one JSON document for machines. They work when plugins are
broken (that is when they are needed most). Exit status: 0 when all is well; 1 when problems
were found (``doctor`` reported a warning, or a plugin failed while strict mode,
``CONVEYOR_STRICT_PLUGINS=1``, is on); 2 for a usage or configuration error. A reader that
closes the pipe early (``conveyor plugins --json | head``) ends the command quietly, status 0.
Core modules beyond the plugin host are imported inside the commands that read them, so each
command pays only for what it shows. Plugins add subcommands through the ``conveyor_commands``
hook (``conveyor demo`` is one); plugins are loaded for that only when the command line names
a command that is not built in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from conveyor import plugins
from conveyor.plugins import (
    Command,
    PluginConflictWarning,
    PluginError,
    PluginRecord,
    PluginState,
    add_doctor_section,
    doctor_sections,
    table,
    terminal_width,
)

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__ = ["add_doctor_section", "main"]

_FAILED: Final = (PluginState.BROKEN, PluginState.INCOMPATIBLE)
_Command = Callable[[argparse.Namespace], int]
# ``--wide`` of the running command: tables keep every character instead of fitting the terminal.
_WIDE: dict[str, bool] = {"wide": False}


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return table(headers, rows, wide=_WIDE["wide"])


def _emit(document: object) -> None:
    print(json.dumps(document, indent=2, sort_keys=False))


def _first_line(text: str | None) -> str:
    return "" if not text else text.splitlines()[0]


def _exit_status(host: plugins.PluginHost, records: Iterable[PluginRecord]) -> int:
    if host.strict and any(r.state in _FAILED for r in records):
        return 1
    return 0


def _record_json(record: PluginRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "distribution": record.distribution,
        "version": record.version,
        "entry_point": record.entry_point,
        "state": str(record.state),
        "carriers": list(record.carriers),
        "api_version": record.api_version,
        "error": record.error,
        "hook": record.hook,
        "conflicts": list(record.conflicts),
        "traceback": record.traceback,
        "load_seconds": record.load_seconds,
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _plugins_table(records: Sequence[PluginRecord]) -> str:
    rows = [
        (
            r.name,
            r.distribution or "-",
            r.version or "-",
            r.state,
            ", ".join(r.carriers) or "-",
            _seconds(r.load_seconds),
            _first_line(r.error) or ("conflict: see `conveyor doctor`" if r.conflicts else ""),
        )
        for r in records
    ]
    headers = ("NAME", "DISTRIBUTION", "VERSION", "STATE", "CARRIERS", "LOAD", "ERROR")
    return _table(headers, rows)


def _slowest(records: Sequence[PluginRecord], count: int = 3) -> str:
    """The slowest plugin loads, like pytest's ``--durations``: where start-up time goes."""
    timed = sorted(
        (r for r in records if r.load_seconds is not None),
        key=lambda r: r.load_seconds or 0.0,
        reverse=True,
    )[:count]
    listed = ", ".join(f"{r.name} {_seconds(r.load_seconds)}" for r in timed)
    return f"slowest plugin loads: {listed}" if listed else ""


def _cmd_entry_points(args: argparse.Namespace) -> int:
    """``conveyor plugins --no-load``: the entry points, read from metadata, none imported.

    The way to see what is installed when a plugin hangs or exits the process at import.
    """
    from conveyor.plugins._discovery import scan

    host = plugins.host()
    candidates, shadowed = scan(host.group)
    found = [*candidates, *(s.candidate for s in shadowed)]
    rows = [
        {
            "name": c.name,
            "distribution": c.distribution,
            "version": c.version,
            "entry_point": c.value,
            "disabled": host._config.exclusion(c.name, c.distribution),
        }
        for c in found
    ]
    if args.json:
        _emit({"group": host.group, "loaded": False, "entry_points": rows})
    elif not rows:
        print(f"no plugins installed in the entry-point group {host.group!r}")
    else:
        table = [
            (
                r["name"],
                r["distribution"] or "-",
                r["version"] or "-",
                r["entry_point"],
                "disabled" if r["disabled"] else "not loaded",
            )
            for r in rows
        ]
        print(_table(("NAME", "DISTRIBUTION", "VERSION", "ENTRY POINT", "STATE"), table))
    return 0


@contextlib.contextmanager
def _plugin_output_to_stderr() -> Iterator[None]:
    """While plugins load, what they print goes to stderr: stdout carries only our output.

    Both levels are redirected: ``sys.stdout`` for ``print``, and file descriptor 1 for C
    extensions and subprocesses, so ``--json`` output stays one parseable document.
    """
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
    except OSError:  # no file descriptor 1 (a closed or detached stdout): nothing to protect
        saved = None
    try:
        if saved is not None:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _cmd_plugins(args: argparse.Namespace) -> int:
    if args.no_load:
        return _cmd_entry_points(args)
    host = plugins.host()
    with _plugin_output_to_stderr():
        records = host.plugins()
    if args.json:
        _emit(
            {
                "group": host.group,
                "strict": host.strict,
                "plugins": list(map(_record_json, records)),
            }
        )
    elif not records:
        print(f"no plugins installed in the entry-point group {host.group!r}")
    else:
        print(_plugins_table(records))
        slowest = _slowest(records)
        if slowest:
            print(f"\n{slowest}")
    return _exit_status(host, records)


def _carrier_rows(
    host: plugins.PluginHost, carriers: Mapping[str, type[Carrier]]
) -> list[dict[str, Any]]:
    from conveyor.engine.carrier import DependentCarrier, is_closed_carrier
    from conveyor.engine.carrier_registry import (
        carrier_definition,
        definition_capabilities,
        fallback_route,
    )

    rows = []
    for name, cls in carriers.items():
        dependent = issubclass(cls, DependentCarrier)
        # A DependentCarrier computes its capabilities per instance from what it composes, so a
        # class-level count would be wrong, not just unknown.
        capabilities = None if dependent else definition_capabilities(cls)
        target, through = fallback_route(cls)
        rows.append(
            {
                "name": name,
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "distribution": host.provider(name).distribution,
                "closed": is_closed_carrier(cls),
                "definition_backed": carrier_definition(cls) is not None,
                "dependent": dependent,
                "names": None if capabilities is None else len(capabilities.names),
                "plans": None if capabilities is None else len(capabilities),
                # The names run by moving to another carrier (CarrierDefinition.fallback).
                "fallback": None
                if target is None
                else {"carrier": target.__name__, "names": sorted(through)},
                "_capabilities": capabilities,
            }
        )
    return rows


def _matrix(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, int] | None]]:
    """Operations (registered first, then any others a carrier declares) and plan counts."""
    from conveyor.types.policy import registered_operations

    counts: dict[str, dict[str, int] | None] = {}
    extra: set[str] = set()
    for row in rows:
        capabilities = row["_capabilities"]
        if capabilities is None:
            counts[row["name"]] = None
            continue
        per_name: dict[str, int] = {}
        for capability in capabilities:
            per_name[capability.operation] = per_name.get(capability.operation, 0) + 1
        counts[row["name"]] = per_name
        extra.update(per_name)
    registered = list(registered_operations())
    operations = registered + sorted(extra - set(registered))
    return operations, counts


def _matrix_text(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The operation x carrier matrix, never cutting a name: wrapped into several tables.

    Operation names differ only in their ends (``reduce_sum``, ``reduce_max``), so shortening
    them would be ambiguous; where the carriers' columns do not fit the terminal, they are
    split into groups, each printed beside the full operation names.
    """
    limit = None if _WIDE["wide"] else terminal_width()
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    groups: list[list[int]] = [[]]
    used = widths[0]
    for column in range(1, len(headers)):
        if limit is not None and groups[-1] and used + 2 + widths[column] > limit:
            groups.append([])
            used = widths[0]
        groups[-1].append(column)
        used += 2 + widths[column]
    parts = []
    for group in groups:
        picked = [0, *group]
        part = [tuple(row[i] for i in picked) for row in cells]
        parts.append(table([headers[i] for i in picked], part, wide=True))
    return "\n\n".join(parts)


def _cmd_carriers(args: argparse.Namespace) -> int:
    host = plugins.host()
    with _plugin_output_to_stderr():
        host.plugins()
    try:
        carriers = host.carriers()
    except PluginError as exc:
        print(f"conveyor carriers: {exc}", file=sys.stderr)
        return 1
    rows = _carrier_rows(host, carriers)
    operations, counts = _matrix(rows) if args.matrix else ([], {})
    if args.json:
        document: dict[str, Any] = {
            "carriers": [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
        }
        if args.matrix:
            document["matrix"] = {"operations": operations, "plans": counts}
        _emit(document)
        return 0
    if not rows:
        print("no carrier is loaded; run `conveyor plugins` to see why")
        return 0
    if args.matrix:
        headers = ("OPERATION", *(row["name"] for row in rows))
        table = []
        for operation in operations:
            cells = []
            for row in rows:
                per_name = counts[row["name"]]
                count = 0 if per_name is None else per_name.get(operation, 0)
                through = row["fallback"]["names"] if row["fallback"] else ()
                cell = f"{count} fb" if count and operation in through else (count or "-")
                cells.append("*" if per_name is None else cell)
            table.append((operation, *cells))
        print(_matrix_text(headers, table))
        if any(c is None for c in counts.values()):
            print("\n* dependent carrier: its plans are computed per instance")
        if any(row["fallback"] for row in rows):
            print("\nfb: run through the carrier's fallback (operands moved there and back)")
        return 0
    table = [
        (
            row["name"],
            row["class"],
            row["distribution"] or "-",
            "closed" if row["closed"] else "open",
            "yes" if row["definition_backed"] else "no",
            "per instance" if row["dependent"] else row["names"],
            "per instance" if row["dependent"] else row["plans"],
        )
        for row in rows
    ]
    headers = ("NAME", "CLASS", "DISTRIBUTION", "KIND", "DEFINITION", "NAMES", "PLANS")
    print(_table(headers, table))
    for row in rows:
        fallback = row["fallback"]
        if fallback is not None:
            print(
                f"\n{row['name']}: {len(fallback['names'])} of its names run through the "
                f"fallback {fallback['carrier']} (operands moved there and back); "
                f"`conveyor carriers --json` lists them"
            )
    return 0


def _version(module: str, distribution: str) -> str | None:
    """The module's ``__version__``, else the installed distribution's; ``None`` if missing."""
    import importlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = getattr(importlib.import_module(module), "__version__", None)
    except ImportError:
        return None
    if isinstance(found, str):
        return found
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _warnings(
    host: plugins.PluginHost, records: Sequence[PluginRecord], carriers_error: str | None
) -> list[dict[str, str]]:
    """Each problem with the one thing to do about it."""
    found: list[dict[str, str]] = []
    for record in records:
        if record.state is PluginState.BROKEN:
            fix = (
                f"fix or block it with CONVEYOR_DISABLE_PLUGINS={record.name} "
                f"(`conveyor plugins --json` shows the traceback)"
            )
            found.append({"problem": _first_line(record.error), "fix": fix})
        elif record.state is PluginState.INCOMPATIBLE:
            fix = (
                f"install a release written for this core, or block it with "
                f"CONVEYOR_DISABLE_PLUGINS={record.name}"
            )
            found.append({"problem": _first_line(record.error), "fix": fix})
    for name, conflict in host.conflicts().items():
        fix = f"prefer one with CONVEYOR_PREFER={name}=<distribution>"
        found.append({"problem": conflict, "fix": fix})
    for conflict in host.entry_point_conflicts().values():
        fix = "name plugins by distribution in CONVEYOR_PLUGINS / CONVEYOR_DISABLE_PLUGINS"
        found.append({"problem": conflict, "fix": fix})
    for note in host.notes():
        fix = "check the spelling; `conveyor plugins` lists the installed names"
        found.append({"problem": note, "fix": fix})
    if carriers_error is not None:
        # The failed plugin has its own entry above; this one says why nothing works now.
        problem = "strict plugin mode is on, so every use of a carrier raises PluginError"
        fix = "fix or block the failed plugins above, or unset CONVEYOR_STRICT_PLUGINS"
        found.append({"problem": problem, "fix": fix})
    elif not any(r.carriers for r in records if r.state is PluginState.LOADED):
        if any(r.state is not PluginState.LOADED for r in records):
            fix = "get one of the plugins listed above to load (see their states)"
        else:
            fix = "pip install conveyor-generic for the reference carriers"
        found.append({"problem": "no carrier is loaded", "fix": fix})
    return found


def _cmd_doctor(args: argparse.Namespace) -> int:
    from conveyor.plugins import ENVIRONMENT_VARIABLES
    from conveyor.types.dtypes import CONCRETE_DTYPES
    from conveyor.types.policy import registered_operations

    host = plugins.host()
    with _plugin_output_to_stderr():
        records = host.plugins()
    carriers: Mapping[str, type[Carrier]] = {}
    carriers_error = None
    try:
        carriers = host.carriers()
    except PluginError as exc:
        carriers_error = str(exc)
    report: dict[str, Any] = {
        "conveyor_core": _version("conveyor", "conveyor-core"),
        "python": platform.python_version(),
        "numpy": _version("numpy", "numpy"),
        "pluggy": _version("pluggy", "pluggy"),
        "platform": platform.platform(),
        "strict": host.strict,
        "environment": {k: os.environ[k] for k in ENVIRONMENT_VARIABLES if k in os.environ},
        "plugins": list(map(_record_json, records)),
        "carriers": {
            name: {
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "distribution": host.provider(name).distribution,
            }
            for name, cls in carriers.items()
        },
        "operations": list(registered_operations()),
        "dtypes": [d.name for d in CONCRETE_DTYPES],
        "warnings": _warnings(host, records, carriers_error),
        "sections": doctor_sections(),
    }
    if args.json:
        _emit(report)
        return 1 if report["warnings"] else _exit_status(host, records)
    versions = ", ".join(
        f"{label} {report[key] or 'not installed'}"
        for label, key in (("Python", "python"), ("numpy", "numpy"), ("pluggy", "pluggy"))
    )
    print(
        f"conveyor-core {report['conveyor_core'] or 'unknown'} ({versions}) on {report['platform']}"
    )
    print(f"strict plugin mode: {'on' if host.strict else 'off'}")
    for name, value in report["environment"].items():
        print(f"environment: {name}={value!r}")
    states = ", ".join(
        f"{sum(r.state is s for r in records)} {s}"
        for s in PluginState
        if any(r.state is s for r in records)
    )
    print(f"\nplugins: {len(records)}" + (f" ({states})" if states else ""))
    if records:
        print(_plugins_table(records))
    listed = ", ".join(f"{n} ({c['distribution'] or '-'})" for n, c in report["carriers"].items())
    print(f"\ncarriers: {listed or 'none'}")
    print(f"operations: {len(report['operations'])} registered: {', '.join(report['operations'])}")
    print(f"dtypes: {', '.join(report['dtypes'])}")
    for name, lines in report["sections"].items():
        print(f"{name}: " + ", ".join(f"{label} {value}" for label, value in lines.items()))
    if report["warnings"]:
        print("\nwarnings:")
        for warning in report["warnings"]:
            print(f"  - {warning['problem']}\n    fix: {warning['fix']}")
    else:
        print("\nno problems found")
    return 1 if report["warnings"] else _exit_status(host, records)


# The built-in commands: (name, one-line summary, implementation).
_BUILTIN: Final[tuple[tuple[str, str, _Command], ...]] = (
    ("plugins", "list discovered plugins and their states", _cmd_plugins),
    ("carriers", "list loaded carriers and what they support", _cmd_carriers),
    ("doctor", "versions, plugin states, and warnings with fixes", _cmd_doctor),
)


def _plugin_commands() -> tuple[tuple[Command, ...], list[str]]:
    """The loaded plugins' commands (built-in names and repeats dropped), and what was dropped."""
    taken = {name for name, _, _ in _BUILTIN}
    found, dropped = [], []
    for command in plugins.host().commands():
        if command.name in taken:
            dropped.append(
                f"a plugin's command {command.name!r} is not added: the name is already taken"
            )
            continue
        taken.add(command.name)
        found.append(command)
    return tuple(found), dropped


def _parser(extra: Sequence[Command] = ()) -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("conveyor-core")
    except PackageNotFoundError:  # running from a source tree that was never installed
        release = "unknown"
    parser = argparse.ArgumentParser(
        prog="conveyor",
        description="Inspect Conveyor's plugins and carriers, and run plugins' commands.",
        epilog="exit status: 0 ok, 1 problems found, 2 usage or configuration error",
    )
    parser.add_argument("--version", action="version", version=f"conveyor {release}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    specs: list[tuple[str, str, _Command, Callable[[argparse.ArgumentParser], None] | None]] = [
        (name, summary, command, None) for name, summary, command in _BUILTIN
    ]
    specs += [(c.name, c.summary, c.run, c.configure) for c in extra]
    for name, summary, command, configure in specs:
        sub = commands.add_parser(name, help=summary, description=summary)
        sub.add_argument("--json", action="store_true", help="print one JSON document")
        sub.add_argument(
            "--wide", action="store_true", help="never shorten table cells to fit the terminal"
        )
        sub.set_defaults(command=command)
        if name == "carriers":
            sub.add_argument(
                "--matrix", action="store_true", help="operation x carrier table of plan counts"
            )
        if name == "plugins":
            sub.add_argument(
                "--no-load",
                action="store_true",
                help="list the entry points from metadata without importing any plugin",
            )
        if configure is not None:
            configure(sub)
    return parser


def _wants_plugin_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` names no built-in command (or asks for help), so plugins must load."""
    builtin = {name for name, _, _ in _BUILTIN}
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None:
        return "--version" not in argv
    return first not in builtin


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``conveyor`` command on ``argv`` (default ``sys.argv[1:]``); return the status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plugins.host()  # reads the CONVEYOR_* configuration: a malformed one is refused here
        extra: tuple[Command, ...] = ()
        if _wants_plugin_command(argv):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PluginConflictWarning)
                extra, dropped = _plugin_commands()
            for line in dropped:
                print(f"conveyor: {line}", file=sys.stderr)
    except (TypeError, ValueError) as exc:  # a malformed CONVEYOR_* variable, named by exc
        print(f"conveyor: {exc}", file=sys.stderr)
        return 2
    except PluginError as exc:  # strict mode: a plugin failed while loading for its commands
        print(f"conveyor: {exc}", file=sys.stderr)
        return 1
    args = _parser(extra).parse_args(argv)
    command: _Command = args.command
    _WIDE["wide"] = args.wide
    try:
        with warnings.catch_warnings():
            # The commands report conflicts themselves, with the fix; a Python warning on
            # stderr pointing into the host would only repeat it less readably.
            warnings.simplefilter("ignore", PluginConflictWarning)
            status = command(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`| head`): point stdout at /dev/null so the interpreter's own flush
        # at exit does not fail again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
