"""Plugin states and records, and the errors and warnings the plugin host raises.

Every discovered plugin ends in exactly one ``PluginState``; its ``PluginRecord`` is the frozen
answer to "what happened to this plugin", which is what ``conveyor plugins`` prints and what a
host application inspects. Records never hold live objects (classes, exceptions), so they can be
printed, compared and serialised freely.
"""

from __future__ import annotations

import enum
from typing import final

import attrs

from conveyor.types.warnings import ConveyorWarning

__all__ = [
    "PluginBrokenWarning",
    "PluginConflictWarning",
    "PluginError",
    "PluginNamespaceWarning",
    "PluginRecord",
    "PluginState",
    "PluginUnavailable",
]


@final
class PluginState(enum.StrEnum):
    """The one state a discovered plugin ends in.

    A ``StrEnum`` so that ``record.state == "loaded"`` holds and JSON output needs no mapping.
    """

    #: Imported, handshake passed, every hook succeeded; its contributions are in use.
    LOADED = "loaded"
    #: Not imported, because an allow-list or block-list option excluded it.
    DISABLED = "disabled"
    #: It raised ``PluginUnavailable``: hardware or an optional dependency is missing.
    UNAVAILABLE = "unavailable"
    #: Imported, but written for a plugin API this host does not speak; no hook ran.
    INCOMPATIBLE = "incompatible"
    #: Its import or one of its hooks failed; the traceback is kept.
    BROKEN = "broken"

    __module__ = "conveyor.plugins"


@final
@attrs.frozen
class PluginRecord:
    """What happened to one discovered plugin (one entry point of one distribution).

    Build by the host only; read it through ``PluginHost.plugins()``.
    """

    #: The entry point name, e.g. ``"generic"``; what allow/block lists usually name.
    name: str
    #: The distribution that declared the entry point (``None`` if it has no metadata).
    distribution: str | None
    #: The distribution's version.
    version: str | None
    #: The entry point's target, e.g. ``"conveyor_generic.plugin"``.
    entry_point: str
    state: PluginState
    #: Registered carrier names the plugin contributes, sorted (empty unless loaded).
    carriers: tuple[str, ...] = ()
    #: The plugin's ``CONVEYOR_PLUGIN_API`` declaration as written (``None`` if not imported or
    #: not declared).
    api_version: str | None = None
    #: Why the plugin is not loaded, one sentence with the fix; ``None`` when loaded.
    error: str | None = None
    #: The formatted traceback of the failure, for broken and unavailable plugins.
    traceback: str | None = None
    #: The hook that failed or refused (``None`` when the import or handshake did).
    hook: str | None = None
    #: One message per carrier name this plugin shares with another plugin, then one per
    #: entry-point name another distribution declares too.
    conflicts: tuple[str, ...] = ()
    #: Seconds spent importing the plugin and running its hooks (``None`` if never imported);
    #: ``conveyor plugins`` shows it, so a slow plugin is easy to find. Not part of equality.
    load_seconds: float | None = attrs.field(default=None, eq=False)

    @property
    def label(self) -> str:
        """How messages name the plugin: entry point, and distribution when known."""
        if self.distribution is None:
            return f"plugin {self.name!r} ({self.entry_point})"
        return f"plugin {self.name!r} of distribution {self.distribution!r}"


class PluginError(RuntimeError):
    """A plugin failed and strict mode (``CONVEYOR_STRICT_PLUGINS=1``, ``strict=True``) is on.

    Carries the failing plugin's ``distribution``, ``entry_point`` (its name) and ``hook``
    (``None`` when the import or API handshake failed). Without strict mode the same failure
    only marks the plugin broken or incompatible.
    """

    __module__ = "conveyor.plugins"

    def __init__(
        self, message: str, *, distribution: str | None, entry_point: str, hook: str | None
    ) -> None:
        super().__init__(message)
        self.distribution = distribution
        self.entry_point = entry_point
        self.hook = hook


class PluginUnavailable(RuntimeError):
    """Raised by a plugin, at import or in a hook, when it cannot work on this machine.

    Use it for missing hardware (Metal off macOS) or a missing optional dependency; the message
    should say what is missing and how to get it. The plugin ends ``unavailable`` instead of
    ``broken``, and strict mode does not treat it as a failure.
    """

    __module__ = "conveyor.plugins"


class PluginBrokenWarning(ConveyorWarning):
    """A plugin that had loaded broke later (an observer raised); its contributions are gone."""

    __module__ = "conveyor.plugins"


class PluginNamespaceWarning(ConveyorWarning):
    """A plugin changed public attributes of the ``conveyor`` namespace while it loaded.

    Raised as a warning, not an error: a plugin that ends broken has the originals restored,
    one that loads keeps its replacements (until it breaks), and the message names both the
    plugin and every attribute.
    """

    __module__ = "conveyor.plugins"


class PluginConflictWarning(ConveyorWarning):
    """Two plugins contribute the same carrier name; the message says which one won and why."""

    __module__ = "conveyor.plugins"
