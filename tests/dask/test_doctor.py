"""``conveyor doctor`` names the active Dask cluster's scheduler and dashboard."""

from __future__ import annotations

import json
from typing import Any

import pytest

import conveyor as cv
from conveyor import cli
from conveyor_dask import DaskCarrier


def test_doctor_shows_the_active_cluster(cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """With a cluster in use, the JSON report and the text name its scheduler and dashboard."""
    cv.tensor([1.0], carrier="dask")
    assert cli.main(["doctor", "--json"]) == 0
    section = json.loads(capsys.readouterr().out)["sections"]["dask"]
    assert section["scheduler"] == cluster.scheduler_address
    assert section["dashboard"] == DaskCarrier.dashboard_link()
    assert section["workers"] == "2"
    assert cli.main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert f"dask: scheduler {cluster.scheduler_address}, dashboard " in text


def test_doctor_reports_an_unreachable_configured_scheduler(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No cluster in use and the variable naming a dead address: doctor says it is unreachable."""
    from conveyor_dask import _cluster

    _cluster.close()
    monkeypatch.setenv(_cluster.SCHEDULER_VARIABLE, "tcp://127.0.0.1:9")
    assert cli.main(["doctor", "--json"]) == 0
    section = json.loads(capsys.readouterr().out)["sections"]["dask"]
    assert section["scheduler"] == "tcp://127.0.0.1:9"
    assert section["state"].startswith("unreachable")
