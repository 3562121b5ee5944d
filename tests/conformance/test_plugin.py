"""The conformance kit passes the shipped carriers, a composite and a sampled run, with every check.

Generic is checked against the NumPy references and CPU against Generic on every plan; shm and
two Evictable hierarchies on a sample of plans (every check kind still runs). Slow: each full
run takes minutes on a small machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conformance.kit_runner import KitRun, run_kit

pytestmark = pytest.mark.slow

# Kit runs: run id -> extra pytest arguments.
_RUNS: dict[str, list[str]] = {
    "generic": ["--conveyor-carrier=generic"],
    "cpu": ["--conveyor-carrier=cpu"],
    # shm allocates a shared-memory segment per tensor: a sample of its plans keeps the run short.
    "shm": ["--conveyor-carrier=shm", "--conveyor-max-plans=25"],
    "evictable": ["--conveyor-carrier=evictable", "--conveyor-max-plans=10"],
    "evictable_shm": ["--conveyor-carrier=evictable:shm/file", "--conveyor-max-plans=5"],
    "sampled": ["--conveyor-carrier=cpu", "--conveyor-max-plans=2", "-k", "oracle"],
    "report": ["--conveyor-carrier=cpu", "--conveyor-max-plans=1", "--conveyor-report=kit.json"],
}


@pytest.fixture(scope="module")
def kit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder outside the repository the kit runs start in."""
    return tmp_path_factory.mktemp("kit")


@pytest.fixture(scope="module")
def kit_runs(kit_root: Path) -> dict[str, KitRun]:
    return run_kit(kit_root, _RUNS)


class TestShippedCarriersConform:
    @pytest.mark.parametrize(
        ("carrier", "against"), [("generic", "the NumPy reference"), ("cpu", "Generic")]
    )
    def test_shipped_carrier_passes_with_summary(
        self, kit_runs: dict[str, KitRun], carrier: str, against: str
    ) -> None:
        """The kit passes on Generic (against NumPy) and CPU (against Generic), every plan."""
        run = kit_runs[carrier]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert f"carrier: '{carrier}'" in summary
        assert "names supported: 71:" in summary
        assert f"9052 advertised, 9052 checked against {against}: 9052 passed, 0 failed" in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    def test_example_vendor_carrier_conforms(self, kit_runs: dict[str, KitRun]) -> None:
        """conveyor-shm, the example vendor carrier, passes every check of the kit."""
        run = kit_runs["shm"]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert "carrier: 'shm'" in summary and "names supported: 71:" in summary
        sampled = "9052 advertised, 1037 checked against Generic (at most 25 per name): 1037 passed"
        assert sampled in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    @pytest.mark.parametrize(
        ("run_id", "tiers"),
        [
            ("evictable", "primary=CPU secondary=FileBacked"),
            ("evictable_shm", "primary=SharedMemoryCarrier secondary=FileBacked"),
        ],
    )
    def test_evictable_hierarchies_conform(
        self, kit_runs: dict[str, KitRun], run_id: str, tiers: str
    ) -> None:
        """--conveyor-carrier=evictable[:P/S] runs every check through an Evictable hierarchy."""
        run = kit_runs[run_id]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert f"(conveyor_storage.evictable.Evictable), hierarchy {tiers}" in summary
        assert "names supported: 71:" in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    def test_max_plans_samples_each_name(self, kit_runs: dict[str, KitRun]) -> None:
        """--conveyor-max-plans=2 checks two plans of each of the 71 names."""
        run = kit_runs["sampled"]
        assert run.returncode == 0, run.output[-4000:]
        assert "142 checked against Generic (at most 2 per name): 142 passed" in run.summary()


class TestReport:
    def test_json_report_matches_the_summary(
        self, kit_runs: dict[str, KitRun], kit_root: Path
    ) -> None:
        """--conveyor-report=FILE.json writes the counts, the plans and the result."""
        run = kit_runs["report"]
        assert run.returncode == 0, run.output[-4000:]
        report = json.loads((kit_root / "kit.json").read_text())
        assert report["carrier"] == "cpu" and report["result"] == "conforms"
        assert report["plans"] == {"advertised": 9052, "checked": 71, "failed": 0}
        checks = report["checks"]
        assert checks["run"] == checks["passed"] > 0 and checks["failed"] == 0
        assert f"checks: {checks['run']} run, {checks['passed']} passed" in run.summary()
