"""The ``conveyor`` command: plugins, carriers and doctor, as tables and as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any

import pytest

from conveyor.cli import main
from conveyor.plugins import PluginConflictWarning, PluginHost, set_default_host

from .environment import PluginEnvironment

# A plugin whose carriers cover every column of `conveyor carriers`.
_SHOWCASE = """
import conveyor as cv
from conveyor.types.capabilities import OperationCapability, register_operation_capabilities
from conveyor.engine.carrier import closed_carrier
from conveyor.sdk import CarrierDefinition, register_carrier_definition
from conveyor.types.policy import resolve_plan


@closed_carrier
class Shut(Carrier):
    pass


register_operation_capabilities(
    Shut,
    [
        OperationCapability.from_plan(resolve_plan("add", cv.float32, cv.float32)),
        OperationCapability.from_plan(resolve_plan("add", cv.float64, cv.float64)),
        OperationCapability.from_plan(resolve_plan("neg", cv.float32)),
    ],
)


class Defined(Carrier):
    pass


register_carrier_definition(Defined, CarrierDefinition(storage=object()))


class Composite(DependentCarrier):
    pass


@hookimpl
def conveyor_carriers():
    return {"shut": Shut, "defined": Defined, "composite": Composite}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _use(host: PluginHost) -> PluginHost:
    set_default_host(host)
    return host


@pytest.fixture
def mixed(plugin_env: PluginEnvironment) -> PluginEnvironment:
    """A loaded showcase plugin, a broken one and an unavailable one."""
    plugin_env.plugin("showcase", _SHOWCASE, distribution="cvt-showcase", version="3.1")
    plugin_env.plugin("bad", "raise ValueError('boom\\nsecond line')", distribution="cvt-bad")
    plugin_env.plugin("gpu", "raise PluginUnavailable('needs a GPU')", distribution="cvt-gpu")
    return plugin_env


def _column(lines: list[str], header: str) -> set[int]:
    """The start offset of ``header``'s column in each line (one value when aligned)."""
    start = lines[0].index(header)
    return {start if len(line) > start and line[start - 1] == " " else -1 for line in lines[1:]}


class TestPluginsCommand:
    def test_table_lists_every_plugin_with_state_and_error(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One aligned row per plugin, the error's first line included, exit status 0."""
        _use(mixed.host())
        status, out, _ = _run(capsys, "plugins")
        assert status == 0
        lines = out.splitlines()
        assert lines[0].split() == [
            "NAME",
            "DISTRIBUTION",
            "VERSION",
            "STATE",
            "CARRIERS",
            "LOAD",
            "ERROR",
        ]
        assert lines[1].split()[:4] == ["bad", "cvt-bad", "1.0", "broken"]
        assert "raised ValueError: boom" in lines[1] and "second line" not in out
        assert lines[2].split()[:4] == ["gpu", "cvt-gpu", "1.0", "unavailable"]
        assert lines[3].split()[:5] == ["showcase", "cvt-showcase", "3.1", "loaded", "composite,"]
        assert len(lines) == 6  # the table, a blank line and the slowest loads
        assert lines[5].startswith("slowest plugin loads: ")
        assert len(_column(lines[:4], "STATE")) == 1

    def test_json_has_every_field(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json prints one document with each record, tracebacks included."""
        host = _use(mixed.host())
        status, out, _ = _run(capsys, "plugins", "--json")
        assert status == 0
        document = json.loads(out)
        assert document["group"] == host.group and document["strict"] is False
        bad, gpu, showcase = document["plugins"]
        assert bad["state"] == "broken" and "ValueError: boom" in bad["traceback"]
        assert bad["entry_point"] == mixed.module_name("bad")
        assert gpu["state"] == "unavailable"
        assert all(isinstance(p["load_seconds"], float) for p in document["plugins"])
        assert showcase.pop("load_seconds") >= 0.0
        assert showcase == {
            "name": "showcase",
            "distribution": "cvt-showcase",
            "version": "3.1",
            "entry_point": mixed.module_name("showcase"),
            "state": "loaded",
            "carriers": ["composite", "defined", "shut"],
            "api_version": "1.0",
            "error": None,
            "hook": None,
            "conflicts": [],
            "traceback": None,
        }

    def test_strict_mode_exits_1_but_still_lists(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With a broken plugin in strict mode the listing is printed and the status is 1."""
        _use(mixed.host(strict=True))
        status, out, _ = _run(capsys, "plugins")
        assert status == 1
        assert "broken" in out

    def test_no_plugins(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An empty group says so instead of printing an empty table."""
        _use(plugin_env.host())
        status, out, _ = _run(capsys, "plugins")
        assert (status, out) == (
            0,
            f"no plugins installed in the entry-point group {plugin_env.group!r}\n",
        )


class TestCarriersCommand:
    def test_table_shows_kind_definition_and_counts(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Closed/open, definition-backed, and names/plans (per instance for dependents)."""
        _use(mixed.host())
        status, out, _ = _run(capsys, "carriers")
        assert status == 0
        lines = out.splitlines()
        assert lines[0].split() == [
            "NAME",
            "CLASS",
            "DISTRIBUTION",
            "KIND",
            "DEFINITION",
            "NAMES",
            "PLANS",
        ]
        module = mixed.module_name("showcase")
        rows = {line.split()[0]: line for line in lines[1:]}
        assert rows["shut"].split() == [
            "shut",
            f"{module}.Shut",
            "cvt-showcase",
            "closed",
            "no",
            "2",
            "3",
        ]
        assert rows["defined"].split() == [
            "defined",
            f"{module}.Defined",
            "cvt-showcase",
            "open",
            "yes",
            "0",
            "0",
        ]
        assert rows["composite"].split()[3:] == ["open", "no", "per", "instance", "per", "instance"]
        assert len(_column(lines, "KIND")) == 1

    def test_json(self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]) -> None:
        """--json gives booleans and counts (null for per-instance carriers)."""
        _use(mixed.host())
        status, out, _ = _run(capsys, "carriers", "--json")
        assert status == 0
        carriers = {c["name"]: c for c in json.loads(out)["carriers"]}
        assert carriers["shut"] == {
            "name": "shut",
            "class": f"{mixed.module_name('showcase')}.Shut",
            "distribution": "cvt-showcase",
            "closed": True,
            "definition_backed": False,
            "dependent": False,
            "names": 2,
            "plans": 3,
            "fallback": None,
        }
        assert carriers["composite"]["dependent"] is True
        assert carriers["composite"]["plans"] is None

    def test_matrix(self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]) -> None:
        """--matrix: one row per registered operation, plan counts per carrier."""
        from conveyor.types.policy import registered_operations

        _use(mixed.host())
        status, out, _ = _run(capsys, "carriers", "--matrix")
        assert status == 0
        lines = out.splitlines()
        assert lines[0].split() == ["OPERATION", "composite", "defined", "shut"]
        rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line and " " in line}
        assert rows["add"] == ["*", "-", "2"]
        assert rows["neg"] == ["*", "-", "1"]
        assert rows["matmul"] == ["*", "-", "-"]
        assert [line.split()[0] for line in lines[1 : 1 + len(registered_operations())]] == list(
            registered_operations()
        )
        assert lines[-1] == "* dependent carrier: its plans are computed per instance"

    def test_listing_names_what_runs_through_a_fallback(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A carrier with a fallback says which names run through it: table, JSON, matrix."""
        source = """
        import numpy as np

        import conveyor as cv
        from conveyor.sdk import policy_capabilities
        from conveyor_generic import CPU
        from tests.conformance.reference_vendor import _ArrayStorage


        def _add(ctx):
            out = ctx.allocate_result(0)
            np.add(*ctx.arrays(), out=ctx.array(out))
            return cv.ProviderResult(out)


        ADD = policy_capabilities(["add"])


        class Falls(Carrier):
            pass


        cv.register_carrier_definition(
            Falls,
            cv.CarrierDefinition(
                storage=_ArrayStorage(),
                kernels=cv.KernelProvider(
                    [cv.KernelPattern(operation="add", kernel=_add, plans=ADD)]
                ),
                fallback=CPU,
            ),
        )


        @hookimpl
        def conveyor_carriers():
            return {"falls": Falls}
        """
        plugin_env.plugin("falls", source)
        _use(plugin_env.host())
        from conveyor.sdk import policy_capabilities
        from conveyor.types.policy import is_planned, registered_operations

        planned = sorted(n for n in registered_operations() if is_planned(n) and n != "add")
        _, out, _ = _run(capsys, "carriers", "--json")
        (row,) = json.loads(out)["carriers"]
        assert row["fallback"] == {"carrier": "CPU", "names": planned}
        _, out, _ = _run(capsys, "carriers")
        assert f"falls: {len(planned)} of its names run through the fallback CPU" in out
        _, out, _ = _run(capsys, "carriers", "--matrix")
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line}
        assert rows["exp"][-1] == "fb"
        assert rows["add"] == [str(len(policy_capabilities(["add"])))]
        assert out.splitlines()[-1].startswith("fb: run through the carrier's fallback")

    def test_matrix_wraps_to_the_terminal_without_cutting_names(
        self,
        mixed: PluginEnvironment,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """At 30 columns the carriers go to several tables, each with every operation in full."""
        from conveyor.types.policy import registered_operations

        _use(mixed.host())
        monkeypatch.setenv("COLUMNS", "30")
        status, out, _ = _run(capsys, "carriers", "--matrix")
        assert status == 0
        lines = out.splitlines()
        assert max(len(line) for line in lines if not line.startswith("*")) <= 30
        assert "…" not in out
        groups = [line.split()[1:] for line in lines if line.startswith("OPERATION")]
        assert len(groups) > 1
        assert [c for group in groups for c in group] == ["composite", "defined", "shut"]
        names = [
            line.split()[0] for line in lines if line and not line.startswith(("OPERATION", "*"))
        ]
        assert names == list(registered_operations()) * len(groups)

    def test_matrix_json(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--matrix --json adds the operations and per-carrier plan counts."""
        _use(mixed.host())
        _, out, _ = _run(capsys, "carriers", "--matrix", "--json")
        matrix = json.loads(out)["matrix"]
        assert matrix["plans"]["shut"] == {"add": 2, "neg": 1}
        assert matrix["plans"]["composite"] is None
        assert "add" in matrix["operations"]

    def test_strict_failure_exits_1_with_the_error(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """In strict mode a broken plugin makes `carriers` fail with the plugin error."""
        _use(mixed.host(strict=True))
        status, out, err = _run(capsys, "carriers")
        assert (status, out) == (1, "")
        assert err.startswith("conveyor carriers: plugin 'bad' of distribution 'cvt-bad'")


class TestDoctorCommand:
    def test_report_lists_versions_states_and_fixes(
        self,
        mixed: PluginEnvironment,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Versions, states, carriers, operations, dtypes, each warning with its fix; conflicts
        are reported in the text, not as Python warnings."""
        monkeypatch.setenv("CONVEYOR_DISABLE_PLUGINS", "nothing-here")
        mixed.plugin("twin", distribution="cvt-twin", carriers={"shut": "OtherShut"})
        _use(mixed.host())
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginConflictWarning)
            status, out, _ = _run(capsys, "doctor")
        assert status == 1  # problems found
        assert out.startswith("conveyor-core 0.1.0 (Python ")
        assert "numpy " in out.splitlines()[0]
        assert "strict plugin mode: off" in out
        assert "environment: CONVEYOR_DISABLE_PLUGINS='nothing-here'" in out
        assert "plugins: 4 (2 loaded, 1 unavailable, 1 broken)" in out
        assert (
            "carriers: composite (cvt-showcase), defined (cvt-showcase), shut (cvt-showcase)" in out
        )
        assert "operations: " in out and " add, " in out
        assert "dtypes: bool, int8," in out
        problems = out.split("\nwarnings:\n")[1]
        assert "fix: fix or block it with CONVEYOR_DISABLE_PLUGINS=bad" in problems
        assert "carrier name 'shut' is claimed by cvt-showcase" in problems
        assert "fix: prefer one with CONVEYOR_PREFER=shut=<distribution>" in problems
        assert "CONVEYOR_DISABLE_PLUGINS='nothing-here' names 'nothing-here'" in problems

    def test_entry_point_name_clash_is_a_problem_with_its_fix(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two distributions declaring one entry-point name: doctor names both and the fix."""
        for distribution in ("cvt-left", "cvt-right"):
            module = plugin_env.write_module(distribution[4:], 'CONVEYOR_PLUGIN_API = "1.0"\n')
            plugin_env.entry_point(distribution, "same", module)
        _use(plugin_env.host())
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginConflictWarning)
            status, out, _ = _run(capsys, "doctor", "--json")
        report: dict[str, Any] = json.loads(out)
        assert status == 1
        (warning,) = [w for w in report["warnings"] if "entry point name" in w["problem"]]
        assert warning["problem"].startswith("entry point name 'same' is declared by cvt-left (")
        assert " and cvt-right (" in warning["problem"]
        assert warning["fix"] == (
            "name plugins by distribution in CONVEYOR_PLUGINS / CONVEYOR_DISABLE_PLUGINS"
        )

    def test_json_report(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json: the same report as one document."""
        _use(mixed.host())
        status, out, _ = _run(capsys, "doctor", "--json")
        report: dict[str, Any] = json.loads(out)
        assert status == 1  # the broken plugin is a problem found
        assert report["conveyor_core"] == "0.1.0"
        assert report["python"] == ".".join(map(str, sys.version_info[:3]))
        assert report["strict"] is False
        assert [p["state"] for p in report["plugins"]] == ["broken", "unavailable", "loaded"]
        assert report["carriers"]["shut"]["distribution"] == "cvt-showcase"
        assert "float32" in report["dtypes"] and "add" in report["operations"]
        (warning,) = report["warnings"]
        assert warning["fix"].startswith("fix or block it with CONVEYOR_DISABLE_PLUGINS=bad")

    def test_clean_install_has_no_problems(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A healthy installation ends with "no problems found"."""
        plugin_env.plugin("ok", carriers={"ok": "Ok"})
        _use(plugin_env.host())
        status, out, _ = _run(capsys, "doctor")
        assert status == 0
        assert out.endswith("\nno problems found\n")

    def test_no_carrier_warns_with_install_hint(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With no carrier loaded, doctor says what to install."""
        _use(plugin_env.host())
        _, out, _ = _run(capsys, "doctor")
        assert "no carrier is loaded\n    fix: pip install conveyor-generic" in out

    def test_no_carrier_because_of_failures_points_at_them(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """When the only plugin is broken, doctor points at it rather than an install."""
        plugin_env.plugin("bad", "raise ValueError('x')")
        _use(plugin_env.host())
        _, out, _ = _run(capsys, "doctor")
        assert "no carrier is loaded\n    fix: get one of the plugins listed above to load" in out

    def test_strict_mode_exits_1(
        self, mixed: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Strict mode with a broken plugin: the report is printed, status 1."""
        _use(mixed.host(strict=True))
        status, out, _ = _run(capsys, "doctor")
        assert status == 1
        assert "strict plugin mode: on" in out
        assert "strict plugin mode is on, so every use of a carrier raises PluginError" in out


class TestConfigurationErrors:
    def test_malformed_variable_exits_2_naming_it(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A malformed CONVEYOR_* variable is reported in one line, not a traceback."""
        monkeypatch.setenv("CONVEYOR_STRICT_PLUGINS", "sometimes")
        status, out, err = _run(capsys, "plugins")
        assert (status, out) == (2, "")
        assert err == (
            "conveyor: CONVEYOR_STRICT_PLUGINS='sometimes' is not a switch; set it to 1 (strict) "
            "or 0 (lenient)\n"
        )


class TestEntryPoint:
    def test_python_dash_m_runs_the_command(self) -> None:
        """``python -m conveyor.cli`` works and needs a subcommand."""
        done = subprocess.run(
            [sys.executable, "-m", "conveyor.cli", "--help"], capture_output=True, text=True
        )
        assert done.returncode == 0
        assert "plugins" in done.stdout and "doctor" in done.stdout
        missing = subprocess.run(
            [sys.executable, "-m", "conveyor.cli"], capture_output=True, text=True
        )
        assert missing.returncode == 2
        assert "required: COMMAND" in missing.stderr

    def test_python_dash_m_conveyor_runs_the_command(self) -> None:
        """``python -m conveyor`` is the same command."""
        done = subprocess.run(
            [sys.executable, "-m", "conveyor", "--help"], capture_output=True, text=True
        )
        assert done.returncode == 0
        assert "exit status: 0 ok, 1 problems found, 2 usage" in done.stdout

    def test_version_flag_prints_the_core_release(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``conveyor --version`` prints the installed conveyor-core release and exits 0."""
        with pytest.raises(SystemExit) as exited:
            main(["--version"])
        assert exited.value.code == 0
        assert capsys.readouterr().out == "conveyor 0.1.0\n"

    def test_closed_pipe_ends_quietly(self) -> None:
        """``conveyor plugins --json | head -1``: no BrokenPipeError traceback, status 0."""
        done = subprocess.run(
            f"{sys.executable} -m conveyor plugins --json | head -c 1",
            shell=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.stdout == "{"
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


class TestTerminalWidth:
    def test_tables_fit_the_terminal_unless_wide(
        self,
        plugin_env: PluginEnvironment,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A long error is shortened with an ellipsis to fit 80 columns; --wide keeps it all."""
        plugin_env.plugin("bad", "raise ValueError('" + "x" * 150 + "')")
        _use(plugin_env.host())
        monkeypatch.setenv("COLUMNS", "80")
        _, fitted, _ = _run(capsys, "plugins")
        table_lines = fitted.split("\n\n")[0].splitlines()
        assert max(map(len, table_lines)) <= 80
        assert "…" in fitted
        _, wide, _ = _run(capsys, "plugins", "--wide")
        assert "x" * 150 in wide
