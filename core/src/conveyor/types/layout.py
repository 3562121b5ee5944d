"""Layout: a flat strided view (shape, strides, offset) of a carrier's buffer, in elements.

Layouts follow NumPy's conventions exactly (row-major canonical order, negative axes count from
the end, broadcasting aligns from the right and widens extent 1 with stride 0), so a layout maps
onto ``numpy.lib.stride_tricks.as_strided`` of a carrier's flat buffer with no translation.
Every view operation (reshape, permute, broadcast, basic indexing) is pure layout algebra here;
carriers never re-implement it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

__all__ = [
    "Layout",
    "broadcast_shapes",
    "normalize_axes",
    "normalize_axis",
    "rearrange_plan",
    "slot_indices",
    "view_layout",
]


def _as_shape(values: Iterable[Any] | int, what: str) -> tuple[int, ...]:
    if isinstance(values, int) and not isinstance(values, bool):
        return (values,)
    out = []
    for v in values:  # type: ignore[union-attr]  # checked non-int above
        if isinstance(v, bool):
            msg = f"{what} entries must be integers, got {v!r} (bool)"
            raise TypeError(msg)
        out.append(operator.index(v))
    return tuple(out)


#: The largest element count, extent, stride or slot a layout may name: NumPy and every
#: carrier index with int64.
_INDEX_MAX = 2**63 - 1

# shape -> row-major strides, for shapes already seen (bounded: cleared when it grows large).
_CONTIGUOUS: dict[tuple[int, ...], tuple[int, ...]] = {}


_CONTIGUOUS_LAYOUTS: dict[tuple[int, ...], Layout] = {}


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    found = _CONTIGUOUS.get(shape)
    if found is None:
        strides = []
        step = 1
        for extent in reversed(shape):
            strides.append(step)
            step *= max(extent, 1)
        found = tuple(reversed(strides))
        if len(_CONTIGUOUS) > 4096:
            _CONTIGUOUS.clear()
        _CONTIGUOUS[shape] = found
    return found


def _refuse_past_int64(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> None:
    """Raise ``ValueError`` for a layout int64 cannot index, saying what is too large."""
    size = math.prod(shape)
    if size > _INDEX_MAX:
        msg = (
            f"Layout: shape {shape!r} has {size} elements, more than int64 can index "
            f"({_INDEX_MAX}); use a smaller shape"
        )
        raise ValueError(msg)
    if max(shape, default=0) > _INDEX_MAX:
        msg = (
            f"Layout: shape {shape!r} has an extent of {max(shape)}, more than int64 can "
            f"index ({_INDEX_MAX}); use a smaller shape"
        )
        raise ValueError(msg)
    low = high = offset
    for extent, stride in zip(shape, strides, strict=True):
        reach = (extent - 1) * stride if extent else 0
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    msg = (
        f"Layout: strides {strides!r} with offset {offset} (slots [{low}, {high + 1})) go "
        f"beyond what int64 can index ({_INDEX_MAX}); use smaller strides"
    )
    raise ValueError(msg)


@final
class Layout:
    """Shape, strides and offset (all in elements) of a view into one flat buffer.

    Frozen and hashable: layouts are values. Strides ``None`` means row-major contiguous.
    """

    __slots__ = ("_contiguous", "_hash", "_span", "offset", "shape", "size", "strides")

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    size: int  # number of logical elements
    _hash: int | None
    _contiguous: bool
    _span: tuple[int, int]

    def __init__(
        self,
        shape: Sequence[int] | int,
        strides: Sequence[int] | None = None,
        offset: int = 0,
    ) -> None:
        shape_t = _as_shape(shape, "shape")
        if any(extent < 0 for extent in shape_t):
            msg = f"Layout: shape extents must be >= 0, got {shape_t!r}"
            raise ValueError(msg)
        if strides is None:
            strides_t = _contiguous_strides(shape_t)
        else:
            strides_t = _as_shape(strides, "strides")
            if len(strides_t) != len(shape_t):
                msg = f"Layout: {len(strides_t)} strides for {len(shape_t)} axes"
                raise ValueError(msg)
        offset = operator.index(offset)
        if offset < 0:
            msg = f"Layout: offset must be >= 0, got {offset!r}"
            raise ValueError(msg)
        if max(shape_t, default=0) > _INDEX_MAX or max(map(abs, strides_t), default=0) > _INDEX_MAX:
            _refuse_past_int64(shape_t, strides_t, offset)
        self._init(shape_t, strides_t, offset)

    def _init(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> None:
        # Everything derived is computed once here: layouts are immutable and these are read
        # on every storage access, so caching them keeps the per-operation path short.
        size = math.prod(shape)
        contiguous = True
        low = high = offset
        if size:
            step = 1
            for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
                if extent != 1 and stride != step:
                    contiguous = False
                step *= extent
                reach = (extent - 1) * stride
                if reach < 0:
                    low += reach
                else:
                    high += reach
            high += 1
            if size > _INDEX_MAX or high > _INDEX_MAX or low < -_INDEX_MAX:
                # Also reached by the view algebra (broadcast_to, reshape): no view may name
                # more elements or slots than int64 indexes. Comparisons only: no call here.
                _refuse_past_int64(shape, strides, offset)
        elif shape and max(shape) > _INDEX_MAX:  # empty, but with an extent int64 cannot hold
            _refuse_past_int64(shape, strides, offset)
        setattr_ = object.__setattr__
        setattr_(self, "shape", shape)
        setattr_(self, "strides", strides)
        setattr_(self, "offset", offset)
        setattr_(self, "size", size)
        setattr_(self, "_contiguous", contiguous)
        setattr_(self, "_span", (low, high))
        setattr_(self, "_hash", None)

    @classmethod
    def contiguous(cls, shape: Sequence[int] | int, offset: int = 0) -> Layout:
        """Row-major contiguous layout of ``shape``; internal tuples skip re-validation."""
        if type(shape) is tuple and offset == 0:
            found = _CONTIGUOUS_LAYOUTS.get(shape)
            if found is None:
                found = cls(shape)  # validated once per shape; layouts are immutable
                if len(_CONTIGUOUS_LAYOUTS) > 4096:
                    _CONTIGUOUS_LAYOUTS.clear()
                _CONTIGUOUS_LAYOUTS[found.shape] = found
            return found
        return cls(shape, None, offset)

    @classmethod
    def _derived(cls, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Layout:
        """A layout the view algebra proved valid (int tuples, offset >= 0): no re-validation."""
        self = object.__new__(cls)
        self._init(shape, strides, offset)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        msg = f"Layout is frozen; cannot set {name!r}"
        raise AttributeError(msg)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (self.shape, self.strides, self.offset) == (other.shape, other.strides, other.offset)

    def __hash__(self) -> int:
        value = self._hash
        if value is None:
            value = hash((self.shape, self.strides, self.offset))
            object.__setattr__(self, "_hash", value)
        return value

    def __repr__(self) -> str:
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    def __reduce__(self) -> tuple[type[Layout], tuple[tuple[int, ...], tuple[int, ...], int]]:
        return (Layout, (self.shape, self.strides, self.offset))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """Row-major contiguous (extent-1 axes may have any stride; empty layouts always are)."""
        return self._contiguous

    def span(self) -> tuple[int, int]:
        """The half-open range of buffer slots this layout can touch (empty: ``(offset, offset)``).

        Carriers check it against their size before any read or write.
        """
        return self._span

    # -- view algebra -----------------------------------------------------------------------

    def broadcast_to(self, shape: Sequence[int]) -> Layout:
        """A layout that reads this one broadcast to ``shape`` (stride 0 on widened axes)."""
        target = _as_shape(shape, "shape")
        if len(target) < self.ndim:
            msg = f"cannot broadcast shape {self.shape} to {target}: fewer axes"
            raise ValueError(msg)
        lead = len(target) - self.ndim
        strides = [0] * lead
        for extent, stride, want in zip(self.shape, self.strides, target[lead:], strict=True):
            if extent == want:
                strides.append(stride)
            elif extent == 1:
                strides.append(0)
            else:
                msg = f"cannot broadcast shape {self.shape} to {target}"
                raise ValueError(msg)
        if any(extent < 0 for extent in target):
            msg = f"Layout: shape extents must be >= 0, got {target!r}"
            raise ValueError(msg)
        return Layout._derived(target, tuple(strides), self.offset)

    def permute(self, axes: Sequence[int]) -> Layout:
        order = normalize_axes(axes, self.ndim)
        if len(order) != self.ndim:
            msg = f"permute needs all {self.ndim} axes, got {tuple(axes)!r}"
            raise ValueError(msg)
        return Layout._derived(
            tuple([self.shape[a] for a in order]),
            tuple([self.strides[a] for a in order]),
            self.offset,
        )

    def squeeze(self, axes: Sequence[int] | int | None = None) -> Layout:
        if axes is None:
            drop = {a for a, extent in enumerate(self.shape) if extent == 1}
        else:
            drop = set(normalize_axes(axes, self.ndim))
            for a in drop:
                if self.shape[a] != 1:
                    msg = f"cannot squeeze axis {a} of extent {self.shape[a]} (shape {self.shape})"
                    raise ValueError(msg)
        keep = [a for a in range(self.ndim) if a not in drop]
        return Layout._derived(
            tuple([self.shape[a] for a in keep]),
            tuple([self.strides[a] for a in keep]),
            self.offset,
        )

    def unsqueeze(self, axes: Sequence[int] | int) -> Layout:
        new_ndim = self.ndim + len(_as_shape(axes, "axes"))
        inserted = set(normalize_axes(axes, new_ndim))
        shape, strides = list(self.shape), list(self.strides)
        for a in sorted(inserted):
            shape.insert(a, 1)
            strides.insert(a, 0)
        return Layout._derived(tuple(shape), tuple(strides), self.offset)

    def reshape(self, shape: Sequence[int] | int) -> Layout | None:
        """The same elements under ``shape`` without copying, or ``None`` when a copy is needed.

        Raises:
            ValueError: the element counts differ or more than one extent is -1.
        """
        target = list(_as_shape(shape, "shape"))
        if target.count(-1) > 1:
            msg = f"reshape: at most one -1 extent, got {tuple(target)}"
            raise ValueError(msg)
        if -1 in target:
            known = math.prod(e for e in target if e != -1)
            if known == 0 or self.size % known:
                msg = f"cannot reshape {self.shape} ({self.size} elements) to {tuple(target)}"
                raise ValueError(msg)
            target[target.index(-1)] = self.size // known
        if math.prod(target) != self.size or any(e < 0 for e in target):
            msg = f"cannot reshape {self.shape} ({self.size} elements) to {tuple(target)}"
            raise ValueError(msg)
        if self._contiguous:
            shape = tuple(target)
            return Layout._derived(shape, _contiguous_strides(shape), self.offset)
        return self._reshape_strided(tuple(target))

    def _reshape_strided(self, target: tuple[int, ...]) -> Layout | None:
        # NumPy's no-copy rule: pair the smallest groups of source and target axes with equal
        # element counts; each source group must be one contiguous run (it is then re-split
        # into its target extents), else a copy is needed (None). Extent-1 source axes carry
        # no placement and are dropped first. Called only for non-empty layouts.
        src = [(e, s) for e, s in zip(self.shape, self.strides, strict=True) if e != 1]
        strides = [0] * len(target)
        si = ti = 0
        while si < len(src) and ti < len(target):
            src_end, tgt_end = si + 1, ti + 1
            src_count, tgt_count = src[si][0], target[ti]
            while src_count != tgt_count:
                if tgt_count < src_count:
                    tgt_count *= target[tgt_end]
                    tgt_end += 1
                else:
                    src_count *= src[src_end][0]
                    src_end += 1
            for k in range(si, src_end - 1):
                if src[k][1] != src[k + 1][0] * src[k + 1][1]:
                    return None  # a target axis would straddle a stride break
            step = src[src_end - 1][1]
            for k in range(tgt_end - 1, ti - 1, -1):
                strides[k] = step
                step *= target[k]
            si, ti = src_end, tgt_end
        return Layout._derived(target, tuple(strides), self.offset)

    def index(self, key: Any) -> Layout:
        """Basic indexing (ints, slices, ``None``, ``...``) as a view, like NumPy."""
        items = key if isinstance(key, tuple) else (key,)
        if sum(1 for k in items if k is Ellipsis) > 1:
            msg = "an index can only have a single ellipsis ('...')"
            raise IndexError(msg)
        consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
        if consumed > self.ndim:
            msg = f"too many indices: {consumed} for a tensor with {self.ndim} axes"
            raise IndexError(msg)
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items = items[:at] + (slice(None),) * (self.ndim - consumed) + items[at + 1 :]
        else:
            items = items + (slice(None),) * (self.ndim - consumed)
        shape: list[int] = []
        strides: list[int] = []
        offset = self.offset
        axis = 0
        for k in items:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            extent, stride = self.shape[axis], self.strides[axis]
            axis += 1
            if isinstance(k, slice):
                start, stop, step = k.indices(extent)
                count = len(range(start, stop, step))
                if count:
                    offset += start * stride
                shape.append(count)
                strides.append(stride * step)
            elif isinstance(k, bool) or not hasattr(k, "__index__"):
                msg = f"only integers, slices, None and ... are basic indices, got {k!r}"
                raise IndexError(msg)
            else:
                i = operator.index(k)
                if not -extent <= i < extent:
                    msg = f"index {i} is out of range for axis {axis - 1} with extent {extent}"
                    raise IndexError(msg)
                offset += (i % extent) * stride
        return Layout(shape, strides, offset)


def normalize_axis(axis: int, ndim: int) -> int:
    """``axis`` counted from the front; negative axes count from the end.

    Raises:
        numpy.exceptions.AxisError: ``axis`` is out of range (NumPy's type, an ``IndexError``
            and a ``ValueError``); the message names the axis and the rank.
    """
    if ndim == 0 and axis in (0, -1):
        return 0  # a 0-d tensor's single element answers to axis 0 and -1, as in PyTorch
    if not -ndim <= axis < ndim:
        from numpy.exceptions import AxisError  # only on refusal: core imports no NumPy eagerly

        msg = f"axis {axis} is out of range for {ndim} axes"
        raise AxisError(msg)
    return axis % ndim


def normalize_axes(axes: Sequence[int] | int | None, ndim: int) -> tuple[int, ...]:
    """Every axis counted from the front; ``None`` means all axes; duplicates are refused."""
    if axes is None:
        return tuple(range(ndim))
    out = tuple(normalize_axis(a, ndim) for a in _as_shape(axes, "axes"))
    if len(set(out)) != len(out):
        msg = f"repeated axis in {tuple(_as_shape(axes, 'axes'))!r}"
        raise ValueError(msg)
    return out


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of shapes (``ValueError`` naming the shapes when incompatible)."""
    if len(shapes) == 1:
        return tuple(shapes[0])
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, extent in enumerate(s, ndim - len(s)):
            if extent != 1:
                if out[i] not in (1, extent):
                    msg = f"shapes {', '.join(map(str, shapes))} cannot be broadcast together"
                    raise ValueError(msg)
                out[i] = extent
    return tuple(out)


# -- the eight view names as layout algebra, shared by every carrier ------------------------

_TOKEN = r"\.\.\.|[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S"  # compiled (and cached) by re on first use


def _pattern_groups(side: str, pattern: str) -> list[list[str]]:
    """One list of axis names per axis of one side of a pattern (``1`` is an empty group)."""
    out: list[list[str]] = []
    group: list[str] | None = None
    for token in re.findall(_TOKEN, side):
        if token == "(" and group is None:
            group = []
        elif token == ")" and group is not None:
            out.append(group)
            group = None
        elif token == "1" or token == "..." or token.isidentifier():
            names = [] if token == "1" else [token]
            if group is None:
                out.append(names)
            else:
                group.extend(names)
        else:
            msg = f"rearrange: unexpected {token!r} in the pattern {pattern!r}"
            raise ValueError(msg)
    if group is not None:
        msg = f"rearrange: unclosed '(' in the pattern {pattern!r}"
        raise ValueError(msg)
    return out


def rearrange_plan(
    pattern: str, shape: tuple[int, ...], sizes: Mapping[str, int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], dict[str, int]]:
    """How an einops-style ``rearrange`` acts on ``shape``: split, permute, merge.

    Returns ``(split shape, axis order, merged shape, size of every named axis)``.

    Raises:
        ValueError: a malformed pattern, sides naming different axes, or sizes that do not fit.
    """
    if pattern.count("->") != 1:
        msg = f"rearrange: the pattern needs exactly one '->', got {pattern!r}"
        raise ValueError(msg)
    left_text, right_text = pattern.split("->")
    left = _pattern_groups(left_text, pattern)
    right = _pattern_groups(right_text, pattern)
    spread = len(shape) - (len(left) - 1) if ["..."] in left else 0
    if (["..."] in left and spread < 0) or (["..."] not in left and len(left) != len(shape)):
        msg = f"rearrange: {left_text.strip()!r} does not describe {len(shape)} axes"
        raise ValueError(msg)

    def expand(groups: list[list[str]]) -> list[list[str]]:
        out: list[list[str]] = []
        for g in groups:
            out.extend([[f"...{i}"] for i in range(spread)] if g == ["..."] else [g])
        return out

    left, right = expand(left), expand(right)
    known = dict(sizes)
    for group, extent in zip(left, shape, strict=True):
        if len(group) == 1 and group[0].startswith("..."):
            known[group[0]] = extent
            continue
        missing = [n for n in group if n not in known]
        product = math.prod(known[n] for n in group if n in known)
        if len(missing) > 1 or (missing and (product == 0 or extent % product)):
            msg = f"rearrange: cannot split an axis of extent {extent} into {group}"
            raise ValueError(msg)
        if missing:
            known[missing[0]] = extent // product
        elif product != extent:
            msg = f"rearrange: {group} multiplies to {product}, the axis has extent {extent}"
            raise ValueError(msg)
    names = [n for g in left for n in g]
    outputs = [n for g in right for n in g]
    if len(set(names)) != len(names) or sorted(names) != sorted(outputs):
        msg = f"rearrange: both sides of {pattern!r} must name the same axes, each once"
        raise ValueError(msg)
    split = tuple(known[n] for n in names)
    order = tuple(names.index(n) for n in outputs)
    merged = tuple(math.prod(known[n] for n in g) for g in right)
    return split, order, merged, {n: known[n] for n in names}


def view_layout(name: str, layout: Layout, options: Any, buffer_size: int) -> Layout | None:
    """The layout a view name gives over the same buffer, or ``None`` when only a copy can.

    ``options`` is the validated ``OperationExecutionOptions`` of ``name``; ``buffer_size`` bounds
    ``as_strided`` (whose ``offset`` counts from the input's own offset).

    Raises:
        ValueError, IndexError: the options do not fit the layout (as NumPy would raise).
    """
    if name == "reshape":
        return layout.reshape(options.shape)
    if name == "squeeze":
        return layout.squeeze(options.axes)
    if name == "unsqueeze":
        return layout.unsqueeze(options.axes)
    if name == "permute":
        return layout.permute(options.axes)
    if name == "broadcast_to":
        return layout.broadcast_to(options.shape)
    if name == "view":
        return layout.index(options.key)
    if name == "as_strided":
        out = Layout(options.shape, options.strides, layout.offset + options.offset)
        low, high = out.span()
        if out.size and (low < 0 or high > buffer_size):
            msg = f"as_strided: the view reaches slots [{low}, {high}) outside {buffer_size} slots"
            raise IndexError(msg)
        return out
    if name == "rearrange":
        split, order, merged, _ = rearrange_plan(options.pattern, layout.shape, dict(options.sizes))
        step = layout.reshape(split)
        step = step.permute(order) if step is not None else None
        return step.reshape(merged) if step is not None else None
    msg = f"{name!r} is not a view name"
    raise ValueError(msg)


def slot_indices(layout: Layout) -> Any:
    """A NumPy int64 array, shaped like ``layout``, of the buffer slot of every element.

    Gradients of overlapping views (``as_strided``, broadcasts) scatter-add through it.
    """
    import numpy as np

    index = np.full(layout.shape, layout.offset, np.int64)
    for axis, (extent, stride) in enumerate(zip(layout.shape, layout.strides, strict=True)):
        reach = [1] * layout.ndim
        reach[axis] = extent
        index = index + (np.arange(extent, dtype=np.int64) * stride).reshape(reach)
    return index
