"""The conveyor.plugins entry point of conveyor-metal: contributes the ``metal`` carrier.

Off macOS arm64 (or without torch and tilelang) the hooks raise ``PluginUnavailable``, so the
plugin is listed as ``unavailable`` with the reason instead of failing. Nothing heavy is
imported here: the carrier module imports torch lazily, when a Metal carrier is first made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from conveyor.plugins import PluginUnavailable, hookimpl
from conveyor_metal._platform import unavailable_reason

CONVEYOR_PLUGIN_API = "1.0"


def _require_platform() -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailable(reason)


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    _require_platform()
    from conveyor_metal.metal import Metal

    return {"metal": Metal}


@hookimpl
def conveyor_move_routes() -> Iterable[object]:
    """Metal <-> CPU: both export NumPy spans, so the core's span copy is one bulk transfer."""
    _require_platform()
    from conveyor.sdk import MoveRoute, span_copy
    from conveyor_generic import CPU
    from conveyor_metal.metal import Metal

    return [
        MoveRoute(source=Metal, destination=CPU, copy=span_copy),
        MoveRoute(source=CPU, destination=Metal, copy=span_copy),
    ]
