"""Plugin import and first use load only what they need (checked in fresh interpreters)."""

from __future__ import annotations

import subprocess
import sys

TIMEOUT = 120


def imported_modules(code: str) -> set[str]:
    """The modules a fresh interpreter imports running ``code``, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


class TestPluginImportIsCheap:
    def test_the_entry_point_module_imports_no_carrier_module_and_no_numpy(self) -> None:
        loaded = imported_modules("import conveyor_generic.plugin")
        assert "conveyor_generic.plugin" in loaded
        heavy = {"numpy", "conveyor_generic.cpu", "conveyor_generic.generic"}
        assert not heavy & loaded
        assert not {m for m in loaded if m.startswith("conveyor_generic.kernels")}

    def test_the_carrier_modules_declare_capabilities_without_enumerating_plans(self) -> None:
        out = run(
            "import conveyor_generic.cpu, conveyor_generic.generic\n"
            "from conveyor.types import policy\n"
            "print(len(policy._ENUMERATED))"
        )
        assert out == "0"

    def test_a_first_add_on_cpu_enumerates_only_the_plans_of_add(self) -> None:
        out = run(
            "import numpy as np\n"
            "from conveyor_generic import CPU\n"
            "import conveyor as cv\n"
            "from conveyor.types import policy\n"
            "t = cv.tensor(np.ones(2, np.float32), carrier=CPU)\n"
            "(t + t).numpy()\n"
            "print(sorted(k for k in policy._ENUMERATED if k is not None))"
        )
        assert out == "['add']"

    def test_counts_stay_exact_when_asked(self) -> None:
        out = run(
            "from conveyor_generic import CPU, Generic\n"
            "import conveyor as cv\n"
            "from conveyor.types.policy import enumerate_plans\n"
            "print(len(cv.declared_capabilities(CPU)) == len(enumerate_plans()),"
            " len(cv.declared_capabilities(Generic)) == len(enumerate_plans()))"
        )
        assert out == "True True"
