"""Saving and loading tensors in NumPy's ``.npy`` format: ``cv.save`` and ``cv.load``.

The format is NumPy's own, so ``np.load`` reads what ``cv.save`` writes and ``cv.load`` reads
what ``np.save`` writes. A tensor on any carrier saves its values (a FileBacked or Dask tensor
is read through its carrier); loading puts them on the carrier asked for, so
``cv.load(path, carrier="file")`` gives a FileBacked tensor again. Only values are kept: the
autograd graph and ``requires_grad`` are not.
"""

from __future__ import annotations

import os
from typing import Any

from conveyor.engine.tensor import Tensor, _from_array, _resolve_carrier
from conveyor.types import dtypes

__all__ = ["load", "save"]

_Path = str | os.PathLike[str]


def save(file: _Path | Any, tensor: Tensor, /) -> None:
    """Write ``tensor``'s values to ``file`` (a path or a binary file object) as ``.npy``.

    Like ``np.save``, a path without the ``.npy`` suffix gets it.

    Raises:
        TypeError: ``tensor`` is not a Tensor, or is bfloat16 (``.npy`` has no bfloat16; save
            ``tensor.astype(cv.float32)``, which holds every bfloat16 value exactly).
    """
    import numpy as np

    if not isinstance(tensor, Tensor):
        msg = f"save: expected a Tensor, got {type(tensor).__name__}; use np.save for arrays"
        raise TypeError(msg)
    if tensor.dtype is dtypes.bfloat16:
        msg = (
            f"save on {type(tensor.carrier).__name__}: the .npy format has no bfloat16; save "
            f"tensor.astype(cv.float32), which holds every bfloat16 value exactly"
        )
        raise TypeError(msg)
    np.save(file, np.asarray(tensor), allow_pickle=False)


def load(file: _Path | Any, /, *, carrier: Any = None) -> Tensor:
    """The tensor stored in the ``.npy`` ``file``, on ``carrier`` (default: the default one).

    Raises:
        TypeError: the file holds a dtype Conveyor has no descriptor for (strings, objects).
        ValueError: the file is not a ``.npy`` file (an ``.npz`` archive holds several arrays:
            load each with ``np.load`` and ``cv.asarray``).
    """
    import numpy as np

    values = np.load(file, allow_pickle=False)
    if not isinstance(values, np.ndarray):
        msg = f"load: {file!r} is an .npz archive, not one array; read it with np.load"
        raise ValueError(msg)
    dtype = dtypes.from_numpy(values.dtype)
    return _from_array(values, dtype, _resolve_carrier(carrier))
