"""The eight representation-preserving operations on Metal (the core's view algebra).

The operations themselves live in ``conveyor.sdk.view_operations``: a view shares the input's
buffer whenever a layout can express it. Metal supplies only its copy, made once on the
device, for the ``reshape`` / ``rearrange`` results no layout can express.
"""

from __future__ import annotations

import conveyor as cv
from conveyor.sdk import Tensor, view_operations, wrap
from conveyor_metal._storage import TorchStorage

__all__ = ["VIEW_OPERATIONS"]


def _copy(x: Tensor, order: tuple[int, ...]) -> Tensor:
    """A contiguous device copy of ``x`` with its axes permuted by ``order``."""
    storage = x.carrier
    assert isinstance(storage, TorchStorage)
    values = storage.strided(x.layout).permute(order)
    carrier = type(storage)._from_buffer(values.contiguous().reshape(-1), x.dtype)
    return wrap(carrier, cv.Layout(tuple(values.shape)), x.dtype)


VIEW_OPERATIONS = view_operations(_copy)
