"""Printing: NumPy-style text for tensors, with summarisation and dtype-exact digits.

The options are process-wide like NumPy's (``cv.set_printoptions``, ``cv.printoptions()``), but
held here rather than in NumPy's own global state, so printing a tensor never changes how the
user's ndarrays print. Values are read through the carrier's span export, so a 1000 x 1000 tensor
prints its corners, not 5 MB.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import numpy as np

    from conveyor.types.dtypes import DType

__all__ = ["PrintOptions", "format_values", "get_printoptions", "printoptions", "set_printoptions"]


@attrs.frozen(kw_only=True)
class PrintOptions:
    """How tensors print: NumPy's fields of the same names.

    ``precision=None`` prints each float with the fewest digits that round-trip in its own dtype
    (so float32 shows float32 precision, not float64's).
    """

    threshold: int = 1000
    edgeitems: int = 3
    linewidth: int = 80
    precision: int | None = None
    suppress: bool = False


_lock = threading.Lock()
_current = PrintOptions()


def get_printoptions() -> PrintOptions:
    """The options in force."""
    return _current


def set_printoptions(
    *,
    threshold: int | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    precision: int | None = None,
    suppress: bool | None = None,
) -> None:
    """Change the fields given (the others keep their value), as ``numpy.set_printoptions``.

    Raises:
        ValueError: a count is negative (``linewidth`` must be at least 1).
    """
    global _current
    given: dict[str, Any] = {
        "threshold": threshold,
        "edgeitems": edgeitems,
        "linewidth": linewidth,
        "precision": precision,
        "suppress": suppress,
    }
    for field in ("threshold", "edgeitems", "linewidth", "precision"):
        value = given[field]
        if value is not None and (not isinstance(value, int) or value < (field == "linewidth")):
            msg = f"set_printoptions: {field} must be a non-negative int, got {value!r}"
            raise ValueError(msg)
    with _lock:
        _current = attrs.evolve(_current, **{k: v for k, v in given.items() if v is not None})


@contextlib.contextmanager
def printoptions(**fields: Any) -> Iterator[PrintOptions]:
    """Set print options for the ``with`` block and restore the previous ones after it."""
    global _current
    saved = _current
    set_printoptions(**fields)
    try:
        yield _current
    finally:
        with _lock:
            _current = saved


def format_values(values: np.ndarray[Any, Any], dtype: DType, prefix: str) -> str:
    """The values as NumPy's ``array2string`` writes them under the current options.

    ``prefix`` is the text before the opening bracket, so continuation lines align under it.
    """
    import numpy as np

    options = _current
    if values.dtype.kind not in "biufc":  # bfloat16 and other extension dtypes print as float32
        values = values.astype(np.float32)
    if values.size == 0:
        return "[]"
    return np.array2string(
        values,
        separator=", ",
        prefix=prefix,
        threshold=options.threshold,
        edgeitems=options.edgeitems,
        max_line_width=options.linewidth,
        precision=options.precision,
        suppress_small=options.suppress,
        floatmode="maxprec" if options.precision is not None else "unique",
    )
