"""The conveyor.plugins entry point of conveyor-dask: contributes the ``"dask"`` carrier.

Cheap to import: neither the carrier module nor Dask loads until the host asks for carriers.
"""

from __future__ import annotations

from collections.abc import Mapping

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_dask.carrier import DaskCarrier

    return {"dask": DaskCarrier}
