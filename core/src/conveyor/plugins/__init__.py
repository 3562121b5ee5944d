"""The plugin host: carriers and extensions discovered from the ``conveyor.plugins`` entry points.

Importing this package reads no distribution metadata and imports no plugin; the default host
scans on first use (``host().plugins()``, the first tensor naming a carrier, the ``conveyor``
command). A plugin module declares ``CONVEYOR_PLUGIN_API = "1.0"`` and implements hooks with
``@hookimpl``; see ``docs/plugins.md``. Plugins that add ``conveyor`` subcommands
(``Command``) or ``conveyor doctor`` sections (``add_doctor_section``) print their tables with
``table``, as the built-in commands do.
"""

from __future__ import annotations

from conveyor.plugins._commands import Command
from conveyor.plugins._config import ENVIRONMENT_VARIABLES
from conveyor.plugins._doctor import add_doctor_section, doctor_sections
from conveyor.plugins._hookspecs import PLUGIN_API_VERSION, hookimpl, hookspec
from conveyor.plugins._host import PluginHost, host, set_default_host
from conveyor.plugins._state import (
    PluginBrokenWarning,
    PluginConflictWarning,
    PluginError,
    PluginNamespaceWarning,
    PluginRecord,
    PluginState,
    PluginUnavailable,
)
from conveyor.plugins._tables import table, terminal_width

__all__ = [
    "Command",
    "ENVIRONMENT_VARIABLES",
    "PLUGIN_API_VERSION",
    "PluginBrokenWarning",
    "PluginConflictWarning",
    "PluginError",
    "PluginHost",
    "PluginNamespaceWarning",
    "PluginRecord",
    "PluginState",
    "PluginUnavailable",
    "add_doctor_section",
    "doctor_sections",
    "hookimpl",
    "hookspec",
    "host",
    "set_default_host",
    "table",
    "terminal_width",
]
