"""ConveyorWarning: the one base class of every warning Conveyor emits.

A single base lets users and test suites silence or escalate everything Conveyor says with one
filter (``warnings.simplefilter("error", conveyor.ConveyorWarning)``) without touching other
libraries' warnings. The module only defines the class, so importing it costs nothing.
"""

from __future__ import annotations

__all__ = ["ConveyorWarning"]


class ConveyorWarning(UserWarning):
    """Base class of every warning Conveyor emits; filter on it to control them all."""

    # Shown as ``conveyor.ConveyorWarning`` in warning output, where users re-export it from.
    __module__ = "conveyor"
