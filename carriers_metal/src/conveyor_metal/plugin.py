"""The conveyor.plugins entry point of conveyor-metal: contributes the ``metal`` carrier.

Off macOS arm64 (or without torch and tilelang) the hook raises ``PluginUnavailable``, so the
plugin is listed as ``unavailable`` with the reason instead of failing. Nothing heavy is
imported here: the carrier module imports torch lazily, when a Metal carrier is first made.
"""

from __future__ import annotations

from collections.abc import Mapping

from conveyor.plugins import PluginUnavailable, hookimpl
from conveyor_metal._platform import unavailable_reason

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    reason = unavailable_reason()
    if reason is not None:
        raise PluginUnavailable(reason)
    from conveyor_metal.metal import Metal

    return {"metal": Metal}
