"""conveyor-dask: ``DaskCarrier``, a definition-backed sibling carrier on ``dask.distributed``.

Importing this package registers the carrier's ``CarrierDefinition`` but imports no Dask; the
plugin host imports it only when a program asks for the ``"dask"`` carrier.
"""

from conveyor_dask.carrier import DaskCarrier

__all__ = ["DaskCarrier"]
