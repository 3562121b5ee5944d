"""Deprecated alias of ``conveyor.engine.profiling``, kept for one release (removed in 0.2).

Import the names from ``conveyor`` (the user API) or ``conveyor.sdk`` (the carrier author's
surface) instead; ``docs/architecture.md`` says where everything lives now.
"""

import warnings as _warnings

from conveyor.engine.profiling import *  # noqa: F403  # the thin re-export this alias exists for
from conveyor.engine.profiling import __all__ as __all__

_warnings.warn(
    "conveyor.profiling is deprecated and will be removed in 0.2; import its names from conveyor "
    "or conveyor.sdk (it is conveyor.engine.profiling now)",
    DeprecationWarning,
    stacklevel=2,
)
