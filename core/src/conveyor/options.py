"""Deprecated alias of ``conveyor.types.options``, kept for one release (removed in 0.2).

Import the names from ``conveyor`` (the user API) or ``conveyor.sdk`` (the carrier author's
surface) instead; ``docs/architecture.md`` says where everything lives now.
"""

import warnings as _warnings

from conveyor.types.options import *  # noqa: F403  # the thin re-export this alias exists for
from conveyor.types.options import __all__ as __all__

_warnings.warn(
    "conveyor.options is deprecated and will be removed in 0.2; import its names from conveyor "
    "or conveyor.sdk (it is conveyor.types.options now)",
    DeprecationWarning,
    stacklevel=2,
)
