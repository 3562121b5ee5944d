"""Plugin commands: ``conveyor`` subcommands contributed through the ``conveyor_commands`` hook."""

from __future__ import annotations

import json

import pytest

from conveyor.cli import main
from conveyor.plugins import Command, PluginState, set_default_host

from .environment import PluginEnvironment

_GREET = """
import json
from conveyor.plugins import Command


def _configure(parser):
    parser.add_argument("--name", default="world")


def _run(args):
    if args.json:
        print(json.dumps({"hello": args.name}))
    else:
        print(f"hello, {args.name}")
    return 3 if args.name == "fail" else 0


@hookimpl
def conveyor_commands():
    return [Command(name="greet", summary="say hello", run=_run, configure=_configure)]
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def greeting(plugin_env: PluginEnvironment) -> PluginEnvironment:
    """A loaded plugin contributing the ``greet`` command."""
    plugin_env.plugin("greeter", _GREET)
    set_default_host(plugin_env.host())
    return plugin_env


class TestCommandRecord:
    def test_fields_are_validated_at_construction(self) -> None:
        """A bad name is a ValueError, a non-callable run a TypeError, both naming the field."""
        with pytest.raises(ValueError, match="Command: name must be a lower-case word"):
            Command(name="Greet", summary="s", run=lambda args: 0)
        with pytest.raises(TypeError, match="Command: run must be callable"):
            Command(name="greet", summary="s", run=42)  # type: ignore[arg-type]  # the refusal

    def test_configure_defaults_to_no_arguments(self) -> None:
        """Without ``configure`` the command takes only the common ``--json`` and ``--wide``."""
        command = Command(name="ping", summary="s", run=lambda args: 0)
        assert command.configure(None) is None  # type: ignore[arg-type, func-returns-value]


class TestPluginCommands:
    def test_a_contributed_command_runs_with_its_arguments(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``conveyor greet --name ada`` parses the plugin's own argument and runs it."""
        status, out, _ = _run(capsys, "greet", "--name", "ada")
        assert (status, out) == (0, "hello, ada\n")

    def test_the_common_json_flag_reaches_the_command(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every plugin command gets ``--json``, as the built-in ones do."""
        status, out, _ = _run(capsys, "greet", "--json")
        assert status == 0
        assert json.loads(out) == {"hello": "world"}

    def test_the_exit_status_is_the_commands(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, _, _ = _run(capsys, "greet", "--name", "fail")
        assert status == 3

    def test_help_lists_plugin_commands(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``conveyor --help`` loads plugins and lists their commands beside the built-in ones."""
        with pytest.raises(SystemExit) as info:
            main(["--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0
        assert "greet" in out and "say hello" in out and "doctor" in out

    def test_built_in_commands_load_no_plugin(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``conveyor plugins --no-load`` imports no plugin module to look for commands."""
        status, out, _ = _run(capsys, "plugins", "--no-load")
        assert status == 0 and "greeter" in out
        assert not greeting.imported("greeter")

    def test_an_unknown_command_is_a_usage_error(
        self, greeting: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as info:
            main(["no-such-command"])
        assert info.value.code == 2
        assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


class TestCommandConflicts:
    def test_a_built_in_name_is_not_taken_over(
        self, plugin_env: PluginEnvironment, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A plugin's ``doctor`` command is dropped (with a note); the built-in one runs."""
        source = (
            "from conveyor.plugins import Command\n"
            "@hookimpl\ndef conveyor_commands():\n"
            "    return [Command(name='doctor', summary='x', run=lambda a: 7),\n"
            "            Command(name='other', summary='y', run=lambda a: 5)]\n"
        )
        plugin_env.plugin("usurper", source)
        set_default_host(plugin_env.host())
        status, _, err = _run(capsys, "other")
        assert status == 5
        assert "a plugin's command 'doctor' is not added: the name is already taken" in err

    def test_something_other_than_a_command_breaks_the_plugin(
        self, plugin_env: PluginEnvironment
    ) -> None:
        """A hook returning a non-Command marks that plugin broken, naming the record type."""
        source = "@hookimpl\ndef conveyor_commands():\n    return ['greet']\n"
        plugin_env.plugin("sloppy", source)
        host = plugin_env.host()
        (record,) = host.plugins()
        assert record.state is PluginState.BROKEN
        assert record.hook == "conveyor_commands"
        assert "contribute conveyor.plugins.Command records" in (record.error or "")
        assert host.commands() == ()
