"""The user library: everyday functions composed from the engine's public operations.

Nothing here dispatches on its own: ``composed`` builds NumPy- and Array-API-style functions
from the dispatch names, ``numpy_protocols`` maps NumPy calls on tensors to them, ``random``
draws onto a carrier, ``printing`` formats tensors, and ``tensor_methods`` is what Tensor's
composed operators call (connected to the engine by the package root).
"""
