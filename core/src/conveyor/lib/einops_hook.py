"""Makes einops recognise Conveyor tensors, whichever of the two is imported first.

``install()`` (called by ``import conveyor``) defines the backend (``conveyor.lib.einops_backend``)
at once when einops' backends module is already imported, and otherwise right after einops
imports it, through a one-shot import hook: neither import order nor importing einops (it is
optional) is needed, and ``import conveyor`` loads neither einops nor the backend's module.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["install"]

_MODULE: Final = "einops._backends"


def _define(backends: ModuleType) -> None:
    from conveyor.lib import einops_backend  # the library's functions: only once einops is here

    einops_backend.define(backends)


# The hook's two classes follow importlib's finder and loader protocols without subclassing
# importlib.abc, whose import (through importlib.resources) would cost every `import conveyor`
# about a tenth of a second.


class _Loader:
    """einops' own loader for its backends module, defining ours right after it runs."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _define(module)


class _AfterEinops:
    """A one-shot hook: finds einops' backends module with the other finders, wraps its loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        import importlib.util  # 0.6 ms: only once einops imports its backends

        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]  # a Loader by protocol
        return spec


def install() -> None:
    """Make einops recognise Conveyor tensors, now or when einops is first imported."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        _define(loaded)
    elif not any(isinstance(finder, _AfterEinops) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterEinops())
