"""A fresh virtual environment with local distributions pip-installed into it (real installs).

The environment has no pip of its own: a ``.pth`` file makes the outer environment's packages
(conveyor, numpy, pluggy, setuptools) importable, and the outer pip installs into it with
``--python`` (no index, no build isolation, no dependencies: everything needed is already there).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
from collections.abc import Iterable
from pathlib import Path

import conveyor

__all__ = ["fresh_venv"]


def fresh_venv(root: Path, folders: Iterable[Path]) -> Path:
    """Create ``root / "venv"``, pip-install each distribution folder into it; its Python."""
    venv.create(root / "venv", with_pip=False, symlinks=os.name != "nt")
    python = root / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir (not a bare path line) so the outer environment's own .pth files run too:
    # that is how an editable conveyor-core install puts core/src on sys.path.
    outer = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = [f"import site; site.addsitedir({p!r})" for p in outer]
    lines.append(str(Path(conveyor.__file__).resolve().parents[1]))
    Path(purelib, "_conveyor_outer.pth").write_text("\n".join(lines) + "\n")
    install = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--disable-pip-version-check",
        *map(str, folders),
    ]
    done = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    return python
