"""cv.progress: long operations report (done, total, label) to the callbacks active here."""

from __future__ import annotations

import threading

import pytest

import conveyor as cv
from conveyor.engine.progress import active, report


class TestProgress:
    def test_progress_is_public(self) -> None:
        """`progress` is exported from conveyor."""
        assert "progress" in cv.__all__
        assert callable(cv.progress)

    def test_reports_reach_active_callback_in_order(self) -> None:
        """Every report inside the block reaches the callback with its arguments."""
        seen: list[tuple[int, int, str]] = []
        with cv.progress(lambda d, t, label: seen.append((d, t, label))):
            report(1, 3, "tiles")
            report(3, 3, "tiles")
        assert seen == [(1, 3, "tiles"), (3, 3, "tiles")]

    def test_nested_blocks_all_hear_and_unwind(self) -> None:
        """Nested blocks stack their callbacks; leaving a block removes only its own."""
        outer: list[int] = []
        inner: list[int] = []
        with cv.progress(lambda d, t, label: outer.append(d)):
            with cv.progress(lambda d, t, label: inner.append(d)):
                report(1, 2, "x")
            report(2, 2, "x")
        report(9, 9, "x")
        assert outer == [1, 2]
        assert inner == [1]
        assert active() == ()

    def test_no_callback_means_no_listeners(self) -> None:
        """Outside any block nothing is active, so reporting does nothing."""
        assert active() == ()
        report(1, 1, "ignored")

    def test_other_threads_do_not_hear(self) -> None:
        """A callback active in one thread is not active in a thread started without its context."""
        seen: list[int] = []
        found: list[tuple[object, ...]] = []
        with cv.progress(lambda d, t, label: seen.append(d)):
            worker = threading.Thread(target=lambda: found.append(active()))
            worker.start()
            worker.join(timeout=10)
        assert found == [()]
        assert seen == []

    def test_callback_error_unwinds_block(self) -> None:
        """An exception inside the block still removes the callback."""
        with pytest.raises(ZeroDivisionError), cv.progress(lambda d, t, label: None):
            _ = 1 / 0
        assert active() == ()

    def test_non_callable_refused(self) -> None:
        """A non-callable callback is refused with TypeError naming it."""
        expected = "progress: callback must be callable or 'bar', got 3 \\(int\\)"
        with pytest.raises(TypeError, match=expected), cv.progress(3):  # type: ignore[arg-type]  # refused
            pass
        assert active() == ()


class TestProgressBar:
    def test_bar_follows_reports_and_closes(self, capsys: pytest.CaptureFixture[str]) -> None:
        """progress("bar") draws a tqdm bar per label, to its total, and leaves none open."""
        from conveyor.engine.progress import report

        with cv.progress("bar"):
            (callback,) = active()
            for done in range(1, 4):
                report(done, 4, "tiles")
            assert set(callback._bars) == {"tiles"}
            assert callback._bars["tiles"].n == 3
            report(4, 4, "tiles")
            assert callback._bars == {}
            report(1, 2, "panels")
        assert callback._bars == {}  # the block's end closes what is still open
        assert active() == ()
        assert "tiles" in capsys.readouterr().err

    def test_other_strings_are_refused(self) -> None:
        """Only "bar" names a built-in callback; another string is a TypeError."""
        with pytest.raises(TypeError, match="callable or 'bar', got 'line'"), cv.progress("line"):
            pass
        assert active() == ()
