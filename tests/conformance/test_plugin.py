"""The conformance kit run as a vendor runs it: `pytest --pyargs conveyor_testkit`, in a subprocess.

Generic and CPU must conform. The deliberately broken carriers of ``broken_plugin.py``, installed
as a throw-away distribution (a dist-info folder on ``PYTHONPATH``), must make the kit fail and
name the problem; a DependentCarrier and an unset ``--conveyor-carrier`` must skip with a reason.
All runs start together in one module fixture, so the two full runs overlap with the small ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_BROKEN_MODULE = "conveyor_kit_broken_carriers"
# Kit runs: run id -> extra pytest arguments (None: no --conveyor-carrier at all).
_RUNS: dict[str, list[str]] = {
    "generic": ["--conveyor-carrier=generic"],
    "cpu": ["--conveyor-carrier=cpu"],
    "shm": ["--conveyor-carrier=shm"],
    "off_by_one": ["--conveyor-carrier=broken_off_by_one"],
    "caching": ["--conveyor-carrier=broken_caching"],
    "eager": ["--conveyor-carrier=broken_eager"],
    "overclaim": ["--conveyor-carrier=broken_overclaim"],
    "dependent": ["--conveyor-carrier=broken_dependent"],
    "sampled": ["--conveyor-carrier=cpu", "--conveyor-max-plans=2", "-k", "oracle"],
    "unknown": ["--conveyor-carrier=no_such_carrier"],
    "unset": ["-rs"],
}
_TIMEOUT = 200


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
def kit_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, KitRun]]:
    """Every kit run of ``_RUNS``, started concurrently from a folder outside the repository."""
    root = tmp_path_factory.mktemp("kit")
    site = _throwaway_site(root)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    base = [sys.executable, "-m", "pytest", "--pyargs", "conveyor_testkit", "-q"]
    base += ["-p", "no:cacheprovider", "--color=no"]
    started = {
        run: subprocess.Popen(
            [*base, *extra],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for run, extra in _RUNS.items()
    }
    results = {}
    try:
        for run, process in started.items():
            output, _ = process.communicate(timeout=_TIMEOUT)
            results[run] = KitRun(process.returncode, output)
        yield results
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


class TestShippedCarriersConform:
    @pytest.mark.parametrize("carrier", ["generic", "cpu"])
    def test_shipped_carrier_passes_with_summary(
        self, kit_runs: dict[str, KitRun], carrier: str
    ) -> None:
        """The kit passes on Generic and CPU and prints the conformance summary."""
        run = kit_runs[carrier]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert f"carrier: '{carrier}'" in summary
        assert "names supported: 54:" in summary
        assert "8856 advertised, 8856 checked against Generic: 8856 passed, 0 failed" in summary
        assert "result: conforms" in summary

    def test_example_vendor_carrier_conforms(self, kit_runs: dict[str, KitRun]) -> None:
        """conveyor-shm, the example vendor carrier, passes the kit on every plan it advertises."""
        run = kit_runs["shm"]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert "carrier: 'shm'" in summary
        assert ", 0 failed" in summary
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


class TestSkips:
    def test_dependent_carrier_skips_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """A DependentCarrier is not tested; every check skips and the summary says why."""
        run = kit_runs["dependent"]
        assert run.returncode == 0, run.output[-4000:]
        assert "not tested: Tiered is a DependentCarrier" in run.summary()
        assert " passed" not in run.output and " skipped" in run.output

    def test_unset_carrier_skips_with_reason(self, kit_runs: dict[str, KitRun]) -> None:
        """Without --conveyor-carrier every check skips, telling how to run the kit."""
        run = kit_runs["unset"]
        assert run.returncode == 0, run.output[-4000:]
        assert "--conveyor-carrier is not set" in run.output
        assert " passed" not in run.output and "conformance summary" not in run.output

    def test_unknown_carrier_is_a_usage_error(self, kit_runs: dict[str, KitRun]) -> None:
        """An unregistered name stops the run with the known names listed."""
        run = kit_runs["unknown"]
        assert run.returncode == 4, run.output[-4000:]
        assert "--conveyor-carrier='no_such_carrier'" in run.output
        assert "'generic'" in run.output
