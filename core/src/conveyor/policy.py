"""Deprecated alias of ``conveyor.types.policy``, kept for one release (removed in 0.2).

Import the names from ``conveyor`` (the user API) or ``conveyor.sdk`` (the carrier author's
surface) instead; ``docs/architecture.md`` says where everything lives now.
"""

import warnings as _warnings

from conveyor.types.policy import *  # noqa: F403  # the thin re-export this alias exists for
from conveyor.types.policy import __all__ as __all__

_warnings.warn(
    "conveyor.policy is deprecated and will be removed in 0.2; import its names from conveyor "
    "or conveyor.sdk (it is conveyor.types.policy now)",
    DeprecationWarning,
    stacklevel=2,
)
