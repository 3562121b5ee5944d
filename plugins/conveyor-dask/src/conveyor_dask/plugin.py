"""The conveyor.plugins entry point of conveyor-dask: contributes the ``"dask"`` carrier.

Cheap to import: neither the carrier module nor Dask loads until the host asks for carriers.
It also adds a ``dask`` section to ``conveyor doctor`` naming the active cluster's scheduler
and dashboard.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from conveyor.plugins import add_doctor_section, hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers() -> Mapping[str, type]:
    from conveyor_dask.carrier import DaskCarrier

    return {"dask": DaskCarrier}


def _doctor() -> Mapping[str, str]:
    """The cluster in use in this process, else the one ``CONVEYOR_DASK_SCHEDULER`` names."""
    from conveyor_dask import _cluster

    found = _cluster.active_session()
    if found is not None:
        return _cluster.describe(found)
    address = os.environ.get(_cluster.SCHEDULER_VARIABLE, "").strip()
    return _cluster.probe(address) if address else {}


add_doctor_section("dask", _doctor)
