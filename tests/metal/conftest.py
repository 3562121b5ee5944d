"""Metal test set-up: device tests skip off macOS arm64, the Linux engines are shared.

``@pytest.mark.metal`` tests execute kernels on an Apple GPU; elsewhere they are skipped with
the reason "needs macOS arm64 with MPS". The Linux checks share two engines per session: one
records Metal launches without running them (lowering, binding and syntax checks), one runs
the same kernels through TileLang's C target. Both keep lowered sources in a disk cache under
the temporary folder, namespaced by a digest of the kernel modules, so reruns skip lowering.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from conveyor_metal._platform import REASON, unavailable_reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``metal``-marked tests where no Metal device can run them."""
    if unavailable_reason() is None:
        import torch

        if torch.backends.mps.is_available():
            return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if item.get_closest_marker("metal") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kernel_cache() -> Path:
    """Where lowered kernel sources and built C libraries are kept between runs."""
    return Path(tempfile.gettempdir()) / f"conveyor-metal-tests-{os.getuid()}"
