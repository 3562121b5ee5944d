"""Composed contractions: ``einsum``, ``tensordot``, ``outer`` and ``vecdot`` through ``matmul``.

Every contraction is brought to one batched matrix product: operands are permuted so that batch,
kept and summed axes are contiguous groups, reshaped to ``(batch, rows, inner)`` and
``(batch, inner, cols)``, multiplied, and the result reshaped and permuted back. Axes only one
operand carries that the output drops are summed first. Gradients come from the views, sums and
``matmul`` they are built of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor

__all__ = ["einsum", "matrix_transpose", "outer", "tensordot", "vecdot"]


def _parse(subscripts: str, operands: Sequence[Tensor]) -> tuple[list[str], str]:
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        inputs_text, output = spec.split("->")
    else:
        inputs_text = spec
        letters = inputs_text.replace(",", "").replace("...", "")
        output = ("..." if "..." in inputs_text else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1)
        )
    inputs = inputs_text.split(",")
    if len(inputs) != len(operands):
        msg = f"einsum: {len(inputs)} subscript groups for {len(operands)} operands"
        raise ValueError(msg)
    # Ellipsis becomes upper-case letters aligned from the right, as NumPy broadcasts them.
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec]
    width = max(
        (
            t.ndim - len(s.replace("...", ""))
            for s, t in zip(inputs, operands, strict=True)
            if "..." in s
        ),
        default=0,
    )
    fill = "".join(spare[:width])
    expanded = []
    for s, t in zip(inputs, operands, strict=True):
        if "..." in s:
            n = t.ndim - len(s.replace("...", ""))
            s = s.replace("...", fill[width - n :])
        if len(s) != t.ndim:
            msg = f"einsum: subscripts {s!r} name {len(s)} axes, the operand has {t.ndim}"
            raise ValueError(msg)
        if len(set(s)) != len(s):
            msg = f"einsum: repeated subscript in {s!r} (diagonals) is not supported"
            raise ValueError(msg)
        expanded.append(s)
    return expanded, output.replace("...", fill)


def _sum_out(t: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    drop = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not drop:
        return t, labels
    return F.reduce_sum(t, axis=drop), "".join(c for c in labels if c in keep)


def _sizes(operands: Sequence[Tensor], labels: Sequence[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for t, s in zip(operands, labels, strict=True):
        for c, d in zip(s, t.shape, strict=True):
            if sizes.get(c, d) != d and d != 1 and sizes[c] != 1:
                msg = f"einsum: subscript {c!r} has extents {sizes[c]} and {d}"
                raise ValueError(msg)
            sizes[c] = max(sizes.get(c, d), d)
    return sizes


def _pair(
    a: Tensor, la: str, b: Tensor, lb: str, keep: set[str], sizes: dict[str, int]
) -> tuple[Tensor, str]:
    batch = [c for c in la if c in lb and c in keep]
    inner = [c for c in la if c in lb and c not in keep]
    rows = [c for c in la if c not in lb]
    cols = [c for c in lb if c not in la]

    def arrange(t: Tensor, labels: str, order: list[str]) -> Tensor:
        t = F.permute(t, axes=tuple(labels.index(c) for c in order))
        return F.broadcast_to(t, shape=tuple(sizes[c] for c in order))

    def size(group: list[str]) -> int:
        return math.prod(sizes[c] for c in group)

    left = F.reshape(
        arrange(a, la, batch + rows + inner), shape=(size(batch), size(rows), size(inner))
    )
    right = F.reshape(
        arrange(b, lb, batch + inner + cols), shape=(size(batch), size(inner), size(cols))
    )
    product = F.matmul(left, right)
    labels = batch + rows + cols
    return F.reshape(product, shape=tuple(sizes[c] for c in labels)), "".join(labels)


def einsum(subscripts: str, /, *operands: Tensor) -> Tensor:
    """Einstein summation (NumPy's notation, ``...`` included; no repeated subscripts).

    Raises:
        ValueError: the subscripts do not fit the operands, or an operand repeats a subscript.
    """
    labels, output = _parse(subscripts, operands)
    sizes = _sizes(operands, labels)
    tensors = list(operands)
    current, current_labels = tensors[0], labels[0]
    for i in range(1, len(tensors) + 1):
        later = set(output).union(*labels[i:]) if i < len(tensors) else set(output)
        if i < len(tensors):
            later |= set(labels[i])
        current, current_labels = _sum_out(current, current_labels, later)
        if i == len(tensors):
            break
        other, other_labels = _sum_out(tensors[i], labels[i], later | set(current_labels))
        current, current_labels = _pair(
            current, current_labels, other, other_labels, set(output).union(*labels[i + 1 :]), sizes
        )
    missing = [c for c in output if c not in current_labels]
    if missing:
        msg = f"einsum: output subscripts {''.join(missing)!r} appear in no operand"
        raise ValueError(msg)
    current = F.permute(current, axes=tuple(current_labels.index(c) for c in output))
    return F.broadcast_to(current, shape=tuple(sizes[c] for c in output))


def tensordot(
    a: Tensor, b: Tensor, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2
) -> Tensor:
    """Sum of products over the last ``axes`` axes of ``a`` and the first of ``b`` (or listed)."""
    if isinstance(axes, int):
        if axes < 0:
            msg = f"tensordot: axes must be non-negative, got {axes}"
            raise ValueError(msg)
        pairs = (list(range(a.ndim - axes, a.ndim)), list(range(axes)))
    else:
        pairs = (list(axes[0]), list(axes[1]))
    if len(pairs[0]) != len(pairs[1]):
        msg = f"tensordot: {len(pairs[0])} axes of a against {len(pairs[1])} of b"
        raise ValueError(msg)
    letters = "abcdefghijklmnopqrstuvwxyz"
    la = list(letters[: a.ndim])
    lb = list(letters[a.ndim : a.ndim + b.ndim])
    for i, j in zip(*pairs, strict=True):
        if a.shape[i] != b.shape[j]:
            msg = f"tensordot: axis {i} of a has extent {a.shape[i]}, axis {j} of b {b.shape[j]}"
            raise ValueError(msg)
        lb[j % b.ndim] = la[i % a.ndim]
    summed = set(lb) & set(la)
    out = "".join(c for c in la if c not in summed) + "".join(c for c in lb if c not in summed)
    return einsum(f"{''.join(la)},{''.join(lb)}->{out}", a, b)


def outer(a: Tensor, b: Tensor, /) -> Tensor:
    """The outer product of two 1-D tensors."""
    if a.ndim != 1 or b.ndim != 1:
        msg = f"outer: needs two 1-D tensors, got shapes {a.shape} and {b.shape}"
        raise ValueError(msg)
    return F.mul(F.reshape(a, shape=(a.size, 1)), F.reshape(b, shape=(1, b.size)))


def vecdot(a: Tensor, b: Tensor, /, *, axis: int = -1) -> Tensor:
    """``sum(conj(a) * b)`` along ``axis``, other axes broadcast."""
    from conveyor.lib.composed.elementwise import conj

    if a.shape[axis] != b.shape[axis]:
        msg = f"vecdot: extents {a.shape[axis]} and {b.shape[axis]} differ along axis {axis}"
        raise ValueError(msg)
    product = F.mul(conj(a), b)
    total = F.reduce_sum(product, axis=axis)
    # Integer sums widen to 64 bits; the standard's vecdot keeps the operands' promoted dtype
    # (the low bits of the wide sum are the wrapped narrow one).
    return total if total.dtype is product.dtype else total.astype(product.dtype)


def matrix_transpose(x: Tensor, /) -> Tensor:
    """The last two axes swapped."""
    return x.mT
