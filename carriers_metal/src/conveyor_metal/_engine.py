"""Executing accepted plans on flat torch buffers: layout class, kernel cache, launch.

The engine is the part of the Metal carrier that is independent of the device: it turns an
accepted ``OperationPlan`` and its operands (flat buffer + layout, weak scalar or ``None``)
into a kernel key and a layout class, finds or builds the kernel for that pair (lowered once,
then cached, so a new shape of the same kind does not recompile), allocates the result and
launches. ``Metal`` runs it with ``device="mps"`` and the ``MetalLauncher``; the Linux checks
run the very same engine with ``device="cpu"`` and the ``CLauncher``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import conveyor as cv
from conveyor_metal._launch import Launch, Launcher
from conveyor_metal._storage import torch_dtype

__all__ = ["Engine", "Operand"]


@attrs.frozen
class Operand:
    """A tensor operand as the engine sees it: the carrier's flat buffer and a layout."""

    buffer: Any
    layout: cv.Layout


def weak_scalar(value: Any, dtype: cv.DType) -> np.ndarray[Any, Any]:
    """A weak Python scalar converted to ``dtype`` the reference's way (integers wrap)."""
    if dtype.is_bool:
        return np.array([bool(value)])
    if dtype.is_integer:
        bits = dtype.bits
        wrapped = int(value) % (1 << bits)
        if dtype.kind == "signed_integer" and wrapped >= 1 << (bits - 1):
            wrapped -= 1 << bits
        return np.array([wrapped], dtype.numpy)
    try:
        number = float(value)
    except OverflowError:  # a Python int beyond float64
        number = math.copysign(math.inf, value)
    with np.errstate(all="ignore"):
        return np.array([number]).astype(dtype.numpy)


@functools.cache
def _tilelang_version() -> str:
    import tilelang

    return str(tilelang.__version__)


class Engine:
    """Kernel cache and launch for one device (``"mps"`` or ``"cpu"``) and one launcher.

    Lowered sources are cached in memory per (kernel key, layout class) and, when
    ``cache_dir`` is given, on disk too, addressed by the digest of the kernel's TIR text, the
    target and the TileLang version: a changed kernel can never hit a stale entry, and a later
    process skips lowering (building the TIR is cheap, lowering is not).
    """

    def __init__(self, device: str, launcher: Launcher, cache_dir: Path | None = None) -> None:
        self.device = device
        self.launcher = launcher
        self.cache_dir = cache_dir
        self._sources: dict[tuple[Any, Any], str] = {}
        self._lock = threading.Lock()
        #: How many kernels were lowered or read from disk (the cache tests count this).
        self.lowered = 0

    def source(self, key: Any, layout_class: Any, build: Callable[[], Any]) -> str:
        """The lowered source of (key, layout class), built by ``build()`` on first use."""
        cache_key = (key, layout_class)
        source = self._sources.get(cache_key)
        if source is None:
            with self._lock:
                source = self._sources.get(cache_key)
                if source is None:
                    source = self._lower(cache_key, build)
                    self._sources[cache_key] = source
                    self.lowered += 1
        return source

    def _lower(self, cache_key: tuple[Any, Any], build: Callable[[], Any]) -> str:
        from conveyor_metal.kernels._tile import dialect, lower

        target = self.launcher.target
        with dialect(target):
            function = build()
        if self.cache_dir is None:
            return lower(function, target)
        text = f"{target}\0{_tilelang_version()}\0{function.script()}"
        name = hashlib.sha256(text.encode()).hexdigest()[:32]
        path = self.cache_dir / f"{name}.{target}"
        if path.exists():
            return path.read_text()
        source = lower(function, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        partial.write_text(source)
        os.replace(partial, path)
        return source

    def empty(self, size: int, dtype: cv.DType) -> Any:
        """A fresh flat result buffer on the device."""
        import torch

        return torch.empty(size, dtype=torch_dtype(dtype), device=self.device)

    def upload(self, values: np.ndarray[Any, Any], dtype: cv.DType) -> Any:
        """A device buffer holding ``values`` (small: weak scalars and meta words)."""
        import torch

        from conveyor_metal._storage import _tensor

        return _tensor(values, dtype).to(self.device) if values.size else torch.empty(0)

    def meta(self, values: Sequence[int]) -> Any:
        """The int32 meta buffer (at least one word: Metal refuses empty buffers)."""
        import torch

        return torch.tensor(list(values) or [0], dtype=torch.int32, device=self.device)

    def run(
        self,
        source: str,
        buffers: dict[str, Any],
        scalars: dict[str, int],
        launch: Launch,
    ) -> None:
        """Launch ``source`` with arguments bound by name."""
        self.launcher.run(source, buffers, scalars, launch)

    def operand(self, value: Any, dtype: cv.DType, shape: tuple[int, ...]) -> Operand:
        """``value`` (an ``Operand`` or a weak scalar) as an operand broadcast to ``shape``."""
        if isinstance(value, Operand):
            return Operand(value.buffer, value.layout.broadcast_to(shape))
        buffer = self.upload(weak_scalar(value, dtype), dtype)
        return Operand(buffer, cv.Layout((1,)).broadcast_to(shape) if shape else cv.Layout(()))
