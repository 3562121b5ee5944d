"""``conveyor demo --quick``: every step runs and its summary holds what the demo promises."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor_demo import DemoOptions, run_demo
from conveyor_demo._report import PLOT_SIZE


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    output = tmp_path_factory.mktemp("demo")
    with open(output / "story.txt", "w") as story:
        summary = run_demo(DemoOptions(quick=True, output=output), stream=story)
    return summary, output


class TestQuickDemo:
    def test_training_beats_the_accuracy_goal(self, demo: tuple[dict[str, Any], Path]) -> None:
        """The digits classifier trained on CPU beats the quick run's accuracy goal."""
        train = demo[0]["train"]
        assert train["conveyor"]["accuracy"] > train["accuracy_goal"]
        assert train["conveyor"]["steps_per_second"] > 0

    def test_training_matches_the_numpy_reference(self, demo: tuple[dict[str, Any], Path]) -> None:
        """Conveyor and the hand-written NumPy network reach the same test accuracy."""
        train = demo[0]["train"]
        assert train["same_accuracy_as_numpy"]
        assert train["conveyor"]["final_loss"] == pytest.approx(train["numpy"]["final_loss"], 1e-4)

    def test_resume_gives_identical_accuracy(self, demo: tuple[dict[str, Any], Path]) -> None:
        """Weights evicted to disk and promoted back score exactly as before."""
        resume = demo[0]["resume"]
        assert resume["evicted"]
        assert resume["identical"]
        assert resume["accuracy_after"] == resume["accuracy_before"]

    def test_shared_memory_sibling_is_identical(self, demo: tuple[dict[str, Any], Path]) -> None:
        """A second process attached to the shared-memory tensors computes CPU's logits (to
        float32 rounding: its matmul sums in another order than CPU's BLAS)."""
        shm = demo[0]["siblings"]["shm"]
        assert shm["second_process_exit"] == 0
        assert shm["agrees"], shm

    def test_out_of_core_is_correct_within_the_budget(
        self, demo: tuple[dict[str, Any], Path]
    ) -> None:
        """The tiled reduction and product are exact and never held more than the budget."""
        ooc = demo[0]["out_of_core"]
        assert ooc["bytes"] > 2 * ooc["budget_bytes"]  # several times the budget
        assert ooc["sum"] == ooc["expected_sum"]
        assert ooc["matmul_max_error"] < 1e-3
        assert 0 < ooc["peak_resident_bytes"] <= ooc["budget_bytes"] + ooc["tile_bytes"]
        assert ooc["within_budget"]

    def test_dask_sibling_agrees(self, demo: tuple[dict[str, Any], Path]) -> None:
        """The Dask carrier's local cluster computes CPU's logits within float32 rounding."""
        dask = demo[0]["siblings"]["dask"]
        assert dask["agrees"], dask

    def test_plugins_are_listed(self, demo: tuple[dict[str, Any], Path]) -> None:
        """The plugin step lists the shipped plugins, loaded."""
        states = {p["name"]: p["state"] for p in demo[0]["plugins"]}
        assert states["generic"] == "loaded"
        assert states["storage"] == "loaded"

    def test_summary_file_holds_the_returned_figures(
        self, demo: tuple[dict[str, Any], Path]
    ) -> None:
        """summary.json is the summary the run returned."""
        summary, output = demo
        assert json.loads((output / "summary.json").read_text()) == summary

    def test_loss_plot_is_a_png_of_the_expected_size(
        self, demo: tuple[dict[str, Any], Path]
    ) -> None:
        """loss.png starts with the PNG signature and its header gives the promised size."""
        data = (demo[1] / "loss.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert data[12:16] == b"IHDR"
        assert struct.unpack(">II", data[16:24]) == PLOT_SIZE
        assert len(data) > 10_000  # curves and labels, not an empty canvas

    def test_story_names_every_step(self, demo: tuple[dict[str, Any], Path]) -> None:
        """The terminal story walks through the six steps and ends with the summary table."""
        story = (demo[1] / "story.txt").read_text()
        for heading in ("1. Plugins", "2. Train", "3. Out of core", "4. Evict", "5. Sibling"):
            assert heading in story
        assert "step" in story and "evict and resume" in story


def test_json_flag_prints_only_the_summary(tmp_path: Path) -> None:
    """``conveyor demo --quick --json`` prints one JSON document and nothing else on stdout."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conveyor.cli",
            "demo",
            "--quick",
            "--json",
            "--output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    summary = json.loads(done.stdout)
    assert summary["quick"] is True
    assert summary["problems"] == []  # and so the status was 0 (check=True)
    assert (tmp_path / "summary.json").exists()
