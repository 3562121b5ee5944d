"""The pytest plugin of the conformance kit: options, fixtures and the conformance summary.

Installed through the ``pytest11`` entry point, so it is active in every pytest run of the
environment; it stays inert (no import of plugins, no summary) unless ``--conveyor-carrier`` is
given. Run the kit with::

    pytest --pyargs conveyor_testkit --conveyor-carrier=NAME

Without ``--conveyor-carrier`` the kit's tests skip with a reason and the run fails: a kit run that
checked nothing never passes (nor does one whose carrier the kit cannot drive).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from conveyor_testkit._run import PlanFailure
from conveyor_testkit._target import Target, resolve_target

__all__ = ["Report"]

UNSET_REASON: Final = (
    "--conveyor-carrier is not set: the conformance kit checks one carrier; run "
    "`pytest --pyargs conveyor_testkit --conveyor-carrier=NAME`"
)
# How many failing plans the summary shows per name (every failure is counted).
_SHOWN_PER_NAME: Final = 10
# How many lines of a failed check's message the summary shows.
_MESSAGE_LINES: Final = 6


@dataclass
class Report:
    """What the kit found, filled in while the tests run and printed by the terminal summary.

    Mutable on purpose: the tests add to it as they go.
    """

    target: Target | None
    max_plans: int | None = None
    seed: int = 0
    advertised: dict[str, int] = field(default_factory=dict)
    passed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, list[PlanFailure]] = field(default_factory=dict)
    checks: dict[str, tuple[str, str]] = field(default_factory=dict)

    def sample(self, name: str, plans: list[Any]) -> list[Any]:
        """At most ``max_plans`` of ``plans`` (a deterministic sample, in registry order)."""
        if self.max_plans is None or len(plans) <= self.max_plans:
            return plans
        picked = sorted(
            random.Random(f"{self.seed}:{name}").sample(range(len(plans)), self.max_plans)
        )
        return [plans[i] for i in picked]

    def record(self, name: str, advertised: int, passed: int, failures: list[PlanFailure]) -> None:
        self.advertised[name] = advertised
        self.passed[name] = passed
        self.failed[name] = failures

    def counts(self) -> dict[str, int]:
        """How many checks ran, passed, failed and were skipped (a check is one kit test)."""
        found = {"run": 0, "passed": 0, "failed": 0, "skipped": 0}
        for outcome, _ in self.checks.values():
            found[outcome] += 1
        found["run"] = found["passed"] + found["failed"]
        return found

    def plan_failures(self) -> int:
        return sum(len(f) for f in self.failed.values())

    def result(self) -> str:
        """``conforms`` only when checks ran and every one passed."""
        counts = self.counts()
        if self.target is None or counts["run"] == 0:
            return "NOTHING CHECKED"
        if counts["failed"] or self.plan_failures():
            return "DOES NOT CONFORM"
        return "conforms"

    def _table(self) -> list[str]:
        """One row per kind of check (the kit's test classes): run, passed, failed, skipped."""
        rows: dict[str, dict[str, int]] = {}
        for check, (outcome, _) in self.checks.items():
            row = rows.setdefault(check.split("::", 1)[0], dict.fromkeys(_COLUMNS, 0))
            row[outcome] += 1
        width = max([len(k) for k in rows] + [5])
        out = [f"  {'check':<{width}}  " + "  ".join(f"{c:>7}" for c in ("run", *_COLUMNS))]
        for kind, row in sorted(rows.items()):
            run = row["passed"] + row["failed"]
            cells = "  ".join(f"{n:>7}" for n in (run, *(row[c] for c in _COLUMNS)))
            out.append(f"  {kind:<{width}}  {cells}")
        return out

    def lines(self) -> list[str]:
        target = self.target
        if target is None:
            return [f"carrier: none; {UNSET_REASON}", "result: NOTHING CHECKED"]
        out = [f"carrier: {target.title}"]
        if target.skip:
            out.append(f"not tested: {target.skip}")
        names = target.supported_names()
        out.append(f"names supported: {len(names)}: {', '.join(names) if names else '(none)'}")
        if target.oracle_skip:
            out.append(f"oracle comparison skipped: {target.oracle_skip}")
        checked = sum(self.passed.values()) + self.plan_failures()
        failed = self.plan_failures()
        sampled = f" (at most {self.max_plans} per name)" if self.max_plans is not None else ""
        against = "the NumPy reference" if target.oracle is target.cls else "Generic"
        if checked:
            out.append(
                f"plans: {sum(self.advertised.values())} advertised, {checked} checked against "
                f"{against}{sampled}: {checked - failed} passed, {failed} failed"
            )
        counts = self.counts()
        out.append(
            f"checks: {counts['run']} run, {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped"
        )
        if self.checks:
            out += self._table()
        for check, (outcome, text) in self.checks.items():
            if outcome == "passed" or (outcome == "failed" and check.startswith(_ORACLE_TEST)):
                continue  # oracle failures are listed per plan below
            first, *rest = text.splitlines() or [""]
            out.append(f"  {outcome.upper()} {check}: {first}")
            out += [f"      {line.strip()}" for line in rest]
        for name, failures in self.failed.items():
            if not failures:
                continue
            total = self.passed.get(name, 0) + len(failures)
            out.append(f"  FAILED plans of {name}: {len(failures)} of {total} checked")
            out += [f"    {f}" for f in failures[:_SHOWN_PER_NAME]]
            if len(failures) > _SHOWN_PER_NAME:
                out.append(f"    ... and {len(failures) - _SHOWN_PER_NAME} more")
        result = self.result()
        if result == "NOTHING CHECKED":
            result += " (no check ran, so the kit fails)"
        out.append(f"result: {result}")
        return out

    def as_json(self) -> dict[str, Any]:
        """The report for CI systems (``--conveyor-report=FILE.json``)."""
        target = self.target
        return {
            "carrier": None if target is None else target.name,
            "class": None
            if target is None
            else f"{target.cls.__module__}.{target.cls.__qualname__}",
            "not_tested": None if target is None else target.skip,
            "names": [] if target is None else target.supported_names(),
            "checks": self.counts(),
            "outcomes": {k: {"outcome": o, "message": m} for k, (o, m) in self.checks.items()},
            "plans": {
                "advertised": sum(self.advertised.values()),
                "checked": sum(self.passed.values()) + self.plan_failures(),
                "failed": self.plan_failures(),
            },
            "failed_plans": [
                {"name": f.name, "plan": f.plan, "case": f.case, "detail": f.detail}
                for failures in self.failed.values()
                for f in failures
            ],
            "result": self.result(),
        }


_COLUMNS: Final = ("passed", "failed", "skipped")
_ORACLE_TEST: Final = "TestAdvertisedPlansMatchTheOracle::"
_SURFACE_MODULE: Final = "conveyor_testkit.test_surface"
_TARGET: Final = pytest.StashKey[Target | None]()
_REPORT: Final = pytest.StashKey[Report]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conveyor", "Conveyor carrier conformance kit")
    group.addoption(
        "--conveyor-carrier",
        metavar="NAME",
        default=None,
        help="registered carrier name the conformance kit checks (see `conveyor carriers`)",
    )
    group.addoption(
        "--conveyor-max-plans",
        metavar="N",
        type=int,
        default=None,
        help="check at most N plans per operation name, a deterministic sample (default: all)",
    )
    group.addoption(
        "--conveyor-report",
        metavar="FILE.json",
        default=None,
        help="also write the conformance report as JSON to FILE.json (for CI systems)",
    )
    group.addoption(
        "--conveyor-seed",
        metavar="SEED",
        type=int,
        default=0,
        help="seed of the generated inputs and of the plan sample (default: 0)",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("conveyor_carrier", None)
    max_plans = config.getoption("conveyor_max_plans", None)
    if max_plans is not None and max_plans < 1:
        msg = f"--conveyor-max-plans must be >= 1, got {max_plans}"
        raise pytest.UsageError(msg)
    target = None
    if name is not None:
        try:
            target = resolve_target(name)
        except ValueError as exc:
            msg = f"--conveyor-carrier={name!r}: {exc}"
            raise pytest.UsageError(msg) from exc
    config.stash[_TARGET] = target
    report = Report(target, max_plans, config.getoption("conveyor_seed", 0))
    config.stash[_REPORT] = report
    # Always registered: without a carrier, a run that collected the kit must still fail.
    config.pluginmanager.register(_Recorder(report), "conveyor-testkit-recorder")


def _skip_reason(target: Target | None, oracle: bool = False) -> str | None:
    if target is None:
        return UNSET_REASON
    if target.skip:
        return target.skip
    if oracle and target.oracle_skip:
        return target.oracle_skip
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``conveyor_operation`` by the names the carrier advertises, and
    ``conveyor_differentiable_operation`` by those of them that have a gradient rule."""
    from conveyor.sdk import differentiable_operations

    for fixture in ("conveyor_operation", "conveyor_differentiable_operation"):
        if fixture not in metafunc.fixturenames:
            continue
        target = metafunc.config.stash.get(_TARGET, None)
        reason = _skip_reason(target, oracle=True)
        names = target.supported_names() if target is not None and reason is None else []
        if fixture == "conveyor_differentiable_operation":
            names = [n for n in names if n in differentiable_operations()]
        if reason is None and not names:
            reason = f"{target.cls.__name__ if target else '?'} advertises no such operation plan"
        if reason is not None:
            param = pytest.param(None, marks=pytest.mark.skip(reason=reason), id="none")
            metafunc.parametrize(fixture, [param])
            continue
        metafunc.parametrize(fixture, names)


class _Recorder:
    """Records the outcome of each kit check for the summary (registered with a target only)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.items: set[str] = set()

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        # The direct-surface contract is only a tiled composite's: others never collect it.
        target = self.report.target
        if target is None or target.surface is None:
            dropped = [i for i in items if _module(i) == _SURFACE_MODULE]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [i for i in items if _module(i) != _SURFACE_MODULE]
        for item in items:
            if _module(item).startswith("conveyor_testkit."):
                self.items.add(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.items:
            return
        check = report.nodeid.split("::", 1)[-1]
        if report.skipped:
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.report.checks[check] = ("skipped", reason.removeprefix("Skipped: "))
        elif report.failed:
            self.report.checks[check] = ("failed", _failure_text(report))
        elif report.when == "call":
            self.report.checks.setdefault(check, ("passed", ""))


def _module(item: pytest.Item) -> str:
    return str(getattr(getattr(item, "module", None), "__name__", ""))


def _failure_text(report: pytest.TestReport) -> str:
    """The failure message of a kit check, at most ``_MESSAGE_LINES`` lines of it."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr)
    lines = [line.rstrip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return "failed"
    lines[0] = lines[0].removeprefix("Failed: ")
    shown = lines[:_MESSAGE_LINES]
    if len(lines) > _MESSAGE_LINES:
        shown.append(f"  ... ({len(lines) - _MESSAGE_LINES} more lines in the failure report)")
    return "\n".join(shown)


def _kit_collected(config: pytest.Config) -> bool:
    recorder = config.pluginmanager.get_plugin("conveyor-testkit-recorder")
    return isinstance(recorder, _Recorder) and bool(recorder.items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A kit run that checked nothing fails; the JSON report is written when asked for."""
    config = session.config
    if not _kit_collected(config):
        return
    report = config.stash[_REPORT]
    if report.result() == "NOTHING CHECKED" and exitstatus in (0, 5):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("conveyor_report", None)
    if path:
        Path(path).write_text(json.dumps(report.as_json(), indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _kit_collected(config):
        return
    target = config.stash.get(_TARGET, None)
    title = target.name if target is not None else "no carrier"
    terminalreporter.write_sep("=", f"conveyor conformance summary: {title}")
    for line in config.stash[_REPORT].lines():
        terminalreporter.write_line(line)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def conveyor_target(request: pytest.FixtureRequest) -> Target:
    """The carrier under test (skips the test when the kit cannot test it)."""
    target = request.config.stash.get(_TARGET, None)
    reason = _skip_reason(target)
    if reason is not None:
        pytest.skip(reason)
    assert target is not None
    return target


@pytest.fixture(scope="session")
def conveyor_oracle_target(conveyor_target: Target) -> Target:
    """The carrier under test, when the oracle comparison can run (skips otherwise)."""
    if conveyor_target.oracle_skip:
        pytest.skip(conveyor_target.oracle_skip)
    return conveyor_target


@pytest.fixture
def conveyor_instance(conveyor_target: Target) -> Iterator[Any]:
    """A fresh instance of the carrier under test, released afterwards."""
    instance = conveyor_target.instance()
    yield instance
    instance.release()


@pytest.fixture(scope="session")
def conveyor_report(request: pytest.FixtureRequest) -> Report:
    """The session's conformance report (the oracle test records its plans here)."""
    return request.config.stash[_REPORT]
