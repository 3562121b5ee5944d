"""Composed discrete Fourier transforms: each 1-D transform is one ``matmul`` by a DFT matrix.

The matrix ``exp(-2 pi i j k / n)`` is a constant built on the host (like ``eye``) and put on
the input's carrier, so the transform runs wherever complex ``matmul`` is planned: ``O(n^2)``
work per transformed line instead of an FFT's ``O(n log n)``, exact to the matrix's rounding,
and differentiable through ``matmul``. Multi-axis transforms apply the 1-D one axis by axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, _from_array, _resolve_carrier
from conveyor.lib.composed.creation import constant
from conveyor.lib.composed.elementwise import conj, real
from conveyor.lib.composed.manipulation import moveaxis, pad, roll
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

__all__ = [
    "fft",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfftn",
    "rfft",
    "rfftfreq",
    "rfftn",
]

_NORMS = ("backward", "ortho", "forward")


def _complex_of(dtype: DType) -> DType:
    if dtype.is_complex:
        return dtype
    return dtypes.complex128 if dtype is dtypes.float64 else dtypes.complex64


def _real_of(dtype: DType) -> DType:
    return dtypes.float64 if dtype in (dtypes.complex128, dtypes.float64) else dtypes.float32


def _scale(norm: str, n: int, inverse: bool) -> float:
    if norm not in _NORMS:
        msg = f"fft: norm must be one of {_NORMS}, got {norm!r}"
        raise ValueError(msg)
    if norm == "ortho":
        return 1.0 / math.sqrt(n) if n else 1.0
    scaled = (norm == "backward") == inverse
    return 1.0 / n if scaled and n else 1.0


def _fit(x: Tensor, n: int, axis: int) -> Tensor:
    """``x`` cut or zero-padded to ``n`` entries along ``axis``."""
    have = x.shape[axis]
    if n < 1:
        msg = f"fft: the transform length must be at least 1, got {n}"
        raise ValueError(msg)
    if have >= n:
        key = tuple(slice(0, n) if a == axis % x.ndim else slice(None) for a in range(x.ndim))
        return x[key]
    widths = [(0, n - have if a == axis % x.ndim else 0) for a in range(x.ndim)]
    return pad(x, widths)


def _matrix(
    rows: int, cols: int, n: int, sign: float, weights: Any, like: Tensor, dtype: DType
) -> Tensor:
    import numpy as np

    j = np.arange(rows).reshape(-1, 1)
    k = np.arange(cols).reshape(1, -1)
    values = np.exp(sign * 2j * np.pi * ((j * k) % n) / n) * weights
    return constant(values, dtype, like)


def _transform(x: Tensor, n: int | None, axis: int, norm: str, inverse: bool) -> Tensor:
    dtype = _complex_of(x.dtype)
    x = x if x.dtype is dtype else x.astype(dtype)
    n = x.shape[axis] if n is None else n
    line = moveaxis(_fit(x, n, axis), axis, -1)
    w = _matrix(n, n, n, 1.0 if inverse else -1.0, _scale(norm, n, inverse), line, dtype)
    return moveaxis(F.matmul(line, w), -1, axis)


def fft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The 1-D discrete Fourier transform along ``axis``."""
    return _transform(x, n, axis, norm, inverse=False)


def ifft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse 1-D discrete Fourier transform along ``axis``."""
    return _transform(x, n, axis, norm, inverse=True)


def _axes(
    x: Tensor, s: Sequence[int] | None, axes: Sequence[int] | None
) -> tuple[list[int], list[int | None]]:
    if axes is None:
        axes = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    lengths: list[int | None] = (
        [None] * len(axes) if s is None else [None if v == -1 else v for v in s]
    )
    if len(lengths) != len(axes):
        msg = f"fftn: {len(lengths)} lengths for {len(axes)} axes"
        raise ValueError(msg)
    return list(axes), lengths


def fftn(
    x: Tensor,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Tensor:
    """The n-D discrete Fourier transform over ``axes``."""
    chosen, lengths = _axes(x, s, axes)
    for a, n in zip(chosen, lengths, strict=True):
        x = _transform(x, n, a, norm, inverse=False)
    return x


def ifftn(
    x: Tensor,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Tensor:
    """The inverse n-D discrete Fourier transform over ``axes``."""
    chosen, lengths = _axes(x, s, axes)
    for a, n in zip(chosen, lengths, strict=True):
        x = _transform(x, n, a, norm, inverse=True)
    return x


def rfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The 1-D transform of real input: the ``n // 2 + 1`` non-negative frequencies."""
    if x.dtype.is_complex:
        msg = f"rfft: needs real input, got {x.dtype.name}; use fft"
        raise TypeError(msg)
    dtype = _complex_of(x.dtype)
    n = x.shape[axis] if n is None else n
    line = moveaxis(_fit(x, n, axis), axis, -1).astype(dtype)
    w = _matrix(n, n // 2 + 1, n, -1.0, _scale(norm, n, False), line, dtype)
    return moveaxis(F.matmul(line, w), -1, axis)


def irfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of ``rfft``: a real signal of length ``n`` (default ``2 (m - 1)``).

    The Hermitian half-spectrum is weighted (``1`` for the zero and Nyquist terms, ``2`` for the
    others) and only the real part of the product is kept, which ignores the imaginary parts of
    the zero and Nyquist terms as NumPy does.
    """
    import numpy as np

    dtype = _complex_of(x.dtype)
    x = x if x.dtype is dtype else x.astype(dtype)
    n = 2 * (x.shape[axis] - 1) if n is None else n
    half = n // 2 + 1
    line = moveaxis(_fit(x, half, axis), axis, -1)
    weights = np.full((half, 1), 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    w = _matrix(half, n, n, 1.0, weights * _scale(norm, n, True), line, dtype)
    return moveaxis(real(F.matmul(line, w)), -1, axis)


def rfftn(
    x: Tensor,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Tensor:
    """``rfft`` over the last of ``axes``, then ``fft`` over the others."""
    chosen, lengths = _axes(x, s, axes)
    x = rfft(x, n=lengths[-1], axis=chosen[-1], norm=norm)
    for a, n in zip(chosen[:-1], lengths[:-1], strict=True):
        x = _transform(x, n, a, norm, inverse=False)
    return x


def irfftn(
    x: Tensor,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> Tensor:
    """``ifft`` over all but the last of ``axes``, then ``irfft`` over the last."""
    chosen, lengths = _axes(x, s, axes)
    for a, n in zip(chosen[:-1], lengths[:-1], strict=True):
        x = _transform(x, n, a, norm, inverse=True)
    return irfft(x, n=lengths[-1], axis=chosen[-1], norm=norm)


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def hfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The transform of a Hermitian-symmetric signal given by its first half (real output)."""
    if norm not in _NORMS:
        _scale(norm, 1, False)
    return irfft(conj(x), n=n, axis=axis, norm=_SWAP[norm])


def ihfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of ``hfft``: the half-spectrum of a real signal."""
    if norm not in _NORMS:
        _scale(norm, 1, False)
    return conj(rfft(x, n=n, axis=axis, norm=_SWAP[norm]))


def fftfreq(n: int, /, *, d: float = 1.0, dtype: DType | None = None, device: Any = None) -> Tensor:
    """The sample frequencies of an ``n``-point transform with spacing ``d``."""
    import numpy as np

    target = dtype or dtypes.default_float
    return _from_array(np.fft.fftfreq(n, d).astype(target.numpy), target, _resolve_carrier(device))


def rfftfreq(
    n: int, /, *, d: float = 1.0, dtype: DType | None = None, device: Any = None
) -> Tensor:
    """The non-negative sample frequencies of an ``n``-point real transform."""
    import numpy as np

    target = dtype or dtypes.default_float
    return _from_array(np.fft.rfftfreq(n, d).astype(target.numpy), target, _resolve_carrier(device))


def _shift(x: Tensor, axes: int | Sequence[int] | None, sign: int) -> Tensor:
    chosen = (
        list(range(x.ndim)) if axes is None else [axes] if isinstance(axes, int) else list(axes)
    )
    return roll(x, [sign * (x.shape[a] // 2) for a in chosen], axis=chosen)


def fftshift(x: Tensor, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """The zero frequency moved to the centre of ``axes``."""
    return _shift(x, axes, 1)


def ifftshift(x: Tensor, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """The inverse of ``fftshift``."""
    return _shift(x, axes, -1)
