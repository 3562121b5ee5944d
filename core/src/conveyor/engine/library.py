"""Library access: what Tensor's operators and protocols call in the user library above the engine.

Most of Tensor's sugar maps to one public function of the engine (``a + b`` is ``add``), but a
few operators are composed from several dispatch names in ``conveyor.lib`` (``//``, the bitwise
operators, advanced indexing), and the NumPy and Array API protocols and the printed form live
there too. The engine cannot import that layer, so it declares here, as a typed protocol, exactly
what Tensor calls, and the package root connects the library's implementation at import, to be
loaded on the first call Tensor makes into it (the library is a large part of import time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast, final

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from conveyor.engine.tensor import Tensor
    from conveyor.types.dtypes import DType

__all__ = ["TensorLibrary", "connect", "connect_on_first_use", "methods"]


class TensorLibrary(Protocol):
    """The functions of the user library that Tensor's methods call (``conveyor.lib`` has them)."""

    def is_advanced(self, key: Any) -> bool:
        """Whether an index key needs advanced indexing (a gather) rather than a view."""
        ...

    def getitem(self, x: Tensor, key: Any) -> Tensor:
        """``x[key]`` for an advanced key."""
        ...

    def setitem(self, x: Tensor, key: Any, value: Any) -> None:
        """``x[key] = value`` for an advanced key."""
        ...

    def floor_divide(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_and(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_or(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_xor(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_left_shift(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_right_shift(self, x: Any, y: Any) -> Tensor: ...

    def bitwise_invert(self, x: Tensor) -> Tensor: ...

    def clip(self, x: Tensor, lo: Any, hi: Any) -> Tensor:
        """``x`` limited to ``[lo, hi]`` (absent bounds are not applied)."""
        ...

    def std(self, x: Tensor, *, axis: Any, keepdims: bool, correction: float) -> Tensor: ...

    def var(self, x: Tensor, *, axis: Any, keepdims: bool, correction: float) -> Tensor: ...

    def any(self, x: Tensor, *, axis: Any, keepdims: bool) -> Tensor: ...

    def all(self, x: Tensor, *, axis: Any, keepdims: bool) -> Tensor: ...

    def array_ufunc(
        self, x: Tensor, ufunc: Any, method: str, inputs: Any, kwargs: dict[str, Any]
    ) -> Any:
        """``x.__array_ufunc__``: the Conveyor equivalent of a NumPy ufunc, else NotImplemented."""
        ...

    def array_function(self, x: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``x.__array_function__``: the Conveyor equivalent of a NumPy function."""
        ...

    def array_namespace(self, api_version: str | None) -> Any:
        """The Array API namespace (``conveyor.array_api``)."""
        ...

    def format_values(self, values: np.ndarray[Any, Any], dtype: DType, prefix: str) -> str:
        """The NumPy-style text of ``values`` inside ``repr(tensor)``."""
        ...


@final
class _Unconnected:
    """Stands in until the package root connects the library (only reachable by a broken import)."""

    def __getattr__(self, name: str) -> Any:
        msg = f"Tensor.{name}: the user library is not connected; import conveyor (the package)"
        raise RuntimeError(msg)


#: The connected implementation; Tensor reads this attribute on every composed operator.
methods: TensorLibrary = cast("TensorLibrary", _Unconnected())


def connect(library: TensorLibrary) -> None:
    """Make ``library`` what Tensor's composed operators and protocols call (the root does it)."""
    global methods
    methods = library


@final
class _OnFirstUse:
    """Loads the library on the first call Tensor makes into it, then steps aside for good."""

    def __init__(self, load: Callable[[], TensorLibrary]) -> None:
        self._load = load

    def __getattr__(self, name: str) -> Any:
        library = self._load()
        connect(library)
        return getattr(library, name)


def connect_on_first_use(load: Callable[[], TensorLibrary]) -> None:
    """Connect the library that ``load`` returns, calling it only when Tensor first needs it."""
    connect(cast("TensorLibrary", _OnFirstUse(load)))
