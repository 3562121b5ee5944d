"""The engine: Tensor, Operation, Carrier and dispatch, autograd, definitions, moves.

These pieces depend on each other (a Tensor's operators dispatch operations whose results are
Tensors), so they live together in one part. ``tensor`` is imported first: every other module
of the engine imports Tensor, and ``tensor`` imports the modules its methods call last.
"""

from conveyor.engine import tensor as _tensor  # noqa: F401  # first, see above
