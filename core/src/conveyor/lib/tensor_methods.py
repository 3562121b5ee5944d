"""Tensor methods from the user library: this layer's side of ``conveyor.engine.library``.

Tensor's composed operators (``//``, the bitwise operators, advanced indexing), its NumPy
protocols and its printed form live in this layer, above the engine; the package root connects
one ``TensorMethods`` to the engine at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

from conveyor.lib import numpy_protocols, printing
from conveyor.lib.composed import bitwise, elementwise, indexing, numpy_names, reductions

__all__ = ["TensorMethods"]


@final
class TensorMethods:
    """The library functions Tensor's methods call (``conveyor.engine.library.TensorLibrary``).

    Args:
        array_namespace: returns the Array API namespace for an ``api_version``; the namespace
            is a layer above this one, so the package root supplies it (loading it on demand).
    """

    is_advanced = staticmethod(indexing.is_advanced)
    getitem = staticmethod(indexing.getitem)
    setitem = staticmethod(indexing.setitem)
    floor_divide = staticmethod(elementwise.floor_divide)
    bitwise_and = staticmethod(bitwise.bitwise_and)
    bitwise_or = staticmethod(bitwise.bitwise_or)
    bitwise_xor = staticmethod(bitwise.bitwise_xor)
    bitwise_left_shift = staticmethod(bitwise.bitwise_left_shift)
    bitwise_right_shift = staticmethod(bitwise.bitwise_right_shift)
    bitwise_invert = staticmethod(bitwise.bitwise_invert)
    clip = staticmethod(numpy_names.clip)
    std = staticmethod(reductions.std)
    var = staticmethod(reductions.var)
    any = staticmethod(reductions.any)
    all = staticmethod(reductions.all)
    array_ufunc = staticmethod(numpy_protocols.array_ufunc)
    array_function = staticmethod(numpy_protocols.array_function)
    format_values = staticmethod(printing.format_values)

    def __init__(self, array_namespace: Callable[[str | None], Any]) -> None:
        self._array_namespace = array_namespace

    def array_namespace(self, api_version: str | None) -> Any:
        return self._array_namespace(api_version)
