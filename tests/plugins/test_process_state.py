"""``conveyor.plugins._process_state``: process-wide state a plugin's load must leave alone.

The end-to-end scenario (a plugin closing stdout and arming an alarm, in a child process) is in
``test_import_timeout.py``; these check the record itself: signal handlers, threads, timers the
host armed before the load, streams with no descriptor.
"""

from __future__ import annotations

import io
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from conveyor.plugins._process_state import ProcessState


@pytest.fixture
def usr2_default() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGUSR2)
    yield
    signal.signal(signal.SIGUSR2, previous)


@pytest.fixture
def no_alarm() -> Iterator[None]:
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)


class TestProcessState:
    def test_nothing_changed_reports_nothing(self) -> None:
        """A load that touches none of it gives no phrase and changes nothing."""
        state = ProcessState()
        out = sys.stdout
        assert state.restore() == []
        assert sys.stdout is out

    @pytest.mark.usefixtures("usr2_default")
    def test_replaced_signal_handler_restored_on_the_main_thread(self) -> None:
        """A handler installed during the load (possible on the main thread) is put back."""
        before = signal.getsignal(signal.SIGUSR2)
        state = ProcessState()
        signal.signal(signal.SIGUSR2, lambda *_: None)

        assert state.restore() == ["the handlers of SIGUSR2 were replaced (restored)"]
        assert signal.getsignal(signal.SIGUSR2) is before

    @pytest.mark.usefixtures("usr2_default")
    def test_handler_change_off_the_main_thread_is_reported_not_restored(self) -> None:
        """signal.signal works only on the main thread, so a scan elsewhere can only report."""
        state = ProcessState()
        signal.signal(signal.SIGUSR2, lambda *_: None)
        found: list[list[str]] = []
        worker = threading.Thread(target=lambda: found.append(state.restore()))
        worker.start()
        worker.join(60)
        assert found == [
            ["the handlers of SIGUSR2 were replaced (not restored: off the main thread)"]
        ]

    @pytest.mark.usefixtures("no_alarm")
    def test_timer_the_host_armed_before_the_load_is_left_alone(self) -> None:
        """An alarm set before the load is the host's own: it keeps running, unreported."""
        signal.setitimer(signal.ITIMER_REAL, 300)
        state = ProcessState()
        assert state.restore() == []
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 300

    @pytest.mark.usefixtures("no_alarm")
    def test_timer_armed_during_the_load_is_disarmed(self) -> None:
        state = ProcessState()
        signal.setitimer(signal.ITIMER_REAL, 300)
        assert state.restore() == ["signal.alarm armed a SIGALRM timer (ITIMER_REAL; disarmed)"]
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

    def test_closed_stream_without_a_descriptor_is_reported(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A closed stream that has no file descriptor (a StringIO) cannot be reopened."""
        fake = io.StringIO()
        monkeypatch.setattr(sys, "stdout", fake)
        state = ProcessState()
        fake.close()
        assert state.restore() == ["sys.stdout was closed (it could not be reopened)"]
        assert sys.stdout is fake
