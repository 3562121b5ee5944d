"""Array API set functions (every NaN is its own distinct value, as the standard asks)."""

from __future__ import annotations

from conveyor import composed as C

__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]

unique_all = C.unique_all
unique_counts = C.unique_counts
unique_inverse = C.unique_inverse
unique_values = C.unique_values
