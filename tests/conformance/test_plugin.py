"""The conformance kit run as a vendor runs it: `pytest --pyargs conveyor_testkit`, in a subprocess.

Generic and CPU must conform. The deliberately broken carriers of ``broken_plugin.py``, installed
as a throw-away distribution (a dist-info folder on ``PYTHONPATH``), must make the kit fail and
name the problem; a DependentCarrier and an unset ``--conveyor-carrier`` check nothing, so the
run must fail and say why.
The runs share one module fixture, a few at a time, the full runs first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # about two dozen kit runs, two of them over every plan

_BROKEN_MODULE = "conveyor_kit_broken_carriers"
# Kit runs: run id -> extra pytest arguments (None: no --conveyor-carrier at all).
_RUNS: dict[str, list[str]] = {
    "generic": ["--conveyor-carrier=generic"],
    "cpu": ["--conveyor-carrier=cpu"],
    # shm allocates a shared-memory segment per tensor: a sample of its plans keeps the run short.
    "shm": ["--conveyor-carrier=shm", "--conveyor-max-plans=25"],
    "evictable": ["--conveyor-carrier=evictable", "--conveyor-max-plans=10"],
    "evictable_shm": ["--conveyor-carrier=evictable:shm/file", "--conveyor-max-plans=5"],
    "off_by_one": ["--conveyor-carrier=broken_off_by_one"],
    "caching": ["--conveyor-carrier=broken_caching"],
    "eager": ["--conveyor-carrier=broken_eager"],
    "overclaim": ["--conveyor-carrier=broken_overclaim"],
    "dependent": ["--conveyor-carrier=broken_dependent"],
    "mutating": ["--conveyor-carrier=broken_mutating"],
    "silent_mutation": ["--conveyor-carrier=broken_silent_mutation"],
    "aliasing": ["--conveyor-carrier=broken_aliasing"],
    "foreign_alloc": ["--conveyor-carrier=broken_foreign_alloc"],
    "large": ["--conveyor-carrier=broken_large"],
    "gradient": ["--conveyor-carrier=broken_gradient"],
    "indexing": ["--conveyor-carrier=broken_indexing"],
    "moves": ["--conveyor-carrier=broken_moves"],
    "sampled": ["--conveyor-carrier=cpu", "--conveyor-max-plans=2", "-k", "oracle"],
    "report": ["--conveyor-carrier=cpu", "--conveyor-max-plans=1", "--conveyor-report=kit.json"],
    "unknown": ["--conveyor-carrier=no_such_carrier"],
    "unset": ["-rs"],
}
_TIMEOUT = 600
_PARALLEL = 3  # kit runs at once: the machine running the suite may be small


@dataclass(frozen=True)
class KitRun:
    """The outcome of one kit subprocess."""

    returncode: int
    output: str

    def summary(self) -> str:
        marker = "conveyor conformance summary"
        return self.output[self.output.find(marker) :] if marker in self.output else ""


def _throwaway_site(root: Path) -> Path:
    """A folder holding the broken plugin module and a dist-info declaring its entry point."""
    site = root / "site"
    site.mkdir()
    shutil.copy(Path(__file__).with_name("broken_plugin.py"), site / f"{_BROKEN_MODULE}.py")
    info = site / "conveyor_kit_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: conveyor-kit-broken\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(f"[conveyor.plugins]\nkit_broken = {_BROKEN_MODULE}\n")
    return site


@pytest.fixture(scope="module")
def kit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder outside the repository the kit runs start in."""
    return tmp_path_factory.mktemp("kit")


@pytest.fixture(scope="module")
def kit_runs(kit_root: Path) -> Iterator[dict[str, KitRun]]:
    """Every kit run of ``_RUNS``, started concurrently from a folder outside the repository."""
    root = kit_root
    site = _throwaway_site(root)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    base = [sys.executable, "-m", "pytest", "--pyargs", "conveyor_testkit", "-q"]
    base += ["-p", "no:cacheprovider", "--color=no"]
    # Bounded concurrency: the long runs start first and the small ones fill in beside them.
    pending = list(_RUNS.items())
    running: dict[str, tuple[subprocess.Popen[str], Any]] = {}
    results: dict[str, KitRun] = {}
    try:
        with ThreadPoolExecutor(_PARALLEL) as pool:

            def run_one(run: str, extra: list[str]) -> KitRun:
                process = subprocess.Popen(
                    [*base, *extra],
                    cwd=root,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                running[run] = (process, None)
                output, _ = process.communicate(timeout=_TIMEOUT)
                return KitRun(process.returncode, output)

            futures = {run: pool.submit(run_one, run, extra) for run, extra in pending}
            for run, future in futures.items():
                results[run] = future.result()
        yield results
    finally:
        for process, _ in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()


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
        assert "names supported: 54:" in summary
        assert f"8856 advertised, 8856 checked against {against}: 8856 passed, 0 failed" in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    def test_example_vendor_carrier_conforms(self, kit_runs: dict[str, KitRun]) -> None:
        """conveyor-shm, the example vendor carrier, passes every check of the kit."""
        run = kit_runs["shm"]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert "carrier: 'shm'" in summary and "names supported: 54:" in summary
        assert "8856 advertised, 1350 checked against Generic (at most 25 per name)" in summary
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
        assert "names supported: 54:" in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    def test_max_plans_samples_each_name(self, kit_runs: dict[str, KitRun]) -> None:
        """--conveyor-max-plans=2 checks two plans of each of the 54 names."""
        run = kit_runs["sampled"]
        assert run.returncode == 0, run.output[-4000:]
        assert "108 checked against Generic (at most 2 per name): 108 passed" in run.summary()


class TestBrokenCarriersFail:
    def test_wrong_results_fail_with_the_first_mismatch(self, kit_runs: dict[str, KitRun]) -> None:
        """An add that is off by one fails the oracle check, naming plan, index and values;
        the correct neg passes."""
        run = kit_runs["off_by_one"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED plans of add: 4 of 4 checked" in summary
        assert "add(input: float32, other: float32) -> float32 [case 4x5]" in summary
        assert "max abs error 1;" in summary
        assert "first at (0, 0): got" in summary
        assert "plans of neg" not in summary
        assert "result: DOES NOT CONFORM" in summary

    def test_cached_operations_fail_the_freshness_check(self, kit_runs: dict[str, KitRun]) -> None:
        """A dispatch hook returning a cached operation fails the dispatch contract."""
        run = kit_runs["caching"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED TestDispatchIsFresh::test_every_advertised_name_dispatches_fresh" in summary
        assert "neg: the second dispatch raised TypeError" in summary
        assert "already dispatched" in summary

    def test_allocation_before_refusal_fails(self, kit_runs: dict[str, KitRun]) -> None:
        """Allocating the result before the capability gate refuses fails the refusal check."""
        run = kit_runs["eager"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED TestRefusalsBeforeAllocation::test_unadvertised_plan_refused" in summary
        assert "allocated or entered the implementation before refusing" in summary
        assert "Eager.allocate" in summary

    def test_unresolvable_capabilities_fail(self, kit_runs: dict[str, KitRun]) -> None:
        """A forged capability and an unknown name fail the registry checks, naming both."""
        run = kit_runs["overclaim"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "'frobnicate' is not in conveyor.policy.registered_operations()" in summary
        assert "FAILED TestCapabilitiesMatchTheRegistry::test_every_capability_is_a_central" in (
            summary
        )
        assert "compute=" in summary and "float16" in summary


class TestNothingCheckedFails:
    def test_dependent_carrier_fails_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """A carrier the kit cannot drive checks nothing, so the run fails and says why."""
        run = kit_runs["dependent"]
        assert run.returncode == 1, run.output[-4000:]
        summary = run.summary()
        assert "not tested: Tiered is a DependentCarrier" in summary
        assert "checks: 0 run, 0 passed, 0 failed," in summary
        assert "result: NOTHING CHECKED" in summary

    def test_unset_carrier_fails_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """Without --conveyor-carrier every check skips, telling how to run the kit; exit 1."""
        run = kit_runs["unset"]
        assert run.returncode == 1, run.output[-4000:]
        assert "--conveyor-carrier is not set" in run.output
        assert " passed" not in run.output
        assert "result: NOTHING CHECKED" in run.summary()

    def test_unknown_carrier_is_a_usage_error(self, kit_runs: dict[str, KitRun]) -> None:
        """An unregistered name stops the run with the known names listed."""
        run = kit_runs["unknown"]
        assert run.returncode == 4, run.output[-4000:]
        assert "--conveyor-carrier='no_such_carrier'" in run.output
        assert "'generic'" in run.output


class TestReport:
    def test_json_report_matches_the_summary(
        self, kit_runs: dict[str, KitRun], kit_root: Path
    ) -> None:
        """--conveyor-report=FILE.json writes the counts, the plans and the result."""
        run = kit_runs["report"]
        assert run.returncode == 0, run.output[-4000:]
        report = json.loads((kit_root / "kit.json").read_text())
        assert report["carrier"] == "cpu" and report["result"] == "conforms"
        assert report["plans"] == {"advertised": 8856, "checked": 54, "failed": 0}
        checks = report["checks"]
        assert checks["run"] == checks["passed"] > 0 and checks["failed"] == 0
        assert f"checks: {checks['run']} run, {checks['passed']} passed" in run.summary()


# Each deliberately broken carrier, and what the kit must say about it.
_REJECTED: dict[str, list[str]] = {
    "mutating": ["it mutated its input input (version 1 -> 2); kernels must never write"],
    "silent_mutation": ["it mutated its input input without a version bump"],
    "aliasing": ["output 0 aliases input operand 0 (the same carrier instance)"],
    "foreign_alloc": [
        "FAILED TestRefusalsBeforeAllocation::test_unadvertised_plan_refused_before_allocation",
        "Generic.allocate (another carrier class)",
    ],
    "large": ["[case n=65]", "first at (64,)"],
    "gradient": ["FAILED TestGradientsMatchTheOracle::test_gradients_of_name_match[mul]"],
    "indexing": ["FAILED TestIndexingAndAssignment::test_indexing_matches_numpy"],
    "moves": ["FAILED TestMoves::test_round_trip_with_cpu_is_bit_exact", "the move to CPU changed"],
}


class TestCommonVendorMistakesAreRejected:
    @pytest.mark.parametrize("run_id", sorted(_REJECTED))
    def test_broken_carrier_rejected_naming_the_problem(
        self, kit_runs: dict[str, KitRun], run_id: str
    ) -> None:
        """Each broken carrier fails the kit (exit 1) with a message naming its defect."""
        run = kit_runs[run_id]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        for text in _REJECTED[run_id]:
            assert text in summary, summary[-4000:]
        assert "result: DOES NOT CONFORM" in summary
