"""Compiling and launching lowered kernels: Metal through torch, C through ctypes.

Both launchers take a kernel's source, read its binding from the source (``_binding``) and
call it with arguments placed by name. ``MetalLauncher`` compiles Metal Shading Language
with ``torch.mps.compile_shader`` and dispatches ``threads = grid * threadgroup`` with the
threadgroup size the kernel was written for. ``CLauncher`` is the Linux correctness path: the
same TileLang ``prim_func`` lowered with ``target="c"``, many kernels built into one shared
library (``_c_build``: few translation units, compiled in parallel), called through ``ctypes``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from conveyor_metal._binding import KernelBinding, bind, pack_scalars, parse_c, parse_metal
from conveyor_metal._c_build import build_library

__all__ = ["CLauncher", "Launch", "Launcher", "MetalLauncher", "c_include_dir"]


@attrs.frozen
class Launch:
    """The geometry of one dispatch: threadgroups per grid and threads per threadgroup."""

    grid: tuple[int, int, int]
    threads: tuple[int, int, int]


class Launcher(Protocol):
    """Runs a lowered kernel by name: ``run(source, buffers, scalars, launch)``."""

    target: str

    def run(
        self,
        source: str,
        buffers: Mapping[str, Any],
        scalars: Mapping[str, int],
        launch: Launch,
    ) -> None: ...


class MetalLauncher:
    """Compiles MSL once per source with ``torch.mps.compile_shader``; binds by buffer slot."""

    target = "metal"

    def __init__(self) -> None:
        self._compiled: dict[str, tuple[KernelBinding, Any]] = {}
        self._lock = threading.Lock()

    def run(
        self,
        source: str,
        buffers: Mapping[str, Any],
        scalars: Mapping[str, int],
        launch: Launch,
    ) -> None:
        import torch

        entry = self._compiled.get(source)
        if entry is None:
            with self._lock:
                binding = parse_metal(source)
                library = torch.mps.compile_shader(source)
                entry = self._compiled[source] = (binding, getattr(library, binding.kernel))
        binding, kernel = entry
        packed = None
        if binding.scalar_slot is not None:
            words = pack_scalars(binding, scalars)
            packed = torch.tensor(words, dtype=torch.int32, device="mps")
        arguments = bind(binding, buffers, scalars, packed)
        threads = [g * t for g, t in zip(launch.grid, launch.threads, strict=True)]
        kernel(*arguments, threads=threads, group_size=list(launch.threads))


def c_include_dir() -> Path:
    """The folder holding TileLang's ``tl_templates/cpp/common.h`` (what C sources include)."""
    import tilelang

    return Path(tilelang.__file__).parent / "src"


class CLauncher:
    """Runs C-target kernels through ctypes; ``prepare`` builds many into one library.

    Buffers are CPU torch tensors (their ``data_ptr`` is passed); scalars are int32.
    Libraries are kept in ``cache_dir`` under the digest of their sources.
    """

    target = "c"

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._cache = cache_dir or Path(tempfile.gettempdir()) / f"conveyor-metal-c-{os.getuid()}"
        self._functions: dict[str, tuple[KernelBinding, Callable[..., int]]] = {}
        self._lock = threading.Lock()

    def prepare(self, sources: Sequence[str]) -> None:
        """Build every source not yet built into one shared library (see ``_c_build``)."""
        missing = sorted({s for s in sources if s not in self._functions})
        if not missing:
            return
        with self._lock:
            bindings = [parse_c(s) for s in missing]
            names = [b.kernel for b in bindings]
            if len(set(names)) != len(names):
                msg = f"CLauncher.prepare: kernel names repeat across sources: {sorted(names)}"
                raise ValueError(msg)
            digest = hashlib.sha256("\0".join(missing).encode()).hexdigest()[:20]
            library = self._cache / f"{digest}.so"
            if not library.exists():
                build_library(missing, library, c_include_dir())
            handle = ctypes.CDLL(str(library))
            for source, binding in zip(missing, bindings, strict=True):
                function = getattr(handle, binding.kernel)
                function.restype = ctypes.c_int32
                self._functions[source] = (binding, function)

    def run(
        self,
        source: str,
        buffers: Mapping[str, Any],
        scalars: Mapping[str, int],
        launch: Launch,
    ) -> None:
        del launch  # the C target runs the whole grid as loops
        if source not in self._functions:
            self.prepare([source])
        binding, function = self._functions[source]
        pointers = {name: ctypes.c_void_p(tensor.data_ptr()) for name, tensor in buffers.items()}
        arguments = bind(binding, pointers, scalars)
        converted = [a if isinstance(a, ctypes.c_void_p) else ctypes.c_int32(a) for a in arguments]
        status = function(*converted)
        if status != 0:
            msg = f"CLauncher: kernel {binding.kernel} returned {status}"
            raise RuntimeError(msg)
