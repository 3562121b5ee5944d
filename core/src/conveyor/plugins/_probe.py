"""Probing a plugin's import in a child process, so the import time limit holds whatever it does.

The in-process limit (``_importing``) waits for the import on another thread; it cannot fire
while the import holds the GIL in one long C call (a catastrophic regular expression held a 2 s
limit for 11 s), and nothing in-process survives an import that ends the process (``os._exit``,
a crash, SIGALRM). With probing on (``CONVEYOR_PLUGIN_IMPORT_PROBE=1``, ``probe_imports=True``)
each plugin is first imported in a fresh interpreter, which is killed at the limit: a plugin
whose probe does not finish in time, or dies before its import returns, is ``broken`` without
ever being imported here. A probe that finishes, whether the import succeeded or raised, lets
the real import go ahead in this process (which then reports any error itself).

Costs: each plugin is imported twice (its start-up time, and the child interpreter's, about a
tenth of a second, count against the limit), and its import-time side effects (files written,
network) happen twice. The child scans no plugins of its own (``CONVEYOR_PLUGINS`` is empty
there), so a plugin that creates a tensor at import fails in the child as it fails here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__: list[str] = []

#: Seconds a killed probe gets to print where it hung (faulthandler, on SIGUSR1) first.
_DUMP_GRACE_S: Final = 1.0
_PROBE_VARIABLE: Final = "CONVEYOR_PLUGIN_IMPORT_PROBE"

# Runs in the child: import the entry point, then write how it ended to the result file. The
# traceback of every thread goes to the log on SIGUSR1 (faulthandler needs no GIL for it).
_CHILD: Final = """
import faulthandler, importlib.metadata, json, os, signal, sys
result, name, value, group, path = sys.argv[1:6]
sys.path[:] = json.loads(path)
faulthandler.register(signal.SIGUSR1, all_threads=True)
try:
    importlib.metadata.EntryPoint(name=name, value=value, group=group).load()
    outcome = "returned"
except BaseException as exc:
    outcome = "raised " + type(exc).__name__
with open(result, "w") as file:
    file.write(outcome)
os._exit(0)
"""


class ProbeFailed(Exception):
    """The probe of an import did not finish in time, or its process died before it returned.

    ``timed_out`` tells the two apart; the message says what happened, ``where`` holds the
    threads' tracebacks the probe printed when it was stopped (or its last output).
    """

    def __init__(self, message: str, *, timed_out: bool, where: str) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.where = where


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ask the probe for its tracebacks, give it a moment to print them, then kill its group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(_DUMP_GRACE_S)  # returns at once if it died meanwhile
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _ended(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def probe(entry_point: EntryPoint, timeout: float) -> None:
    """Import ``entry_point`` in a child interpreter, killed after ``timeout`` seconds.

    Returns when the child's import returned or raised (the caller then imports it here).

    Raises:
        ProbeFailed: the child did not finish in time, or ended before the import returned.
        KeyboardInterrupt: the wait was interrupted; the child is killed first.
    """
    env = {k: v for k, v in os.environ.items() if k != _PROBE_VARIABLE}
    env["CONVEYOR_PLUGINS"] = ""  # the child's own host loads nothing
    with tempfile.TemporaryDirectory(prefix="conveyor-probe-") as folder:
        result, log = Path(folder, "result"), Path(folder, "log")
        command = [sys.executable, "-c", _CHILD, str(result), entry_point.name]
        command += [entry_point.value, entry_point.group, json.dumps(sys.path)]
        with open(log, "wb") as output:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=env,
                start_new_session=True,  # its own group: killing it kills what it started
            )
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            where = log.read_text(errors="replace")
            msg = f"the probe did not finish within {timeout:g} s and was killed"
            raise ProbeFailed(msg, timed_out=True, where=where) from None
        except BaseException:  # KeyboardInterrupt: never leave the child running
            _stop(process)
            raise
        if not result.exists():
            where = log.read_text(errors="replace")
            msg = (
                f"the probe process ended before the import returned ({_ended(process.returncode)}"
                f": os._exit, a crash or a fatal signal)"
            )
            raise ProbeFailed(msg, timed_out=False, where=where)
