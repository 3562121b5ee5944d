"""Real installs: conveyor-shm, pip-installed into a fresh venv, is discovered and computes.

Like ``test_real_install``, one throw-away virtual environment sees the outer environment's
packages through a ``.pth`` file and the outer pip installs into it with ``--python``. The vendor
guide's own commands run in ``test_plugin_authors_guide``.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import conveyor

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


class _Venv:
    def __init__(self, root: Path) -> None:
        venv.create(root / "venv", with_pip=False, symlinks=os.name != "nt")
        self.python = root / "venv" / "bin" / "python"
        self.cwd = root
        purelib = self.run("-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
        outer = [p for p in site.getsitepackages() if Path(p).is_dir()]
        lines = [f"import site; site.addsitedir({p!r})" for p in outer]
        lines.append(str(Path(conveyor.__file__).resolve().parents[1]))
        Path(purelib.stdout.strip(), "_conveyor_outer.pth").write_text("\n".join(lines) + "\n")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env.pop("PYTHONPATH", None)
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.cwd,
            timeout=300,
        )

    def pip_install(self, *paths: str) -> None:
        """``pip install`` into the venv with the outer pip (the venv has none of its own)."""
        command = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(self.python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            *paths,
        ]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.cwd, timeout=300)
        assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> _Venv:
    """A fresh venv with conveyor-shm installed by pip."""
    env = _Venv(tmp_path_factory.mktemp("shm"))
    env.pip_install(str(ROOT / "plugins" / "conveyor-shm"))
    return env


class TestShmRealInstall:
    def test_shm_discovered_after_pip_install(self, environment: _Venv) -> None:
        """`conveyor plugins --json` lists conveyor-shm as loaded with the shm carrier."""
        done = environment.run("-m", "conveyor.cli", "plugins", "--json")
        assert done.returncode == 0, done.stderr
        plugins = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
        assert plugins["shm"]["state"] == "loaded"
        assert plugins["shm"]["distribution"] == "conveyor-shm"
        assert plugins["shm"]["carriers"] == ["shm"]

    def test_shm_computes_by_name(self, environment: _Venv) -> None:
        code = (
            "import conveyor as cv\n"
            "x = cv.tensor([-1.0, 2.0], cv.float32, carrier='shm')\n"
            "print(type(x.carrier).__module__, cv.relu(x).numpy().tolist())\n"
        )
        done = environment.run("-c", code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["conveyor_shm.carrier", "[0.0,", "2.0]"]
