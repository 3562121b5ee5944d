"""The conveyor.plugins entry point of conveyor-generic: contributes Generic and CPU.

Cheap to import: the carrier modules load only when the host asks for the carriers.
"""

from __future__ import annotations

from collections.abc import Mapping

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_generic.cpu import CPU
    from conveyor_generic.generic import Generic

    return {"generic": Generic, "cpu": CPU}
