"""Profiling: per-thread operation records, nesting, process-wide observers, zero cost when off."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings

import pytest

import conveyor as cv
from conveyor.engine import profiling
from tests.core.carriers import ArrayCarrier
from tests.core.more_carriers import ProbeCarrier, probe_tensor


def arr(values: list[float]) -> cv.Tensor:
    return cv.tensor(values, carrier=ArrayCarrier)


def run_in_thread(func: object) -> None:
    worker = threading.Thread(target=func)  # type: ignore[arg-type]  # any callable
    worker.start()
    worker.join()


def fail_forward() -> None:
    x = probe_tensor([1.0], cv.float32)
    with pytest.raises(ArithmeticError, match="fail_forward always fails"):
        x.carrier.dispatch_op("fail_forward").forward(x)


class TestProfile:
    def test_records_operation_carrier_duration_and_success(self) -> None:
        """Each dispatched operation gives one record: name, exact carrier class, time, success."""
        a, b = arr([1.0, 2.0]), arr([3.0, 4.0])

        with cv.profile() as prof:
            cv.add(a, b)
            cv.exp(a)

        assert [(r.operation, r.carrier, r.success) for r in prof.records] == [
            ("add", ArrayCarrier, True),
            ("exp", ArrayCarrier, True),
        ]
        assert all(r.duration > 0 for r in prof.records)

    def test_carrier_is_exact_dispatch_class(self) -> None:
        """The record names the exact dispatching subclass, not a base class."""
        x = probe_tensor([1.0], cv.float32)

        with cv.profile() as prof:
            x.carrier.dispatch_op("scale").forward(x)

        assert [(r.operation, r.carrier) for r in prof.records] == [("scale", ProbeCarrier)]

    def test_failing_operation_records_failure(self) -> None:
        """An operation whose implementation raises is recorded with success False."""
        with cv.profile() as prof:
            fail_forward()

        assert [(r.operation, r.carrier, r.success) for r in prof.records] == [
            ("fail_forward", ProbeCarrier, False)
        ]

    def test_nothing_recorded_outside_the_block(self) -> None:
        """Operations before and after the block are not recorded."""
        a = arr([1.0])
        cv.neg(a)
        with cv.profile() as prof:
            cv.exp(a)
        cv.neg(a)

        assert [r.operation for r in prof.records] == ["exp"]

    def test_summary_counts_and_totals_per_operation(self) -> None:
        """summary() groups records by (operation, carrier name) into (count, total seconds)."""
        a = arr([1.0])
        with cv.profile() as prof:
            cv.exp(a)
            cv.exp(a)
            cv.neg(a)

        summary = prof.summary()

        assert set(summary) == {("exp", "ArrayCarrier"), ("neg", "ArrayCarrier")}
        count, total = summary[("exp", "ArrayCarrier")]
        assert count == 2
        assert total == pytest.approx(sum(r.duration for r in prof.records[:2]))

    def test_records_are_frozen(self) -> None:
        """A record is a frozen value."""
        with cv.profile() as prof:
            cv.neg(arr([1.0]))

        with pytest.raises(AttributeError):
            prof.records[0].success = False  # type: ignore[misc]  # the point of the test


class TestNestedProfilers:
    def test_outer_sees_everything_inner_only_its_block(self) -> None:
        """Nested profilers each record what runs while they are open."""
        a = arr([1.0])

        with cv.profile() as outer:
            cv.neg(a)
            with cv.profile() as inner:
                cv.exp(a)
            cv.relu(a)

        assert [r.operation for r in outer.records] == ["neg", "exp", "relu"]
        assert [r.operation for r in inner.records] == ["exp"]
        assert inner.records[0] is outer.records[1]


class TestThreadLocalProfiler:
    def test_other_threads_operations_are_not_recorded(self) -> None:
        """A profiler records only its own thread's operations."""
        a = arr([1.0])

        with cv.profile() as prof:
            cv.neg(a)
            run_in_thread(lambda: cv.exp(a))

        assert [r.operation for r in prof.records] == ["neg"]

    def test_profiler_in_other_thread_does_not_see_this_thread(self) -> None:
        """A profiler opened in another thread records that thread only."""
        a = arr([1.0])
        opened, done = threading.Event(), threading.Event()
        found: list[str | None] = []

        def worker() -> None:
            with cv.profile() as prof:
                opened.set()
                done.wait(5)
                cv.exp(a)
            found.extend(r.operation for r in prof.records)

        thread = threading.Thread(target=worker)
        thread.start()
        opened.wait(5)
        cv.neg(a)
        done.set()
        thread.join()

        assert found == ["exp"]


class TestObservers:
    def test_observer_receives_records_from_every_thread(self) -> None:
        """add_observer's callback gets a record for operations of any thread."""
        seen: list[str | None] = []
        lock = threading.Lock()

        def observe(record: cv.OperationRecord) -> None:
            with lock:
                seen.append(record.operation)

        remove = cv.add_observer(observe)
        a = arr([1.0])
        try:
            cv.neg(a)
            run_in_thread(lambda: cv.exp(a))
        finally:
            remove()

        assert sorted(seen) == ["exp", "neg"]

    def test_remover_stops_delivery(self) -> None:
        """After the remover is called the observer receives nothing; calling it again is safe."""
        seen: list[cv.OperationRecord] = []
        before = profiling.active
        remove = cv.add_observer(seen.append)
        a = arr([1.0])
        cv.neg(a)

        remove()
        remove()
        cv.exp(a)

        assert [r.operation for r in seen] == ["neg"]
        assert profiling.active == before

    def test_observer_sees_failures(self) -> None:
        """Observers receive failed operations too."""
        seen: list[cv.OperationRecord] = []
        remove = cv.add_observer(seen.append)
        try:
            fail_forward()
        finally:
            remove()

        assert [(r.operation, r.success) for r in seen] == [("fail_forward", False)]

    def test_raising_observer_warns_and_operation_succeeds(self) -> None:
        """An observer that raises yields a ConveyorWarning; the operation still returns."""

        def broken(record: cv.OperationRecord) -> None:
            raise LookupError("observer is broken")

        remove = cv.add_observer(broken)
        try:
            with pytest.warns(cv.ConveyorWarning, match="raised LookupError.*observer is broken"):
                result = cv.neg(arr([2.0]))
        finally:
            remove()

        assert result.tolist() == [-2.0]

    def test_raising_observer_does_not_stop_other_observers(self) -> None:
        """Observers after a raising one still receive the record."""
        seen: list[cv.OperationRecord] = []

        def broken(record: cv.OperationRecord) -> None:
            raise LookupError("observer is broken")

        removers = [cv.add_observer(broken), cv.add_observer(seen.append)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cv.ConveyorWarning)
                cv.neg(arr([2.0]))
        finally:
            for remove in removers:
                remove()

        assert [r.operation for r in seen] == ["neg"]

    def test_non_callable_raises(self) -> None:
        """add_observer needs a callable."""
        with pytest.raises(TypeError, match="add_observer expects a callable, got 3"):
            cv.add_observer(3)  # type: ignore[arg-type]  # the point of the test


_ACTIVE_PROBE = """
import conveyor
from conveyor.engine import profiling
print(profiling.active)
with conveyor.profile():
    print(profiling.active)
print(profiling.active)
"""


class TestActiveCounter:
    def test_zero_when_nothing_is_open(self) -> None:
        """In a fresh process profiling is off (0), on while a profiler is open, then off again."""
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CONVEYOR_")}

        done = subprocess.run(
            [sys.executable, "-c", _ACTIVE_PROBE],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )

        assert done.stdout.split() == ["0", "1", "0"]

    def test_counts_open_profilers_and_observers(self) -> None:
        """Each open profiler and each observer counts once; closing restores the count."""
        before = profiling.active
        with cv.profile():
            with cv.profile():
                assert profiling.active == before + 2
            remove = cv.add_observer(lambda r: None)
            assert profiling.active == before + 2
            remove()
        assert profiling.active == before

    def test_profiler_closed_by_exception_is_removed(self) -> None:
        """A profiler left by an exception stops counting and recording."""
        before = profiling.active
        a = arr([1.0])
        with pytest.raises(KeyError), cv.profile() as prof:
            raise KeyError("leave the block")
        cv.neg(a)

        assert profiling.active == before
        assert prof.records == []
