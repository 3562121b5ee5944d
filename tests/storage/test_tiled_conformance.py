"""The conformance kit runs against TiledEvictable (``--conveyor-carrier=tiled``) and rejects a
deliberately broken one.

The kit checks the tiled direct surface against Generic (cases outside it must be refused
before work, saying to project first), the dispatch contract, gradients through the central
VJPs, and the tiled contract itself (footprints, project/scatter, residency, the budget). A
sample of three plans per name keeps each run to seconds.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conformance.kit_runner import KitRun, run_kit

pytestmark = pytest.mark.slow  # three kit subprocesses: about a minute on a small machine

_SAMPLE = "--conveyor-max-plans=3"
_RUNS: dict[str, list[str]] = {
    "tiled": ["--conveyor-carrier=tiled", _SAMPLE],
    "tiled_generic": ["--conveyor-carrier=tiled:generic/file", _SAMPLE, "-k", "oracle or Surface"],
    "broken": ["--conveyor-carrier=tiled", _SAMPLE, "-p", "tiled_kit_broken"],
}


@pytest.fixture(scope="module")
def kit_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KitRun]:
    root = tmp_path_factory.mktemp("tiled-kit")
    plugin_dir = root / "plugin"
    plugin_dir.mkdir()
    shutil.copy(Path(__file__).with_name("tiled_kit_broken.py"), plugin_dir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(plugin_dir), prepend=":")
        return run_kit(root, _RUNS)


class TestKitOnTiled:
    @pytest.mark.parametrize(
        ("run_id", "tiers"),
        [
            ("tiled", "primary=CPU secondary=FileBacked"),
            ("tiled_generic", "primary=Generic secondary=FileBacked"),
        ],
    )
    def test_tiled_conforms(self, kit_runs: dict[str, KitRun], run_id: str, tiers: str) -> None:
        """Every check kind passes on TiledEvictable, the direct-surface checks included."""
        run = kit_runs[run_id]
        assert run.returncode == 0, run.output[-4000:]
        summary = run.summary()
        assert "(conveyor_storage.tiled_evictable.TiledEvictable), hierarchy " + tiers in summary
        # Every elementwise name and activation, every reduction, matmul and permute.
        assert "names supported: 58: abs, acos, acosh, add, argmax, argmin," in summary
        checked = re.search(
            r"(\d+) checked against Generic \(at most 3 per name\): (\d+) passed", summary
        )
        assert checked is not None and checked[1] == checked[2] and int(checked[1]) >= 150
        assert "passed, 0 failed" in summary.split("checked against Generic", 1)[1].splitlines()[0]
        assert "TestDirectSurface" in summary
        assert ", 0 failed, " in summary.split("checks: ", 1)[1].splitlines()[0]
        assert "result: conforms" in summary

    def test_broken_tiled_rejected_naming_each_defect(self, kit_runs: dict[str, KitRun]) -> None:
        """An off-by-one add fails the oracle check; an advertised name nothing runs fails the
        dispatch contract."""
        run = kit_runs["broken"]
        summary = run.summary()
        assert run.returncode == 1, run.output[-4000:]
        assert "FAILED plans of add: 3 of 3 checked" in summary
        assert "max abs error 1;" in summary
        assert "FAILED TestDirectSurface::test_direct_operation_within_a_two_tile_budget[add]" in (
            summary
        )
        assert "cumsum: the first dispatch raised NotImplementedError" in summary
        assert "result: DOES NOT CONFORM" in summary


def test_tiled_tensors_over_one_compute_class_share_one_capability_set(tmp_path: Path) -> None:
    """The direct surface depends on the compute class only: a new tiled tensor reuses the
    frozen set instead of rebuilding thousands of plans on its first call (the kit's cost)."""
    import conveyor as cv
    from conveyor_generic import CPU, Generic
    from conveyor_storage import FileBacked, TiledEvictable

    def tiled(primary: type[cv.Carrier]) -> TiledEvictable:
        file = FileBacked.allocate(0, cv.float32, directory=str(tmp_path))
        return TiledEvictable(primary.allocate(0, cv.float32), file, (2, 2), (1, 1))

    first, second, other = tiled(CPU), tiled(CPU), tiled(Generic)
    assert first.operation_capabilities() is second.operation_capabilities()
    assert other.operation_capabilities() is not first.operation_capabilities()
    assert {c.operation for c in other.operation_capabilities()} == {
        c.operation for c in first.operation_capabilities()
    }
