"""Hook specifications: what a Conveyor plugin may contribute, and the plugin API version.

Every hook takes no argument and returns data; the host calls each plugin's implementations one
by one (never as one pluggy multicall) so that a failure is attributed to exactly one plugin and
a plugin contributes everything or nothing. Spec and implementation names mirror each other, and
pluggy validates implementations against these specs when the plugin is registered, not at the
first call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, TypeAlias

import pluggy

if TYPE_CHECKING:
    from conveyor.engine.carrier import Carrier

__all__ = [
    "HOOK_NAMES",
    "PLUGIN_API_VERSION",
    "conveyor_carriers",
    "conveyor_commands",
    "conveyor_kernel_packs",
    "conveyor_move_routes",
    "conveyor_operation_definitions",
    "conveyor_operation_observers",
    "hookimpl",
    "hookspec",
]

#: The project name pluggy keys markers on: ``@hookimpl`` sets ``conveyor_impl`` on a function.
_PROJECT: Final = "conveyor"

#: Marks a hook specification. Only this module declares specs.
hookspec: Final = pluggy.HookspecMarker(_PROJECT)

#: Marks a hook implementation in a plugin module: ``@conveyor.hookimpl``.
hookimpl: Final = pluggy.HookimplMarker(_PROJECT)

#: The plugin API this host speaks, as ``(major, minor)``. A plugin module declares the version
#: it was written for as ``CONVEYOR_PLUGIN_API = "MAJOR.MINOR"``. The host loads a plugin when
#: the majors agree and the plugin's minor is not newer than the host's: a minor release only
#: adds hooks, so a plugin written for 1.0 still works with a 1.3 host, but not the reverse.
PLUGIN_API_VERSION: Final = (1, 0)

#: An operation observer: called with each executed operation (its profiling record).
_Observer: TypeAlias = Callable[[object], None]


@hookspec
def conveyor_carriers() -> Mapping[str, type[Carrier]]:  # type: ignore[empty-body]  # a spec has no body
    """Return the carrier classes this plugin contributes, keyed by registered name.

    Names are the short lower-case identifiers users type (``"cpu"``, ``"file"``); values are
    ``conveyor.Carrier`` subclasses. Return the classes themselves: the host validates them
    once at load, and two plugins claiming one name is reported as a conflict.

    Import heavy dependencies (torch, a GPU runtime) when a carrier is first constructed, not
    here: this hook runs during discovery. Raise ``conveyor.plugins.PluginUnavailable`` when the
    hardware or an optional dependency is missing.
    """


@hookspec
def conveyor_operation_definitions() -> Iterable[object]:  # type: ignore[empty-body]  # spec
    """Return operation definitions this plugin contributes (consumed by the extension API)."""


@hookspec
def conveyor_kernel_packs() -> Iterable[object]:  # type: ignore[empty-body]  # spec
    """Return kernel packs this plugin contributes (consumed by the extension API)."""


@hookspec
def conveyor_move_routes() -> Iterable[object]:  # type: ignore[empty-body]  # spec
    """Return movement routes between carriers this plugin contributes (used by ``cv.move``)."""


@hookspec
def conveyor_commands() -> Iterable[object]:  # type: ignore[empty-body]  # spec
    """Return ``conveyor.plugins.Command`` records: subcommands of the ``conveyor`` command.

    A name the command line has built in (``plugins``, ``carriers``,
    ``doctor``), or one an earlier plugin already contributed, is not added; ``conveyor
    doctor`` names the clash.
    """


@hookspec
def conveyor_operation_observers() -> Iterable[_Observer]:  # type: ignore[empty-body]  # spec
    """Return callables to be told about every executed operation (profiling / computation hooks).

    They are registered with ``conveyor.engine.profiling.add_observer`` when the plugin loads. Only
    plugins that implement this hook install observers, so the hot path pays nothing otherwise.
    """


#: The hooks in the order the host calls them on each plugin. Carriers come first because they
#: are what most plugins exist for; observers come last because installing them has a global
#: effect that must only happen once every other hook of the plugin has succeeded.
HOOK_NAMES: Final = (
    "conveyor_carriers",
    "conveyor_operation_definitions",
    "conveyor_kernel_packs",
    "conveyor_move_routes",
    "conveyor_commands",
    "conveyor_operation_observers",
)
