"""Shared TileLang pieces: dtype names, strided addressing, layout classes and lowering.

Every kernel addresses its operands through one small int32 ``meta`` buffer: the iteration
shape, then per operand its element offset and strides. A layout class says, per operand,
whether it is read contiguously (``"c"``: ``offset + i``), as one broadcast value (``"s"``:
``offset``) or through the general strided formula (``"g"``) over ``rank`` dimensions. The
class, not the shape, is part of the kernel cache key, so a new shape of the same kind reuses
the compiled kernel; only the meta values change.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

import attrs

import conveyor as cv
from conveyor_metal._storage import METAL_DTYPE_NAMES

__all__ = [
    "BLOCK",
    "INT32_MAX",
    "AccumulatingKey",
    "LayoutClass",
    "accumulating_key",
    "classify",
    "dialect",
    "load",
    "lower",
    "math",
    "merge",
    "meta_values",
    "offset",
    "storage",
    "store",
    "target",
    "tl_dtype",
    "walk",
    "work",
]

#: Threads per threadgroup of the elementwise and reduction kernels (a multiple of 32).
BLOCK: Final = 256
#: Indices are 32-bit in the kernels; larger tensors are refused before launch.
INT32_MAX: Final = 2**31 - 1


def tl_dtype(dtype: cv.DType) -> str:
    """The TileLang name of ``dtype`` (``KeyError`` for what a Metal kernel cannot hold)."""
    if dtype.name not in METAL_DTYPE_NAMES:
        raise KeyError(dtype.name)
    return dtype.name


@attrs.frozen
class AccumulatingKey:
    """What a reduction, matmul or convolution kernel computes: its stored, accumulator and
    output dtypes (``family`` and ``name`` keep the families' kernels apart in the cache)."""

    family: str
    name: str
    stored: str
    accumulate: str
    output: str


def accumulating_key(family: str, plan: cv.OperationPlan) -> AccumulatingKey:
    """The kernel key of a plan whose first operand's dtype is the stored dtype of all."""
    operand = plan.operands[0]
    assert operand.dtype is not None  # a tensor (``_surface`` advertises no scalar first operand)
    accumulate = plan.accumulator_dtype or plan.compute
    return AccumulatingKey(
        family,
        plan.operation,
        tl_dtype(operand.dtype),
        tl_dtype(accumulate),
        tl_dtype(plan.outputs[0]),
    )


def work(dtype: cv.DType) -> str:
    """The dtype a pointwise body computes in: float32 for bfloat16 (rounded once on store,
    as the reference rounds its wide result once), ``tl_dtype`` otherwise."""
    return "float32" if dtype.name == "bfloat16" else tl_dtype(dtype)


@attrs.frozen
class LayoutClass:
    """How each operand is addressed (``"c"``, ``"s"`` or ``"g"``) and the strided rank."""

    kinds: tuple[str, ...]
    rank: int

    @property
    def meta_size(self) -> int:
        return self.rank + len(self.kinds) * (self.rank + 1)


def merge(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[Any, Any]:
    """Merge adjacent axes every operand walks as one (fewer axes: cheaper index math)."""
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for axis, extent in enumerate(shape):
        if extent == 1:
            continue
        if out_shape and all(
            out_strides[j][-1] == strides[j][axis] * extent for j in range(len(strides))
        ):
            out_shape[-1] *= extent
            for j in range(len(strides)):
                out_strides[j][-1] = strides[j][axis]
            continue
        out_shape.append(extent)
        for j in range(len(strides)):
            out_strides[j].append(strides[j][axis])
    return tuple(out_shape), [tuple(s) for s in out_strides]


def classify(
    shape: tuple[int, ...], operands: Sequence[cv.Layout]
) -> tuple[LayoutClass, list[int]]:
    """The layout class of operands broadcast to ``shape``, and the meta buffer's values.

    Each operand layout must already have ``shape`` (broadcast axes with stride 0).
    """
    strides = [tuple(layout.strides) for layout in operands]
    merged, merged_strides = merge(shape, strides)
    contiguous = cv.Layout(merged).strides if merged else ()
    kinds: list[str] = []
    for steps in merged_strides:
        if all(s == 0 for s in steps):
            kinds.append("s")
        elif steps == contiguous:
            kinds.append("c")
        else:
            kinds.append("g")
    rank = len(merged) if "g" in kinds else 0
    layout_class = LayoutClass(tuple(kinds), rank)
    return layout_class, meta_values(layout_class, merged, operands, merged_strides)


def meta_values(
    layout_class: LayoutClass,
    shape: tuple[int, ...],
    operands: Sequence[cv.Layout],
    strides: Sequence[tuple[int, ...]],
) -> list[int]:
    """``[shape[:rank]] + per operand [offset, strides[:rank]]`` as the kernels read them."""
    rank = layout_class.rank
    values = list(shape[:rank]) if rank else []
    for layout, walk in zip(operands, strides, strict=True):
        values.append(layout.offset)
        values.extend(walk[:rank] if rank else ())
    return values


def offset(meta: Any, layout_class: LayoutClass, slot: int, i: Any) -> Any:
    """The element index operand ``slot`` reads for flat output index ``i`` (a TIR expr)."""
    rank = layout_class.rank
    base = rank + slot * (rank + 1)
    kind = layout_class.kinds[slot]
    if kind == "s":
        return meta[base]
    if kind == "c":
        return meta[base] + i
    return meta[base] + walk(meta, 0, base + 1, rank, i)


def walk(meta: Any, shape_at: int, strides_at: int, rank: int, i: Any) -> Any:
    """The element offset of row-major index ``i`` over ``rank`` axes read from ``meta``.

    The axes' extents start at ``meta[shape_at]``, their strides at ``meta[strides_at]``. The
    outermost axis needs no modulo: ``i`` is below the product of the extents.
    """
    import tilelang.language as T

    if rank == 0:
        return 0
    position = 0
    rest = i
    for axis in reversed(range(1, rank)):
        position = position + T.truncmod(rest, meta[shape_at + axis]) * meta[strides_at + axis]
        rest = T.truncdiv(rest, meta[shape_at + axis])
    return position + rest * meta[strides_at]


_DIALECT = threading.local()

# The C target's names of the math functions (float32 versions; other dtypes go through them).
_C_MATH: Final = {
    "exp": "expf",
    "exp2": "exp2f",
    "log": "logf",
    "log2": "log2f",
    "sqrt": "sqrtf",
    "sin": "sinf",
    "cos": "cosf",
    "tanh": "tanhf",
    "floor": "floorf",
    "ceil": "ceilf",
    "round": "rintf",  # ties to even under the default rounding mode
    "fmod": "fmodf",
}


@contextlib.contextmanager
def dialect(target: str) -> Iterator[None]:
    """Build kernels for ``target``: ``math`` spells its calls for that target inside."""
    previous = getattr(_DIALECT, "target", "metal")
    _DIALECT.target = target
    try:
        yield
    finally:
        _DIALECT.target = previous


def target() -> str:
    """The target kernels are being built for (``"metal"`` unless inside ``dialect``)."""
    return str(getattr(_DIALECT, "target", "metal"))


def math(name: str, *args: Any) -> Any:
    """A math function call: TileLang's intrinsic for Metal, the libm call for the C target.

    TileLang 0.1.15's C target leaves most float intrinsics (``exp``, ``floor``, ...)
    unresolved, so the C twin of a kernel calls libm's float32 function by name and converts
    around it; the Metal source keeps the intrinsic. This spelling is the only difference
    between a kernel's Metal and C sources.
    """
    import tilelang.language as T

    if target() != "c":
        if name == "round":
            return T.round(*args)
        return getattr(T, name)(*args)
    dtype = str(args[0].dtype)
    wide = [T.cast(a, "float32") for a in args]
    return T.cast(T.call_extern("float32", _C_MATH[name], *wide), dtype)


def _bfloat16_as_bits() -> bool:
    """Whether bfloat16 buffers are declared as their uint16 bits (the C dialect).

    TileLang 0.1.15's C target refuses bfloat16 ("Cannot convert type bfloat16 to C type"),
    so the C twin reads and writes bfloat16 as bits, converting through float32 by hand;
    Metal (MSL 3.1 ``bfloat``) declares the type itself.
    """
    return getattr(_DIALECT, "target", "metal") == "c"


def storage(dtype: str) -> str:
    """The element dtype a buffer of ``dtype`` is declared with for the current target."""
    return "uint16" if dtype == "bfloat16" and _bfloat16_as_bits() else dtype


def load(value: Any, stored: str, to: str) -> Any:
    """A loaded element of ``stored`` dtype converted to ``to`` (bfloat16 bits widen exactly)."""
    import tilelang.language as T

    if stored == "bfloat16" and _bfloat16_as_bits():
        bits = T.shift_left(T.cast(value, "uint32"), T.uint32(16))
        return T.cast(T.reinterpret(bits, "float32"), to)
    return T.cast(value, to)


def store(value: Any, to: str) -> Any:
    """``value`` converted to the stored dtype ``to`` (bfloat16: round to nearest even)."""
    import tilelang.language as T

    if to != "bfloat16" or not _bfloat16_as_bits():
        return T.cast(value, to)
    bits = T.reinterpret(T.cast(value, "float32"), "uint32")
    odd = T.bitwise_and(T.shift_right(bits, T.uint32(16)), T.uint32(1))
    rounded = T.shift_right(bits + T.uint32(0x7FFF) + odd, T.uint32(16))
    return T.cast(T.if_then_else(T.isnan(value), T.uint32(0x7FC0), rounded), "uint16")


# Bounds are established by the launcher (every offset lies in its buffer), so TileLang's
# per-load guards would only cost time; the meta values are checked on the host instead.
_PASS_CONFIG: Final = {"tl.disable_safe_memory_legalize": True}


def lower(function: Any, target: str) -> str:
    """The kernel source of ``function`` lowered for ``target`` (``"metal"`` or ``"c"``)."""
    import tilelang
    from tilelang import tvm

    with tvm.target.Target(target), tvm.transform.PassContext(config=_PASS_CONFIG):
        artifact = tilelang.lower(function, target=target)
    return str(artifact.kernel_source)
