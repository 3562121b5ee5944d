"""Array API set functions (every NaN is its own distinct value, as the standard asks)."""

from __future__ import annotations

from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor
from conveyor.lib import composed as C
from conveyor.types import dtypes

__all__ = ["isin", "unique_all", "unique_counts", "unique_inverse", "unique_values"]

unique_all = C.unique_all
unique_counts = C.unique_counts
unique_inverse = C.unique_inverse
unique_values = C.unique_values


def isin(x1: Tensor, x2: Any, /, *, invert: bool = False) -> Tensor:
    """Whether each element of ``x1`` occurs in ``x2`` (one broadcast comparison)."""
    pool = x2 if isinstance(x2, Tensor) else C.asarray(x2, carrier=type(x1.carrier))
    flat = F.reshape(pool, shape=(pool.size,))
    column = F.unsqueeze(x1, axes=x1.ndim)
    found = (
        C.any(F.eq(column, flat), axis=-1) if pool.size else C.full_like(x1, False, dtypes.bool_)
    )
    return F.logical_not(found) if invert else found
