"""``conv_general`` as an implicit GEMM on the matmul kernel's tiling (``matmul.tiled``).

Per feature group ``g`` (the batch axis of the GEMM), the convolution is a product of an
``(N * output positions) x (input channels per group * kernel taps)`` matrix, whose entries
are read straight from the input (no im2col buffer), with the ``(channels x taps) x (outputs
per group)`` weight matrix. A row decodes to (image, output position), a contracted index to
(channel, tap); the input position of a tap is ``y * window_stride + t * rhs_dilation - low``
in the dilated input, which holds a real element only where it is a non-negative multiple of
``lhs_dilation`` inside the input: elsewhere the entry is zero (padding and dilation holes).
The result is written channels-last, ``(N, output positions..., O)``, so rows are contiguous;
the caller views it in the requested axis order without a copy.

Both operands are read through their own strides in canonical (N, C, spatial...) /
(O, I, spatial...) order, so ``dimension_numbers`` and strided views cost no copy. ``meta``
holds the offsets, strides, extents and options (``meta_layout``); one kernel serves every
shape and option value of its class, the number of spatial axes.
(No ``from __future__ import annotations`` here: TileLang evaluates the signature annotations.)
"""

from typing import Any

import attrs

from conveyor_metal.kernels._pointwise import symbol
from conveyor_metal.kernels._tile import AccumulatingKey
from conveyor_metal.kernels.matmul import tiled

__all__ = ["ConvClass", "build", "meta_layout"]

# The meta fields of ``d`` spatial axes: (name, length in words).
_FIELDS = (
    ("x_offset", 0),
    ("x_strides", 2),
    ("w_offset", 0),
    ("w_strides", 2),
    ("in_shape", 0),
    ("out_shape", 0),
    ("kernel_shape", 0),
    ("step", 0),
    ("low", 0),
    ("lhs_dilation", 0),
    ("rhs_dilation", 0),
    ("per_in", 0),
    ("per_out", 0),
    ("out_size", 0),
    ("taps", 0),
    ("channels", 0),
)
_SCALARS = frozenset({"x_offset", "w_offset", "per_in", "per_out", "out_size", "taps", "channels"})


@attrs.frozen
class ConvClass:
    """The layout class of a convolution: its number of spatial axes."""

    spatial: int


def meta_layout(layout_class: ConvClass) -> dict[str, int]:
    """Where each field of the meta buffer starts, and its total size."""
    d = layout_class.spatial
    parts: dict[str, int] = {}
    at = 0
    for name, extra in _FIELDS:
        parts[name] = at
        at += 1 if name in _SCALARS else d + extra
    parts["size"] = at
    return parts


def _T() -> Any:
    import tilelang.language as T

    return T


def _digits(meta: Any, shape_at: int, rank: int, flat: Any) -> list[Any]:
    """The row-major multi-index of ``flat`` over ``rank`` extents read from ``meta``."""
    T = _T()
    digits = []
    rest = flat
    for axis in reversed(range(rank)):
        digits.append(T.truncmod(rest, meta[shape_at + axis]))
        rest = T.truncdiv(rest, meta[shape_at + axis])
    return digits[::-1]


def build(key: AccumulatingKey, layout_class: ConvClass) -> Any:
    """The ``prim_func`` of a convolution kernel for the current dialect."""
    T = _T()
    p = meta_layout(layout_class)
    d = layout_class.spatial

    def a_at(meta: Any, g: Any, row: Any, k: Any) -> tuple[Any, Any]:
        n = T.truncdiv(row, meta[p["out_size"]])
        ys = _digits(meta, p["out_shape"], d, T.truncmod(row, meta[p["out_size"]]))
        c = T.truncdiv(k, meta[p["taps"]])
        ts = _digits(meta, p["kernel_shape"], d, T.truncmod(k, meta[p["taps"]]))
        channel = g * meta[p["per_in"]] + c
        index = meta[p["x_offset"]] + n * meta[p["x_strides"]] + channel * meta[p["x_strides"] + 1]
        inside = None
        for axis in range(d):
            place = (
                ys[axis] * meta[p["step"] + axis]
                + ts[axis] * meta[p["rhs_dilation"] + axis]
                - meta[p["low"] + axis]
            )
            dilation = meta[p["lhs_dilation"] + axis]
            q = T.truncdiv(place, dilation)
            valid = T.And(
                T.And(place >= 0, T.truncmod(place, dilation) == 0), q < meta[p["in_shape"] + axis]
            )
            inside = valid if inside is None else T.And(inside, valid)
            index = index + q * meta[p["x_strides"] + 2 + axis]
        return inside, index

    def b_at(meta: Any, g: Any, k: Any, col: Any) -> tuple[Any, Any]:
        c = T.truncdiv(k, meta[p["taps"]])
        ts = _digits(meta, p["kernel_shape"], d, T.truncmod(k, meta[p["taps"]]))
        out = g * meta[p["per_out"]] + col
        index = meta[p["w_offset"]] + out * meta[p["w_strides"]] + c * meta[p["w_strides"] + 1]
        for axis in range(d):
            index = index + ts[axis] * meta[p["w_strides"] + 2 + axis]
        return None, index

    def y_at(meta: Any, g: Any, row: Any, col: Any, m: Any, n: Any) -> Any:
        return row * meta[p["channels"]] + g * n + col

    function = tiled(key, p["size"], a_at, b_at, y_at)
    return function.with_attr("global_symbol", symbol(key, layout_class))
