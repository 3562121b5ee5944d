"""A vendor distribution installed for real: every planned name through one kernel pattern.

``tests/vendor/cvt-vendor-numpy`` is written the way docs/plugin-authors.md says: a
definition-backed carrier whose storage provider keeps NumPy arrays and whose one generic
kernel pattern covers every plan of every planned name. It is pip-installed into a fresh virtual
environment; there it must be discovered, pass the conformance kit with every plan checked, and
train the MLP of tests/generic/test_training.py with CPU's plans and gradients.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.plugins.fresh_venv import fresh_venv

pytestmark = pytest.mark.slow

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[1]


def _run(python: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CONVEYOR_")
        and k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    return subprocess.run(
        [str(python), *args], capture_output=True, text=True, env=env, cwd=_REPO, timeout=timeout
    )


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fresh environment's Python, with cvt-vendor-numpy pip-installed."""
    return fresh_venv(tmp_path_factory.mktemp("vendor"), [_HERE / "cvt-vendor-numpy"])


class TestVendorInstalled:
    def test_discovered_and_definition_backed(self, python: Path) -> None:
        """`conveyor plugins` lists it loaded; every planned name has a capability."""
        done = _run(python, "-m", "conveyor.cli", "plugins", "--json")
        assert done.returncode == 0, done.stderr
        (vendor,) = [p for p in json.loads(done.stdout)["plugins"] if p["name"] == "vendor_numpy"]
        assert (vendor["state"], vendor["distribution"]) == ("loaded", "cvt-vendor-numpy")
        code = (
            "import conveyor as cv\n"
            "import conveyor.sdk as sdk\n"
            "cls = cv.plugins.host().carrier('vendor_numpy')\n"
            "names = cv.definition_capabilities(cls).names\n"
            "print(sdk.carrier_definition(cls) is not None, len(names))\n"
        )
        done = _run(python, "-c", code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "71"]

    def test_passes_the_kit_with_every_plan(self, python: Path, tmp_path: Path) -> None:
        """The conformance kit checks all 9052 plans and every other check, and it conforms."""
        report = tmp_path / "vendor.json"
        done = _run(
            python,
            "-m",
            "pytest",
            "--pyargs",
            "conveyor_testkit",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--conveyor-carrier=vendor_numpy",
            f"--conveyor-report={report}",
        )
        assert done.returncode == 0, done.stdout[-4000:]
        assert "9052 advertised, 9052 checked against Generic: 9052 passed, 0 failed" in done.stdout
        assert "result: conforms" in done.stdout
        summary = json.loads(report.read_text())
        assert summary["result"] == "conforms" and summary["checks"]["failed"] == 0

    def test_trains_the_mlp_like_cpu(self, python: Path) -> None:
        """The MLP of test_training runs identical plans, and its gradients match CPU's."""
        script = textwrap.dedent(
            """
            import json
            import numpy as np
            import conveyor as cv
            from conveyor_generic import CPU
            from tests.generic import test_training as t

            cls = cv.plugins.host().carrier("vendor_numpy")
            out = {}
            for carrier in (cls, CPU):
                x, y = t._problem()
                x = cv.tensor(x, dtype=cv.float32, carrier=carrier)
                y = cv.tensor(y, dtype=cv.float32, carrier=carrier)
                params = [
                    cv.tensor(w, dtype=cv.float32, carrier=carrier, requires_grad=True)
                    for w in t._initial_weights()
                ]
                loss = t._loss(params, x, y)
                loss.backward()
                losses, plans = t.train(carrier)
                out[carrier.__name__] = {
                    "plans": [repr(p) for p in plans],
                    "grads": [p.grad.numpy().tolist() for p in params],
                    "grad_carriers": sorted({type(p.grad.carrier).__name__ for p in params}),
                    "losses": losses,
                }
            print(json.dumps(out))
            """
        )
        done = _run(python, "-c", script)
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(done.stdout)
        vendor, cpu = result["VendorNumpy"], result["CPU"]
        assert vendor["plans"] == cpu["plans"]
        assert vendor["grad_carriers"] == ["VendorNumpy"]
        for got, want in zip(vendor["grads"], cpu["grads"], strict=True):
            assert np_allclose(got, want)
        assert vendor["losses"][-1] < 0.05 < vendor["losses"][0]
        assert np_allclose(vendor["losses"], cpu["losses"], rtol=1e-3)


def np_allclose(got: object, want: object, rtol: float = 1e-5) -> bool:
    import numpy as np

    return bool(np.allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=1e-6))
