"""Seeded random numbers on any carrier: NumPy's generators, copied through span import.

``cv.random.default_rng(seed)`` wraps ``numpy.random.default_rng``, so a seed gives the same
stream as NumPy (reproducible, independent of the carrier); each draw makes the values on the
host and imports them into a fresh carrier of the requested class, which every carrier with
CPU-addressable storage accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

from conveyor.engine.tensor import Tensor, _check_dtype, _from_array, _resolve_carrier
from conveyor.lib.composed.manipulation import take
from conveyor.types import dtypes
from conveyor.types.dtypes import DType

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Generator", "default_rng"]

_Shape = int | Sequence[int] | None


def _size(shape: _Shape, size: _Shape = None) -> tuple[int, ...]:
    """The draw's shape from ``shape`` or NumPy's keyword ``size`` (one of them at most)."""
    if size is not None:
        if shape is not None:
            msg = f"random: shape={shape!r} and size={size!r} both given; pass one of them"
            raise TypeError(msg)
        shape = size
    if shape is None:
        return ()
    return (shape,) if isinstance(shape, int) else tuple(shape)


@final
class Generator:
    """Draws tensors from one seeded NumPy ``Generator`` (use ``default_rng`` to build one)."""

    __slots__ = ("_carrier", "_rng")

    def __init__(self, rng: np.random.Generator, carrier: Any = None) -> None:
        self._rng = rng
        self._carrier = carrier

    def __repr__(self) -> str:
        return f"conveyor.random.Generator({self._rng.bit_generator!r})"

    def _make(self, values: Any, dtype: DType, carrier: Any) -> Tensor:
        import numpy as np

        array = np.asarray(values).astype(dtype.numpy)
        return _from_array(array, dtype, _resolve_carrier(carrier or self._carrier))

    def _float(self, dtype: DType | None) -> DType:
        target = _check_dtype(dtype) if dtype is not None else dtypes.default_float
        if not target.is_floating:
            msg = f"random: needs a floating dtype, got {target.name}"
            raise TypeError(msg)
        return target

    def random(
        self,
        shape: _Shape = None,
        dtype: DType | None = None,
        carrier: Any = None,
        *,
        size: _Shape = None,
    ) -> Tensor:
        """Uniform values in ``[0, 1)`` (``size`` is NumPy's name for ``shape``)."""
        target = self._float(dtype)
        return self._make(self._rng.random(_size(shape, size)), target, carrier)

    def standard_normal(
        self,
        shape: _Shape = None,
        dtype: DType | None = None,
        carrier: Any = None,
        *,
        size: _Shape = None,
    ) -> Tensor:
        """Normal values with mean 0 and standard deviation 1 (NumPy's ``standard_normal``)."""
        target = self._float(dtype)
        return self._make(self._rng.standard_normal(_size(shape, size)), target, carrier)

    def choice(
        self,
        a: int | Tensor,
        size: _Shape = None,
        replace: bool = True,
        p: Tensor | Sequence[float] | None = None,
        carrier: Any = None,
    ) -> Tensor:
        """Elements drawn from tensor ``a`` (its first axis), or from ``arange(a)``.

        ``p`` gives each element's probability; without ``replace`` each is drawn once at most.

        Raises:
            ValueError: NumPy's refusals (more draws than elements without ``replace``, ``p``
                not summing to 1, ...).
        """
        import numpy as np

        weights = None if p is None else np.asarray(p.numpy() if isinstance(p, Tensor) else p)
        if isinstance(a, Tensor):
            if a.ndim == 0:
                msg = "choice: a 0-d tensor has no axis to draw from; pass a 1-D tensor"
                raise ValueError(msg)
            picks = self._rng.choice(a.shape[0], _size(None, size), replace=replace, p=weights)
            index = _from_array(np.asarray(picks, np.int64), dtypes.int64, type(a.carrier))
            return take(a, index, axis=0)
        picks = self._rng.choice(a, _size(None, size), replace=replace, p=weights)
        return self._make(picks, dtypes.default_int, carrier)

    def uniform(
        self,
        low: float = 0.0,
        high: float = 1.0,
        shape: _Shape = None,
        dtype: DType | None = None,
        carrier: Any = None,
        *,
        size: _Shape = None,
    ) -> Tensor:
        """Uniform values in ``[low, high)``."""
        target = self._float(dtype)
        return self._make(self._rng.uniform(low, high, _size(shape, size)), target, carrier)

    def normal(
        self,
        loc: float = 0.0,
        scale: float = 1.0,
        shape: _Shape = None,
        dtype: DType | None = None,
        carrier: Any = None,
        *,
        size: _Shape = None,
    ) -> Tensor:
        """Normally distributed values with mean ``loc`` and standard deviation ``scale``.

        Raises:
            ValueError: ``scale`` is negative.
        """
        if scale < 0:
            msg = f"normal: scale must be non-negative, got {scale!r}"
            raise ValueError(msg)
        target = self._float(dtype)
        return self._make(self._rng.normal(loc, scale, _size(shape, size)), target, carrier)

    def integers(
        self,
        low: int,
        high: int | None = None,
        shape: _Shape = None,
        dtype: DType | None = None,
        carrier: Any = None,
        *,
        endpoint: bool = False,
        size: _Shape = None,
    ) -> Tensor:
        """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is ``None``), int64 default.

        Raises:
            ValueError: the range is empty.
        """
        target = _check_dtype(dtype) if dtype is not None else dtypes.default_int
        if not target.is_integer:
            msg = f"integers: needs an integer dtype, got {target.name}"
            raise TypeError(msg)
        values = self._rng.integers(
            low, high, _size(shape, size), dtype=target.numpy, endpoint=endpoint
        )
        return self._make(values, target, carrier)

    def permutation(self, x: int | Tensor, carrier: Any = None) -> Tensor:
        """A shuffled ``arange(x)``, or a shuffled copy of tensor ``x`` along its first axis."""
        import numpy as np

        if isinstance(x, Tensor):
            order = self._rng.permutation(x.shape[0]) if x.ndim else None
            if order is None:
                msg = "permutation: a 0-d tensor has no axis to shuffle"
                raise ValueError(msg)
            index = _from_array(order.astype(np.int64), dtypes.int64, type(x.carrier))
            return take(x, index, axis=0)
        return self._make(self._rng.permutation(x), dtypes.default_int, carrier)


def default_rng(seed: int | None = None, *, carrier: Any = None) -> Generator:
    """A generator seeded like ``numpy.random.default_rng(seed)``; draws go to ``carrier``."""
    import numpy as np

    return Generator(np.random.default_rng(seed), carrier)
