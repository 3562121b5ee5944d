"""Advanced indexing: boolean masks and integer arrays, through ``gather`` and ``scatter``.

NumPy's indexing rules are applied to a grid of element positions (index data is read, as
PyTorch reads a mask), which turns any key into flat positions; the values are then gathered
from, or scattered into, the tensor's row-major flattening on its own carrier. Reads are
differentiable through ``gather``; writes follow ``Tensor.__setitem__``'s in-place rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conveyor.engine import functional as F
from conveyor.engine.tensor import Tensor, zeros
from conveyor.lib.composed.creation import constant
from conveyor.types import dtypes

if TYPE_CHECKING:
    import numpy as np

__all__ = ["getitem", "is_advanced", "positions", "setitem"]


def is_advanced(key: Any) -> bool:
    """Whether ``key`` needs gather (it holds a bool, a sequence, an ndarray or a tensor)."""
    import numpy as np

    items = key if type(key) is tuple else (key,)
    return any(isinstance(k, bool | list | np.ndarray | Tensor | np.bool_) for k in items)


def _host_key(key: Any) -> Any:
    items = key if type(key) is tuple else (key,)
    return tuple(k.numpy() if isinstance(k, Tensor) else k for k in items)


def positions(shape: tuple[int, ...], key: Any) -> np.ndarray[Any, Any]:
    """The flat row-major positions ``key`` selects in a tensor of ``shape`` (NumPy's rules).

    Raises:
        IndexError: an index is out of range, or the key does not fit the shape.
    """
    import numpy as np

    grid = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    try:
        return np.asarray(grid[_host_key(key)])
    except IndexError as error:
        msg = f"index: {error}; keys follow NumPy's indexing rules"
        raise IndexError(msg) from error


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` for an advanced key: a new tensor gathered from ``x``."""
    chosen = positions(x.shape, key)
    if chosen.size == 0:
        return zeros(chosen.shape, x.dtype, type(x.carrier))
    flat = F.reshape(x, shape=(x.size,))
    index = constant(chosen.reshape(-1), dtypes.int64, x)
    return F.reshape(F.gather(flat, index, axis=0), shape=chosen.shape)


def setitem(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value`` for an advanced key: scattered into ``x``'s own storage."""
    x._check_inplace("__setitem__")
    chosen = positions(x.shape, key)
    if chosen.size == 0:
        return
    # The scatter reads a snapshot, so the graph it records survives the write into x.
    base = x._snapshot() if x.grad_fn is not None else x
    source = value if isinstance(value, Tensor) else constant(value, x.dtype, x)
    if source.dtype is not x.dtype:
        source = source.astype(x.dtype)
    source = F.broadcast_to(source, shape=chosen.shape)
    flat = F.reshape(base, shape=(x.size,))
    index = constant(chosen.reshape(-1), dtypes.int64, x)
    written = F.scatter(flat, index, F.reshape(source, shape=(chosen.size,)), axis=0)
    x.copy_(F.reshape(written, shape=x.shape))
