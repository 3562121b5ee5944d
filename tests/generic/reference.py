"""The independent NumPy references of every planned name; they live in the conformance kit.

The kit checks Generic against them, so they are installed with ``conveyor-testkit``; the
conveyor-generic tests use the same ones.
"""

from conveyor_testkit._reference import REFERENCES, conv_reference, reference

__all__ = ["REFERENCES", "conv_reference", "reference"]
