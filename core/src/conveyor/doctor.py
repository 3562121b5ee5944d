"""Deprecated alias of ``conveyor.plugins._doctor``, kept for one release (removed in 0.2).

Import ``add_doctor_section`` from ``conveyor.plugins`` instead; ``docs/architecture.md`` says
where everything lives now.
"""

import warnings as _warnings

from conveyor.plugins._doctor import *  # noqa: F403  # the thin re-export this alias exists for
from conveyor.plugins._doctor import __all__ as __all__

_warnings.warn(
    "conveyor.doctor is deprecated and will be removed in 0.2; import add_doctor_section from "
    "conveyor.plugins",
    DeprecationWarning,
    stacklevel=2,
)
