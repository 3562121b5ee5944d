"""The eight representation-preserving operations of Generic and CPU (the core's view algebra).

The operations themselves are the SDK's ``view_operations``; a host carrier supplies only
its copy, made with NumPy, for the ``reshape`` / ``rearrange`` results no layout can express.
"""

from __future__ import annotations

import numpy as np

from conveyor.sdk import Tensor, view_operations
from conveyor_generic._storage import ArrayStorage

__all__ = ["VIEW_OPERATIONS"]


def _copy(x: Tensor, order: tuple[int, ...]) -> Tensor:
    """A contiguous NumPy copy of ``x`` with its axes permuted by ``order``, on its carrier."""
    storage = x.carrier
    assert isinstance(storage, ArrayStorage)
    return type(storage).wrap(np.ascontiguousarray(x.numpy().transpose(order)), x.dtype)


VIEW_OPERATIONS = view_operations(_copy)
