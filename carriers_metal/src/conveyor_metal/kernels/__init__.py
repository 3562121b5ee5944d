"""The Metal carrier's kernels, written in TileLang: one module per operation family.

Each family module maps dispatch names to a ``KernelFamily`` (``kernels._tile``): which plans
its kernels implement, how a plan and a layout class become a TileLang ``prim_func``, and how
an accepted call is launched. Importing this package imports tilelang.
"""
