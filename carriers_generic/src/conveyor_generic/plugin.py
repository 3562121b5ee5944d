"""The conveyor.plugins entry point of conveyor-generic: contributes Generic and CPU.

Cheap to import: the carrier modules load only when the host asks for the carriers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_generic.cpu import CPU
    from conveyor_generic.generic import Generic

    return {"generic": Generic, "cpu": CPU}


@hookimpl
def conveyor_move_routes() -> Iterable[object]:
    """CPU <-> Generic: both export NumPy spans, so the core's span copy is the bulk route."""
    from conveyor.sdk import MoveRoute, span_copy
    from conveyor_generic.cpu import CPU
    from conveyor_generic.generic import Generic

    return [
        MoveRoute(source=CPU, destination=Generic, copy=span_copy),
        MoveRoute(source=Generic, destination=CPU, copy=span_copy),
    ]
