"""Deprecated alias of ``conveyor.engine.move``, kept for one release (removed in 0.2).

Import the names from ``conveyor`` (the user API: ``cv.move``, ``cv.MoveRoute``, ...) or
``conveyor.sdk`` (the carrier author's surface) instead; ``docs/architecture.md`` says where
everything lives now.
"""

import sys as _sys
import types as _types
import warnings as _warnings
from typing import Any as _Any

from conveyor.engine.move import *  # noqa: F403  # the thin re-export this alias exists for
from conveyor.engine.move import __all__ as __all__
from conveyor.engine.move import move as _move


class _CallableAlias(_types.ModuleType):
    """Importing this module makes ``conveyor.move`` the module, not the function: keep it
    callable as the function, so ``cv.move(tensor, "cpu")`` still works afterwards."""

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        return _move(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableAlias

_warnings.warn(
    "conveyor.move (the module) is deprecated and will be removed in 0.2; import its names from "
    "conveyor or conveyor.sdk (it is conveyor.engine.move now)",
    DeprecationWarning,
    stacklevel=2,
)
